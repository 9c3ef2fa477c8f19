"""``amlgpu schema``: the JSON Schema of ``Pulumi.<stack>.yaml`` for editors, and the config reference.

* ``amlgpu schema``: print the schema (generated from the stack model);
* ``amlgpu schema --reference``: print the config reference (``docs/config.md``) instead;
* ``amlgpu schema --write``: write both committed files, ``schema/stack.schema.json`` and
  ``docs/config.md``, into the project;
* ``amlgpu schema --check``: exit 1, naming each file, when a committed file differs from the model.

To validate a stack file in the editor, make its first line::

    # yaml-language-server: $schema=schema/stack.schema.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from amlgpu.config_docs import DOCS_PATH, reference_markdown
from kernel.errors import EXIT_OK, EXIT_POLICY, UserError
from planning.artifacts import canonical_json, write_text
from stack.jsonschema import SCHEMA_PATH, stack_schema
from stack.project import find_root


def register(sub: Any) -> None:
    parser = sub.add_parser("schema", description=__doc__)
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--reference", action="store_true", help="print the config reference (Markdown) instead")
    what.add_argument("--write", action="store_true", help="write schema/stack.schema.json and docs/config.md")
    what.add_argument("--check", action="store_true", help="exit 1 when a committed file is out of date")
    parser.set_defaults(func=run)


def generated_files() -> dict[str, str]:
    """Each committed file (path relative to the project root) and the text it must have: the schema
    first, then the reference."""
    return {SCHEMA_PATH: canonical_json(stack_schema()), DOCS_PATH: reference_markdown()}


def run(args: argparse.Namespace) -> int:
    files = generated_files()
    if not (args.write or args.check):
        schema_text, reference_text = files.values()
        sys.stdout.write(reference_text if args.reference else schema_text)
        return EXIT_OK
    root = find_root()
    if args.check:
        stale = [name for name, text in files.items() if _read(root / name) != text]
        for name in stale:
            print(f"{name} is out of date with the stack model: run `amlgpu schema --write`.", file=sys.stderr)
        if not stale:
            print(f"{', '.join(files)} are up to date.")
        return EXIT_POLICY if stale else EXIT_OK
    for name, text in files.items():
        try:
            write_text(root / name, text)
        except OSError as err:
            raise UserError(f"cannot write: {err.strerror}", file=name) from None
        print(f"Wrote {name}.")
    return EXIT_OK


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
