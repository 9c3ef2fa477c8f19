"""A Hugging Face ``Trainer`` run that starts either way Azure ML can start it.

* Per-process (``distribution: pytorch``, process_count_per_instance = GPUs): Azure ML starts one
  process per GPU and sets RANK, WORLD_SIZE, MASTER_ADDR/PORT and LOCAL_RANK; pass
  ``--local_rank $LOCAL_RANK`` so the Trainer binds the process to its GPU.
* Per-node (``accelerate launch`` with process_count_per_instance = 1): accelerate starts the GPU
  processes on each node from ``--num_machines``, ``--num_processes`` (all nodes together),
  ``--machine_rank $NODE_RANK`` and ``--main_process_ip/port $MASTER_ADDR/$MASTER_PORT``.

All ``TrainingArguments`` apply (``--bf16``, ``--per_device_train_batch_size``,
``--dataloader_num_workers``, ``--save_strategy``...). The model is a small GPT-2 built from its
config (no download) learning synthetic token sequences that follow per-sequence arithmetic rules,
so the loss visibly falls within an epoch. The Trainer shards data, all-reduces metrics and saves
from the main process.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, HfArgumentParser, Trainer, TrainingArguments


@dataclass
class DataArguments:
    samples: int = field(default=20000, metadata={"help": "synthetic training sequences"})
    sequence_length: int = field(default=64)
    vocab_size: int = field(default=512)
    layers: int = field(default=2, metadata={"help": "GPT-2 blocks"})
    width: int = field(default=128, metadata={"help": "GPT-2 embedding size"})


class ArithmeticSequences(Dataset[dict[str, torch.Tensor]]):
    """Sequence i: x[t+1] = (x[t] + step_i) mod vocab, from a seeded start and step: next-token learnable."""

    def __init__(self, samples: int, length: int, vocab: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        starts = torch.randint(0, vocab, (samples, 1), generator=generator)
        steps = torch.randint(1, 8, (samples, 1), generator=generator)
        self.tokens = (starts + steps * torch.arange(length)) % vocab

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.tokens[index], "labels": self.tokens[index]}


def argument_parser() -> HfArgumentParser:
    """This script's options plus every ``TrainingArguments`` flag (``--local_rank``, ``--bf16``...)."""
    return HfArgumentParser(cast(Any, (DataArguments, TrainingArguments)))  # its DataClassType is opaque


def main() -> None:
    data, training = argument_parser().parse_args_into_dataclasses()
    config = GPT2Config(vocab_size=data.vocab_size, n_positions=data.sequence_length, n_embd=data.width,
                        n_layer=data.layers, n_head=4)
    trainer = Trainer(
        model=GPT2LMHeadModel(config),
        args=training,
        train_dataset=ArithmeticSequences(data.samples, data.sequence_length, data.vocab_size, seed=training.seed),
        eval_dataset=ArithmeticSequences(max(64, data.samples // 10), data.sequence_length, data.vocab_size,
                                         seed=training.seed + 1),
    )
    trainer.train()
    metrics = trainer.evaluate()
    trainer.save_model()
    if trainer.is_world_process_zero():
        print(json.dumps({"eval_loss": round(metrics["eval_loss"], 4), "world_size": training.world_size},
                         sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
