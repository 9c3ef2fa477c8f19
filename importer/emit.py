"""Imported entries as stack YAML: printed for review, or appended to ``Pulumi.<stack>.yaml``.

Both use ruamel.yaml. Appending is a round trip: the stack file keeps its comments, key order, quoting
and indentation (guessed from the file), and the new entries follow the existing ones under
``aml-gpu-training:environments`` and ``aml-gpu-training:jobs``, each with a comment saying where it
came from. The file is replaced atomically (a temporary file renamed over it).
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.util import load_yaml_guess_indent

from importer.base import Draft
from kernel import bounded
from kernel.errors import UserError
from stack import NAMESPACE
from stack.pipelines import PipelineJob
from stack.runs import Run
from stack.sweeps import SweepJob

JOBS_KEY = f"{NAMESPACE}:jobs"
ENVIRONMENTS_KEY = f"{NAMESPACE}:environments"

_ORDERS = {kind: ["name", "type", *model.model_fields] for kind, model in (
    ("command", Run), ("pipeline", PipelineJob), ("sweep", SweepJob))}


def _ordered(run: dict[str, Any]) -> CommentedMap:
    """An entry with its keys in its model's order (name first, then a pipeline's or sweep's type), nested
    values as plain YAML."""
    order = _ORDERS.get(str(run.get("type", "command")), _ORDERS["command"])
    out = CommentedMap()
    for key in sorted(run, key=lambda k: order.index(k) if k in order else len(order)):
        out[key] = run[key]
    return out


def _origin_comment(draft: Draft) -> str:
    return f"imported from {draft.origin} ({draft.kind})"


def _for_run(draft: Draft) -> str:
    return f"for {draft.run.get('name')}, {_origin_comment(draft)}"


def _yaml(mapping: int = 2, sequence: int = 4, offset: int = 2) -> YAML:
    yaml = YAML(typ="rt", pure=True)
    yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
    yaml.width = 4096  # a command stays on one line, as written
    yaml.preserve_quotes = True
    return yaml


def _deepest_trailing(node: Any) -> tuple[Any, Any] | None:
    """(container, key) of the comment that trails ``node``'s last entry at any depth (ruamel keeps a comment
    after a block on the innermost last key, or on the last item of the innermost sequence)."""
    while isinstance(node, CommentedMap | CommentedSeq) and len(node):
        last: Any = list(node)[-1] if isinstance(node, CommentedMap) else len(node) - 1
        entry = node.ca.items.get(last)
        if entry and len(entry) > 2 and entry[2] is not None and "#" in entry[2].value:
            return node, last
        if entry and isinstance(node, CommentedSeq) and entry[0] is not None and "#" in entry[0].value:
            return node, last
        node = node[last]
    return None


def _comment_lines(token: Any) -> list[str]:
    """The text of a ruamel comment token's lines (without ``#``), blank lines left out."""
    return [line.strip()[1:].removeprefix(" ") for line in str(token.value).splitlines()
            if line.strip().startswith("#")]


def _move_to_next_key(seq: CommentedSeq, config: CommentedMap, key: str, indent: int) -> None:
    """The comment that trails ``seq``'s last item (at any depth) is the user's note on the key after ``key`` in
    ``config``: move it above that key, so an entry appended to ``seq`` goes before it, not after it."""
    keys = list(config)
    following = keys[keys.index(key) + 1] if key in keys and keys.index(key) + 1 < len(keys) else None
    found = _deepest_trailing(seq)
    if following is None or found is None:
        return
    container, last = found
    entry = container.ca.items[last]
    token = entry[2] if len(entry) > 2 and entry[2] is not None else entry[0]
    lines = _comment_lines(token)
    if not lines:
        return
    if token is entry[2]:
        kept = str(token.value).split("\n", 1)[0]  # a comment on the entry's own line stays there
        if "#" in kept:
            token.value = kept + "\n"
            lines = lines[1:]
        else:
            entry[2] = None
    else:
        entry[0] = None
    if lines:
        config.yaml_set_comment_before_after_key(following, before="\n".join(lines), indent=indent)


def _append(seq: CommentedSeq, item: CommentedMap, comment: str, indent: int) -> None:
    """Append ``item`` with ``comment`` above it, moving a comment that trailed the old last item (the
    one introducing the next key of the file) after the new one, where it belongs."""
    trailing = None
    if seq and len(seq) - 1 in seq.ca.items:
        trailing = seq.ca.items.pop(len(seq) - 1)
    else:
        last = seq[-1] if seq else None
        if isinstance(last, CommentedMap) and last and last.ca.items.get(list(last)[-1]):
            key = list(last)[-1]
            entry = last.ca.items[key]
            if len(entry) > 2 and entry[2] is not None and "#" in entry[2].value:
                trailing = (key, entry)
    seq.append(item)
    seq.yaml_set_comment_before_after_key(len(seq) - 1, before=comment, indent=indent)
    if trailing is not None and isinstance(trailing, tuple) and len(trailing) == 2 and isinstance(trailing[0], str):
        key, entry = trailing
        last_key = list(item)[-1]
        moved = seq[-2].ca.items.pop(key)
        item.ca.items[last_key] = [None, None, moved[2], None]
    elif trailing is not None:
        seq.ca.items[len(seq) - 1] = trailing


def render(drafts: list[Draft]) -> str:
    """The entries as a YAML fragment of a stack file's ``config:`` (for review or pasting)."""
    document = CommentedMap()
    environments = CommentedSeq()
    jobs = CommentedSeq()
    for draft in drafts:
        for env in draft.environments:
            environments.append(CommentedMap(env))
            environments.yaml_set_comment_before_after_key(len(environments) - 1, before=_for_run(draft), indent=2)
        jobs.append(_ordered(draft.run))
        jobs.yaml_set_comment_before_after_key(len(jobs) - 1, before="\n".join(draft.comments), indent=2)
    if environments:
        document[ENVIRONMENTS_KEY] = environments
    document[JOBS_KEY] = jobs
    stream = io.StringIO()
    _yaml(2, 4, 2).dump(document, stream)
    return stream.getvalue()


def _mapping_indent(text: str) -> int:
    """The indentation of the file's first nested key (``config:``'s keys): 2 when there is none."""
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        if stripped and line != stripped and not stripped.startswith(("#", "- ")):
            return len(line) - len(stripped)
    return 2


def append_to_stack(path: Path, drafts: list[Draft]) -> str:
    """The stack file's text with the drafts appended (nothing is written; see :func:`write_atomically`). The
    file is read within the stack file's bounds (:data:`kernel.bounded.STACK_FILE`) before ruamel, which is
    recursive, reads it again."""
    try:
        text = bounded.read_text(path, bounded.STACK_FILE)
        bounded.check(text, bounded.STACK_FILE)
    except bounded.BoundedInputError as err:  # it changed since it was read and checked
        raise UserError(f"cannot read the stack file: {err}", file=str(path)) from None
    mapping = _mapping_indent(text)
    _, sequence, offset = load_yaml_guess_indent(text)
    if offset is None:  # no block sequence in the file yet: the usual "- " under the key
        sequence, offset = mapping + 2, mapping
    yaml = _yaml(mapping, sequence, offset)
    document = yaml.load(text)
    config = document.setdefault("config", CommentedMap())
    item_indent = mapping + offset
    for key, items in ((ENVIRONMENTS_KEY, [(e, d) for d in drafts for e in d.environments]),
                       (JOBS_KEY, [(d.run, d) for d in drafts])):
        if not items:
            continue
        seq = config.get(key)
        if seq is None:
            seq = config[key] = CommentedSeq()
        else:
            _move_to_next_key(seq, config, key, mapping)
        for entry, draft in items:
            item = _ordered(entry) if key == JOBS_KEY else CommentedMap(entry)
            comment = "\n".join(draft.comments) if key == JOBS_KEY else _for_run(draft)
            _append(seq, item, comment, item_indent)
    stream = io.StringIO()
    yaml.dump(document, stream)
    return stream.getvalue()


def write_atomically(path: Path, text: str, check: Callable[[Path], object]) -> None:
    """Replace ``path`` with ``text`` all at once, keeping its permissions, once ``check`` accepts the new
    file (it is called with the written temporary file and raises to refuse it: the original stays)."""
    mode = path.stat().st_mode & 0o777
    temporary: str | None = None
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(temporary, mode)
        check(Path(temporary))
        os.replace(temporary, path)
    except BaseException:  # KeyboardInterrupt included: the caller makes Ctrl-C and SIGTERM raise it
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
        raise
