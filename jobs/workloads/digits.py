"""MNIST-shaped synthetic digits for the MNIST-style samples (Horovod, TensorFlow, Lightning).

Ten fixed 28x28 stroke patterns, one per class, shifted by a pixel or two and blurred with noise:
learnable to high accuracy in an epoch or two, generated in milliseconds, identical on every rank for
the same seed, and no download (private workspaces often have no route to the internet). Pass real
MNIST as ``--data mnist.npz`` (Keras' ``x_train, y_train, x_test, y_test`` layout) to use it instead.

NumPy only, so every framework's sample can use it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

CLASSES = 10
SIDE = 28


def _templates(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    templates = np.zeros((CLASSES, SIDE, SIDE), dtype=np.float32)
    for digit in range(CLASSES):
        for _ in range(3):  # three strokes per class
            row, col = rng.integers(4, SIDE - 4, size=2)
            d_row, d_col = rng.integers(-1, 2, size=2)
            for step in range(10):
                r, c = row + step * d_row, col + step * d_col
                if 0 <= r < SIDE and 0 <= c < SIDE:
                    templates[digit, max(r - 1, 0):r + 2, max(c - 1, 0):c + 2] = 1.0
    return templates


def synthetic(samples: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``samples`` images (float32 in [0, 1], shape (n, 28, 28)) and their labels (int64)."""
    rng = np.random.default_rng(seed + 1)
    templates = _templates(seed)
    labels = rng.integers(0, CLASSES, size=samples)
    shifts = rng.integers(-2, 3, size=(samples, 2))
    images = np.empty((samples, SIDE, SIDE), dtype=np.float32)
    for i, (label, (d_row, d_col)) in enumerate(zip(labels, shifts, strict=True)):
        images[i] = np.roll(templates[label], (d_row, d_col), axis=(0, 1))
    images += rng.normal(0.0, 0.3, size=images.shape).astype(np.float32)
    return np.clip(images, 0.0, 1.0), labels.astype(np.int64)


def load(data: Path | None, samples: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Train and test images/labels: real MNIST from ``data`` (an ``.npz``) or synthetic digits."""
    if data is not None:
        with np.load(data) as mnist:
            return (mnist["x_train"].astype(np.float32) / 255.0, mnist["y_train"].astype(np.int64),
                    mnist["x_test"].astype(np.float32) / 255.0, mnist["y_test"].astype(np.int64))
    x, y = synthetic(samples + samples // 5, seed)
    return x[:samples], y[:samples], x[samples:], y[samples:]
