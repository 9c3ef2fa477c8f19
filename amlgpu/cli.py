"""``amlgpu``: plan, check, emulate and submit distributed GPU training on Azure ML.

Each subcommand lives in :mod:`amlgpu.commands` as a module with ``register(subparsers)``, which
adds its parser and sets ``func``. Exit codes are the same everywhere: 0 success, 1 a mandatory
policy failed (artifacts still written), 2 bad input (nothing written), 3 an internal error (amlgpu itself
failed: reported in one line asking for a report, no traceback), 4 ``preflight`` could check nothing,
130 interrupted.

:data:`COMMANDS` is the one place a module is imported late: only the module of the command that runs is
loaded (a plan's libraries take seconds), so ``amlgpu --version``, ``--help`` and the light commands start
in a fraction of a second; the others are listed by name and help line.
"""

from __future__ import annotations

import argparse
import importlib
import keyword
import os
import re
import sys
import tomllib
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn

from amlgpu.terminal import cleaned_output, use_colour
from kernel import interrupts
from kernel.errors import EXIT_INTERNAL, EXIT_USAGE, UserError, internal_error

COMMANDS = {
    "init": "write a commented stack file (Pulumi.<stack>.yaml) that plans clean",
    "plan": "plan a stack offline (Pulumi mock engine) and check it against the policy pack",
    "preflight": "read-only checks of what would stop the first pulumi up (providers, quota, sizes, permissions, "
    "names, keys, DNS, the upload's network path)",
    "run-local": "run a declared distributed run on this machine with Azure ML's launch contract",
    "submit": "submit a declared run to the stack's Azure ML workspace and follow it to the end",
    "components": "pull the registered components the stack's pipelines run",
    "job": "a submitted job: show its status, stream its logs, cancel it",
    "import": "turn Azure ML job YAML and SDK v1/v2 scripts into stack entries",
    "policy": "list the policy rules, or generate their docs page",
    "schema": "print the stack file's JSON Schema (for editors), or check/write the committed copy",
    "doctor": "check this machine (Python, packages, Pulumi CLI, Azure login, mpirun, torch, GPUs, what each declared "
              "run needs to run locally) and say what to do",
    "prices": "the pricing table: refresh it from Azure's Retail Prices API, or show it",
}
"""Each command (a module under amlgpu.commands) and its line in ``amlgpu --help``, in the order listed."""


_EPILOG = """\
start here:
  amlgpu init --stack mine                  write Pulumi.mine.yaml, a commented stack that plans clean
  amlgpu doctor                             what this machine can do, and what to install
  amlgpu plan --stack mine                  plan Pulumi.mine.yaml offline, with the policy verdict
  amlgpu preflight --stack mine             what would stop the first pulumi up (quota, permissions...)
  amlgpu run-local ddp-train --stack mine   run a declared run here, as Azure ML would start it
  amlgpu submit ddp-train --stack mine      send it to the deployed workspace and follow it
  amlgpu job stream NAME --stack mine       follow a submitted job again (also: job show, job cancel)
  amlgpu COMMAND --help                     a command's options

exit codes: 0 ok, 1 a mandatory policy failed, 2 bad input, 3 internal error, 4 preflight checked nothing,
130 interrupted.
docs: docs/quickstart.md"""


_ROLE = re.compile(r":[a-z]+:`(~?)([^`<]+?)(?:\s*<[^>]*>)?`")


def plain(text: str) -> str:
    """Docstring reStructuredText as terminal text: ``x`` -> x, :mod:`a.b` -> a.b, :class:`~a.B` -> B."""
    text = _ROLE.sub(lambda m: m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2), text)
    return text.replace("``", "").replace("\\ ", "")


class _Parser(argparse.ArgumentParser):
    """argparse with our exit code for usage errors, help without docstring markup and descriptions (the
    commands' docstrings) laid out as written."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def add_actions(self) -> Any:
        """The required ``ACTION`` of a command that has several (``amlgpu job show|logs|cancel``)."""
        actions = self.add_subparsers(dest="action", metavar="ACTION", parser_class=type(self))
        actions.required = True
        return actions

    def format_help(self) -> str:
        return plain(super().format_help())

    def format_usage(self) -> str:
        return plain(super().format_usage())

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        # Python 3.11's argparse drops a value of "--" given as `--flag=--` and hands the command [] instead,
        # unconverted (run-local then failed with a TypeError); read it as the value it is.
        if arg_strings == ["--"] and action.option_strings and action.nargs is None:
            return self._get_value(action, "--")
        return super()._get_values(action, arg_strings)

    def error(self, message: str) -> NoReturn:  # argparse's own exit code is 2 as well; keep its usage line
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def version() -> str:
    """The installed distribution's version (pyproject's when run from a checkout that is not installed)."""
    try:
        return metadata.version("aml-gpu-training")
    except metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        return str(tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"])


class _Commands:
    """The subparsers as a command's ``register`` sees them: its help line is :data:`COMMANDS`'."""

    def __init__(self, sub: Any) -> None:
        self._sub = sub

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        kwargs.setdefault("help", COMMANDS[name])
        return self._sub.add_parser(name, **kwargs)


def build_parser(load: Iterable[str] = COMMANDS) -> argparse.ArgumentParser:
    """The parser: the commands in ``load`` with their options (their modules imported), the others by name and
    help line only."""
    parser = _Parser(
        prog="amlgpu",
        description="Distributed GPU training on Azure Machine Learning, as code:\n"
        "plan the Pulumi stack offline, check it against policy, emulate runs locally, submit them.",
        epilog=_EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"amlgpu {version()}")
    parser.add_argument("--color", action="store_true", help="colour findings even when not on a terminal or with "
                        "NO_COLOR set (given anywhere on the command line)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    load = set(load)
    for name, line in COMMANDS.items():
        if name not in load:
            sub.add_parser(name, help=line)
            continue
        module = name.replace("-", "_") + ("_" if keyword.iskeyword(name) else "")  # import -> import_
        importlib.import_module(f"amlgpu.commands.{module}").register(_Commands(sub))
    return parser


def _command(argv: list[str]) -> list[str]:
    """The command ``argv`` runs (its first word, as argparse reads it), when it names one."""
    word = next((arg for arg in argv if not arg.startswith("-")), None)
    return [word] if word in COMMANDS else []


def main(argv: list[str] | None = None) -> int:
    # Every line printed holds no secret the stack holds and is inert in a terminal and a CI log, whatever
    # prints it (amlgpu.terminal).
    with cleaned_output():
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    try:
        # Inside the try: building the parser imports the command, long enough for a Ctrl-C to land there.
        given = sys.argv[1:] if argv is None else argv
        bad = next((arg for arg in given if "\0" in arg), None)
        if bad is not None:  # no shell can pass one, but a caller of main() can: no path may hold it
            raise UserError(f"argument {bad!r} holds a NUL byte")
        force = "--color" in given
        given = [arg for arg in given if arg != "--color"]
        use_colour(force=force)  # a terminal gets colour, a pipe none (amlgpu.terminal)
        args = build_parser(_command(given)).parse_args(given)
        return int(args.func(args) or 0)
    except UserError as err:
        print(err.report(), file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        raise  # the reader of stdout left: console_main's to handle
    except Exception as err:  # a bug: one line and its own exit code, never "policy failed" (1)
        from kernel import secrets  # loaded only on this path: the light commands start without it

        print(f"error: {secrets.mask(internal_error(err))}", file=sys.stderr)
        return EXIT_INTERNAL


def console_main() -> None:
    """The ``amlgpu`` console script: :func:`main`, then exit with its code."""
    interrupts.install()  # done already when the package saw it was started as amlgpu; harmless again
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # `amlgpu policy list | head`: the reader left; that is not an error worth a traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        code = 0
    if code == 130:
        # An interrupted plan can leave the Pulumi runtime's worker threads waiting on futures that will
        # never resolve, and the interpreter would wait for them at exit (the process hung on Ctrl-C).
        # What had to be cleaned up (staging folders) was cleaned on the way here: leave now.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    console_main()
