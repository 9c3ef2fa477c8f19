"""``amlgpu import PATH...``: existing Azure ML jobs as entries of a stack.

Reads CLI v2 command, pipeline and sweep job files (``*.yml``) and SDK v1 / v2 submission scripts, or every one
directly in a folder (YAML files that are not jobs and scripts without one are skipped, with a note),
(``*.py``: each ``ScriptRunConfig(...)``, ``command(...)`` and ``@pipeline`` function, read without running
the script) and prints them as ``aml-gpu-training:jobs`` entries (with the ``environments`` entries they
need), each preceded by a comment naming the file and line it came from. See docs/migrating.md for every
mapping.

With ``--stack``, ``compute`` and ``environment`` map to that stack's clusters and environments
(``--compute`` / ``--environment`` choose them explicitly) and the entries are checked against it.
``--write`` appends them to ``Pulumi.<stack>.yaml``, keeping its comments and layout, then plans it.

Exit 0 when everything was imported (with --write: the plan's own exit code), 1 when values were left
as ``TODO(amlgpu import)`` placeholders (listed with their file and line; --write then writes nothing),
2 on bad input (a file that is not a job, a script without ScriptRunConfig or command(), a name the
stack already uses), 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from amlgpu.commands import plan
from importer import Context, import_files
from importer.emit import append_to_stack, render, write_atomically
from kernel import secrets
from kernel.errors import EXIT_OK, EXIT_POLICY, UserError
from kernel.interrupts import cleanup_on_interrupt, terminate_as_interrupt
from stack import stackfile
from stack.config import from_stackfile
from stack.project import find_root, load_stack


def register(sub: Any) -> None:
    parser = sub.add_parser("import", description=__doc__)
    parser.add_argument("paths", metavar="PATH", nargs="+", type=Path,
                        help="job files (.yml) and scripts (.py), or folders of them (each run named distinctly)")
    parser.add_argument("--stack", "-s", help="map to (and with --write, append to) Pulumi.<stack>.yaml")
    parser.add_argument("--compute", metavar="CLUSTER",
                        help="the stack cluster every imported run (every pipeline step, every sweep) uses")
    parser.add_argument("--environment", metavar="ENV",
                        help="the stack environment (or azureml: reference) they use, every step included")
    parser.add_argument("--name", help="the run's name (importing one run)")
    parser.add_argument("--write", action="store_true", help="append to the stack file, then run amlgpu plan")
    parser.set_defaults(func=run)


def _remember_secrets(paths: list[str]) -> None:
    """The secrets the imported files hold, masked wherever they would show (in an error or the entries)."""
    for name in paths:
        path = Path(name)
        try:
            if path.is_file() and path.stat().st_size <= stackfile.MAX_BYTES:
                secrets.remember_in_text(path.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue  # the importer itself says what is wrong with the file


def run(args: argparse.Namespace) -> int:
    if args.write and not args.stack:
        raise UserError("--write appends to a stack file: name it with --stack", key="--write")
    root = find_root()
    stack = load_stack(args.stack, root) if args.stack else None
    ctx = Context(root=root, stack=stack, compute=args.compute, environment=args.environment)
    try:
        _remember_secrets(list(args.paths))
        skipped: list[str] = []
        drafts = import_files(list(args.paths), ctx, name=args.name, skipped=skipped)
        secrets.remember_in([draft.run for draft in drafts])
    except secrets.TooManySecrets as err:
        raise UserError(str(err), key="PATH") from None
    for why in skipped:
        print(f"note: skipped {why}", file=sys.stderr)
    for draft in drafts:
        for note in draft.notes:
            print(f"{draft.origin}: note: {note}", file=sys.stderr)
    placeholders = [p for d in drafts for p in d.placeholders]
    for p in placeholders:
        print(f"{p.file}:{p.line}: left for you: {p.key}: {p.why}; {p.fix}", file=sys.stderr)
    if not args.write or placeholders:
        print(render(drafts), end="")
        if placeholders:
            print(f"{len(placeholders)} value(s) left as 'TODO(amlgpu import)' placeholders"
                  + ("; nothing written: complete them in the source or pass --compute/--environment"
                     if args.write else ""), file=sys.stderr)
            return EXIT_POLICY
        return EXIT_OK
    assert stack is not None
    text = append_to_stack(stack.file.path, drafts)
    # Ctrl-C or SIGTERM while the new file is checked removes the temporary copy (write_atomically's except).
    with cleanup_on_interrupt(), terminate_as_interrupt():
        write_atomically(stack.file.path, text, check=lambda written: from_stackfile(stackfile.read(written), root))
    runs = ", ".join(str(d.run["name"]) for d in drafts)
    print(f"Appended {len(drafts)} run(s) to {stack.file.display}: {runs}", file=sys.stderr)
    return plan.plan_stacks([stack.name])  # `amlgpu plan --stack S`
