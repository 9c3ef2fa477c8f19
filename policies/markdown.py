"""Text from a stack file, safe inside ``policy.md``: the pull-request comment and the job summary.

A finding quotes what the stack file says (names, keys, values, waiver reasons), and anyone who can open a
pull request writes the stack file. Unescaped, a value could inject HTML (``<img src=...>``, ``<details>``),
a link or an image hiding where it points (``[fix](https://evil)``, ``![](https://tracker)``), table cells
(``|``), emphasis, or ``@someone`` mentions that notify people. Two functions cover every place free text goes:

* :func:`text` for prose (messages, reasons, verdicts): whitespace collapsed to single spaces, ``&``, ``<``
  and ``>`` as HTML entities (no tag, no ``<autolink>``), the punctuation that opens links, images, code
  spans and table cells (``[ ] ` | \\``) backslash-escaped (CommonMark: any ASCII punctuation may be), and
  each ``@mention`` in a code span, where GitHub does not notify. Emphasis is left alone: ``snake_case``
  reads as written and ``*x*`` is only cosmetic;
* :func:`code` for names and ids: a code span whose fence is longer than any run of backticks inside,
  with ``|`` escaped for tables (GitHub's table parser reads ``\\|`` before the code span).
"""

from __future__ import annotations

from typing import Any

from kernel import regex as linear

_ESCAPED = str.maketrans({c: "\\" + c for c in "\\`[]|"})
"""The punctuation that opens links, images, code spans and table cells, each behind a backslash."""
_MENTION = linear.compile(rf"@[{linear.WORD}./-]+")
_BACKTICKS = linear.compile(r"`+")


def _escape(value: str) -> str:
    value = value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return value.translate(_ESCAPED)


def text(value: Any) -> str:
    """``value`` as inert Markdown prose on one line (see the module docstring)."""
    flat = " ".join(str(value).split())
    out, last = [], 0
    for mention in _MENTION.finditer(flat):
        out.append(_escape(flat[last:mention.start()]))
        out.append(code(mention.group()))
        last = mention.end()
    out.append(_escape(flat[last:]))
    return "".join(out)


def _fence(text: str, least: int) -> str:
    """Backticks longer than any run of them in ``text``: nothing inside can close the span or block."""
    return "`" * max(least, max((len(run) for run in _BACKTICKS.findall(text)), default=0) + 1)


def code(value: Any) -> str:
    """``value`` as a code span on one line, whatever backticks it holds, safe in a table cell."""
    flat = " ".join(str(value).split())
    fence = _fence(flat, 1)
    padded = f" {flat} " if flat.startswith("`") or flat.endswith("`") or not flat.strip() else flat
    return f"{fence}{padded.replace('|', chr(92) + '|')}{fence}"


def fenced(value: str) -> str:
    """``value`` verbatim as a fenced code block (error messages): no fence inside it can end the block."""
    fence = _fence(value, 3)
    return f"{fence}text\n{value.rstrip()}\n{fence}"
