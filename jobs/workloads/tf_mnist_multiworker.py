"""MNIST with TensorFlow's MultiWorkerMirroredStrategy, as in Azure ML's distributed TensorFlow example.

Azure ML's ``distribution: tensorflow`` starts one worker per node and describes the cluster in
TF_CONFIG. Two things in that contract need care, both handled by :func:`tensorflow_tf_config`:

* Azure ML writes an empty ``"ps": []`` into the cluster, which TensorFlow >= 2.13 rejects;
* there is no ``chief`` task: worker 0 acts as chief (TensorFlow 2 never accepts ``master``).

All workers all-reduce gradients over NCCL (collective ops, one replica per GPU on each node). Every
worker must save the model (the save is itself collective): worker 0 saves to ``--model-dir``, the
others to a scratch folder they delete. Data: synthetic MNIST-shaped digits (see ``digits.py``) or
``--data mnist.npz``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import digits


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size-per-replica", type=int, default=128)
    parser.add_argument("--samples", type=int, default=60000, help="synthetic training images")
    parser.add_argument("--data", type=Path, help="mnist.npz (x_train, y_train, x_test, y_test) instead of synthetic")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--model-dir", type=Path, default=Path("outputs/model"))
    return parser.parse_args(argv)


def tensorflow_tf_config(raw: str | None) -> str | None:
    """Azure ML's TF_CONFIG as TensorFlow 2 accepts it: empty task lists (``"ps": []``) removed."""
    if not raw:
        return raw
    config = json.loads(raw)
    cluster = {task: hosts for task, hosts in config.get("cluster", {}).items() if hosts}
    return json.dumps({**config, "cluster": cluster}, sort_keys=True)


def is_chief(tf_config: Mapping[str, Any] | None) -> bool:
    """The ``chief`` task, or worker 0 when the cluster has no chief (Azure ML's case); alone, a chief too."""
    if not tf_config:
        return True
    task = tf_config.get("task", {})
    cluster = tf_config.get("cluster", {})
    kind, index = task.get("type"), task.get("index", 0)
    if kind == "chief":
        return True
    return kind == "worker" and index == 0 and "chief" not in cluster


def main() -> None:
    args = parse_args()
    if "TF_CONFIG" in os.environ:
        os.environ["TF_CONFIG"] = tensorflow_tf_config(os.environ["TF_CONFIG"]) or ""
    import tensorflow as tf  # after TF_CONFIG is fixed: the strategy reads it once

    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.NCCL
            if tf.config.list_physical_devices("GPU") else tf.distribute.experimental.CommunicationImplementation.RING
        )
    )
    global_batch = args.batch_size_per_replica * strategy.num_replicas_in_sync
    x_train, y_train, x_test, y_test = digits.load(args.data, args.samples)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    train = (tf.data.Dataset.from_tensor_slices((x_train[..., None], y_train)).shuffle(10_000, seed=0)
             .repeat().batch(global_batch).prefetch(tf.data.AUTOTUNE).with_options(options))
    test = tf.data.Dataset.from_tensor_slices((x_test[..., None], y_test)).batch(global_batch).with_options(options)

    with strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.layers.Input(shape=(28, 28, 1)),
            tf.keras.layers.Conv2D(32, 3, activation="relu"),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Conv2D(64, 3, activation="relu"),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(128, activation="relu"),
            tf.keras.layers.Dense(digits.CLASSES),
        ])
        model.compile(optimizer=tf.keras.optimizers.Adam(args.learning_rate),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    model.fit(train, epochs=args.epochs, steps_per_epoch=max(1, len(x_train) // global_batch), verbose=2)
    _, accuracy = model.evaluate(test, verbose=0)

    chief = is_chief(json.loads(os.environ["TF_CONFIG"]) if os.environ.get("TF_CONFIG") else None)
    target = args.model_dir if chief else Path(tempfile.mkdtemp())
    target.mkdir(parents=True, exist_ok=True)
    model.save(target / "mnist.keras")
    if chief:
        print(json.dumps({"test_accuracy": round(float(accuracy), 4),
                          "replicas": strategy.num_replicas_in_sync}, sort_keys=True), flush=True)
    else:
        shutil.rmtree(target, ignore_errors=True)


if __name__ == "__main__":
    main()
