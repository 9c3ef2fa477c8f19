"""`amlgpu run-local` as a user runs it: a project folder with a stack file, real processes.

Each distribution type runs from a declared run and every process is checked against the launch
contract (shared/reference/azureml-launch-contract.md): per-process pytorch with a gloo all-reduce
across 2 nodes x 2 processes, a per-node torchrun, mpi through Open MPI's mpirun, TensorFlow's
TF_CONFIG (read by a plain script: TensorFlow is never installed), a failing rank stopping the run,
the DDP trainer converging, the all-reduce health check, timeout, Ctrl-C and bad input.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from amlgpu.cli import main
from analysis import contract
from tests import cli
from tests.conftest import emulation_project, required_tool
from tests.jobs.emulate.test_launcher import gone

pytestmark = pytest.mark.slow


SCRIPTS = {
    "allreduce_sum.py": """
import os
import torch
import torch.distributed as dist
dist.init_process_group("gloo", init_method="env://")
value = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(value)
# One write(2) per line: ranks of one node share a pipe, and an unbuffered print() writes the text and the
# newline separately, so two ranks' lines can interleave ("sum 10 over 4sum 10 over 4").
os.write(1, f"sum {value.item():g} over {dist.get_world_size()}\\n".encode())
dist.destroy_process_group()
os._exit(0)
""",
    "fail.py": """
import os, sys, time
from pathlib import Path
rank = os.environ.get("RANK") or os.environ["OMPI_COMM_WORLD_RANK"]
Path(sys.argv[2], f"{rank}.pid").write_text(str(os.getpid()))
os.write(1, f"rank {rank} up\\n".encode())
if rank == sys.argv[1]:
    time.sleep(0.5)
    print("giving up", flush=True)
    sys.exit(7)
time.sleep(120)
""",
    "done.py": """
import os
os.write(1, f"rank {os.environ['RANK']} done\\n".encode())
""",
    "show.py": """
import os, sys
from pathlib import Path
Path("written-into-the-snapshot.txt").write_text("x")
Path(sys.argv[3], "model.txt").write_text(f"lr={sys.argv[1]} data={sorted(os.listdir(sys.argv[2]))}")
print("cwd", os.getcwd(), flush=True)
""",
}


def _run(name: str, command: str, distribution: dict[str, Any], instances: int = 2, code: str = "t",
         **extra: Any) -> dict[str, Any]:
    return {"name": name, "code": code, "command": command, "environment": "azureml:acpt:1", "compute": "gpu-a100",
            "resources": {"instance_count": instances}, "distribution": distribution, **extra}


PT2 = {"type": "pytorch", "process_count_per_instance": 2}
MPI2 = {"type": "mpi", "process_count_per_instance": 2}
PROBES = {"probes": {"type": "uri_folder"}}
RUNS = [
    _run("allreduce-sum", "python allreduce_sum.py", PT2),
    _run("probe-torchrun", "torchrun --nnodes 2 --nproc_per_node 8 --node_rank $NODE_RANK --master_addr $MASTER_ADDR "
         "--master_port $MASTER_PORT probe.py --expect pytorch --out ${{outputs.probes}}",
         {"type": "pytorch"}, code="src", outputs=PROBES),
    _run("probe-mpi", "python probe.py --expect mpi --out ${{outputs.probes}}", MPI2, code="src", outputs=PROBES),
    _run("fabric-check", "python allreduce_perf.py -b 1K -e 4K -w 1 -n 2", MPI2, code="src"),
    _run("probe-tf", "python probe.py --expect tensorflow --out ${{outputs.probes}}",
         {"type": "tensorflow", "worker_count": 2}, code="src", outputs=PROBES),
    # Real TensorFlow workers wait for their parameter server; these wait for its probe, so stopping the
    # server once the workers are done can never come before it reported.
    _run("probe-tf-ps", "python probe.py --expect tensorflow --out ${{outputs.probes}} && "
         "python await_file.py ${{outputs.probes}}/ps-0.json",
         {"type": "tensorflow", "worker_count": 2, "parameter_server_count": 1}, code="src", outputs=PROBES),
    _run("fail", "python fail.py 2 ${{outputs.pids}}", PT2, outputs={"pids": {"type": "uri_folder"}}),
    _run("fail-mpi", "python fail.py 2 ${{outputs.pids}}", MPI2, outputs={"pids": {"type": "uri_folder"}}),
    _run("sleep", "python fail.py none ${{outputs.pids}}", PT2, instances=1, outputs={"pids": {"type": "uri_folder"}}),
    _run("train", "python train_ddp.py --epochs 4 --samples 2048 --checkpoint-dir ${{outputs.checkpoints}} "
         "--max-final-loss 0.05", {"type": "pytorch"}, code="src", outputs={"checkpoints": {"type": "uri_folder"}}),
    _run("show", "python show.py ${{inputs.lr}} ${{inputs.images}} ${{outputs.model}}", PT2, instances=1,
         inputs={"lr": 0.01, "images": {"type": "uri_folder", "path": "azureml:images:1"}},
         outputs={"model": {"type": "uri_folder"}}),
    _run("torchrun-twice", "torchrun --nproc_per_node 8 probe.py", {"type": "pytorch", "process_count_per_instance": 8},
         code="src"),
]
STATIC = "--node_rank $NODE_RANK --master_addr $MASTER_ADDR --master_port $MASTER_PORT"
PER_NODE = {"type": "pytorch", "process_count_per_instance": 1}
TOPOLOGY_MISTAKES = {
    # run -> (command on 2 nodes, the gate's rule that blocks it)
    "nnodes-4-on-2": (f"torchrun --nnodes 4 --nproc_per_node 2 {STATIC} allreduce_sum.py", "run-launcher-node-count"),
    "no-rendezvous": ("torchrun --nnodes 2 --nproc_per_node 2 allreduce_sum.py", "run-launcher-rendezvous"),
    "standalone": ("torchrun --standalone --nproc_per_node 2 allreduce_sum.py", "run-launcher-rendezvous"),
    "nnodes-1": ("torchrun --nnodes 1 --nproc_per_node 2 allreduce_sum.py", "run-launcher-rendezvous"),
    "launch-nnodes-3": (f"python -m torch.distributed.launch --nnodes 3 --nproc_per_node 2 {STATIC} --use_env "
                        "allreduce_sum.py", "run-launcher-node-count"),
    "accelerate-one-machine": ("accelerate launch --multi_gpu --num_machines 1 --num_processes 2 allreduce_sum.py",
                               "run-launcher-rendezvous"),
    "deepspeed-no-hostfile": ("deepspeed --num_gpus 2 allreduce_sum.py", "run-launcher-rendezvous"),
}
# One worker per node: a group split by node would sum 1 and 2 apart instead of 3 together (how a node's own
# workers are numbered is test_per_node_torchrun_starts_its_workers_with_the_rewritten_count's).
CORRECT_LAUNCHES = {
    "torchrun-static": f"torchrun --nnodes 2 --nproc_per_node 1 {STATIC} allreduce_sum.py",
    "torchrun-c10d": "torchrun --nnodes 2 --nproc_per_node 1 --rdzv_backend c10d --rdzv_endpoint "
                     "$MASTER_ADDR:$MASTER_PORT --rdzv_id job allreduce_sum.py",
    "accelerate-two-machines": "accelerate launch --multi_gpu --num_machines 2 --num_processes 2 --machine_rank "
                               "$NODE_RANK --main_process_ip $MASTER_ADDR --main_process_port $MASTER_PORT "
                               "allreduce_sum.py",
}
RUNS += [_run(name, command, PER_NODE) for name, (command, _) in TOPOLOGY_MISTAKES.items()]
RUNS += [_run(name, command, PER_NODE) for name, command in CORRECT_LAUNCHES.items()]
RUNS.append(_run("done", "python done.py", PT2))  # four ranks that start and end at once: run-local's bookkeeping


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = emulation_project(tmp_path_factory.mktemp("project"), RUNS)
    (root / "src" / "await_file.py").write_text(
        "import pathlib, sys, time\n"
        "deadline = time.monotonic() + 60\n"
        "while not pathlib.Path(sys.argv[1]).exists() and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n"
        "sys.exit(0 if pathlib.Path(sys.argv[1]).exists() else 1)\n"
    )
    (root / "t").mkdir()
    for name, text in SCRIPTS.items():
        (root / "t" / name).write_text(text.lstrip())
    return root


@pytest.fixture
def mpirun() -> None:
    required_tool("mpirun", "apt-get install openmpi-bin (Open MPI)")


def user_env(project: Path, **overrides: str) -> dict[str, str]:
    """The user's environment, with work folders (made with mkdtemp) kept inside the test's project."""
    return {**os.environ, "TMPDIR": str(project / "work"), **overrides}


def run_local(project: Path, *args: str, timeout: float = 90, env: dict[str, str] | None = None
              ) -> subprocess.CompletedProcess[str]:
    return cli.amlgpu(project, "run-local", *args, "--stack", "test", env=env or user_env(project), timeout=timeout)


def answer(project: Path, capfd: pytest.CaptureFixture[str], real: bool, *args: str
           ) -> subprocess.CompletedProcess[str]:
    """``run-local ARGS`` for an answer given before any process starts: the console script when ``real`` (one
    case of each kind), else the CLI's entry point in this process, its output read at the file descriptors (so
    a process it wrongly started would still be seen writing)."""
    if real:
        return run_local(project, *args)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(project)
        patch.setenv("TMPDIR", str(project / "work"))
        try:
            code = main(["run-local", *args, "--stack", "test"])
        except SystemExit as exit_:  # argparse's own refusals, as the console script ends on them
            code = int(exit_.code or 0)
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess(["amlgpu", "run-local", *args], code, out, err)


def workdir(result: subprocess.CompletedProcess[str]) -> Path:
    match = re.search(r"^work folder \(snapshot and outputs, kept: --keep\): (.+)$", result.stderr, re.M)
    assert match, result.stderr
    return Path(match.group(1))


def probes(result: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    folder = workdir(result) / "outputs" / "probes"
    return {p.stem: json.loads(p.read_text())["variables"] for p in sorted(folder.glob("*.json"))}


def lines(result: subprocess.CompletedProcess[str], label: str) -> list[str]:
    prefix = f"[{label}] "
    return [line[len(prefix):] for line in result.stdout.splitlines() if line.startswith(prefix)]


def test_per_process_pytorch_all_reduces_across_two_nodes_of_two(project: Path) -> None:
    result = run_local(project, "allreduce-sum")
    assert result.returncode == 0, result.stdout + result.stderr
    for rank in range(4):
        assert lines(result, f"rank {rank}") == ["sum 10 over 4"]  # 1 + 2 + 3 + 4
    assert "2 node(s) x 2 process(es) = 4 processes" in result.stderr
    assert "run succeeded (exit 0)" in result.stderr


def test_per_node_torchrun_starts_its_workers_with_the_rewritten_count(project: Path) -> None:
    result = run_local(project, "probe-torchrun", "--procs-per-node", "2", "--keep")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "torchrun flags rewritten for the local topology: --nproc_per_node 8 -> 2" in result.stderr
    seen = probes(result)
    assert sorted(seen) == ["rank-0", "rank-1", "rank-2", "rank-3"]
    for rank in range(4):
        variables = seen[f"rank-{rank}"]
        node, local = divmod(rank, 2)
        assert (variables["WORLD_SIZE"], variables["LOCAL_RANK"], variables["GROUP_RANK"]) == ("4", str(local),
                                                                                              str(node))
        assert variables["NODE_RANK"] == str(node)  # what Azure ML gave the node's launcher
    assert {lbl for lbl in ("node 0", "node 1") if lines(result, lbl)} == {"node 0", "node 1"}


def test_mpi_ranks_see_open_mpis_variables_per_emulated_node(project: Path, mpirun: None) -> None:
    # Four GPUs "visible" (the probe never touches them): each emulated node must get two of its own.
    result = run_local(project, "probe-mpi", "--keep", env=user_env(project, CUDA_VISIBLE_DEVICES="0,1,2,3"))
    assert result.returncode == 0, result.stdout + result.stderr
    seen = probes(result)
    assert sorted(seen) == ["rank-0", "rank-1", "rank-2", "rank-3"]
    masters = {variables.pop("AZ_BATCH_MASTER_NODE") for variables in seen.values()}
    assert len(masters) == 1 and re.fullmatch(r"127\.0\.0\.1:\d+", masters.pop())
    for rank in range(4):
        assert seen[f"rank-{rank}"].pop("CUDA_VISIBLE_DEVICES") == ("0,1" if rank < 2 else "2,3")
        assert seen[f"rank-{rank}"] == contract.mpi_rank_env(rank=rank, nodes=2, procs_per_node=2)
        assert len(lines(result, f"rank {rank}")) == 1


def test_the_allreduce_health_check_runs_under_mpi_and_finds_the_sums_right(project: Path, mpirun: None) -> None:
    result = run_local(project, "fabric-check")
    assert result.returncode == 0, result.stdout + result.stderr
    report = lines(result, "rank 0")
    assert report[0].startswith("# all_reduce_perf (torch.distributed gloo): 4 ranks")
    rows = [line.split() for line in report if re.match(r"\s*\d", line)]
    assert [int(row[0]) for row in rows] == [1024, 2048, 4096]
    assert all(row[-1] == "0" for row in rows)  # no wrong value
    assert "# Out of bounds values : 0 OK" in report


@pytest.mark.parametrize(("run", "flags", "cluster"), [
    ("probe-tf", [], {"worker": 2}),
    ("probe-tf", ["--tf-empty-ps"], {"worker": 2, "ps": 0}),
    ("probe-tf-ps", [], {"worker": 2, "ps": 1}),
])
def test_tensorflow_tasks_each_get_their_tf_config(project: Path, run: str, flags: list[str],
                                                   cluster: dict[str, int]) -> None:
    result = run_local(project, run, *flags, "--keep")
    assert result.returncode == 0, result.stdout + result.stderr
    configs = {name: variables["TF_CONFIG"] for name, variables in probes(result).items()}
    tasks = [f"worker-{i}" for i in range(cluster["worker"])] + [f"ps-{i}" for i in range(cluster.get("ps", 0))]
    assert sorted(configs) == sorted(tasks)
    for name, config in configs.items():
        kind, index = name.split("-")
        assert config["task"] == {"type": kind, "index": int(index)}
        assert {k: len(v) for k, v in config["cluster"].items()} == cluster
        assert config["cluster"] == configs["worker-0"]["cluster"]
    empty_ps_warning = 'probe: warning: TF_CONFIG.cluster has "ps": []'
    assert any(line.startswith(empty_ps_warning) for line in lines(result, "worker 0")) is ("--tf-empty-ps" in flags)


@pytest.mark.parametrize("run", ["fail", "fail-mpi"])
def test_a_failing_rank_stops_the_whole_run_within_seconds(project: Path, run: str, request: pytest.FixtureRequest
                                                           ) -> None:
    if run == "fail-mpi":
        request.getfixturevalue("mpirun")
    started = time.monotonic()
    result = run_local(project, run, "--keep")
    assert time.monotonic() - started < 15  # the other ranks would sleep for 120 s
    assert result.returncode == 7, result.stdout + result.stderr
    assert "run failed: rank 2 exited 7 first (exit 7)" in result.stderr
    summary = {m.group(1): m.group(2) for m in re.finditer(r"^\s+(rank \d)\s+\S+\s+(\w+)", result.stderr, re.M)}
    # mpirun tears the other ranks down itself (SIGTERM, SIGKILL after the grace period): a rank whose helper
    # was not scheduled in time to record how it ended (a loaded machine) is reported "killed".
    torn_down = {"stopped"} if run == "fail" else {"stopped", "killed"}
    assert summary.pop("rank 2") == "failed"
    assert sorted(summary) == ["rank 0", "rank 1", "rank 3"] and set(summary.values()) <= torn_down, summary
    pids = [int(p.read_text()) for p in (workdir(result) / "outputs" / "pids").glob("*.pid")]
    assert len(pids) == 4 and all(gone(pid) for pid in pids)


def test_the_trainer_converges_on_its_synthetic_task(project: Path) -> None:
    result = run_local(project, "train", "--procs-per-node", "1", "--keep")
    assert result.returncode == 0, result.stdout + result.stderr
    metrics = [json.loads(line) for line in
               (workdir(result) / "outputs" / "checkpoints" / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in metrics] == [0, 1, 2, 3]
    assert metrics[-1]["world_size"] == 2
    assert metrics[-1]["loss"] < 0.05 < metrics[0]["loss"]
    assert (workdir(result) / "outputs" / "checkpoints" / "checkpoint.pt").is_file()
    assert lines(result, "rank 1") == []  # only rank 0 logs


def test_timeout_stops_the_run_with_124(project: Path) -> None:
    started = time.monotonic()
    result = run_local(project, "sleep", "--timeout", "2")
    assert time.monotonic() - started < 15
    assert result.returncode == 124
    assert "run-local: timed out after 2s: every process was stopped" in result.stderr


def ctrl_c_once_up(project: Path, *flags: str, env: dict[str, str]) -> tuple[str, str]:
    """``amlgpu run-local sleep`` (the console script: the signal is the test), interrupted once both ranks are
    up; its stdout and stderr, after checking it exited 130."""
    proc = subprocess.Popen([str(cli.AMLGPU), "run-local", "sleep", "--stack", "test", *flags], cwd=project,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    up = [proc.stdout.readline() for _ in range(2)]
    assert all(" up" in line for line in up), up
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=15)
    assert proc.returncode == 130, err
    return out, err


def test_ctrl_c_stops_every_process_and_exits_130(project: Path) -> None:
    out, err = ctrl_c_once_up(project, "--keep", env=user_env(project))
    assert "run-local: interrupted: every process was stopped" in err
    pids = [int(p.read_text()) for p in (workdir(subprocess.CompletedProcess([], 0, out, err)) / "outputs" / "pids"
                                          ).glob("*.pid")]
    assert len(pids) == 2 and all(gone(pid) for pid in pids)


def test_inputs_outputs_and_the_snapshot(project: Path, tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    (images / "cat.png").write_text("x")
    result = run_local(project, "show", "--procs-per-node", "1", "--input", f"images={images}", "--keep")
    assert result.returncode == 0, result.stdout + result.stderr
    work = workdir(result)
    assert lines(result, "rank 0") == [f"cwd {work / 'code'}"]
    assert (work / "outputs" / "model" / "model.txt").read_text() == "lr=0.01 data=['cat.png']"
    assert (work / "code" / "written-into-the-snapshot.txt").exists()
    assert not (project / "t" / "written-into-the-snapshot.txt").exists()  # the code folder is left alone


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope"], "error: Pulumi.test.yaml: aml-gpu-training:jobs: no run named 'nope'; runs in this stack: "
                   "accelerate-one-machine, accelerate-two-machines, allreduce-sum,"),
        (["allreduce-sum", "--nodes", "3"], "error: --nodes: 3 is more than the run declares: 2 node(s)"),
        (["allreduce-sum", "--nodes", "0"], "argument --nodes: 0 is not at least 1"),
        (["probe-tf", "--procs-per-node", "2"], "error: --procs-per-node: tensorflow starts one process per task"),
        (["show"], "error: Pulumi.test.yaml: aml-gpu-training:jobs[10].inputs.images.path: input 'images' is "
                   "azureml:images:1, which this machine cannot mount: pass a local copy with --input images=PATH"),
        (["show", "--input", "images"], "error: --input: 'images' is not NAME=VALUE"),
        (["torchrun-twice"], "error: Pulumi.test.yaml: aml-gpu-training:jobs[11].distribution.process_count_per_"
                             "instance: the command starts torchrun, a per-node launcher"),
    ],
)
def test_bad_input_exits_2_naming_the_file_and_key(project: Path, args: list[str], message: str,
                                                   capfd: pytest.CaptureFixture[str]) -> None:
    result = answer(project, capfd, args[0] == "nope", *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("run", sorted(TOPOLOGY_MISTAKES))
def test_a_launch_the_gate_blocks_is_refused_never_rewritten_into_one_that_works(
        project: Path, run: str, capfd: pytest.CaptureFixture[str]) -> None:
    result = answer(project, capfd, run == "nnodes-4-on-2", run)
    assert result.returncode == 1, result.stdout + result.stderr
    rule = TOPOLOGY_MISTAKES[run][1]
    assert f"run-local: refused: {run!r} would not run as one training on Azure ML" in result.stderr
    assert f"  {rule}: " in result.stderr and "Fix: " in result.stderr
    assert "run succeeded" not in result.stderr and "rewritten" not in result.stderr
    assert result.stdout == ""  # nothing started


@pytest.mark.parametrize("run", sorted(CORRECT_LAUNCHES))
def test_correct_multi_node_launches_train_as_one(project: Path, run: str) -> None:
    result = run_local(project, run)
    assert result.returncode == 0, result.stdout + result.stderr
    sums = [line for label in ("node 0", "node 1") for line in lines(result, label) if line.startswith("sum ")]
    assert sums == ["sum 3 over 2"] * 2, result.stdout  # one group across both emulated nodes
    assert "run succeeded (exit 0)" in result.stderr


def test_mpi_without_mpirun_says_how_to_install_it(project: Path, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "bash").symlink_to(shutil.which("bash") or "/bin/bash")
    result = run_local(project, "probe-mpi", env=user_env(project, PATH=str(bin_dir)))
    assert result.returncode == 2
    assert "distribution 'mpi' runs under mpirun, which is not on PATH: install Open MPI" in result.stderr


def _scratch(tmp_path: Path) -> Path:
    folder = tmp_path / "tmpdir"
    folder.mkdir()
    return folder


@pytest.mark.parametrize(("run", "code"), [("done", 0), ("fail", 7)])
def test_the_work_folder_is_removed_when_the_run_ends(project: Path, tmp_path: Path, run: str, code: int) -> None:
    scratch = _scratch(tmp_path)
    result = run_local(project, run, env=user_env(project, TMPDIR=str(scratch)))
    assert result.returncode == code, result.stdout + result.stderr
    assert list(scratch.iterdir()) == []
    assert "work folder removed (--keep keeps the snapshot and outputs)" in result.stderr
    assert "kept: --keep" not in result.stderr


def test_keep_keeps_the_work_folder_and_says_where(project: Path, tmp_path: Path) -> None:
    scratch = _scratch(tmp_path)
    result = run_local(project, "done", "--keep", env=user_env(project, TMPDIR=str(scratch)))
    assert result.returncode == 0, result.stdout + result.stderr
    kept = workdir(result)
    assert kept.parent == scratch and list(scratch.iterdir()) == [kept]
    assert (kept / "code" / "done.py").is_file()
    assert "work folder removed" not in result.stderr


def test_ctrl_c_removes_the_work_folder_too(project: Path, tmp_path: Path) -> None:
    scratch = _scratch(tmp_path)
    ctrl_c_once_up(project, env=user_env(project, TMPDIR=str(scratch)))
    assert list(scratch.iterdir()) == []


def test_bad_input_leaves_no_work_folder(project: Path, tmp_path: Path) -> None:
    scratch = _scratch(tmp_path)
    result = run_local(project, "show", "--keep", env=user_env(project, TMPDIR=str(scratch)))
    assert result.returncode == 2 and "--input images=PATH" in result.stderr
    assert list(scratch.iterdir()) == [] and "kept" not in result.stderr
