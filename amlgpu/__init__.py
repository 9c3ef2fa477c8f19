"""aml-gpu-training's command-line tool, ``amlgpu``: the top floor.

The commands: each parses its flags and prints; the plan itself is :mod:`planning.service`, the stack
model it works on :mod:`stack`. Nothing below this package imports it.

Started as ``amlgpu`` (the console script, or ``python -m amlgpu``), the package takes over Ctrl-C
before anything else is imported (:mod:`kernel.interrupts`).
"""

import sys as _sys


def _started_as_the_cli(argv: list[str]) -> bool:
    """Whether the interpreter's own command line runs the ``amlgpu`` console script or ``-m amlgpu``."""
    if len(argv) > 1 and argv[1].replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".exe") == "amlgpu":
        return True
    return any(arg == "-m" and argv[i + 1:i + 2] == ["amlgpu"] for i, arg in enumerate(argv))


if _started_as_the_cli(list(getattr(_sys, "orig_argv", []))):
    from kernel import interrupts as _interrupts

    _interrupts.install()
