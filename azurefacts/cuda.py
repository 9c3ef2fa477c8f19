"""Which CUDA an image carries, and whether that CUDA can drive a GPU: data, with NVIDIA's sources.

The table (``cuda-architectures.yaml`` beside this module) gives each GPU model of the size catalogue its
architecture, compute capability, the first CUDA release that supports it and the release that dropped it.
An image's CUDA is read from its name only where the publisher's naming states it:

* ``nvidia/cuda:<version>-...`` and ``nvcr.io/nvidia/cuda:<version>-...`` (NVIDIA's CUDA images);
* ``mcr.microsoft.com/azureml/openmpi<v>-cuda<version>-...`` (Azure ML's base images, each built
  ``FROM nvidia/cuda:<version>``, Azure/AzureML-Containers);
* ``pytorch/pytorch:<torch>-cuda<version>-cudnn<n>-...`` (PyTorch's own images).

Any other ``cuda<version>`` in a name (a curated environment's name, a team's image) is a hint, not a
fact: curated names are known to disagree with their content (``acpt-pytorch-2.2-cuda12.1`` has shipped
CUDA 11.8 and 12.6 under that name), so a verdict from one is *uncertain*.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from kernel import bounded
from kernel import regex as linear

TABLE = Path(__file__).with_name("cuda-architectures.yaml")

Version = tuple[int, ...]
"""``(11, 8)``; ``(11,)`` when only the major release is known."""


@dataclass(frozen=True)
class Architecture:
    """A GPU architecture and the CUDA releases that can drive it."""

    name: str
    capability: str
    """The compute capability, ``8.0``."""
    minimum: Version
    """The first CUDA release that supports it."""
    below: Version | None
    """The CUDA release that dropped it (None: still supported)."""

    @property
    def sm(self) -> str:
        return "sm_" + self.capability.replace(".", "")


def _version(text: str) -> Version:
    return tuple(int(part) for part in text.split("."))


def show(version: Version) -> str:
    return ".".join(str(part) for part in version)


@functools.cache
def _by_model() -> dict[str, Architecture]:
    data = bounded.data_table(TABLE)
    out: dict[str, Architecture] = {}
    for row in data["gpus"]:
        arch = Architecture(row["architecture"], str(row["capability"]), _version(str(row["minimum"])),
                            _version(str(row["below"])) if row["below"] else None)
        for model in row["models"]:
            out[model] = arch
    return out


def architecture(gpu_model: str) -> Architecture | None:
    """The architecture of a catalogue GPU model (``A100``, ``H100 SXM``); None for AMD or unknown models."""
    return _by_model().get(gpu_model)


def models() -> frozenset[str]:
    """Every GPU model the table knows."""
    return frozenset(_by_model())


@dataclass(frozen=True)
class ImageCuda:
    """The CUDA an image carries, as its name says it."""

    version: Version
    certain: bool
    """The publisher's naming states the image's CUDA (see the module docstring); False for a hint."""
    at_most: bool = False
    """:attr:`version` is an upper bound: the newest CUDA the PyTorch release the name says was built for."""


_D, _W = linear.DIGIT, linear.WORD
_NVIDIA_CUDA = linear.compile(rf"(?i)^(?:[{_W}.-]+/)?(?:nvidia/)?cuda:(?P<v>[{_D}]+\.[{_D}]+)")
_STATED = linear.compile(rf"(?i)^(?:mcr\.microsoft\.com/)?azureml/openmpi[{_D}.]+-cuda(?P<v>[{_D}]+(?:\.[{_D}]+)?)-"
                         rf"|^(?:docker\.io/)?pytorch/pytorch:[{_D}.]+-cuda(?P<t>[{_D}]+(?:\.[{_D}]+)?)-")
# Not after a letter, and not followed by a digit (or a dot): the character on each side is matched instead of
# looked at (RE2 has no look-around). Python's (?i)[a-z] also takes the dotted and dotless i (U+0130, U+0131).
_NOT_AFTER_A_LETTER = r"(?:^|[^a-z\x{130}\x{131}])"
_TORCH = linear.compile(rf"(?i){_NOT_AFTER_A_LETTER}pytorch[-_]?(?P<major>1)\.(?P<minor>[{_D}]+)(?:[^{_D}]|$)")
_HINT = linear.compile(rf"(?i){_NOT_AFTER_A_LETTER}cu(?:da)?[-_]?"
                       rf"(?P<v>[{_D}]{{2,3}}(?:\.[{_D}]+)?|[{_D}]+\.[{_D}]+|[{_D}]{{2}})(?:[^{_D}.]|$)")
_REGISTRY = linear.compile(r"(?i)^(?:docker\.io/|nvcr\.io/)")


def image_cuda(reference: str) -> ImageCuda | None:
    """The CUDA release an image or environment reference names; None when its name says none."""
    ref = reference.strip()
    plain = _REGISTRY.sub("", ref)
    if plain.lower().startswith(("nvidia/cuda:", "cuda:")) and (m := _NVIDIA_CUDA.match(plain)):
        return ImageCuda(_version(m.group("v")), True)
    if m := _STATED.match(ref):
        return ImageCuda(_version(m.group("v") or m.group("t")), True)
    if m := _HINT.search(ref.rsplit("/", 1)[-1] if "://" not in ref else ref):
        text = m.group("v")
        if "." not in text and len(text) == 3:  # cu118 -> 11.8, cu121 -> 12.1
            text = f"{text[:2]}.{text[2]}"
        elif "." not in text and not text.startswith("1"):  # cu92 -> 9.2 (cuda11, cu12: the major only)
            text = f"{text[0]}.{text[1]}"
        return ImageCuda(_version(text), False)
    if m := _TORCH.search(ref.rsplit("/", 1)[-1] if "://" not in ref else ref):
        newest = bounded.data_table(TABLE)["torch_newest_cuda"].get(f"{m.group('major')}.{m.group('minor')}")
        if newest is not None:
            return ImageCuda(_version(str(newest)), False, at_most=True)
    return None


def supports(arch: Architecture, version: Version) -> bool | None:
    """Whether CUDA ``version`` can drive ``arch``; None when a major-only version cannot tell."""
    def compare(a: Version, b: Version) -> int | None:
        for x, y in zip(a, b, strict=False):
            if x != y:
                return -1 if x < y else 1
        if len(a) >= len(b) or not any(b[len(a):]):
            return 0  # (13,) is at least (13, 0)
        return None  # (11,) against (11, 8): cannot tell

    low = compare(version, arch.minimum)
    if low is not None and low < 0:
        return False
    if arch.below is not None:
        high = compare(version, arch.below)
        if high is not None and high >= 0:
            return False
        if high is None:
            return None
    return None if low is None else True
