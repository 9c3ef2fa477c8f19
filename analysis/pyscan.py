"""What a run's Python code does, read with :mod:`ast` (never imported, never run), within bounds.

Two questions the policy pack asks of a run's code folder:

* :func:`process_group_use`: does the script a command starts (or a module of the code folder it imports)
  use a framework that joins its processes into one training: ``torch.distributed`` (and
  ``DistributedDataParallel``), DeepSpeed, Horovod, Lightning, accelerate, the Hugging Face ``Trainer``,
  ``tf.distribute``, mpi4py, Ray? A script that uses none of them and is started more than once runs as
  that many independent copies.
* :func:`legacy_variable_reads`: where the code folder reads ``AZ_BATCHAI_*`` variables (the Batch AI
  names that Azure ML's current runtime no longer sets) with nothing to fall back on.

Bounds: files over :data:`MAX_BYTES` (or past the other limits of :data:`kernel.bounded.CODE_MODULE`), more than
:data:`MAX_MODULES` modules followed from one script, and source that does not parse make the answer *unknown*
(``opaque``), never "no". Trees are walked without recursion: Python builds them about 3,000 levels deep from
flat text (a long ``elif`` chain, ``a.b.b.b...``), and a recursive walk failed past about 450. Imports of
packages outside the code folder are judged by name only (a package not listed here is taken to join no process group);
dynamic imports (``importlib``, ``__import__``, ``exec``) and starting other programs (``subprocess``,
``os.system``) make the answer unknown. Symbolic links leading outside the code folder are never read.
"""

from __future__ import annotations

import ast
import hashlib
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from kernel import bounded
from kernel.paths import files_inside, resolve_inside

MAX_BYTES = bounded.CODE_MODULE.max_bytes
"""Python files larger than this (1 MiB) are not read: generated code, not a training entry point."""
MAX_MODULES = 64
"""Code-folder modules followed from one script before the answer becomes unknown."""
MAX_FILES = 2000
"""Python files of a code folder read for variable names before the scan stops (and says so)."""

DISTRIBUTED_MODULES: dict[str, str] = {
    "torch.distributed": "torch.distributed",
    "torch.nn.parallel.distributed": "torch.distributed",
    "deepspeed": "DeepSpeed",
    "horovod": "Horovod",
    "lightning": "Lightning",
    "pytorch_lightning": "Lightning",
    "lightning_fabric": "Lightning",
    "accelerate": "accelerate",
    "tensorflow.distribute": "tf.distribute",
    "mpi4py": "mpi4py",
    "ray": "Ray",
    "megatron": "Megatron",
    "fairscale": "FairScale",
    "colossalai": "ColossalAI",
    "trl": "Hugging Face Trainer",
}
"""Modules whose import means the code joins (or may join) a process group, and the framework's name."""

GPU_MODULES = frozenset({
    "torch", "torchvision", "torchaudio", "tensorflow", "keras", "jax", "jaxlib", "flax", "cupy", "cudf", "cuml",
    "cugraph", "numba.cuda", "pycuda", "mxnet", "paddle", "tensorrt", "triton", "onnxruntime", "xgboost",
    "lightgbm", "catboost", "transformers", "diffusers", "timm", "sentence_transformers", "vllm", "apex", "nvidia",
    "pynvml", *DISTRIBUTED_MODULES,
})
"""Modules whose import means the code may open a GPU (deep learning frameworks, CUDA libraries, boosted trees
with GPU training): a script importing none of them, read whole, is known to leave the node's GPUs alone."""

_DISTRIBUTED_NAMES: dict[tuple[str, str], str] = {
    ("torch", "distributed"): "torch.distributed",
    ("torch.nn.parallel", "DistributedDataParallel"): "torch.distributed",
    ("tensorflow", "distribute"): "tf.distribute",
}
_ATTRIBUTES: dict[str, dict[str, str]] = {
    "torch": {"distributed": "torch.distributed", "DistributedDataParallel": "torch.distributed"},
    "tensorflow": {"distribute": "tf.distribute"},
}
"""Attribute uses of a plainly imported package that mean distributed use (``torch.distributed.init...``,
``tf.distribute.MultiWorkerMirroredStrategy``)."""
_OPAQUE_BUILTINS = frozenset({"__import__", "exec", "eval"})
_OPAQUE_OS = frozenset({"system", "popen", "execv", "execve", "execvp", "execvpe", "execl", "execlp", "spawnv",
                        "spawnvp", "posix_spawn", "posix_spawnp"})
_OPAQUE_MODULES = frozenset({"importlib", "subprocess", "runpy"})
_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})
"""Exceptions whose handler means the imports in the ``try`` body may fail: the code runs without them."""


def _guards_imports(node: ast.AST) -> bool:
    """Whether ``node``'s body holds imports the code can run without: a ``try`` whose handler catches a failed
    import (or everything), or ``if TYPE_CHECKING:`` (never true when the code runs)."""
    if isinstance(node, ast.Try | ast.TryStar):
        for handler in node.handlers:
            caught = handler.type
            names = caught.elts if isinstance(caught, ast.Tuple) else [caught] if caught is not None else []
            if caught is None or any((n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute)
                                      else None) in _IMPORT_ERRORS for n in names):
                return True
        return False
    if isinstance(node, ast.If):
        test = node.test
        return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    return False


@dataclass(frozen=True)
class Reading:
    """What :func:`process_group_use` found."""

    frameworks: frozenset[str]
    """Distributed frameworks used (by name, see :data:`DISTRIBUTED_MODULES`)."""
    opaque: str | None
    """Why the answer is unknown (a file too big, a module that does not parse, a dynamic import); None when
    every module the script imports from the code folder was read."""
    modules: int = 0
    """Code-folder modules read."""
    opens_gpu: bool = True
    """Whether the script or a code-folder module it imports imports one of :data:`GPU_MODULES` (True, the
    cautious answer, whenever :attr:`opaque` is set)."""
    packages: tuple[Imported, ...] = ()
    """The packages from outside the code folder and the standard library that the script and the code-folder
    modules it imports import for sure: imports inside a ``try`` that catches ``ImportError`` and under
    ``if TYPE_CHECKING:`` are left out (the code runs without them). Only those read so far when :attr:`opaque`
    is set."""


@dataclass(frozen=True)
class Imported:
    """A package a run's code imports: its top-level name, the code-folder file and the line."""

    package: str
    file: str
    line: int


def _source(path: Path) -> bytes | str:
    """The bytes of ``path``, or why they cannot be read."""
    try:
        if path.stat().st_size > MAX_BYTES:
            return f"{path.name} is over {MAX_BYTES >> 20} MiB"
        return bounded.read_bytes(path, MAX_BYTES, bounded.CODE_MODULE.kind)  # it may grow meanwhile
    except OSError as err:
        return f"{path.name} cannot be read ({err.strerror})"
    except bounded.BoundedInputError:
        return f"{path.name} is over {MAX_BYTES >> 20} MiB"


def _parsed(source: bytes, path: Path) -> ast.Module | str:
    try:
        return bounded.parse_python(source, str(path), bounded.CODE_MODULE)
    except SyntaxError:
        return f"{path.name} does not parse as Python"
    except bounded.BoundedInputError as err:
        return f"{path.name} cannot be read: {err}"


@dataclass(frozen=True)
class _Module:
    """What both questions need of one Python file, read from its syntax tree (:func:`_module`)."""

    holds_code: bool
    """Anything but docstrings and other bare constants."""
    frameworks: frozenset[str]
    gpu: bool
    opaque: str | None
    local: tuple[tuple[str, int], ...]
    """(module, level) of each import, to follow in the code folder."""
    imports: tuple[tuple[str, int], ...]
    """(absolute module, line) of each import made for sure (:attr:`Reading.packages`)."""
    legacy_reads: tuple[tuple[str, int], ...]
    """:func:`_environment_reads`."""


_modules: dict[tuple[str, bytes], _Module | str] = {}
_CACHED_MODULES = 4096
"""Distinct (file, content) pairs one process keeps the facts of."""


def _module(path: Path) -> _Module | str:
    """The facts of the Python file ``path``, or why it cannot be read. Parsed and walked once per path and
    content (its SHA-256) in a process: both questions read the same files, and so does every stack of
    ``amlgpu plan --all`` whose runs share a code folder. The file is read every time: a changed file is a new
    entry, never an old answer."""
    source = _source(path)
    if isinstance(source, str):
        return source
    key = (str(path), hashlib.sha256(source).digest())
    found = _modules.get(key)
    if found is None:
        tree = _parsed(source, path)
        if isinstance(tree, str):
            found = tree
        else:
            visitor = _Visitor()
            visitor.visit(tree)
            found = _Module(
                holds_code=any(not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)) for n in tree.body),
                frameworks=frozenset(visitor.frameworks), gpu=visitor.gpu, opaque=visitor.opaque,
                local=tuple(visitor.local), imports=tuple(visitor.imports),
                legacy_reads=tuple(_environment_reads(tree)))
        if len(_modules) >= _CACHED_MODULES:
            _modules.clear()
        _modules[key] = found
    return found


def _framework(module: str) -> str | None:
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        found = DISTRIBUTED_MODULES.get(".".join(parts[:end]))
        if found is not None:
            return found
    return None


def _opens_gpu(module: str) -> bool:
    parts = module.split(".")
    return any(".".join(parts[:end]) in GPU_MODULES for end in range(1, len(parts) + 1))


def _hf_trainer(module: str, name: str) -> bool:
    return module.split(".")[0] == "transformers" and (name.endswith("Trainer") or name == "TrainingArguments")


class _Visitor:
    """What a module imports and uses; :meth:`visit` walks the tree in ``ast.NodeVisitor``'s order (depth first,
    each node before its children), without recursion."""

    def __init__(self) -> None:
        self.frameworks: set[str] = set()
        self.local: list[tuple[str, int]] = []  # (module, level) to follow in the code folder
        self.aliases: dict[str, str] = {}  # local name -> imported module (torch, tensorflow, transformers)
        self.opaque: str | None = None
        self.gpu = False
        self.imports: list[tuple[str, int]] = []  # (absolute module, line) imported for sure

    def visit(self, tree: ast.AST) -> None:
        pending: list[tuple[ast.AST, bool]] = [(tree, False)]  # (node, whether its imports may fail)
        while pending:
            node, guarded = pending.pop()
            if isinstance(node, ast.Import):
                self.visit_Import(node)
                if not guarded:
                    self.imports.extend((alias.name, node.lineno) for alias in node.names)
                continue  # its aliases hold nothing more
            if isinstance(node, ast.ImportFrom):
                self.visit_ImportFrom(node)
                if not guarded and node.level == 0 and node.module:
                    self.imports.append((node.module, node.lineno))
                continue
            if isinstance(node, ast.Attribute):
                self.visit_Attribute(node)
            elif isinstance(node, ast.Call):
                self.visit_Call(node)
            body = set(map(id, getattr(node, "body", ()))) if _guards_imports(node) else set()
            children = reversed(list(ast.iter_child_nodes(node)))
            pending.extend((child, guarded or id(child) in body) for child in children)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._module(alias.name, node.lineno)
            root = alias.name.split(".")[0]
            self.aliases[alias.asname or root] = alias.name if alias.asname else root
            self.local.append((alias.name, 0))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level == 0:
            self._module(module, node.lineno)
            for alias in node.names:
                self.gpu = self.gpu or _opens_gpu(f"{module}.{alias.name}")  # from numba import cuda
                found = _DISTRIBUTED_NAMES.get((module, alias.name)) or _framework(f"{module}.{alias.name}")
                if found:
                    self.frameworks.add(found)
                elif _hf_trainer(module, alias.name):
                    self.frameworks.add("Hugging Face Trainer")
                if module.split(".")[0] in (*_ATTRIBUTES, "transformers"):
                    self.aliases[alias.asname or alias.name] = f"{module}.{alias.name}"
        for alias in node.names:  # `from . import utils`, `from pkg import module` may name modules
            self.local.append((f"{module}.{alias.name}" if module else alias.name, node.level))
        self.local.append((module, node.level))

    def _module(self, module: str, line: int) -> None:
        self.gpu = self.gpu or _opens_gpu(module)
        found = _framework(module)
        if found:
            self.frameworks.add(found)
        if module.split(".")[0] in _OPAQUE_MODULES and self.opaque is None:
            self.opaque = f"imports {module} (line {line}): it may start or load other code"

    def visit_Attribute(self, node: ast.Attribute) -> None:
        root = node
        chain = [node.attr]
        while isinstance(root.value, ast.Attribute):
            root = root.value
            chain.append(root.attr)
        if isinstance(root.value, ast.Name):
            base = self.aliases.get(root.value.id, "")
            package = base.split(".")[0]
            for attr in chain:
                found = _ATTRIBUTES.get(package, {}).get(attr)
                if found:
                    self.frameworks.add(found)
                if package == "transformers" and (attr.endswith("Trainer") or attr == "TrainingArguments"):
                    self.frameworks.add("Hugging Face Trainer")

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        opaque = (isinstance(func, ast.Name) and func.id in _OPAQUE_BUILTINS) or (
            isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
            and self.aliases.get(func.value.id) == "os" and func.attr in _OPAQUE_OS)
        if opaque and self.opaque is None:
            self.opaque = f"calls {ast.unparse(func)} (line {node.lineno}): it may start or load other code"


def _local_module(code: Path, here: PurePosixPath, module: str, level: int) -> Path | None:
    """The code-folder file of an import: relative to the importing file's package (``level`` dots), else
    to the script's folder and the code folder's root (both on ``sys.path`` when the script runs)."""
    if not module and level == 0:
        return None
    parts = [p for p in module.split(".") if p]
    if level:
        bases = [here.parents[level - 1] if level - 1 < len(here.parents) else None]
    else:
        bases = [here.parent, PurePosixPath(".")]
    for base in bases:
        if base is None:
            continue
        for candidate in (base.joinpath(*parts).with_suffix(".py") if parts else None,
                          base.joinpath(*parts, "__init__.py")):
            if candidate is None:
                continue
            path = resolve_inside(code, candidate.as_posix())
            if path is not None and path.is_file():
                return path
    return None


def process_group_use(code: Path, script: str) -> Reading:
    """The distributed frameworks ``script`` (relative to the code folder ``code``) and the code-folder
    modules it imports use, followed to :data:`MAX_MODULES` modules."""
    start = resolve_inside(code, script)
    if start is None or not start.is_file():
        return Reading(frozenset(), f"{script} is not in the code folder")
    top = code.resolve()
    frameworks: set[str] = set()
    packages: dict[str, Imported] = {}
    gpu = False
    pending, seen = [start], {start}
    while pending:
        if len(seen) > MAX_MODULES:
            return Reading(frozenset(frameworks), f"imports more than {MAX_MODULES} modules of the code folder",
                           len(seen), packages=tuple(packages.values()))
        path = pending.pop()
        facts = _module(path)
        if isinstance(facts, str):
            return Reading(frozenset(frameworks), facts, len(seen), packages=tuple(packages.values()))
        if path == start and not facts.holds_code:
            return Reading(frozenset(), f"{script} holds no code", 1)
        frameworks |= facts.frameworks
        gpu = gpu or facts.gpu
        here = PurePosixPath(path.relative_to(top).as_posix())
        for module, line in facts.imports:
            package = module.split(".")[0]
            if package not in packages and package not in sys.stdlib_module_names \
                    and _local_module(code, here, package, 0) is None:
                packages[package] = Imported(package, here.as_posix(), line)
        if facts.opaque is not None:
            return Reading(frozenset(frameworks), f"{here.as_posix()} {facts.opaque}", len(seen),
                           packages=tuple(packages.values()))
        for module, level in facts.local:
            found = _local_module(code, here, module, level)
            if found is not None and found not in seen:
                seen.add(found)
                pending.append(found)
    return Reading(frozenset(frameworks), None, len(seen), opens_gpu=gpu, packages=tuple(packages.values()))


LEGACY_PREFIX = "AZ_BATCHAI_"


def _legacy_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(LEGACY_PREFIX):
        rest = node.value[len(LEGACY_PREFIX):]
        return node.value if rest and rest.replace("_", "").isalnum() else None
    return None


def _environment_reads(tree: ast.Module) -> list[tuple[str, int]]:
    """``AZ_BATCHAI_*`` variables the module reads with nothing else to fall back on, with their lines:
    ``os.environ["AZ_BATCHAI_X"]`` (a KeyError when it is not set) and ``os.environ.get(...)`` /
    ``os.getenv(...)`` that are not one side of an ``or`` with another read. A name in a list of names to
    print, or a fallback after the current name (``get("AZ_BATCH_MASTER_NODE") or get("AZ_BATCHAI_...")``),
    is not such a read."""
    fallbacks: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and len(node.values) > 1:
            fallbacks.update(id(value) for value in node.values)
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            name = _legacy_name(node.slice)
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute | ast.Name)
              and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) in ("get", "getenv")
              and id(node) not in fallbacks and len(node.args) < 2 and not node.keywords):
            name = _legacy_name(node.args[0])
        else:
            continue
        if name:
            found.append((name, node.lineno))
    return found


NOT_THE_RUNS_CODE = frozenset({
    ".git", ".hg", ".svn", "__pycache__", ".venv", "venv", "node_modules",
    ".mypy_cache", ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints",
})
"""Folders of a code folder that hold tools' files or vendored packages, not the run's own code: what they
read is not what the run reads (the secret scan still reads them: :mod:`analysis.code_scan`)."""


def legacy_variable_reads(code: Path, *, skip_dirs: frozenset[str] = NOT_THE_RUNS_CODE) -> tuple[str, ...]:
    """``path:line NAME`` for each ``AZ_BATCHAI_*`` read without a fallback in the code folder's Python files
    (folder order, see :func:`_environment_reads`), read with :mod:`ast`; the first :data:`MAX_FILES` files
    only (a last entry says when more were left)."""
    found: list[str] = []
    top = code.resolve()
    for count, path in enumerate(p for p in files_inside(code, skip_dirs=skip_dirs) if p.suffix == ".py"):
        if count >= MAX_FILES:
            found.append(f"(more than {MAX_FILES} Python files: the rest were not read)")
            break
        facts = _module(path)
        if isinstance(facts, str):
            continue
        where = path.resolve().relative_to(top).as_posix() if path.resolve().is_relative_to(top) else path.name
        found.extend(f"{where}:{line} {name}" for name, line in sorted(set(facts.legacy_reads),
                                                                    key=lambda t: (t[1], t[0])))
    return tuple(found)

