"""SDK v2 ``@pipeline`` functions as stack pipeline entries, read with :mod:`ast` (never executed).

What azure-ai-ml's ``dsl.pipeline`` builds from a function, read from its text:

* each ``<step> = <component>(<input>=<value>, ...)`` of the function body is a command step named
  ``<step>`` (the variable, as the SDK names its nodes), ``<component>`` a module-level
  ``load_component(source=<file>)``; its inputs: literals, ``Input(...)`` data, the function's parameters
  (``${{parent.inputs.<parameter>}}``) and earlier steps' ``<step>.outputs.<x>``
  (``${{parent.jobs.<step>.outputs.<x>}}``);
* settings made on a step afterwards: ``<step>.compute``, ``.environment``, ``.environment_variables``,
  ``.distribution``, ``.resources.<key>`` (or ``.resources = {...}``), ``.limits.timeout``,
  ``.outputs.<x>.<mode|type|path>``, ``set_resources(...)`` and ``set_limits(...)``;
* ``return {"<name>": <step>.outputs.<x>}``: the pipeline's outputs, bound to the steps';
* the decorator's ``name``, ``display_name``, ``description``, ``experiment_name``, ``tags``, ``compute`` /
  ``default_compute``, ``default_datastore``, ``continue_on_step_failure`` and ``force_rerun``, the
  function's parameters with their defaults (the pipeline's inputs), and, at module level, the values the
  function is called with and ``<job>.settings.<key> = ...`` on what it returns.

The result is the pipeline job a CLI v2 file would hold, mapped as :mod:`importer.pipeline` maps one.
Anything the text does not determine (a step made in a loop or a branch, a component not loaded from a
file) is bad input naming the line, or a placeholder.
"""

from __future__ import annotations

import ast
from typing import Any

from importer.base import Draft, ImportInputError, Source, slug
from importer.mapping import Context
from importer.pipeline import _COMMON, _pipeline
from importer.sdk import _DISTRIBUTIONS, _literal
from importer.static import Call, PathValue, Unknown, _Evaluator

KIND = "SDK v2 @pipeline"
_SETTINGS = ("default_datastore", "continue_on_step_failure", "force_rerun")
_STEP_ATTRIBUTES = ("compute", "environment", "environment_variables", "distribution", "display_name",
                    "description", "tags")


def _qualified(evaluator: _Evaluator, node: ast.expr) -> str:
    return evaluator.qualified(node) or ""


def _is_pipeline_decorator(evaluator: _Evaluator, node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    return _qualified(evaluator, target) in ("azure.ai.ml.dsl.pipeline", "azure.ai.ml.dsl._pipeline_decorator.pipeline")


def has_pipeline(source: Source, tree: ast.Module) -> bool:
    """Whether a script (its syntax ``tree``) defines an ``@pipeline`` function (azure-ai-ml's ``dsl.pipeline``)
    at module level."""
    evaluator = _Evaluator(str(source.path))
    evaluator.run([s for s in tree.body if isinstance(s, ast.Import | ast.ImportFrom)])
    return any(isinstance(s, ast.FunctionDef) and any(_is_pipeline_decorator(evaluator, d) for d in s.decorator_list)
               for s in tree.body)


class _Reader:
    def __init__(self, source: Source, tree: ast.Module) -> None:
        self.source = source
        self.evaluator = _Evaluator(str(source.path.resolve()))
        self.evaluator.run(tree.body)
        self.tree = tree
        self.components: dict[str, str] = {}
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                    and isinstance(stmt.value, ast.Call) \
                    and _qualified(self.evaluator, stmt.value.func).endswith("azure.ai.ml.load_component"):
                path = self._component_source(stmt.value)
                if path is not None:
                    self.components[stmt.targets[0].id] = path

    def fail(self, message: str, line: int) -> ImportInputError:
        return ImportInputError(message, file=self.source.display, line=line)

    def _component_source(self, call: ast.Call) -> str | None:
        first = call.args[0] if call.args else None
        node = next((k.value for k in call.keywords if k.arg in ("source", "path")), first)
        value = self.evaluator.expr(node) if node is not None else None
        if isinstance(value, PathValue):
            return value.path
        if isinstance(value, str) and not value.startswith("azureml:"):
            return value
        return None

    def value(self, node: ast.expr, params: set[str], steps: dict[str, Any]) -> Any:
        """A step input's value: a binding, data, or a literal."""
        if isinstance(node, ast.Name) and node.id in params:
            return f"${{{{parent.inputs.{node.id}}}}}"
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "outputs" and isinstance(node.value.value, ast.Name) \
                and node.value.value.id in steps:
            return f"${{{{parent.jobs.{node.value.value.id}.outputs.{node.attr}}}}}"
        value = self.evaluator.expr(node)
        if isinstance(value, Call) and value.name == "Input":
            return value.kwargs
        return value

    def read(self, function: ast.FunctionDef, draft: Draft) -> dict[str, Any]:
        """The CLI v2 pipeline job ``function`` builds, as a document."""
        job: dict[str, Any] = {"type": "pipeline"}
        decorator = next(d for d in function.decorator_list if _is_pipeline_decorator(self.evaluator, d))
        options = {k.arg: self.evaluator.expr(k.value) for k in getattr(decorator, "keywords", []) if k.arg}
        settings = {key: options[key] for key in _SETTINGS if key in options}
        compute = options.get("default_compute", options.get("compute"))
        if compute is not None:
            settings["default_compute"] = compute
        for key in ("name", "display_name", "description", "experiment_name", "tags"):
            if key in options:
                job[key] = options[key]
        docstring = ast.get_docstring(function)
        if docstring and "description" not in job:
            job["description"] = docstring.strip().splitlines()[0]
        arguments = function.args
        params = [a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]]
        defaults = dict(zip([a.arg for a in [*arguments.posonlyargs, *arguments.args]][::-1],
                            arguments.defaults[::-1], strict=False))
        defaults |= {a.arg: d for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True) if d}
        inputs: dict[str, Any] = {name: self.value(defaults[name], set(), {}) for name in params if name in defaults}
        steps: dict[str, dict[str, Any]] = {}
        outputs: dict[str, Any] = {}
        for stmt in function.body:
            self.statement(stmt, set(params), steps, outputs)
        called = self.called(function.name, job, settings, inputs)
        missing = [name for name in params if name not in inputs and name not in called]
        if missing:
            raise self.fail(f"@pipeline {function.name}(): no value for {', '.join(missing)} (no default, and the "
                            "function is not called with one at module level)", function.lineno)
        inputs.update(called)
        if settings:
            job["settings"] = settings
        if inputs:
            job["inputs"] = {k: _literal(draft, v, f"inputs.{k}", function.lineno) for k, v in inputs.items()}
        if outputs:
            job["outputs"] = {name: {} for name in outputs}
        job["jobs"] = steps
        return job

    def statement(self, stmt: ast.stmt, params: set[str], steps: dict[str, dict[str, Any]],
                  outputs: dict[str, Any]) -> None:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            return  # the docstring
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Name):
            name, call, factory = stmt.targets[0].id, stmt.value, stmt.value.func.id
            if factory not in self.components:
                raise self.fail(f"step {name!r}: {factory}(...) is not a component loaded from a file at module "
                                "level (load_component(source=...)); the gate needs its YAML", stmt.lineno)
            if call.args:
                raise self.fail(f"step {name!r}: give the component's inputs by name", stmt.lineno)
            step: dict[str, Any] = {"type": "command", "component": self.components[factory]}
            inputs = {k.arg: self.value(k.value, params, steps) for k in call.keywords if k.arg}
            if inputs:
                step["inputs"] = inputs
            steps[name] = step
            return
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Attribute):
            path = ast.unparse(stmt.targets[0]).split(".")
            if path[0] in steps:
                self.setting(steps[path[0]], path[1:], self.evaluator.expr(stmt.value), stmt.lineno, path[0])
                return
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) \
                and isinstance(stmt.value.func, ast.Attribute) and isinstance(stmt.value.func.value, ast.Name) \
                and stmt.value.func.value.id in steps \
                and stmt.value.func.attr in ("set_resources", "set_limits"):
            step = steps[stmt.value.func.value.id]
            key = "resources" if stmt.value.func.attr == "set_resources" else "limits"
            step.setdefault(key, {}).update({k.arg: self.evaluator.expr(k.value) for k in stmt.value.keywords if k.arg})
            return
        if isinstance(stmt, ast.Return) and isinstance(stmt.value, ast.Dict):
            for key_node, value_node in zip(stmt.value.keys, stmt.value.values, strict=True):
                output_name = self.evaluator.expr(key_node) if key_node is not None else None
                bound = self.value(value_node, set(), steps)
                if not isinstance(output_name, str) or not (isinstance(bound, str)
                                                            and bound.startswith("${{parent.jobs.")):
                    raise self.fail("return: each pipeline output is \"<name>\": <step>.outputs.<output>",
                                    stmt.lineno)
                step_name, output = bound.removeprefix("${{parent.jobs.").removesuffix("}}").split(".outputs.")
                steps[step_name].setdefault("outputs", {})[output] = f"${{{{parent.outputs.{output_name}}}}}"
                outputs[output_name] = bound
            return
        if isinstance(stmt, ast.Return) and stmt.value is None:
            return
        raise self.fail(f"`{ast.unparse(stmt).splitlines()[0][:80]}` inside the @pipeline function is not read "
                        "(steps made in loops, branches or helper calls are known only at run time): write each "
                        "step as <step> = <component>(...)", stmt.lineno)

    def setting(self, step: dict[str, Any], path: list[str], value: Any, line: int, name: str) -> None:
        if isinstance(value, Unknown):
            raise self.fail(f"step {name!r}: {'.'.join(path)}: {value.why}", line)
        if isinstance(value, Call) and value.name in _DISTRIBUTIONS:
            value = {"type": _DISTRIBUTIONS[value.name], **value.kwargs}
        if len(path) == 1 and path[0] in (*_STEP_ATTRIBUTES, "resources", "limits"):
            step[path[0]] = value
        elif len(path) == 2 and path[0] in ("resources", "limits", "distribution"):
            step.setdefault(path[0], {})[path[1]] = value
        elif len(path) == 3 and path[0] == "outputs" and path[2] in ("mode", "type", "path"):
            outputs = step.setdefault("outputs", {})
            current = outputs.get(path[1])
            outputs[path[1]] = {**(current if isinstance(current, dict) else {}), path[2]: value}
        else:
            raise self.fail(f"step {name!r}: setting {'.'.join(path)} is not read: set it in the stack entry",
                            line)

    def called(self, function: str, job: dict[str, Any], settings: dict[str, Any],
               inputs: dict[str, Any]) -> dict[str, Any]:
        """Values the function is called with at module level, and settings made on what it returns."""
        values: dict[str, Any] = {}
        result: str | None = None
        for stmt in self.tree.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                    and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Name) \
                    and stmt.value.func.id == function:
                result = stmt.targets[0].id
                values = {k.arg: self.value(k.value, set(), {}) for k in stmt.value.keywords if k.arg}
            elif result and isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 \
                    and isinstance(stmt.targets[0], ast.Attribute):
                path = ast.unparse(stmt.targets[0]).split(".")
                value = self.evaluator.expr(stmt.value)
                if path[0] != result or isinstance(value, Unknown):
                    continue
                if len(path) == 3 and path[1] == "settings":
                    settings[path[2]] = value
                elif len(path) == 2 and path[1] in ("display_name", "description", "experiment_name", "tags"):
                    job[path[1]] = value
        return values


def read(source: Source, ctx: Context, tree: ast.Module) -> list[Draft]:
    """Every ``@pipeline`` function of a script (its syntax ``tree``), as drafts (exit 2 when one cannot be
    read)."""
    reader = _Reader(source, tree)
    functions = [s for s in tree.body if isinstance(s, ast.FunctionDef)
                 and any(_is_pipeline_decorator(reader.evaluator, d) for d in s.decorator_list)]
    drafts = []
    for function in functions:
        draft = Draft(file=source.display, line=function.lineno, kind=KIND, run={})
        job = _literal(draft, reader.read(function, draft), "pipeline", function.lineno)
        draft.run["name"] = job.pop("name", None) or slug(function.name.replace("_", "-"))
        draft.run["type"] = "pipeline"
        for key in _COMMON:
            if key in job:
                draft.run[key] = job[key]
        _pipeline(ctx, draft, source, job, {})
        drafts.append(draft)
    return drafts
