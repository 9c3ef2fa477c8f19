"""Every pattern and every reader applied to what a pull request can write stays bounded, and stays so.

The product's packages (:data:`planning.changes.PACKAGES`; ``jobs/workloads`` is training
code, not ours to judge input with) are read with :mod:`ast`, never imported, and each call that matches text
against a pattern or parses a file is listed:

* Python's ``re`` (and ``fnmatch``, ``glob``, which compile to it) backtracks: a pattern applied to input a
  user controls runs on RE2 (:mod:`kernel.regex`) instead;
* YAML, JSON and Python are parsed through :mod:`kernel.bounded` (size, nesting, expansion): ``yaml.*load``,
  ruamel's ``YAML``, ``json.load(s)``, ``ast.parse`` and ``tomllib`` elsewhere are refused.

Each exception is an entry of :data:`ALLOWED` with its reason: text of our own, or a reader that is bounded
by other means. An entry that no longer matches a call fails the test too, so the list stays true.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from planning.changes import PACKAGES
from tests.conftest import ROOT

NOT_OURS = ("jobs/workloads/",)
"""Training scripts: they run on the cluster, and read no input of the gate's."""

PATTERN_MODULES = frozenset({"re", "fnmatch", "sre_compile", "sre_parse", "regex"})
"""Modules whose every call applies or builds a backtracking pattern (``regex`` is the PyPI one)."""
WATCHED_CALLS = frozenset({
    "glob.glob", "glob.iglob",
    *(f"yaml.{name}" for name in ("load", "safe_load", "full_load", "unsafe_load", "load_all", "safe_load_all",
                                  "full_load_all", "unsafe_load_all", "compose", "compose_all", "parse", "scan")),
    "ruamel.yaml.YAML", "ruamel.yaml.util.load_yaml_guess_indent",
    "json.load", "json.loads", "ast.parse", "tomllib.load", "tomllib.loads",
})
"""Calls that read a file format (or expand a pattern over a directory tree) besides those of the pattern modules."""
BOUNDED_READER = "kernel/bounded.py"
"""The one module that may parse YAML, JSON and Python: the limits live there."""

ALLOWED: dict[tuple[str, str, str], str] = {
    # --- patterns over our own text
    ("amlgpu/cli.py", "re.compile", "_ROLE"): "reStructuredText roles of our docstrings, shown by --help",
    ("stack/jsonschema.py", "re.escape", "any_case"): "our enum values, written into the editor schema",
    ("amlgpu/commands/init.py", "re.sub", "_cluster_name"): "GPU model names of our size catalogue",
    ("policies/rule.py", "re.compile", "RULE_ID"): "our rule ids",
    ("policies/docs.py", "re.compile", "_HAND_WRITTEN"): "our own docs page (a back-reference RE2 cannot run)",
    # --- patterns on user input that are linear on re, where RE2 cannot run them or is several times slower
    ("amlgpu/terminal.py", "re.compile", "_CONTROL"):
        "one character class (a step per character) on every printed write: RE2 1.8 us a line, re 0.4 us",
    ("azurefacts/naming.py", "re.compile", "CLUSTER"):
        "a look-ahead RE2 cannot run (the editor schema's pattern too); read once from the start, linear",
    ("kernel/secrets.py", "re.compile", "_WORD"):
        "shell words: each alternative starts with its own character, linear; a match per word (RE2: ~10 us each)",
    ("kernel/secrets.py", "re.compile", "_JOIN"):
        "quoted pieces' joins: starting at a quote, blank runs that cannot trade, linear; RE2 is 10x slower a match",
    ("analysis/shell/state.py", "re.compile", "_PLACEHOLDER"):
        "bytes before the parse: a bounded run that cannot hold the next match's start; RE2 11x slower a match",
    ("analysis/shell/state.py", "re.compile", "_EXPANSION_EDGE"):
        "bytes before the parse: a fixed-width alternation, a step per byte; RE2 8x slower a match",
    # --- shell patterns (fnmatch compiles to re with atomic groups: time linear in the name and the pattern)
    ("preflight/deploy.py", "fnmatch.fnmatchcase", "_allowed.matches"):
        "Azure's role-definition actions against the few action names the deployment needs",
    ("policies/rules/hardening.py", "fnmatch.fnmatchcase", "stack_provider_settings_allowed"):
        "the platform's pack-config patterns against a stack's provider keys",
    ("analysis/dockerfile.py", "glob.iglob", "_copy_from_context"):
        "one COPY source pattern, component by component, against a build context's entry names",
    # --- readers bounded by other means, or of our own files
    ("amlgpu/cli.py", "tomllib.loads", "version"): "our pyproject.toml",
    ("planning/review.py", "json.loads", "force_new"): "our table of the provider's replace-on-change inputs",
    ("azurefacts/arm.py", "json.loads", "ArmReader._send"): "Azure Resource Manager's answers (over TLS)",
    ("azurefacts/arm.py", "json.loads", "public_ip"): "the address service's answer (over TLS)",
    ("azurefacts/arm.py", "json.loads", "instance_metadata"): "the Azure VM's own metadata service",
    ("azurefacts/arm.py", "json.loads", "token_object_id"): "the caller's own access token",
    ("jobs/emulate/mpi_rank.py", "json.loads", "main"): "the GPU list run-local's parent puts in our variable",
    ("jobs/emulate/mpi.py", "json.loads", "read_rank_results"): "the reports our rank helper writes",
    ("jobs/workspace.py", "json.loads", "pulumi_outputs"): "the Pulumi CLI's output",
    ("stack/config.py", "json.loads", "from_pulumi_config"):
        "values the Pulumi engine hands over from the stack file; nesting is a config error",
    ("importer/cliv2.py", "ruamel.yaml.YAML", "load_yaml"): "reads a job file after bounded.check",
    ("importer/emit.py", "ruamel.yaml.YAML", "_yaml"):
        "writes; reads only the stack file, after bounded.check (append_to_stack)",
    ("importer/emit.py", "ruamel.yaml.util.load_yaml_guess_indent", "append_to_stack"):
        "the stack file, after bounded.check",
}
"""(file, call, where: the function, or the name a module-level statement assigns) -> why it may stay."""


@dataclass(frozen=True)
class Use:
    file: str
    call: str
    where: str
    line: int

    @property
    def key(self) -> tuple[str, str, str]:
        return self.file, self.call, self.where


class _Reader(ast.NodeVisitor):
    """The watched calls and imports of one module, with the names they are imported under."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.names: dict[str, str] = {}
        """Local name -> what it stands for (``re``, ``re.compile``, ``ruamel.yaml.YAML``)."""
        self.scope: list[str] = []
        self.uses: list[Use] = []
        self.imports: list[tuple[str, int]] = []
        """Pattern modules imported, with their lines."""

    def _where(self) -> str:
        return ".".join(self.scope) or "<module>"

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.names[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else \
                alias.name.split(".")[0]
            if alias.name.split(".")[0] in PATTERN_MODULES:
                self.imports.append((alias.name, node.lineno))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            self.names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        if (node.module or "").split(".")[0] in PATTERN_MODULES:
            self.imports.append((node.module or "", node.lineno))

    def _scoped(self, name: str, node: ast.AST) -> None:
        self.scope.append(name)
        self.generic_visit(node)
        self.scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._scoped(node.name, node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._scoped(node.name, node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._scoped(node.name, node)

    def visit_Assign(self, node: ast.Assign) -> None:
        target = node.targets[0]
        self._statement(target.id if isinstance(target, ast.Name) else None, node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._statement(node.target.id if isinstance(node.target, ast.Name) else None, node)

    def _statement(self, name: str | None, node: ast.AST) -> None:
        if self.scope or name is None:
            self.generic_visit(node)
        else:
            self._scoped(name, node)  # a module-level constant is where its pattern is

    def _dotted(self, node: ast.expr) -> str | None:
        if isinstance(node, ast.Name):
            return self.names.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self._dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def visit_Call(self, node: ast.Call) -> None:
        called = self._dotted(node.func)
        if called is not None and (called.split(".")[0] in PATTERN_MODULES or called in WATCHED_CALLS):
            self.uses.append(Use(self.file, called, self._where(), node.lineno))
        self.generic_visit(node)


def read_module(file: str, source: str) -> _Reader:
    reader = _Reader(file)
    reader.visit(ast.parse(source, filename=file))
    return reader


def violations(file: str, source: str, allowed: dict[tuple[str, str, str], str]) -> list[str]:
    """What ``source`` (the module at ``file``, relative to the project) uses that ``allowed`` does not list."""
    reader = read_module(file, source)
    found = [f"{file}:{use.line}: {use.call} in {use.where}" for use in reader.uses
             if use.key not in allowed and not (file == BOUNDED_READER and use.call in WATCHED_CALLS)]
    if not any(use.key in allowed and use.call.split(".")[0] in PATTERN_MODULES for use in reader.uses):
        found += [f"{file}:{line}: imports {module}, and no call of it is allowed here" for module, line in
                  reader.imports]
    return found


def sources() -> Iterator[tuple[str, str]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            file = path.relative_to(ROOT).as_posix()
            if not file.startswith(NOT_OURS):
                yield file, path.read_text(encoding="utf-8")
    yield "__main__.py", (ROOT / "__main__.py").read_text(encoding="utf-8")


def test_patterns_and_readers_of_user_input_are_bounded() -> None:
    found = [v for file, source in sources() for v in violations(file, source, ALLOWED)]
    assert not found, ("a backtracking pattern or an unbounded reader: use kernel.regex (RE2) or kernel.bounded, or "
                       "add an entry to ALLOWED saying why this one may stay:\n" + "\n".join(found))


def test_every_allowed_entry_is_still_used() -> None:
    used = {use.key for file, source in sources() for use in read_module(file, source).uses}
    assert not set(ALLOWED) - used, f"entries that match no call any more: {sorted(set(ALLOWED) - used)}"


@pytest.mark.parametrize(("source", "says"), [
    ("import re\nX = re.compile(r'(a+)+$')\n", "re.compile in X"),
    ("import re\ndef f(t):\n    return re.search(r'\\$\\[\\[.*?\\]\\]', t)\n", "re.search in f"),
    ("from re import sub as replace\ndef f(t):\n    return replace('x+', '', t)\n", "re.sub in f"),
    ("import re as r\nclass C:\n    def m(self, t):\n        return r.fullmatch('a*', t)\n", "re.fullmatch in C.m"),
    ("import re\n", "imports re"),
    ("import fnmatch\ndef f(n, p):\n    return fnmatch.fnmatch(n, p)\n", "fnmatch.fnmatch in f"),
    ("import yaml\ndef f(t):\n    return yaml.safe_load(t)\n", "yaml.safe_load in f"),
    ("import json\ndef f(t):\n    return json.loads(t)\n", "json.loads in f"),
    ("import ast\ndef f(t):\n    return ast.parse(t)\n", "ast.parse in f"),
    ("from ruamel.yaml import YAML\ndef f(t):\n    return YAML().load(t)\n", "ruamel.yaml.YAML in f"),
    ("import glob\ndef f(p):\n    return glob.glob(p)\n", "glob.glob in f"),
])
def test_the_check_finds_what_it_is_for(source: str, says: str) -> None:
    found = violations("jobs/new.py", source, ALLOWED)
    assert any(says in v for v in found), found


def test_the_check_passes_what_it_allows() -> None:
    source = "import re\n_ROLE = re.compile(r':[a-z]+:')\n"
    assert violations("amlgpu/cli.py", source, ALLOWED) == []
    assert violations("amlgpu/other.py", source, ALLOWED) != []  # the same call elsewhere is not allowed
    assert violations(BOUNDED_READER, "import yaml\ndef f(t):\n    return yaml.parse(t)\n", ALLOWED) == []
    assert violations("jobs/new.py", "from kernel import regex as linear\nX = linear.compile('a+')\n", ALLOWED) == []
