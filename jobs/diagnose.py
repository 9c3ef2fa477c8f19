"""Known failure signatures in a run's output, and what each means with its fix: one table for local and
remote runs.

A signature is data: the texts a line of output holds (each as printed by the library that writes it, quoted
from public reports: ``tests/fixtures/job-logs/README.md``) and the note to print. ``amlgpu run-local`` sees
every line of every process and prints the notes under its closing table when the run failed; ``amlgpu
submit`` and ``amlgpu job stream`` see what Azure ML streams (the first process's log) and the job's error,
and print them when the job did not complete, and, for the few that say a run was wasteful rather than
broken (NCCL on sockets on an InfiniBand cluster), when it did.

Some signatures mean something only on some clusters: NCCL choosing its socket transport is right on a
cluster without InfiniBand and a lost fabric on one with it. Those name the fact they need (``needs``);
the caller says which facts hold (:class:`Diagnosis` ``facts``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

INFINIBAND = "infiniband"
"""The run's cluster has an InfiniBand fabric (its size's catalogue entry says so)."""


@dataclass(frozen=True)
class Signature:
    name: str
    texts: tuple[tuple[str, ...], ...]
    """Alternatives, each a set of texts that must all be on one line (case-sensitive)."""
    note: str
    """What it means and the fix, as one sentence for the terminal."""
    needs: frozenset[str] = frozenset()
    """Facts about the run without which the line means nothing wrong (:data:`INFINIBAND`)."""
    after_success: bool = False
    """Worth saying of a run that succeeded (it ran, but wastefully); the others explain failures only: a
    script may catch an out-of-memory error and go on with a smaller batch."""

    def matches(self, line: str) -> bool:
        return any(all(text in line for text in alternative) for alternative in self.texts)


SIGNATURES: tuple[Signature, ...] = (
    Signature(
        "exit-abort",
        (("terminate called without an active exception",),),
        "aborted at exit (SIGABRT): the torch.distributed process group was torn down while the interpreter "
        "exited, with the backend's threads still running (pytorch/pytorch#190489). Call "
        "torch.distributed.destroy_process_group() once the script's last collective is done, in every "
        "process (PyTorch docs, torch.distributed 'Shutdown'); on Azure ML the same abort fails the job "
        "after training has finished",
    ),
    Signature(
        "duplicate-gpu",
        (("Duplicate GPU detected",),),
        "two processes on one node opened the same GPU (NCCL 'Duplicate GPU detected'): each process must "
        "call torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) before it joins the process group, and "
        "distribution.process_count_per_instance must not exceed the node's GPUs",
    ),
    Signature(
        "nccl-socket-on-infiniband",
        (("NCCL INFO Using network Socket",), ("via NET/Socket",)),
        "NCCL sends over TCP sockets although the cluster has InfiniBand ('Using network Socket', not 'IB'): "
        "use an image with the InfiniBand user libraries (an Azure ML ACPT or NVIDIA NGC image), leave "
        "NCCL_IB_DISABLE and NCCL_NET unset, and run the fabric check (amlgpu submit fabric-check-<cluster>)",
        needs=frozenset({INFINIBAND}),
        after_success=True,
    ),
    Signature(
        "nccl-timeout",
        (("Watchdog caught collective operation timeout",),),
        "a collective waited past the process group's timeout (NCCL watchdog): one rank stopped calling "
        "collectives (crashed earlier, skipped a step, or runs different code paths); read the first rank "
        "that failed above it, and keep data loading and the number of steps the same on every rank",
    ),
    Signature(
        "rendezvous-timeout",
        (("Timed out after", "waiting for clients"), ("Timed out after", "waiting for workers"),
         ("RendezvousTimeoutError",), ("The client socket has timed out after",),
         ("RendezvousConnectionError",)),
        "the processes never met (rendezvous timed out): a node was missing or pointed elsewhere; launchers "
        "must take the node count and address from Azure ML ($NODE_RANK, $MASTER_ADDR, $MASTER_PORT, "
        "or torchrun's --rdzv_endpoint $MASTER_ADDR:$MASTER_PORT) and the node count must equal "
        "resources.instance_count",
    ),
    Signature(
        "cuda-oom",
        (("CUDA out of memory",),),
        "a GPU ran out of memory (CUDA out of memory): lower the per-GPU batch size and use gradient "
        "accumulation, activation checkpointing or a sharded strategy (FSDP, DeepSpeed ZeRO); a cluster "
        "size with more GPU memory is the other fix",
    ),
    Signature(
        "missing-entry-script",
        (("can't open file", "[Errno 2] No such file or directory"),),
        "the command names a script that is not in the uploaded code: the command runs in the code "
        "folder's copy, so paths are relative to `code`; check the file is there and not excluded by "
        ".amlignore or .gitignore",
    ),
)
"""Sources of each line's wording, with real log lines as recorded: ``tests/fixtures/job-logs/``."""


@dataclass
class Diagnosis:
    """Collects which sources printed which signature (``see`` may be called from several threads)."""

    facts: frozenset[str] = frozenset()
    signatures: tuple[Signature, ...] = SIGNATURES
    _seen: dict[Signature, list[str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def see(self, label: str, text: str) -> None:
        """Look at ``text`` (one line or several) that ``label`` (a rank, a log file) printed."""
        for line in text.splitlines():
            for signature in self.signatures:
                if signature.needs <= self.facts and signature.matches(line):
                    with self._lock:
                        labels = self._seen.setdefault(signature, [])
                        if label not in labels:
                            labels.append(label)

    def notes(self, *, succeeded: bool = False) -> tuple[str, ...]:
        """One line per signature seen, in the table's order, naming who printed it; of a run that
        succeeded, only those worth saying after a success."""
        with self._lock:
            return tuple(f"{', '.join(labels)}: {signature.note}" for signature in self.signatures
                         if (labels := self._seen.get(signature)) and (signature.after_success or not succeeded))
