"""``amlgpu`` as a fresh process without paying its imports each time: for tests that run many commands through a
shell (the docs' blocks, as written).

A fresh ``amlgpu plan`` spends most of its CPU importing (Pulumi, azure-native, azure-ai-ml, pydantic models): about
4 of its 5 CPU seconds. The server below imports the project's packages once, then forks one child per command; the
child takes the caller's argv, working folder, environment and standard streams and runs the console script's own
entry point (``amlgpu.cli:console_main``), so its exit status, output and files are those of ``amlgpu`` started by a
shell. What only a real ``exec`` of the console script can show (interpreter start-up, Ctrl-C before the imports,
the installed entry point) is tested through ``tests/cli.py``.

``amlgpu_on_path(folder)`` writes an ``amlgpu`` executable into ``folder`` that hands its command to the server (the
server is started on first use, one per test process, and stopped at its end).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any, NoReturn

ROOT = Path(__file__).resolve().parent.parent

CLIENT = r'''
import json, os, socket, sys
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
conn.connect({socket!r})
request = json.dumps({{"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ), **{extra!r}}}).encode()
socket.send_fds(conn, [len(request).to_bytes(8, "big") + request], [0, 1, 2])
status = b""
while len(status) < 4:
    part = conn.recv(4 - len(status))
    if not part:
        sys.exit("amlgpu (forkserver): the server went away")
    status += part
sys.exit(int.from_bytes(status, "big"))
'''
"""The ``amlgpu`` a shell finds: sends argv, working folder, environment and fds 0-2; exits with the child's status
(``-IS``: no site, no user paths, so it starts in milliseconds)."""


def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    size = int.from_bytes(data[:8], "big")
    data = data[8:]
    while len(data) < size:
        part = conn.recv(size - len(data))
        if not part:
            raise EOFError
        data += part
    return json.loads(data), fds


def cap_address_space(limit: int) -> None:
    """Cap this process's address space (``RLIMIT_AS``) at ``limit`` bytes: a command's memory bound."""
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _child(request: dict[str, Any], fds: list[int]) -> NoReturn:
    """In the forked child: become ``amlgpu ARGV`` started in ``cwd`` with ``env`` and the caller's streams; never
    returns to the server's loop."""
    code = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        if request.get("address_space"):  # what the caller's preexec_fn would have capped
            cap_address_space(int(request["address_space"]))
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # recomputed from the caller's TMPDIR
        sys.argv = ["amlgpu", *request["argv"]]
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from amlgpu.cli import console_main

        console_main()
        code = 0
    except SystemExit as done:  # what the interpreter does with it: an int is the status, anything else is printed
        if isinstance(done.code, int) or done.code is None:
            code = done.code or 0
        else:
            print(done.code, file=sys.stderr)
    except BaseException:  # an uncaught exception: a traceback and exit 1, as in a real process
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a reader that left (a closed pipe) changes nothing here
                stream.flush()
        os._exit(code)


def _answer(conn: socket.socket, request: dict[str, Any], fds: list[int]) -> NoReturn:
    """In a forked child of the server: fork the command, wait for it, send its status (as a shell reports it:
    128 + N for a signal), exit. The server goes on accepting meanwhile: ``amlgpu a | amlgpu b`` runs both."""
    pid = os.fork()
    if pid == 0:
        conn.close()
        _child(request, fds)
    for fd in fds:
        os.close(fd)
    # Wait for the command or for the caller to go away (killed on a timeout): then the command goes too, as a
    # process killed with its shell would, instead of running on unseen.
    command = os.pidfd_open(pid)
    while True:
        ready, _, _ = select.select([command, conn], [], [])
        if command in ready:
            break
        if not conn.recv(1):  # the caller sends nothing after its request: readable means it closed
            os.kill(pid, signal.SIGKILL)
            break
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    with contextlib.suppress(OSError):  # the caller went away
        conn.sendall((code if code >= 0 else 128 - code).to_bytes(4, "big"))
    os._exit(0)


def serve(path: str) -> None:
    """Import the packages a command needs, then serve each connection in a forked child."""
    os.chdir(tempfile.gettempdir())
    import amlgpu.cli

    amlgpu.cli.build_parser()  # every command's module
    for module in ("planning.engine", "planning.service", "preflight.deploy", "jobs.submit", "jobs.component",
                   "infra.access", "infra.build_context", "infra.environment", "infra.gpu_cluster", "infra.network",
                   "infra.private_link", "infra.workspace"):
        importlib.import_module(module)
    # pulumi-azure-native loads a class's module when it is first named: the program's first run would load some
    # 800 of them (2.6 CPU s), so each command would pay them again. Every class the project names, loaded once.
    sys.path.insert(0, str(ROOT / "bench"))
    import plan_bench

    for module, classes in plan_bench.azure_native_classes(ROOT).items():
        namespace = importlib.import_module(f"pulumi_azure_native.{module}")
        for name in classes:
            getattr(namespace, name)
    sys.path.remove(str(ROOT / "bench"))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    listener.settimeout(0.5)
    # Forking is safe only from a process with one thread, native ones included (a lock another thread held would
    # stay held): why torch, which starts a thread as it is imported, is not imported here.
    assert threading.active_count() == 1 and len(os.listdir("/proc/self/task")) == 1, threading.enumerate()
    parent = os.getppid()
    print("ready", flush=True)
    while True:
        with contextlib.suppress(ChildProcessError):  # reap the children that have answered
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            if os.getppid() != parent:  # the test process is gone: so is the need for a server
                return
            continue
        conn.settimeout(None)
        try:
            request, fds = _receive(conn)
        except (EOFError, OSError, ValueError):
            conn.close()
            continue
        if os.fork() == 0:
            listener.close()
            _answer(conn, request, fds)
        for fd in fds:
            os.close(fd)
        conn.close()


_SERVER: tuple[subprocess.Popen[str], str] | None = None


def _server() -> str:
    """The folder of this process's server (its socket, its clients), started on first use and stopped when this
    process ends."""
    global _SERVER
    if _SERVER is None:
        folder = tempfile.mkdtemp(prefix="amlgpu-forkserver-", dir="/tmp")
        process = subprocess.Popen([sys.executable, __file__, os.path.join(folder, "socket")], stdout=subprocess.PIPE,
                                   text=True, stdin=subprocess.DEVNULL)
        assert process.stdout is not None
        ready = process.stdout.readline()
        assert ready == "ready\n", f"the fork server did not start: {ready!r}"

        def stop() -> None:
            process.kill()
            process.wait()
            shutil.rmtree(folder, ignore_errors=True)

        atexit.register(stop)
        _SERVER = (process, folder)
    return _SERVER[1]


def _client_text(address_space: int | None) -> str:
    extra = {"address_space": address_space} if address_space else {}
    return f"#!{sys.executable} -IS\n" + CLIENT.format(socket=os.path.join(_server(), "socket"), extra=extra)


def client(address_space: int | None = None) -> Path:
    """An ``amlgpu`` executable that runs its command through this process's fork server; ``address_space`` caps the
    command's (``RLIMIT_AS``, bytes), as a ``preexec_fn`` would cap a real one's."""
    script = Path(_server()) / f"amlgpu-{address_space or 0}"
    if not script.exists():
        script.write_text(_client_text(address_space))
        script.chmod(0o755)
    return script


def amlgpu_on_path(folder: Path) -> Path:
    """Write an ``amlgpu`` executable into ``folder`` that runs its command through the fork server."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "amlgpu"
    script.write_text(_client_text(None))
    script.chmod(0o755)
    return script


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    serve(sys.argv[1])
