"""Linear-time matching (docs/security.md): every pattern applied to input a user controls runs on RE2
(:mod:`kernel.regex`), whose time is linear in its input, and says what Python's ``re`` said.

What RE2 reads differently from ``re`` is covered here: Python's Unicode classes (:data:`kernel.regex.WORD`,
``DIGIT``, ``SPACE``) on every character, shell patterns (:func:`kernel.regex.glob`) against ``fnmatch``, and
text holding lone surrogates, which RE2's binding could not encode (a stack file with ``"\\uD800"`` in a
command ended in a traceback).
"""

from __future__ import annotations

import fnmatch
import re
import sys
import unicodedata
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel import regex as linear


def _assigned() -> str:
    """Every character Python's Unicode database assigns (RE2's tables are newer: both agree on these)."""
    return "".join(chr(c) for c in range(sys.maxunicode + 1)
                   if not 0xD800 <= c <= 0xDFFF and unicodedata.category(chr(c)) != "Cn")


def _every() -> str:
    return "".join(chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF)


@pytest.mark.parametrize(("python", "ours", "where"), [
    (r"\w", linear.WORD, _assigned), (r"\s", linear.SPACE, _assigned),
    (r"\d", linear.DIGIT, _every),  # on every character: int() refuses a digit Python does not know
])
def test_the_unicode_classes_are_pythons(python: str, ours: str, where: Callable[[], str]) -> None:
    text = where()
    theirs = [m.start() for m in re.finditer(python, text)]
    assert [m.start() for m in linear.compile(f"[{ours}]").finditer(text)] == theirs
    # The negated class takes every other character: counted over its runs (a match per character cost 8 s).
    assert len(text) - len(theirs) == sum(map(len, linear.compile(f"[^{ours}]+").findall(text)))


def test_re2_classes_alone_are_ascii() -> None:
    """Why the constants exist: RE2's own ``\\w``, ``\\d``, ``\\s`` leave out what Python's take in."""
    assert linear.compile(r"\w").fullmatch("é") is None and re.fullmatch(r"\w", "é")
    assert linear.compile(r"\d").fullmatch("\u0663") is None and re.fullmatch(r"\d", "\u0663")
    assert linear.compile(r"\s").fullmatch("\x0b") is None and re.fullmatch(r"\s", "\x0b")


def _fuzz(examples: int) -> settings:
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


_PATTERN_CHARS = st.sampled_from("ab-!*?[]\\^é.")
_TEXT_CHARS = st.sampled_from("ab-!?[]\\^é.\n")


@_fuzz(3000)
@given(pattern=st.text(_PATTERN_CHARS, max_size=10), text=st.text(_TEXT_CHARS, max_size=10))
def test_a_shell_pattern_matches_what_fnmatch_matches(pattern: str, text: str) -> None:
    """Whole matches as ``fnmatch.fnmatchcase``; matches from each position end where Python's translation of
    the pattern (without its final ``\\Z``) ends: shell.py's ``${A/p/r}`` replaces exactly that much."""
    ours = linear.compile(linear.glob(pattern))
    assert (ours.fullmatch(text) is not None) == fnmatch.fnmatchcase(text, pattern)
    python = re.compile(fnmatch.translate(pattern).removesuffix("\\Z"), re.S)
    for start in range(len(text) + 1):
        theirs, mine = python.match(text, start), ours.match(text, start)
        assert (mine.end() if mine else None) == (theirs.end() if theirs else None)


@pytest.mark.parametrize(("pattern", "text", "matches"), [
    ("[z-a]x", "zx", False),  # a reversed range is no range: fnmatch's (?!)
    ("[!z-a]", "q", True),
    ("[!]", "[!]", True),  # no closing bracket after the first: a literal [
    ("[]]", "]", True),
    ("[!-]", "-", False),
    ("a*b*c", "a" + "b" * 50 + "c", True),
    ("*" * 200 + "x", "y" * 5000, False),  # fnmatch's own translation is linear here too (atomic groups)
    ("[[:alpha:]]", "a]", True),  # no POSIX classes in fnmatch: one of '[:alph', then ']' (RE2 has them)
    ("[[:alpha:]]", "b]", False),
])
def test_shell_pattern_cases(pattern: str, text: str, matches: bool) -> None:
    assert fnmatch.fnmatchcase(text, pattern) is matches
    assert (linear.compile(linear.glob(pattern)).fullmatch(text) is not None) is matches


SURROGATES = "a\ud800x\udc00yz \u00e9 x"


def test_text_with_lone_surrogates_is_matched_and_given_back_as_it_is() -> None:
    pattern = linear.compile(r"(x)([a-z]*)")
    assert [m.span() for m in pattern.finditer(SURROGATES)] == [(2, 3), (9, 10)]
    assert pattern.search(SURROGATES).group(0) == "x"  # type: ignore[union-attr]
    assert pattern.sub(lambda m: f"<{m.group(0)}>", SURROGATES) == "a\ud800<x>\udc00yz \u00e9 <x>"
    assert pattern.sub(r"[\1]", SURROGATES) == "a\ud800[x]\udc00yz \u00e9 [x]"
    assert pattern.split(SURROGATES) == ["a\ud800", "x", "", "\udc00yz \u00e9 ", "x", "", ""]
    assert linear.compile(r"[^a]+").search(SURROGATES).group(0) == "\ud800x\udc00yz \u00e9 x"  # type: ignore[union-attr]
    assert linear.compile(linear.escape("\ud800")).search("x\udc00").span() == (1, 2)  # type: ignore[union-attr]


def test_a_stack_command_with_a_lone_surrogate_is_bad_input_not_a_traceback(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Before: the secret scan's RE2 pattern could not encode the command, UnicodeEncodeError (exit 1)."""
    from tests.conftest import make_project
    from tests.reliability.test_corpus import J, assert_clean_refusal, good_config, plan_in_process

    config = good_config()
    config[J][0]["command"] = "python train_ddp.py \ud800 --epochs 1"
    project = make_project(tmp_path / "project", config, stack="case")
    outcome = plan_in_process(project, capsys, stack="case")
    assert_clean_refusal(outcome)
    assert "jobs[0].command" in outcome.error_line


def _removed_as_bash(value: str, pattern: str, op: str) -> str:
    """``${A#p}``... read one candidate at a time with ``fnmatch`` (what analysis/shell.py did before RE2)."""
    n = len(value)
    if op in ("#", "##"):
        for end in range(0, n + 1) if op == "#" else range(n, -1, -1):
            if fnmatch.fnmatchcase(value[:end], pattern):
                return value[end:]
        return value
    for start in range(n, -1, -1) if op == "%" else range(0, n + 1):
        if fnmatch.fnmatchcase(value[start:], pattern):
            return value[:start]
    return value


def _substituted_as_bash(value: str, pattern: str, replacement: str, op: str) -> str:
    if op == "/#":
        end = next((e for e in range(len(value), -1, -1) if fnmatch.fnmatchcase(value[:e], pattern)), None)
        return value if end is None else replacement + value[end:]
    if op == "/%":
        start = next((s for s in range(len(value) + 1) if fnmatch.fnmatchcase(value[s:], pattern)), None)
        return value if start is None else value[:start] + replacement
    matcher = re.compile(fnmatch.translate(pattern).removesuffix("\\Z"), re.S)
    out, i, replaced = [], 0, False
    while i <= len(value):
        found = matcher.match(value, i) if not replaced or op == "//" else None
        if found is not None and found.end() > i:
            out.append(replacement)
            i, replaced = found.end(), True
            continue
        out.append(value[i:i + 1])
        i += 1
    return "".join(out)


@_fuzz(3000)
@given(value=st.text(st.sampled_from("ab/.-x"), max_size=12),
       pattern=st.text(st.sampled_from("ab/.*?[]!-"), max_size=6),
       op=st.sampled_from(["#", "##", "%", "%%", "/", "//", "/#", "/%"]))
def test_pattern_removal_and_replacement_take_what_bash_takes(value: str, pattern: str, op: str) -> None:
    """One RE2 call per expansion (leftmost-longest, shortest-first or on the reversed text) takes the prefix,
    suffix or matches that trying every candidate took (1,025 fnmatch calls for a value of 1,024 characters)."""
    from analysis.shell.patterns import remove_pattern as _remove
    from analysis.shell.patterns import substitute_pattern as _substitute

    if op.startswith("/"):
        assert _substitute(value, pattern, "R", op) == (_substituted_as_bash(value, pattern, "R", op) if pattern
                                                        else value)
    else:
        assert _remove(value, pattern, op) == _removed_as_bash(value, pattern, op)
