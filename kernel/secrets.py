"""One secret detector, by value, and one way to hide what it finds: :data:`MASK`.

A value is a secret when it holds a known credential shape (detect-secrets' plugins and our own, all on RE2)
or a high-entropy literal under a credential name; references (``${{...}}``, ``$NAME``, ``azureml://...``, key
vault references) never are. :func:`walk` visits every value and key name of a document: the gate's findings
come from it and so does what :func:`mask` and :func:`mask_data` hide, so whatever is masked is flagged.
Verdicts are kept per distinct text. Design notes: docs/development.md, "kernel/secrets.py".
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import math
import re
from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector

from kernel.regex import Pattern, PatternSet, compile

MASK = "[secret]"
"""What a secret becomes in every artifact and message (the stack file's own placeholder for ``secure:``)."""


@dataclass(frozen=True)
class Shape:
    """A known credential format: what it is, its pattern, which group is the secret itself."""

    kind: str
    pattern: Pattern
    group: int = 0
    valid: Callable[[str], bool] | None = None
    """A second look at a candidate (detect-secrets' own checks, e.g. a JWT's parts decode to JSON)."""


def _plugin(plugin: Any, kind: str, *, index: int = 0, group: int = 0) -> Shape:
    """A detect-secrets plugin's pattern, compiled by RE2 (its flags written inline)."""
    regex: re.Pattern[str] = plugin.denylist[index]
    if regex.flags & re.VERBOSE and any(c.isspace() or c == "#" for c in regex.pattern):
        raise ValueError(f"{plugin.__name__}: a verbose pattern RE2 cannot read as it is")
    flags = "(?i)" if regex.flags & re.IGNORECASE else ""
    return Shape(kind, compile(flags + regex.pattern), group)


def _own(kind: str, pattern: str, group: int = 0) -> Shape:
    return Shape(kind, compile(pattern), group)


SHAPES: tuple[Shape, ...] = (
    _own("a private key", r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"),
    *(_plugin(PrivateKeyDetector, "a private key", index=i) for i in range(len(PrivateKeyDetector.denylist))),
    _own("a storage connection string with an account key", r"AccountKey=[A-Za-z0-9+/=]{20,}"),
    _own("a Service Bus or Event Hubs shared access key", r"SharedAccessKey=[A-Za-z0-9+/=]{20,}"),
    # 64 random bytes in base64: storage and Cosmos DB account keys, alone.
    _own("a storage account key", r"(?:^|[^A-Za-z0-9+/=])([A-Za-z0-9+/]{86}==)(?:[^A-Za-z0-9+/=]|$)", 1),
    _own("a SAS token", r"(?:^|[?&;])sig=[A-Za-z0-9%+/=]{20,}"),
    _own("a Microsoft Entra client secret",
         r"(?:^|[^A-Za-z0-9_~.-])([A-Za-z0-9_~.]{3}[0-9]Q~[A-Za-z0-9_~.-]{31,34})(?:[^A-Za-z0-9_~.-]|$)", 1),
    _own("a GitHub token", r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})"),
    _plugin(GitHubTokenDetector, "a GitHub token"),
    _own("a Hugging Face token", r"\bhf_[A-Za-z0-9]{30,}"),
    _plugin(AWSKeyDetector, "an AWS access key id"),
    _plugin(AWSKeyDetector, "an AWS secret access key", index=1, group=1),
    _own("an OpenAI-style API key", r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}"),
    _plugin(OpenAIDetector, "an OpenAI-style API key"),
    _own("a Slack token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    _plugin(SlackDetector, "a Slack token"),
    _plugin(SlackDetector, "a Slack webhook", index=1),
    _own("a GitLab token",
         r"\b(?:glpat|gldt|glft|glsoat|glrt|glcbt|glimt|glptt|glagent|gloas)-[A-Za-z0-9_-]{20,}|\bGR1348941[A-Za-z0-9_-]{20,}"),
    _own("a JSON web token", r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"),
    Shape("a JSON web token", _plugin(JwtTokenDetector, "").pattern, valid=JwtTokenDetector.is_formally_valid),
    _own("a Google API key", r"\bAIza[0-9A-Za-z_-]{35}"),
    _plugin(BasicAuthDetector, "a password in a URL", group=1),
    _plugin(NpmDetector, "an npm token", group=1),
    _own("an npm token", r"\bnpm_[A-Za-z0-9]{36}"),
    _plugin(PypiTokenDetector, "a PyPI token"),
    _plugin(PypiTokenDetector, "a PyPI token", index=1),
    _plugin(StripeDetector, "a Stripe key"),
    _own("a Stripe key", r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"),
    _plugin(SendGridDetector, "a SendGrid key"),
    _plugin(SquareOAuthDetector, "a Square OAuth secret"),
    _own("an Authorization header",
         r"(?i)\bauthorization\s*[:=]\s*[\"']?(?:bearer|basic|token)\s+([A-Za-z0-9._~+/=-]{8,})", 1),
    _own("a Weights & Biases API key", r"\bwandb\s+login\s+(?:-\S*\s+)*([0-9a-f]{40})\b", 1),
    _own("a Weights & Biases API key", r"\bwandb\.login\([^)]{0,200}key\s*=\s*[\"']([0-9a-f]{40})[\"']", 1),
)
"""Every known credential format, in the order findings name them. detect-secrets' Discord, Telegram, Twilio
and Mailchimp patterns are left out: without a literal prefix (``[MNO]...``, ``AC[a-z0-9]{32}``) they
match ordinary text, cost the one-pass search most of its speed, and none of them is an ML platform's."""

PUBLISHED = frozenset({
    # Azurite's (the storage emulator's) account key, the same in every installation and in Microsoft's docs.
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==",
})
"""Values of a credential's shape that are public by design: never a finding."""

_ANY_SHAPE = PatternSet(shape.pattern.pattern for shape in SHAPES)
"""One pass that says which shapes are in a text at all (most texts hold none): only those are located."""
_ORDER = {kind: index for index, kind in reversed(list(enumerate(shape.kind for shape in SHAPES)))}


@dataclass(frozen=True)
class Hit:
    """A known credential in a text: what it is and where (``text[start:end]`` is the secret itself)."""

    kind: str
    start: int
    end: int


_CACHED = 1 << 16
"""Distinct texts whose findings (and masked forms) one process keeps: a plan meets the same strings many times
(a run's spec in its job file, its resource and the gate's findings), and each is searched once."""
_CACHED_LENGTH = 1 << 12
"""Longer texts (whole files) are searched each time: they are rarely seen twice and would hold memory."""


def hits(text: str) -> list[Hit]:
    """Every known credential shape in ``text``, by position."""
    return list(_cached_hits(text) if len(text) <= _CACHED_LENGTH else _hits(text))


@functools.lru_cache(maxsize=_CACHED)
def _cached_hits(text: str) -> tuple[Hit, ...]:
    return _hits(text)


def _hits(text: str) -> tuple[Hit, ...]:
    found = []
    for index in _ANY_SHAPE.matching(text):
        shape = SHAPES[index]
        for match in shape.pattern.finditer(text):
            start, end = match.span(shape.group)
            if start < end and _real(shape, text[start:end]):
                found.append(Hit(shape.kind, start, end))
    return tuple(sorted(found, key=lambda h: (h.start, -h.end)))


def _real(shape: Shape, candidate: str) -> bool:
    return (shape.valid is None or shape.valid(candidate)) and not any(p in candidate for p in PUBLISHED)


def kind_in_bytes(data: bytes) -> str | None:
    """The first known credential kind in raw bytes (a file's content, any encoding that keeps ASCII as
    ASCII), or None."""
    for index in _ANY_SHAPE.matching(data):
        shape = SHAPES[index]
        for match in shape.pattern.finditer(data):
            start, end = match.span(shape.group)
            if start < end and _real(shape, data[start:end].decode("latin-1")):
                return shape.kind
    return None


def credential_kind(value: str) -> str | None:
    """What known kind of credential ``value`` contains, or None."""
    found = hits(value)
    return min(found, key=lambda h: _ORDER[h.kind]).kind if found else None


# ------------------------------------------------------------------------------------- by name and entropy

# Name segments (split on non-alphanumerics) that mean "this key holds a credential". Whole segments only,
# so TOKENIZERS_PARALLELISM or KEY_COLUMN are not mistaken for secrets.
_SECRET_WORDS = frozenset({
    "SECRET", "SECRETS", "TOKEN", "PASSWORD", "PASSWD", "PWD", "CREDENTIAL", "CREDENTIALS", "APIKEY", "SAS",
})
_PASSWORD_WORDS = frozenset({"PASSWORD", "PASSWD", "PWD"})
_KEY_QUALIFIERS = frozenset({
    "API", "ACCESS", "ACCOUNT", "PRIVATE", "SECRET", "STORAGE", "SUBSCRIPTION", "AUTH", "SSH", "SIGNING",
    "ENCRYPTION", "MASTER", "SHARED", "HF", "WANDB",
})

# Values that refer to a secret instead of containing it.
_REFERENCE = compile(
    r"^(?:\$\{\{.*\}\}|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|azureml://.*|@Microsoft\.KeyVault\(.*\)|\[secret\])$"
)
_BASE64 = compile(r"^[A-Za-z0-9+/]+=*$")
_DIGIT = compile(r"[0-9]")
_LETTER = compile(r"[A-Za-z]")


def _has_space(text: str) -> bool:
    return any(space in text for space in " \t\n\r\f\v")
_MIN_SECRET_LENGTH = 16
_MIN_ENTROPY_BITS = 3.5
"""Per character: random base64/hex material of 16+ characters is above 3.5 bits (hex alone reaches ~4),
words, file names and paths are below or are excluded by shape."""


def _name_parts(name: str) -> list[str]:
    return "".join(c if c.isascii() and c.isalnum() else " " for c in name.upper()).split()


@functools.lru_cache(maxsize=4096)
def credential_name(name: str) -> bool:
    """``name`` (a variable, tag key or command flag) says its value is a credential."""
    parts = _name_parts(name)
    if any(p in _SECRET_WORDS for p in parts):
        return True
    if any(p == "KEY" and i > 0 and parts[i - 1] in _KEY_QUALIFIERS for i, p in enumerate(parts)):
        return True
    return "CONNECTION" in parts and "STRING" in parts


@functools.lru_cache(maxsize=4096)
def _password_name(name: str) -> bool:
    return any(p in _PASSWORD_WORDS for p in _name_parts(name))


def _entropy(value: str) -> float:
    counts = {c: value.count(c) for c in set(value)}
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


def is_reference(value: str) -> bool:
    """``value`` refers to a secret (``${{...}}``, ``$NAME``, ``azureml://``, a Key Vault reference)."""
    return _REFERENCE.match(value.strip()) is not None


def high_entropy(value: str) -> bool:
    """A literal that looks like generated key material: long, no spaces, not a path, a URL or a
    placeholder, letters and digits mixed, and high Shannon entropy."""
    value = value.strip()
    if len(value) < _MIN_SECRET_LENGTH or _has_space(value) or is_reference(value):
        return False
    if "/" in value.strip("=") and not _BASE64.match(value):  # a path or URL
        return False
    if "${{" in value or value.startswith(("azureml:", "http://", "https://")):
        return False
    if not (_DIGIT.search(value) and _LETTER.search(value)):
        return False
    return _entropy(value) >= _MIN_ENTROPY_BITS


def judge(key: str, value: Any) -> str | None:
    """Why the value at ``key`` is a secret (``holds a Hugging Face token``), or None."""
    if not isinstance(value, str):
        return None
    return _judge_cached(key, value) if len(value) <= _CACHED_LENGTH else _judge(key, value)


def _judge(key: str, value: str) -> str | None:
    text = value.strip()
    if not text or is_reference(text) or any(published in text for published in PUBLISHED):
        return None
    kind = credential_kind(text)
    if kind is not None:
        return f"holds {kind}"
    return _judge_by_name(key, text)


_judge_cached = functools.lru_cache(maxsize=_CACHED)(_judge)


def _judge_by_name(key: str, text: str) -> str | None:
    if credential_name(key) and high_entropy(text):
        return "a credential name with a high-entropy literal value"
    if _password_name(key) and len(text) >= 6 and not _has_space(text) and not any(c in text for c in "/.\\-"):
        # A password is chosen by a person, so its entropy says little; a file or path has a separator.
        return "a password name with a literal value"
    return None


def secret_variables(variables: Mapping[str, str]) -> list[str]:
    """Each variable that carries a literal secret, as ``NAME (reason)``, sorted by name."""
    return [f"{name} ({why})" for name in sorted(variables) if (why := judge(name, variables[name]))]


# ------------------------------------------------------------------------------------------------ commands

_WORD = re.compile(r"""(?:[^\s'"\\]|\\.|'[^']*'|"(?:[^"\\]|\\.)*")+""", re.S)
"""A shell word: unquoted characters, backslash escapes and quoted strings, up to unquoted white space.

The one pattern here on Python's ``re`` rather than RE2, because RE2's Python binding costs ~10 us a match
and a command is a match per word: it is linear by construction (each alternative starts with its own
character, nothing follows the repetition to backtrack for, and a quote that never closes fails once: a
later quote would have closed it), and ``tests/hostile/test_hostile.py`` plans 8 MiB of such words."""
_QUOTED = compile(r"""(?s)'([^']*)'|"((?:[^"\\]|\\.)*)"|\\(.)""")


def _is_name(text: str) -> bool:
    """A shell variable name: ``[A-Za-z_][A-Za-z0-9_]*``."""
    return text.isascii() and text.isidentifier()


def _unquote(word: str) -> str:
    if not any(c in word for c in "'\"\\"):
        return word
    return _QUOTED.sub(lambda m: next((g for g in m.groups() if g is not None), ""), word)


@dataclass(frozen=True)
class Word:
    """One word of a command: its key (the flag or variable name it is the value of; empty for a bare
    word), its value with quotes removed, and where the word is in the command."""

    key: str
    value: str
    start: int
    end: int


def _spans(command: str) -> Iterator[tuple[str, int, int]]:
    """Each shell word of ``command`` with its span (white-space splitting when nothing is quoted)."""
    if not any(c in command for c in "'\"\\"):
        position = 0
        for word in command.split():
            start = command.find(word, position)
            position = start + len(word)
            yield word, start, position
        return
    for match in _WORD.finditer(command):
        yield _unquote(match.group()), match.start(), match.end()


def command_words(command: str) -> Iterator[Word]:
    """(key, value) for every word of a command: ``--flag value``, ``--flag=value``, ``NAME=value``
    assignments; a bare word's key is empty. A line continuation (backslash, newline) is white space."""
    previous = ""
    for word, start, end in _spans(command):
        if word.startswith("-") and "=" in word:
            flag, _, value = word.partition("=")
            yield Word(flag, value, start, end)
            previous = ""
        elif "=" in word and _is_name(name := word.partition("=")[0]):
            value = word.partition("=")[2]
            yield Word(name, value, start, end)
            previous = ""
        elif word.startswith("-"):
            previous = word
        elif word:
            yield Word(previous, word, start, end)
            previous = ""


def command_secrets(command: str) -> list[tuple[Word, str]]:
    """The words of ``command`` that carry a secret, each with why, in order. Known shapes are found in
    the command as a whole (a header or ``wandb login KEY`` spans words); names judge the word they key."""
    found: list[tuple[Word, str]] = []
    shape_hits = hits(command)
    words = list(command_words(command)) if shape_hits or _names_a_credential(command) else []
    starts = [w.start for w in words]
    flagged: set[int] = set()
    for hit in shape_hits:
        index = bisect_right(starts, hit.start) - 1
        if index >= 0 and index not in flagged:
            flagged.add(index)
            found.append((words[index], f"holds {hit.kind}"))
    for index, word in enumerate(words):  # the shapes were looked for in the whole command already
        if index not in flagged and word.key and (why := _judge_by_name(word.key, word.value.strip())) and (
                not is_reference(word.value)):
            flagged.add(index)
            found.append((word, why))
    return sorted(found, key=lambda f: f[0].start)


def _names_a_credential(text: str) -> bool:
    upper = text.upper()
    return any(w in upper for w in (*_SECRET_WORDS, "KEY", "CONNECTION"))


def secrets_in_definition(spec: Mapping[str, Any], *, skip: tuple[str, ...] = ("environment_variables",)) -> list[str]:
    """Secrets anywhere in a job's definition but the top-level keys in ``skip``, as ``where (reason)``:
    command arguments, literal ``inputs``, ``tags`` and ``properties`` first (in that order), then every
    other field by its path (``description``, ``services.jupyter.properties.token``, a key name...)."""
    order = {"command": 0, "inputs": 1, "tags": 2, "properties": 3}
    found = [f for f in walk({k: v for k, v in spec.items() if k not in skip}) if not f.covered]
    found.sort(key=lambda f: (order.get(str(f.path[0]), 4), str(f.path[1]) if f.path[0] in order and
                              len(f.path) > 1 else ""))
    return list(dict.fromkeys(_where(f) for f in found))


_SECTIONS = {"inputs": "input", "tags": "tag", "properties": "property"}


def _where(found: Found) -> str:
    head = found.path[0] if found.path else ""
    if head == "command" and len(found.path) == 1:
        return f"command argument{f' {found.word}' if found.word else ''} ({found.why})"
    if head in _SECTIONS and len(found.path) >= 2 and found.path[1] != found.secret:
        return f"{_SECTIONS[str(head)]} {found.path[1]} ({found.why})" if len(found.path) == 2 or (
            found.path[2:] == ("path",)) else f"{found.field} ({found.why})"
    return f"{found.field} ({found.why})"


# ------------------------------------------------------------------------------------------------- masking

_remembered: set[str] = set()
_values: set[str] = set()
_by_length: list[str] = []
_MIN_REMEMBERED = 6
"""Shorter values are not remembered (a password of 6 characters is the shortest :func:`judge` flags)."""
MAX_REMEMBERED = 256
"""Distinct secrets one process remembers at most: every text written or printed is searched for each, so a
hostile file of a million tokens must not make that search quadratic. Each is a mandatory finding anyway."""


class TooManySecrets(ValueError):
    """More than :data:`MAX_REMEMBERED` distinct values look like secrets: the input is refused."""


def remember(value: str) -> None:
    """Mask ``value`` wherever it shows from now on (in this process), and each of its lines, and the
    forms JSON and YAML quoting give it. Raises :class:`TooManySecrets` past :data:`MAX_REMEMBERED`."""
    global _by_length
    value = value.strip()
    if len(value) < _MIN_REMEMBERED or value in _values:
        return
    if len(_values) >= MAX_REMEMBERED:
        raise TooManySecrets(f"more than {MAX_REMEMBERED} distinct values look like secrets (each a mandatory "
                             "finding): keep secrets in the workspace key vault")
    _values.add(value)
    _forget_masked()
    for piece in {value, *(line.strip() for line in value.splitlines())}:
        if len(piece) >= _MIN_REMEMBERED:
            _remembered.update((piece, json.dumps(piece, ensure_ascii=False)[1:-1], piece.replace("'", "''")))
    _by_length = sorted(_remembered, key=len, reverse=True)


def remember_in(data: Any, key: str = "") -> None:
    """Remember every secret in a stack's (or an imported job's) values: each one :func:`walk` finds (the
    walk the gate's findings come from), ``key`` being the name ``data`` sits under."""
    for found in walk(data, (key,) if key else ()):
        remember(found.secret)


def remember_in_text(text: str) -> None:
    """Remember the secrets of a text (a stack file) line by line, before anything parses it: a file that
    does not parse is still quoted in its error message. ``key: value`` and ``key=value`` pairs are judged
    by name and value, a line's command words as in a command, known shapes wherever they are."""
    for line in text.splitlines():
        if not _names_a_credential(line):
            continue
        item = line.strip().lstrip("-").strip()
        for separator in (":", "="):
            key, found, value = item.partition(separator)
            value = value.strip().strip("'\"")
            if found and value and not is_reference(value) and _judge_by_name(key.strip().strip("'\""), value):
                remember(value)
        for word, _ in command_secrets(line):
            remember(word.value)
    for hit in hits(text):
        remember(text[hit.start:hit.end])


def forget_all() -> None:
    """Forget every remembered value (tests that run several stacks in one process)."""
    global _by_length
    _remembered.clear()
    _values.clear()
    _by_length = []
    _forget_masked()


_masked: dict[str, str] = {}
"""Each distinct short text :func:`mask` has seen, masked: valid until a new value is remembered."""
_masked_leaves: dict[tuple[str, str], str] = {}
"""Each distinct (key, string) :func:`mask_data` has seen, masked, under the same rule."""
_hidden_keys: dict[str, str] = {}
"""Each distinct key name :func:`mask_data` has seen, hidden (:func:`hide`), under the same rule: a document
repeats a few key names (``type``, ``name``, ``inputs``) thousands of times."""


def _forget_masked() -> None:
    _masked.clear()
    _masked_leaves.clear()
    _hidden_keys.clear()


def _kept(cache: dict[Any, str], key: Any, text: str, make: Callable[[], str]) -> str:
    """``make()``, kept in ``cache`` under ``key`` when ``text`` is at most :data:`_CACHED_LENGTH` long (the
    cache emptied when full, and by :func:`_forget_masked` whenever a secret value is remembered)."""
    if len(text) > _CACHED_LENGTH:
        return make()
    found = cache.get(key)
    if found is None:
        if len(cache) >= _CACHED:
            cache.clear()
        found = cache[key] = make()
    return found


def mask(text: str) -> str:
    """``text`` with every remembered value and every known credential shape replaced by :data:`MASK`."""
    return _kept(_masked, text, text, lambda: _mask(text))


def _mask(text: str) -> str:
    for value in _by_length:
        if value in text:
            text = text.replace(value, MASK)
    found = hits(text)
    if not found:
        return text
    out, last = [], 0
    for hit in found:
        if hit.start >= last:
            out += [text[last:hit.start], MASK]
            last = hit.end
        elif hit.end > last:  # overlapping shapes: the masked span grows
            last = hit.end
    return "".join([*out, text[last:]])


def mask_data(value: Any, key: str = "") -> Any:
    """``value`` (JSON-like data) with every secret replaced: a single word :func:`walk` flags as a whole
    becomes :data:`MASK`, any other string is :func:`hide`-n (a command keeps its other words); keys are
    masked too. ``key``: the name ``value`` sits under."""
    return _masked_tree(value, (key,) if key else ())


def _masked_tree(value: Any, path: Path) -> Any:
    if isinstance(value, Mapping):
        return {_hidden_key(k) if isinstance(k, str) else k: _masked_tree(v, (*path, str(k))) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_masked_tree(v, (*path, i)) for i, v in enumerate(value)]
    if isinstance(value, str):
        key = _judged_name(path)
        return _kept(_masked_leaves, (key, value), value, lambda: _mask_leaf(key, value))
    return value


def _hidden_key(name: str) -> str:
    """:func:`hide` of a key name, kept per distinct name (:data:`_hidden_keys`, forgotten with the masks)."""
    return _kept(_hidden_keys, name, name, lambda: hide(name))


def _mask_leaf(key: str, value: str) -> str:
    whole = not _has_space(value.strip()) and any(hidden == value.strip() for _, hidden, _ in _in_value(key, value))
    return MASK if whole else hide(value, key)


# ------------------------------------------------------------------------------- one walk, two uses

Path = tuple[str | int, ...]
"""Where a value sits in a spec or stack document: keys and list indices (``jobs, prep, inputs, token``)."""


@dataclass(frozen=True)
class Found:
    """One secret the walk met: where, why, the text to hide, and (in a command) the flag or variable it is
    the value of. The rules turn it into a finding naming :attr:`field`; the masker hides :attr:`secret`."""

    path: Path
    why: str
    secret: str
    word: str = ""
    covered: bool = False
    """Part of what an earlier :class:`Found` of the same value hides: hidden too, no finding of its own."""

    @property
    def field(self) -> str:
        """The path as ``a.b[0].c``; a key that is itself the secret is shown as :data:`MASK`."""
        out = ""
        for part in self.path:
            if isinstance(part, int):
                out += f"[{part}]"
            else:
                shown = MASK if hits(part) or part == self.secret else part
                out += f".{shown}" if out else shown
        return out


_GENERIC_KEYS = frozenset({"path", "value", "values", "default", "uri"})
"""Keys that hold the value of the named thing above them (an input's ``path``, a choice's ``values``): a
value under them is judged by that name."""
_PASSWORD_KEY_WORDS = frozenset({"PASSWORD", "PASSWD", "PWD", "PASS", "PASSPHRASE", "SECRET", "PASSCODE"})
_NOT_A_VALUE_KEY = frozenset({
    "NAME", "NAMES", "FILE", "PATH", "DIR", "ID", "URI", "URL", "REF", "SCOPE", "VAULT", "KEYVAULT", "ENV",
    "VAR", "LENGTH", "LEN", "MIN", "MAX", "POLICY", "TYPE", "MOUNT", "HINT", "PROMPT", "FIELD", "COLUMN",
})
"""A name part saying the value names or describes a password rather than being one (``DB_PASSWORD_FILE``)."""
_NOT_LITERAL = compile(r"\$\{|\$\(|`|^\$[A-Za-z_]|^<.*>$|^\*+$")
_PATH_LIKE = ("/", "./", "../", "~/", "file:", "azureml:", "http://", "https://")
_QUERY = compile(r"[?&;]([A-Za-z0-9_.-]{1,64})=([^&#\s\"']+)")
_BASE64_RUN = compile(r"[A-Za-z0-9+/_-]{20,}={0,2}")
_MAX_DECODED = 64
"""Base64 runs decoded per value at most (each at most 4 KiB): the decoding stays bounded."""
_JOIN = re.compile(r"""["'](?:[ \t]*\+)?[ \t]*["']""")
"""Where two quoted pieces meet (``'ghp_' 'abc'``, ``"ghp_"+"abc"``, ``'ghp_'"abc"``): shell, Python and YAML
concatenate them into one string. On Python's ``re``: each match starts at a quote, and neither white-space run
can give back to the other, so it is linear; a million joins take 0.9 s (RE2, ~10 us a match: 10 s)."""


def _password_key(name: str) -> bool:
    parts = _name_parts(name)
    return any(p in _PASSWORD_KEY_WORDS for p in parts) and not any(p in _NOT_A_VALUE_KEY for p in parts)


def password_literal(name: str, value: str) -> bool:
    """A literal under a password (or secret) name, whatever its characters: a person chose it, so neither
    its shape nor its entropy says anything. Not a reference, a path, a placeholder or prose."""
    text = value.strip()
    return (len(text) >= _MIN_REMEMBERED and _password_key(name) and not _has_space(text)
            and not is_reference(text) and not text.startswith(_PATH_LIKE) and _NOT_LITERAL.search(text) is None)


def _decoded(run: str) -> str | None:
    padded = run + "=" * (-len(run) % 4)
    try:
        raw = (base64.urlsafe_b64decode if ("-" in run or "_" in run) else base64.b64decode)(padded)
    except (binascii.Error, ValueError):
        return None
    text = raw.decode("utf-8", errors="replace")
    return text if text.isprintable() or "\n" in text else None


def _hidden_shapes(text: str) -> Iterator[tuple[str, str]]:
    """Known shapes a shell or YAML would reveal: inside a base64 payload (decoded once, bounded), and across
    quoted pieces concatenated into one string. Each as (why, the original text to hide)."""
    for count, match in enumerate(_BASE64_RUN.finditer(text)):
        if count >= _MAX_DECODED:
            break
        decoded = _decoded(match.group()) if len(match.group()) <= 4096 else None
        if decoded and (found := hits(decoded)):
            yield f"holds {found[0].kind}, base64-encoded", match.group()
    if "'" not in text and '"' not in text:
        return
    joined = _JOIN.sub("", text)
    if len(joined) == len(text) or not _ANY_SHAPE.matching(joined):
        return
    at: list[int] = []  # where each join is in the joined string, and how much was removed up to it
    removed: list[int] = []
    total = 0
    for join in _JOIN.finditer(text):
        at.append(join.start() - total)
        total += join.end() - join.start()
        removed.append(total)

    def original(position: int, *, end: bool = False) -> int:
        index = bisect_right(at, position - 1 if end else position) - 1
        return position + (removed[index] if index >= 0 else 0)

    for hit in hits(joined):
        start, stop = original(hit.start), original(hit.end, end=True)
        while stop < len(text) and (text[stop].isalnum() or text[stop] == "_"):  # the rest of the token's piece
            stop += 1
        if stop - start > hit.end - hit.start:  # the shape spans a join: not found in the text itself
            yield f"holds {hit.kind}, split into concatenated pieces", text[start:stop]


def _in_value(key: str, value: str) -> tuple[tuple[str, str, str], ...]:
    """What the value at ``key`` holds: (why, the text to hide, the command word's key); kept per distinct
    (key, value) for texts of at most :data:`_CACHED_LENGTH` (a plan walks the same values again and again: the
    stack file, each run's spec in the gate and in its job file, each artifact written). The answer depends on
    nothing else: no remembered value, no state."""
    return _in_value_cached(key, value) if len(value) <= _CACHED_LENGTH else tuple(_found_in_value(key, value))


def _found_in_value(key: str, value: str) -> Iterator[tuple[str, str, str]]:
    text = value.strip()
    if not text:
        return
    if key != "command" and (why := judge(key, value)):  # a command keeps its other words (below)
        yield why, text, ""
    elif key != "command" and password_literal(key, text):
        yield "a password name with a literal value", text, ""
    if _has_space(text):
        for word, why in command_secrets(value):
            yield why, word.value, word.key
        upper = value.upper()
        words = command_words(value) if any(w in upper for w in ("PASS", "PWD", "SECRET")) else iter(())
        for word in words:
            if word.key and password_literal(word.key, word.value):
                yield "a password name with a literal value", word.value.strip(), word.key
    for hit in hits(value):
        yield f"holds {hit.kind}", value[hit.start:hit.end], ""
    if "=" in value and ("?" in value or "&" in value or ";" in value):
        for match in _QUERY.finditer(value):
            name, literal = match.group(1), match.group(2)
            if (why := _judge_by_name(name, literal)) or password_literal(name, literal):
                yield f"a URL query parameter {name}: {why or 'a password name with a literal value'}", literal, ""
    yield from ((why, hidden, "") for why, hidden in _hidden_shapes(value))


@functools.lru_cache(maxsize=_CACHED)
def _in_value_cached(key: str, value: str) -> tuple[tuple[str, str, str], ...]:
    return tuple(_found_in_value(key, value))


def walk(data: Any, path: Path = ()) -> Iterator[Found]:
    """Every secret in JSON-like ``data``: each value judged under its name, each command word, each known
    shape, URL query tokens, base64 payloads and split tokens, and key names that are themselves secrets.

    The one walk behind both uses: the gate's findings (:func:`secrets_in_definition` and the pipeline
    rule) and what the masker hides (:func:`remember_in`, :func:`mask_data`), so nothing is hidden that is
    not flagged."""
    if isinstance(data, Mapping):
        for name, value in data.items():
            if isinstance(name, str):
                for why, hidden, _ in _in_value("", name):  # a key name is judged by its text alone
                    yield Found((*path, name), f"its key name {why}", hidden)
            yield from walk(value, (*path, name if isinstance(name, str | int) else str(name)))
    elif isinstance(data, list | tuple):
        for index, item in enumerate(data):
            yield from walk(item, (*path, index))
    elif isinstance(data, str):
        key = _judged_name(path)
        seen: list[str] = []
        for why, hidden, word in _in_value(key, data):
            yield Found(path, why, hidden, word, covered=any(hidden in earlier for earlier in seen))
            seen.append(hidden)


def _judged_name(path: Path) -> str:
    names = [p for p in path if isinstance(p, str)]
    while len(names) > 1 and names[-1] in _GENERIC_KEYS:
        names.pop()
    return names[-1] if names else ""


def hide(text: str, key: str = "") -> str:
    """``text`` (the value at ``key``) as every artifact shows it: what :func:`walk` finds in it, every
    remembered value and every known shape replaced by :data:`MASK`."""
    for secret in sorted({hidden for _, hidden, _ in _in_value(key, text)}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return mask(text)
