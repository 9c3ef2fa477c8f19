"""Known failure signatures in a run's output, and the note run-local prints for each.

A signature is data: a text that appears in a process's output, and what it means with the fix. The
console sees every line; a signature seen in a run that did not succeed becomes a ``note:`` line under
the closing table, naming the processes that printed it. One that did not fail the run says nothing.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Signature:
    marker: str
    """Text a line holds (case-sensitive, anywhere in the line)."""
    note: str
    """What it means and the fix, as one sentence for the terminal."""


SIGNATURES: tuple[Signature, ...] = (
    Signature(
        "terminate called without an active exception",
        "aborted at exit (SIGABRT): the torch.distributed process group was torn down while the interpreter "
        "exited, with the backend's threads still running (pytorch/pytorch#190489). Call "
        "torch.distributed.destroy_process_group() once the script's last collective is done, in every "
        "process (PyTorch docs, torch.distributed 'Shutdown'); on Azure ML the same abort fails the job "
        "after training has finished",
    ),
)


@dataclass
class Diagnosis:
    """Collects which processes printed which signature (called from the output reader threads)."""

    signatures: tuple[Signature, ...] = SIGNATURES
    _seen: dict[Signature, list[str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def see(self, label: str, text: str) -> None:
        for signature in self.signatures:
            if signature.marker in text:
                with self._lock:
                    labels = self._seen.setdefault(signature, [])
                    if label not in labels:
                        labels.append(label)

    def notes(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(f"{', '.join(labels)}: {signature.note}"
                         for signature in self.signatures if (labels := self._seen.get(signature)))
