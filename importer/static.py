"""Static reading of an Azure ML submission script: values followed through the module, never executed.

:func:`evaluate` walks a script's statements in order and gives every module-level name the value an
expression would have if it is derivable from the text alone: literals (``nnodes = 2``), lists and
dicts of them, string operations (``"...".split()``, ``" ".join(...)``, f-strings, ``+``), integer
arithmetic, and the path idioms of Azure's examples (``Path(__file__).parent.joinpath("src")``,
``os.path.join``, ``str(...)``). Calls of the SDK classes the importer understands (``ScriptRunConfig``,
``MpiConfiguration``, ``command``, ``Environment.get``...) become :class:`Call` values holding their
evaluated arguments, and attribute assignments on them (``env.docker.base_image = "..."``) are recorded.

Anything else is an :class:`Unknown` carrying the line and the reason, so the importer can leave a
placeholder that says where the value comes from instead of guessing it.
"""

from __future__ import annotations

import ast
import posixpath
import string
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from kernel import bounded
from kernel import regex as linear

KNOWN_CALLS = frozenset({
    # SDK v1 (azureml-core)
    "ScriptRunConfig", "MpiConfiguration", "PyTorchConfiguration", "TensorflowConfiguration",
    "DockerConfiguration", "RunConfiguration", "Environment", "Environment.get",
    "Environment.from_conda_specification", "Environment.from_pip_requirements", "Environment.from_dockerfile",
    "Environment.from_docker_build_context", "DockerBuildContext.from_local_directory",
    "Environment.from_docker_image", "ComputeTarget", "ComputeTarget.create", "Dataset.get_by_name",
    "Dataset.File.from_files", "Dataset.File.upload_directory", "Dataset.Tabular.from_delimited_files",
    # SDK v2 (azure-ai-ml)
    "command", "Input", "Output", "PyTorchDistribution", "MpiDistribution", "TensorFlowDistribution",
    "BuildContext", "JobResourceConfiguration", "ResourceConfiguration", "Experiment", "UserIdentityConfiguration",
    "ManagedIdentityConfiguration", "AmlTokenConfiguration",
})
"""Calls recorded as :class:`Call` (by the name they are called as, after import aliases)."""

SDK_MODULES = ("azureml", "azure.ai.ml")
SUBMITTED = "submitted:"
"""Prefix of a :class:`Call`'s ``attrs`` holding the keyword arguments of the call that submitted it
(``experiment.submit(src, tags=...)``: ``submitted:tags``)."""
_FUNCTIONS = frozenset({"os.path.join", "posixpath.join", "pathlib.Path", "pathlib.PurePath"})
"""Module functions followed like builtins (``str``, ``Path``...), not as methods of a value."""

MAX_SCRIPT_BYTES = bounded.SUBMISSION_SCRIPT.max_bytes
"""The largest script read: a submission script is a few hundred lines."""
MAX_NODES = bounded.SUBMISSION_SCRIPT.max_nodes
"""The most syntax-tree nodes a script may have."""
MAX_DEPTH = bounded.SUBMISSION_SCRIPT.max_depth
"""The deepest nesting of the syntax tree followed (a submission script needs about 20). Python builds
deeper trees from flat text (``1+1+1...``, ``a.b.b.b...``) and walking them recursively would fail."""
MAX_VALUE_SIZE = 1 << 16
"""The largest value followed (characters of a string, items of a list counted in full, bits of an
integer): a script that doubles a string forty times describes a terabyte; past this size a value is
:class:`Unknown`, computed at run time as far as the import is concerned. A command line is a few hundred
characters."""
MAX_WORK = 2_000_000
"""The most steps spent measuring values (see :data:`MAX_VALUE_SIZE`) for one script, about a second:
past it the script is refused rather than followed for minutes."""


class ScriptTooLarge(Exception):
    """A script past :data:`MAX_NODES`, :data:`MAX_DEPTH` or :data:`MAX_WORK` (or one Python itself cannot
    build a tree of)."""

    def __init__(self, message: str, line: int | None = None) -> None:
        self.line = line
        super().__init__(message)


@dataclass(frozen=True)
class Unknown:
    """A value the script computes at run time (or in a way this reader does not follow)."""

    line: int
    why: str


@dataclass(frozen=True)
class PathValue:
    """A ``pathlib.Path`` built from derivable parts (``Path(__file__).parent / "src"``)."""

    path: str


@dataclass
class Call:
    """A call of a known SDK class or function, with its evaluated arguments."""

    name: str
    line: int
    args: list[Any]
    kwargs: dict[str, Any]
    qualified: str = ""
    """The name as imported (``azure.ai.ml.Environment`` vs ``azureml.core.Environment``)."""
    attrs: dict[str, Any] = field(default_factory=dict)
    """Attributes assigned after construction, by dotted path (``docker.base_image``)."""
    attr_lines: dict[str, int] = field(default_factory=dict)
    """The line of each of ``attrs`` (its last assignment)."""
    spread: bool = False
    """Arguments passed as ``*args`` / ``**kwargs``: which parameter gets which value is known only at run time."""

    def arg(self, position: int, keyword: str, default: Any = None) -> Any:
        """The argument given by keyword or at ``position`` (Python's own binding), else ``default``."""
        if keyword in self.kwargs:
            return self.kwargs[keyword]
        if position < len(self.args):
            return self.args[position]
        return default

    def given(self, position: int, keyword: str) -> bool:
        return keyword in self.kwargs or position < len(self.args)


@dataclass(frozen=True)
class DataRef:
    """``<dataset>.as_download()`` / ``.as_mount()`` (SDK v1): a data input of the run."""

    line: int
    dataset: Any
    mode: str
    """``download`` or ``ro_mount``, the v2 mode of the same delivery."""
    name: str | None = None
    """``as_named_input(name)``, when given."""


@dataclass(frozen=True)
class FileWrite:
    """A file the script writes when it runs (``open(path, "w")``, ``Path(...).write_text``): ``path`` is the
    path as the script gives it (relative to the folder it runs from), or :class:`Unknown`."""

    line: int
    path: Any


@dataclass
class Module:
    """What :func:`evaluate` found: the names' final values, every known call in order, and the files the
    script writes."""

    names: dict[str, Any]
    calls: list[Call]
    writes: list[FileWrite] = field(default_factory=list)


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


class _Evaluator:
    def __init__(self, script: str) -> None:
        self.script = script
        self.names: dict[str, Any] = {}
        self.aliases: dict[str, str] = {}
        """Local name -> qualified import (``SRC`` -> ``azureml.core.ScriptRunConfig``)."""
        self.calls: list[Call] = []
        self.writes: list[FileWrite] = []
        self.budget = [MAX_WORK]

    def _size(self, value: Any) -> int:
        return _size(value, self.budget)

    # ---------------------------------------------------------------- statements

    def run(self, body: list[ast.stmt], *, conditional: bool | str = False) -> None:
        for stmt in body:
            self.statement(stmt, conditional=conditional)

    def statement(self, stmt: ast.stmt, *, conditional: bool | str) -> None:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                top = alias.name.split(".")[0]
                self.aliases[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:
                self.aliases[alias.asname or alias.name] = f"{stmt.module or ''}.{alias.name}"
        elif isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
            self.assign(stmt, conditional=conditional)
        elif isinstance(stmt, ast.Expr):
            self.expr(stmt.value)
        elif isinstance(stmt, ast.If) and _is_main_guard(stmt.test):
            self.run(stmt.body, conditional=conditional)
        elif isinstance(stmt, ast.FunctionDef) and stmt.name == "main":
            # The usual `def main(): ...` of a submission script: its body is the script.
            self.run(stmt.body, conditional=conditional)
        elif isinstance(stmt, ast.With):
            for item in stmt.items:  # `with open(path, "w") as f:` runs whatever the body does
                value = self.expr(item.context_expr)
                if isinstance(item.optional_vars, ast.Name):
                    self.names[item.optional_vars.id] = value
            self.run(stmt.body, conditional=True)
        elif isinstance(stmt, ast.If) and not conditional:
            # Values set inside a branch depend on what happens at run time: the message says on what.
            test = _short(ast.unparse(stmt.test))
            self.run(stmt.body, conditional=f"`{test}`")
            self.run(stmt.orelse, conditional=f"`{test}` is false")
        elif isinstance(stmt, ast.If | ast.For | ast.While | ast.Try):
            for child in _child_bodies(stmt):
                self.run(child, conditional=True)

    def assign(self, stmt: ast.Assign | ast.AnnAssign | ast.AugAssign, *, conditional: bool | str) -> None:
        if isinstance(stmt, ast.AugAssign):
            target = stmt.target
            current = self.expr(target) if isinstance(target, ast.Name) else None
            value = self.binop(stmt.op, current, self.expr(stmt.value), stmt)
            targets: list[ast.expr] = [target]
        else:
            if stmt.value is None:
                return
            value = self.expr(stmt.value)
            targets = list(stmt.targets) if isinstance(stmt, ast.Assign) else [stmt.target]
        for each in targets:
            self.bind(each, value, stmt, conditional=conditional)

    def bind(self, target: ast.expr, value: Any, stmt: ast.stmt, *, conditional: bool | str) -> None:
        if conditional and not isinstance(value, Unknown):
            when = f"only when {conditional}" if isinstance(conditional, str) else "inside a branch or loop"
            shown = f" to {_short(ast.unparse(stmt.value))}" if isinstance(stmt, ast.Assign) else ""
            value = Unknown(stmt.lineno, f"`{ast.unparse(target)}` is set{shown} {when} (line {stmt.lineno})")
        if isinstance(target, ast.Name):
            self.names[target.id] = value
        elif isinstance(target, ast.Tuple | ast.List):
            items = value if isinstance(value, list | tuple) and len(value) == len(target.elts) else None
            for i, element in enumerate(target.elts):
                self.bind(element, items[i] if items is not None else Unknown(
                    stmt.lineno, f"`{ast.unparse(element)}` is unpacked from a value computed at run time"),
                    stmt, conditional=conditional)
        elif isinstance(target, ast.Attribute):
            # env.docker.base_image = "...": recorded on the object it belongs to.
            owner = self.attribute_of(target)
            if owner is not None:
                owner[0].attrs[owner[1]] = value
                owner[0].attr_lines[owner[1]] = stmt.lineno
        elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Attribute):
            # src.run_config.environment_variables["NCCL_DEBUG"] = "WARN": an item of a recorded mapping.
            owner = self.attribute_of(target.value)
            key = self.expr(target.slice)
            if owner is not None:
                call, path = owner
                call.attr_lines[path] = stmt.lineno
                mapping = call.attrs.setdefault(path, {})
                if isinstance(mapping, dict) and isinstance(key, str):
                    mapping[key] = value
                else:  # an item of something else, or a key known only at run time
                    call.attrs[path] = Unknown(stmt.lineno, f"`{ast.unparse(target)}` is set item by item with a "
                                                            "key or on a value known only at run time")
        elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            container = self.names.get(target.value.id)
            key = self.expr(target.slice)
            settable = isinstance(container, dict) and isinstance(key, str)
            settable |= isinstance(container, list) and isinstance(key, int) and -len(container) <= key < len(container)
            if settable:
                container[key] = value  # type: ignore[index]

    def attribute_of(self, target: ast.Attribute) -> tuple[Call, str] | None:
        """(the known call, dotted path) of ``name.a.b`` when ``name`` holds a :class:`Call`."""
        parts: list[str] = []
        node: ast.expr = target
        while isinstance(node, ast.Attribute):
            parts.insert(0, node.attr)
            node = node.value
        if isinstance(node, ast.Name) and isinstance(self.names.get(node.id), Call):
            return self.names[node.id], ".".join(parts)
        return None

    # ---------------------------------------------------------------- expressions

    def expr(self, node: ast.expr) -> Any:
        try:
            value = self._expr(node)
        except (TypeError, ValueError, IndexError, KeyError, ZeroDivisionError, OverflowError, RecursionError):
            return self.unknown(node)
        if not isinstance(value, Unknown | Call | DataRef) and self._size(value) > MAX_VALUE_SIZE:
            return self.too_large(node)
        return value

    def too_large(self, node: ast.AST, what: str = "value") -> Unknown:
        return self.unknown(node, f"`{_short(ast.unparse(node))}` builds a {what} larger than the import follows")

    def unknown(self, node: ast.AST, why: str | None = None) -> Unknown:
        return Unknown(getattr(node, "lineno", 0), why or f"`{_short(ast.unparse(node))}` is computed at run time")

    def _expr(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id == "__file__":
                return PathValue(self.script)
            if node.id in self.names:
                return self.names[node.id]
            return self.unknown(node, f"`{node.id}` is not given a value this script states")
        if isinstance(node, ast.List | ast.Tuple):
            items: list[Any] = []
            for element in node.elts:
                if isinstance(element, ast.Starred):
                    inner = self.expr(element.value)
                    if not isinstance(inner, list | tuple):
                        return self.unknown(node)
                    items.extend(inner)
                else:
                    items.append(self.expr(element))
            return items
        if isinstance(node, ast.Dict):
            out: dict[Any, Any] = {}
            for key_node, value_node in zip(node.keys, node.values, strict=True):
                if key_node is None:
                    inner = self.expr(value_node)
                    if not isinstance(inner, dict):
                        return self.unknown(node)
                    out.update(inner)
                    continue
                key = self.expr(key_node)
                if isinstance(key, Unknown) or not isinstance(key, str | int | float | bool):
                    return self.unknown(node)
                out[key] = self.expr(value_node)
            return out
        if isinstance(node, ast.JoinedStr):
            parts = []
            for value in node.values:
                if isinstance(value, ast.Constant):
                    parts.append(str(value.value))
                elif isinstance(value, ast.FormattedValue):
                    inner = self.expr(value.value)
                    if not _is_plain(inner) or value.format_spec is not None or self._size(inner) > MAX_VALUE_SIZE:
                        return self.unknown(node)
                    parts.append(_text(inner, value.conversion))
            return "".join(parts)
        if isinstance(node, ast.BinOp):
            return self.binop(node.op, self.expr(node.left), self.expr(node.right), node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = self.expr(node.operand)
            return -inner if isinstance(inner, int | float) and not isinstance(inner, bool) else self.unknown(node)
        if isinstance(node, ast.Attribute):
            return self.attribute(node)
        if isinstance(node, ast.Subscript):
            key = self.expr(node.slice)
            if isinstance(node.value, ast.Attribute) and node.value.attr == "compute_targets" and isinstance(key, str):
                # ws.compute_targets["gpu-cluster"]: the cluster of that name (SDK v1).
                return Call("ComputeTarget", node.lineno, [], {"name": key}, qualified="ComputeTarget")
            container = self.expr(node.value)
            if isinstance(container, dict) and isinstance(key, str) and key in container:
                return container[key]
            if isinstance(container, list | str) and isinstance(key, int) and not isinstance(key, bool):
                return container[key]
            return self.unknown(node)
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.IfExp):
            # `"gpu-cluster" if gpu_cluster else None`: chosen when the script runs; say what the choices are.
            body, orelse = self.expr(node.body), self.expr(node.orelse)
            if _is_plain(body) and _is_plain(orelse):
                return self.unknown(node, f"`{ast.unparse(node.test)}` picks {body!r} or {orelse!r} when the script "
                                          "runs")
        return self.unknown(node)

    def binop(self, op: ast.operator, left: Any, right: Any, node: ast.AST) -> Any:
        if isinstance(left, Unknown) or isinstance(right, Unknown):
            return left if isinstance(left, Unknown) else right
        if isinstance(op, ast.Div) and isinstance(left, PathValue) and isinstance(right, str | PathValue):
            return PathValue(_join(left.path, right if isinstance(right, str) else right.path))
        numbers = (int, float)
        if isinstance(left, bool) or isinstance(right, bool):
            return self.unknown(node)
        if isinstance(op, ast.Add) and type(left) is type(right) and isinstance(left, str | list | int | float):
            if self._size(left) + self._size(right) > MAX_VALUE_SIZE:
                return self.too_large(node)
            return left + right
        if isinstance(left, numbers) and isinstance(right, numbers):
            if isinstance(op, ast.Sub):
                return left - right
            if isinstance(op, ast.Mult):
                if self._size(left) + self._size(right) > MAX_VALUE_SIZE:  # bits: 10**9 * 10**9 ... squared forty times
                    return self.too_large(node, "number")
                return left * right
            if isinstance(op, ast.FloorDiv):
                return left // right
            if isinstance(op, ast.Add):
                return left + right
        if isinstance(op, ast.Mod) and isinstance(left, str) and _is_plain(right) and _bounded_template(left) \
                and self._size(right) <= MAX_VALUE_SIZE:
            return left % (tuple(right) if isinstance(right, list) else right)
        return self.unknown(node)

    def attribute(self, node: ast.Attribute) -> Any:
        if isinstance(node.value, ast.Name) and self.aliases.get(node.value.id, "").startswith("azure.ai.ml") \
                and node.value.id.endswith("Types") and node.attr.isupper():
            return node.attr.lower()  # AssetTypes.URI_FOLDER == "uri_folder" (azure-ai-ml's constants)
        base = self.expr(node.value)
        if isinstance(base, PathValue):
            if node.attr == "parent":
                return PathValue(str(PurePosixPath(base.path).parent))
            if node.attr == "name":
                return PurePosixPath(base.path).name
        if isinstance(base, Call) and node.attr in base.attrs:
            return base.attrs[node.attr]
        owner = self.attribute_of(node)
        if owner is not None and owner[1] in owner[0].attrs:
            return owner[0].attrs[owner[1]]
        return self.unknown(node)

    def qualified(self, func: ast.expr) -> str | None:
        dotted = _dotted(func)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        if head in self.aliases:
            return self.aliases[head] + (f".{rest}" if rest else "")
        return dotted

    def call(self, node: ast.Call) -> Any:
        qualified = self.qualified(node.func)
        known = _known_name(qualified)
        if known is not None:
            return self.record(known, node)
        if isinstance(node.func, ast.Attribute) and qualified not in _FUNCTIONS:
            return self.method(node)
        args = [self.expr(a) for a in node.args]
        if qualified in ("open", "io.open", "builtins.open"):
            mode = args[1] if len(args) > 1 else next((self.expr(k.value) for k in node.keywords if k.arg == "mode"),
                                                      "r")
            if args and (not isinstance(mode, str) or set(mode) & set("wax+")):
                path = args[0].path if isinstance(args[0], PathValue) else args[0]
                target: str | Unknown = path if isinstance(path, str) else self.unknown(node.args[0])
                self.writes.append(FileWrite(node.lineno, target))
            return self.unknown(node)
        if qualified in ("str", "int", "float") and len(args) == 1 and not node.keywords:
            value = args[0]
            if isinstance(value, PathValue) and qualified == "str":
                return value.path
            if _is_plain(value) and not isinstance(value, list | dict):
                return {"str": str, "int": int, "float": float}[qualified](value)
        if qualified in ("Path", "pathlib.Path", "PurePath", "pathlib.PurePath") and not node.keywords:
            parts = [a.path if isinstance(a, PathValue) else a for a in args]
            if parts and all(isinstance(p, str) for p in parts):
                return PathValue(_join(*parts))
        if qualified in ("os.path.join", "posixpath.join") and not node.keywords:
            parts = [a.path if isinstance(a, PathValue) else a for a in args]
            if parts and all(isinstance(p, str) for p in parts):
                return posixpath.join(*parts)  # os.path.join keeps "./" as written, unlike Path
        if qualified in ("list", "tuple") and len(args) == 1 and isinstance(args[0], list):
            return list(args[0])
        if qualified == "dict" and not args:
            return {k.arg: self.expr(k.value) for k in node.keywords if k.arg}
        return self.unknown(node)

    def method(self, node: ast.Call) -> Any:
        assert isinstance(node.func, ast.Attribute)
        name = node.func.attr
        receiver = self.expr(node.func.value)
        args = [self.expr(a) for a in node.args]
        kwargs = {k.arg: self.expr(k.value) for k in node.keywords if k.arg}
        if name in ("as_download", "as_mount"):
            named = receiver if isinstance(receiver, DataRef) else None
            return DataRef(node.lineno, named.dataset if named else receiver,
                           "download" if name == "as_download" else "ro_mount", named.name if named else None)
        if name == "as_named_input":
            label = args[0] if args else kwargs.get("name")
            return DataRef(node.lineno, receiver, "ro_mount", label if isinstance(label, str) else None)
        if isinstance(receiver, str):
            if name == "split" and len(args) <= 1 and not kwargs and (not args or isinstance(args[0], str)):
                return receiver.split(*args)
            if name == "join" and len(args) == 1 and isinstance(args[0], list) \
                    and all(isinstance(a, str) for a in args[0]):
                return receiver.join(args[0])
            if name == "format" and all(_is_plain(a) for a in [*args, *kwargs.values()]) \
                    and _bounded_template(receiver) and self._size([*args, *kwargs.values()]) <= MAX_VALUE_SIZE:
                return receiver.format(*args, **kwargs)
            if name in ("strip", "lower", "upper") and not args:
                return getattr(receiver, name)()
        submitted = args[0] if args else kwargs.get("config", kwargs.get("job"))
        if name in ("submit", "create_or_update", "begin_create_or_update") and isinstance(submitted, Call) \
                and submitted.name in ("ScriptRunConfig", "command"):
            # experiment.submit(src, tags=...), ml_client.jobs.create_or_update(job, experiment_name=...): what the
            # submission adds to the run.
            for keyword, value in kwargs.items():
                if value is not submitted:
                    submitted.attrs[f"{SUBMITTED}{keyword}"] = value
                    submitted.attr_lines[f"{SUBMITTED}{keyword}"] = node.lineno
            return self.unknown(node)
        if isinstance(receiver, PathValue) and name in ("write_text", "write_bytes"):
            self.writes.append(FileWrite(node.lineno, receiver.path))
            return None
        if isinstance(receiver, PathValue):
            if name == "joinpath" and args and all(isinstance(a, str) for a in args):
                return PathValue(_join(receiver.path, *args))
            if name in ("resolve", "absolute") and not args:
                return receiver
            if name == "as_posix" and not args:
                return receiver.path
        if isinstance(receiver, list) and name in ("append", "extend") and len(args) == 1:
            if self._size(receiver) + self._size(args[0]) > MAX_VALUE_SIZE:
                return self.too_large(node)
            if name == "append":
                receiver.append(args[0])
            elif isinstance(args[0], list):
                receiver.extend(args[0])
            return None
        if isinstance(receiver, dict) and name == "update" and len(args) == 1 and isinstance(args[0], dict):
            receiver.update(args[0])
            return None
        if isinstance(receiver, dict) and name == "get" and args and isinstance(args[0], str):
            return receiver.get(args[0], args[1] if len(args) > 1 else None)
        return self.unknown(node)

    def record(self, name: str, node: ast.Call) -> Call:
        args = []
        for a in node.args:
            args.append(self.unknown(a) if isinstance(a, ast.Starred) else self.expr(a))
        kwargs = {}
        for keyword in node.keywords:
            if keyword.arg is None:  # **options: which keywords it holds is known only at run time
                kwargs[f"**{ast.unparse(keyword.value)}"] = self.unknown(keyword.value)
            else:
                kwargs[keyword.arg] = self.expr(keyword.value)
        spread = any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords)
        call = Call(name=name, line=node.lineno, args=args, kwargs=kwargs, qualified=self.qualified(node.func) or name,
                    spread=spread)
        self.calls.append(call)
        return call


def _known_name(qualified: str | None) -> str | None:
    """The :data:`KNOWN_CALLS` name of a call, if it is one (``azureml.core.ScriptRunConfig`` -> ...)."""
    if qualified is None:
        return None
    parts = qualified.split(".")
    for size in (3, 2, 1):
        candidate = ".".join(parts[-size:])
        prefix = ".".join(parts[:-size])
        if candidate in KNOWN_CALLS and (not prefix or prefix.startswith(SDK_MODULES)):
            return candidate
    return None


def _short(text: str, limit: int = 80) -> str:
    """Source text on one line, cut to ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _is_main_guard(test: ast.expr) -> bool:
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and len(test.comparators) == 1 and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == "__main__")


def _child_bodies(stmt: ast.stmt) -> list[list[ast.stmt]]:
    bodies = [getattr(stmt, name) for name in ("body", "orelse", "finalbody") if getattr(stmt, name, None)]
    bodies += [handler.body for handler in getattr(stmt, "handlers", [])]
    return bodies


def _is_plain(value: Any) -> bool:
    if isinstance(value, list):
        return all(_is_plain(v) for v in value)
    if isinstance(value, dict):
        return all(_is_plain(v) for v in value.values())
    return isinstance(value, str | int | float | bool) or value is None


def _size(value: Any, budget: list[int]) -> int:
    """How big ``value`` is when written out: characters of a string, bits of an integer, items of lists and
    mappings counted in full (a list holding one list twice counts it twice, as its text would). Counting
    stops just past :data:`MAX_VALUE_SIZE`; each step spends one unit of ``budget`` (a one-item list, the
    script's remaining :data:`MAX_WORK`), and :class:`ScriptTooLarge` is raised when none is left."""
    total = 0
    pending = [value]
    while pending and total <= MAX_VALUE_SIZE:
        budget[0] -= 1
        if budget[0] < 0:
            raise ScriptTooLarge("takes more work to follow than a submission script: its values are built "
                                 "from each other thousands of times over")
        item = pending.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, bool) or item is None:
            total += 1
        elif isinstance(item, int):
            total += max(1, item.bit_length())
        elif isinstance(item, list | tuple):
            total += 1 + len(item)
            pending.extend(item)
        elif isinstance(item, dict):
            total += 1 + len(item)
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, PathValue):
            total += len(item.path)
        else:
            total += 1
    return total


def _bounded_spec(spec: str) -> bool:
    """A width or precision of at most three digits, given in the template itself (``%-10s``, ``{:.3f}``)."""
    return not any(ch in spec for ch in "{*") and _LONG_NUMBER.search(spec) is None


_LONG_NUMBER = linear.compile(r"[0-9]{4,}")


def _bounded_template(template: str) -> bool:
    """Whether formatting ``template`` (``%`` or ``str.format``) writes about as much as its arguments: widths
    and precisions of at most three digits, none taken from the arguments. ``"%999999999d"`` and
    ``"{:>999999999}"`` describe a gigabyte in a dozen characters."""
    if not all(_bounded_spec(spec) for spec in _percent_specs(template)):
        return False
    try:
        return all(_bounded_spec(spec or "") for _, _, spec, _ in string.Formatter().parse(template))
    except ValueError:
        return True  # not a format template: str.format raises and the value is unknown


def _percent_specs(template: str) -> list[str]:
    """The flags, width and precision of each ``%`` conversion in ``template`` (``%-10.3f`` -> ``-10.3``)."""
    specs = []
    i = template.find("%")
    while i >= 0 and i + 1 < len(template):
        j = i + 1
        if template[j] == "(":  # %(name)s: the mapping key may hold digits
            j = template.find(")", j) + 1 or len(template)
        start = j
        while j < len(template) and template[j] in "#0- +*.123456789":
            j += 1
        specs.append(template[start:j])
        i = template.find("%", j + 1 if j < len(template) and template[j] == "%" else j)
    return specs


def _text(value: Any, conversion: int) -> str:
    return repr(value) if conversion == ord("r") else str(value)


def _join(*parts: str) -> str:
    """``str(Path(*parts))``, POSIX style: ``.`` parts dropped, ``..`` kept (pathlib's own rules)."""
    return str(PurePosixPath(*parts))


def parse(source: str, script: str) -> ast.Module:
    """``source`` (the text of the script at ``script``) as a syntax tree, within the import's bounds.

    Raises ``SyntaxError`` for text that is not Python and :class:`ScriptTooLarge` for a script past the
    bounds (:data:`kernel.bounded.SUBMISSION_SCRIPT`: nodes, depth, or a tree Python itself cannot build).
    """
    try:
        return bounded.parse_python(source, script, bounded.SUBMISSION_SCRIPT)
    except bounded.BoundedInputError as err:
        raise ScriptTooLarge(err.message, err.line) from None


def evaluate(source: str, script: str) -> Module:
    """Read ``source`` (the text of the script at absolute path ``script``) without running it.

    Raises as :func:`parse` does.
    """
    return evaluate_tree(parse(source, script), script)


def evaluate_tree(tree: ast.Module, script: str) -> Module:
    """:func:`evaluate` of a script already parsed (:func:`parse`) into ``tree``."""
    evaluator = _Evaluator(script)
    evaluator.run(tree.body)
    return Module(names=evaluator.names, calls=evaluator.calls, writes=evaluator.writes)
