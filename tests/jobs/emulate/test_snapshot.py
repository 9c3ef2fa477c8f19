"""Which files the snapshot leaves out: Azure ML's .amlignore (else .gitignore) rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.emulate.snapshot import copy_code, is_ignored, read_patterns


@pytest.mark.parametrize(
    ("rules", "path", "is_dir", "ignored"),
    [
        ("*.pyc", "pkg/mod.pyc", False, True),
        ("*.pyc", "pkg/mod.py", False, False),
        ("data/", "data", True, True),
        ("data/", "data", False, False),  # folders only
        ("/build", "build", True, True),
        ("/build", "pkg/build", True, False),  # anchored at the root
        ("build", "pkg/build", True, True),  # unanchored: at any depth
        ("docs/*.md", "docs/a.md", False, True),
        ("docs/*.md", "docs/sub/a.md", False, False),  # '*' does not cross '/'
        ("docs/**/*.md", "docs/sub/deep/a.md", False, True),
        ("**/cache", "a/b/cache", True, True),
        ("logs/**", "logs/x/y.txt", False, True),
        ("ckpt-[0-9].pt", "ckpt-3.pt", False, True),
        ("ckpt-[!0-9].pt", "ckpt-3.pt", False, False),
        ("*.log\n!keep.log", "keep.log", False, False),  # the last matching rule wins
        ("!keep.log\n*.log", "keep.log", False, True),
        ("# *.py\n\n", "train.py", False, False),  # comments and blank lines
    ],
)
def test_ignore_rules(tmp_path: Path, rules: str, path: str, is_dir: bool, ignored: bool) -> None:
    (tmp_path / ".amlignore").write_text(rules + "\n")
    assert is_ignored(path, is_dir=is_dir, patterns=read_patterns(tmp_path)) is ignored


def test_gitignore_applies_only_without_an_amlignore(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    for name in ("a.py", "a.tmp", "b.bak"):
        (code / name).write_text("x")
    (code / ".gitignore").write_text("*.tmp\n")
    copy_code(code, tmp_path / "one")
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == [".gitignore", "a.py", "b.bak"]
    (code / ".amlignore").write_text("*.bak\n")
    copy_code(code, tmp_path / "two")
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == [".amlignore", ".gitignore", "a.py", "a.tmp"]
