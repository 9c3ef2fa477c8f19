"""``amlgpu policy``: the policy pack's rules, listed or as the generated docs page.

* ``amlgpu policy list [--format table|json] [--wide] [--config FILE]``: every rule with its severity,
  enforcement (as a pack config sets it, when given), title and what it applies to; the table fits
  100 columns (the title wrapped on its own line below each rule), ``--wide`` puts each rule on one line;
* ``amlgpu policy docs [--out PATH | --out -] [--check]``: write ``docs/policies.md`` from the
  rules' metadata (``-`` prints it); ``--check`` only compares and exits 1 when it is out of date.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

from kernel.errors import EXIT_OK, EXIT_POLICY, UserError
from policies.catalogue import RULES
from policies.docs import DOCS_PATH, render
from policies.packconfig import load, resolve


def register(sub: Any) -> None:
    parser = sub.add_parser("policy", description=__doc__)
    actions = parser.add_actions()

    listing = actions.add_parser("list", help="list every rule")
    listing.add_argument("--format", choices=("table", "json"), default="table")
    listing.add_argument("--wide", action="store_true", help="one line per rule, however long")
    listing.add_argument("--config", type=Path, help="policy pack config (JSON) whose enforcement to show")
    listing.set_defaults(func=list_rules)

    docs = actions.add_parser("docs", help="write docs/policies.md from the rules' metadata")
    docs.add_argument("--out", default=None, help="file to write ('-' prints it; default docs/policies.md)")
    docs.add_argument("--check", action="store_true", help="only check the file is up to date (exit 1 if not)")
    docs.set_defaults(func=write_docs)


def _rows(config: dict[str, Any] | None) -> list[dict[str, Any]]:
    settings = resolve(config)
    return [
        {
            "id": rule.id,
            "family": rule.family,
            "kind": rule.kind,
            "severity": rule.severity,
            "enforcement": settings[rule.id].enforcement,
            "applies_to": rule.applies_to,
            "title": rule.title,
            "parameters": {k: list(v) if isinstance(v, tuple) else v for k, v in settings[rule.id].params.items()},
            "reference": rule.reference,
        }
        for rule in RULES
    ]


TABLE_WIDTH = 100
"""Columns the default table fits in."""


def _wide_table(rows: list[dict[str, Any]]) -> list[str]:
    columns = ("id", "severity", "enforcement", "applies_to", "title")
    headers = ("RULE", "SEVERITY", "ENFORCEMENT", "APPLIES TO", "TITLE")
    widths = [max(len(h), *(len(str(r[c])) for r in rows)) for c, h in zip(columns[:-1], headers[:-1], strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, [*widths, 0], strict=True)).rstrip()]
    for row in rows:
        lines.append("  ".join(str(row[c]).ljust(w) for c, w in zip(columns, [*widths, 0], strict=True)).rstrip())
    return lines


def _table(rows: list[dict[str, Any]]) -> list[str]:
    """Rule, severity and enforcement on one line; the title and what it applies to wrapped below it."""
    width = max(len("RULE"), *(len(r["id"]) for r in rows))
    lines = [f"{'RULE'.ljust(width)}  SEVERITY  ENFORCEMENT", "    TITLE (APPLIES TO)"]
    for row in rows:
        lines.append(f"{row['id'].ljust(width)}  {row['severity']:<8}  {row['enforcement']}")
        lines += textwrap.wrap(f"{row['title']} ({row['applies_to']})", TABLE_WIDTH, initial_indent="    ",
                               subsequent_indent="    ", break_long_words=False, break_on_hyphens=False)
    return lines


def list_rules(args: argparse.Namespace) -> int:
    config = load(args.config) if args.config else None
    rows = _rows(config)
    if args.format == "json":
        print(json.dumps(rows, indent=2, sort_keys=True))
        return EXIT_OK
    for line in _wide_table(rows) if args.wide else _table(rows):
        print(line)
    mandatory = sum(1 for r in rows if r["enforcement"] == "mandatory")
    print(f"\n{len(rows)} rules: {mandatory} mandatory, "
          f"{sum(1 for r in rows if r['enforcement'] == 'advisory')} advisory, "
          f"{sum(1 for r in rows if r['enforcement'] == 'disabled')} disabled.")
    return EXIT_OK


def write_docs(args: argparse.Namespace) -> int:
    text = render()
    if args.out == "-":
        sys.stdout.write(text)
        return EXIT_OK
    path = Path(args.out) if args.out else DOCS_PATH
    if args.check:
        current = path.read_text(encoding="utf-8") if path.is_file() else None
        if current == text:
            print(f"{path} is up to date.")
            return EXIT_OK
        print(f"{path} is out of date: run `amlgpu policy docs`.", file=sys.stderr)
        return EXIT_POLICY
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as err:
        raise UserError(f"cannot write: {err.strerror}", file=str(path)) from None
    print(f"Wrote {path}.")
    return EXIT_OK
