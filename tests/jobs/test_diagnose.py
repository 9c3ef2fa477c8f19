"""The failure signatures (``jobs/diagnose.py``) against log lines recorded from public reports
(``tests/fixtures/job-logs``, sources in its README): each names its cause, nothing else fires, and the ones that
need a fact about the cluster (InfiniBand) stay silent without it."""

from __future__ import annotations

import pytest

from jobs.diagnose import INFINIBAND, SIGNATURES, Diagnosis
from tests.conftest import ROOT

LOGS = ROOT / "tests" / "fixtures" / "job-logs"
ON_FABRIC = frozenset({INFINIBAND})


def seen(log: str, facts: frozenset[str] = ON_FABRIC, *, succeeded: bool = False) -> list[str]:
    diagnosis = Diagnosis(facts)
    diagnosis.see("rank 0", (LOGS / log).read_text())
    notes = diagnosis.notes(succeeded=succeeded)
    return [s.name for s in SIGNATURES if any(note == f"rank 0: {s.note}" for note in notes)]


@pytest.mark.parametrize(("log", "expected"), [
    ("duplicate-gpu.txt", ["duplicate-gpu"]),
    ("nccl-socket.txt", ["nccl-socket-on-infiniband"]),
    ("nccl-socket-rings.txt", ["nccl-socket-on-infiniband"]),
    ("nccl-ib.txt", []),
    ("nccl-timeout.txt", ["nccl-timeout"]),
    ("rendezvous-timeout.txt", ["rendezvous-timeout"]),
    ("store-timeout.txt", ["rendezvous-timeout"]),
    ("cuda-oom.txt", ["cuda-oom"]),
    ("cuda-oom-legacy.txt", ["cuda-oom"]),
    ("missing-entry-script.txt", ["missing-entry-script"]),
    # recorded on an H100 with PyTorch 2.11 and NCCL 2.28 (bench/gpu_check.sh)
    ("nccl-2.28-duplicate-gpu.txt", ["duplicate-gpu"]),
    ("nccl-2.28-socket.txt", ["nccl-socket-on-infiniband"]),
    ("torch-2.11-cuda-oom.txt", ["cuda-oom"]),
])
def test_each_recorded_log_names_its_cause_and_nothing_else(log: str, expected: list[str]) -> None:
    assert seen(log) == expected


def test_every_signature_but_the_exit_abort_has_a_recorded_log() -> None:
    """The exit-time abort is covered by a real aborting process (tests/jobs/emulate/test_launcher.py)."""
    recorded = {name for log in LOGS.glob("*.txt") for name in seen(log.name)}
    assert recorded == {s.name for s in SIGNATURES} - {"exit-abort"}


def test_nccl_on_sockets_says_nothing_on_a_cluster_without_infiniband() -> None:
    """Sockets are NCCL's only network on an Ethernet-only cluster: no fault there."""
    assert seen("nccl-socket.txt", frozenset()) == []


@pytest.mark.parametrize(("log", "expected"), [("nccl-socket.txt", ["nccl-socket-on-infiniband"]),
                                                ("cuda-oom.txt", []), ("duplicate-gpu.txt", [])])
def test_after_a_success_only_what_wasted_the_run_is_said(log: str, expected: list[str]) -> None:
    """A script may catch an out-of-memory error and retry with a smaller batch; a job that completed on sockets
    instead of InfiniBand still ran slowly."""
    assert seen(log, succeeded=True) == expected


def test_lines_split_across_writes_and_sources_are_named_once() -> None:
    diagnosis = Diagnosis()
    for label in ("rank 3", "rank 3", "rank 5"):
        diagnosis.see(label, "Last error:\nDuplicate GPU detected : rank 3 and rank 0 both on CUDA device f000\n")
    (note,) = diagnosis.notes()
    assert note.startswith("rank 3, rank 5: two processes on one node opened the same GPU")
