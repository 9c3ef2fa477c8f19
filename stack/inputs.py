"""The values a command's ``${{...}}`` placeholders will have, where the stack file states them: folded once here.

Azure ML replaces ``${{inputs.<x>}}`` (and a sweep trial's ``${{search_space.<x>}}``) in the command before the
shell runs, textually, a literal value as written (CLI v2 "Reference inputs and outputs in the command";
jobs/emulate/commandline.py does the same on one machine). The gate knows the value when the stack file writes it:

* a literal input of the run, of the pipeline step, or of the sweep (``inputs: {ib: 1}``);
* a component input's ``default`` when the step gives no value (:func:`stack.pipelines._component_inputs`
  merges it into the step's inputs, so it arrives here as the step's literal);
* a step input bound to the pipeline's (``${{parent.inputs.x}}``) where the pipeline's input is a literal;
* a sweep's ``choice`` parameter: each of its values is a trial's (:func:`of_search_space`), judged one by one.

What stays unknown: an input bound to a data asset, a ``${{parent.inputs.x}}`` whose pipeline input is data or
not given, another step's output, any other sampled parameter (``uniform``...), a placeholder of an output. A
boolean is sent as ``1``/``0`` (Azure ML's encoding; the plan notes it per run).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kernel import regex as linear
from stack.pipelines import binding

PLACEHOLDER = linear.compile(
    rf"\$\{{\{{[{linear.SPACE}]*((?:inputs|search_space)\.[A-Za-z_][A-Za-z0-9_]*)[{linear.SPACE}]*\}}\}}")
"""``${{inputs.x}}``, ``${{search_space.x}}`` (spaces inside the braces allowed, as Azure ML allows them)."""
MAX_CHOICES = 64
"""Combinations of several-valued placeholders one command is judged with (each evaluated): past it, the
several-valued ones stay unknown."""


@dataclass(frozen=True)
class Folded:
    """What the stack file says one placeholder will be."""

    expression: str
    """Inside the braces: ``inputs.lr``, ``search_space.ib``."""
    values: tuple[str, ...]
    """The text Azure ML puts in the command: one value, or a sweep choice's values (each a trial's)."""
    source: str
    """Where the value is written, for findings: ``the run's input lr``, ``sweep choice ib``."""

    def to_props(self) -> list[Any]:
        return [self.expression, list(self.values), self.source]

    @classmethod
    def from_props(cls, props: Sequence[Any]) -> Folded:
        expression, values, source = props
        return cls(str(expression), tuple(str(v) for v in values), str(source))


def text(value: object) -> str | None:
    """A literal input's text in the command (``True`` as ``1``, Azure ML's encoding); None for data."""
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int | float | str) and binding(value) is None:
        return str(value)
    return None


def of_inputs(inputs: Mapping[str, Any], whose: str = "the run's") -> list[Folded]:
    """The literal ones of ``inputs`` (a run's, a step's with its component's defaults, a sweep trial's); a
    ``${{parent...}}`` binding and a data input are not values."""
    out = []
    for name, value in inputs.items():
        shown = text(value)
        if shown is not None:
            out.append(Folded(f"inputs.{name}", (shown,), f"{whose} input {name}"))
    return out


def of_defaults(inputs: Mapping[str, Any], step_inputs: Mapping[str, Any]) -> list[Folded]:
    """A step's inputs that its component's ``default`` gives (those the step leaves out), so a finding says so."""
    return [Folded(f"inputs.{name}", (shown,), f"the component's default of input {name}")
            for name, value in inputs.items() if name not in step_inputs and (shown := text(value)) is not None]


def of_pipeline(step_inputs: Mapping[str, Any], pipeline_inputs: Mapping[str, Any]) -> list[Folded]:
    """A step's inputs bound to the pipeline's (``${{parent.inputs.x}}``) where the pipeline's input is a literal."""
    out = []
    for name, value in step_inputs.items():
        bound = binding(value)
        if bound is None or bound.kind != "inputs" or bound.name not in pipeline_inputs:
            continue
        shown = text(pipeline_inputs[bound.name])
        if shown is not None:
            out.append(Folded(f"inputs.{name}", (shown,), f"the pipeline's input {bound.name} "
                                                            f"(bound by ${{{{parent.inputs.{bound.name}}}}})"))
    return out


def of_search_space(space: Mapping[str, Any]) -> list[Folded]:
    """A sweep's ``choice`` parameters: each value is some trial's (``type``/``values`` as the stack declares)."""
    out = []
    for name, parameter in space.items():
        if getattr(parameter, "type", None) != "choice" or not parameter.values:
            continue
        texts = [text(v) for v in parameter.values]
        if all(t is not None for t in texts):
            out.append(Folded(f"search_space.{name}", tuple(dict.fromkeys(t for t in texts if t is not None)),
                              f"the sweep's choice {name}"))
    return out


def used(command: str) -> set[str]:
    """The placeholder expressions ``command`` holds (``inputs.x``, ``search_space.x``)."""
    return {m.group(1) for m in PLACEHOLDER.finditer(command)}


def known(command: str, folded: Iterable[Folded]) -> dict[str, Folded]:
    """Of ``folded``, those ``command`` uses, by expression (a later one replaces an earlier one)."""
    wanted = used(command)
    return {f.expression: f for f in folded if f.expression in wanted}


def single(folded: Iterable[Folded]) -> dict[str, str]:
    """The placeholders with one value: expression -> text (for readers that take one value each)."""
    return {f.expression: f.values[0] for f in folded if len(f.values) == 1}


def choices(folded: Mapping[str, Folded]) -> list[dict[str, str]]:
    """Every combination of the placeholders' values (one for single values); with more than
    :data:`MAX_CHOICES`, the several-valued ones are left out (unknown)."""
    names = sorted(folded)
    count = 1
    for name in names:
        count *= len(folded[name].values)
    if count > MAX_CHOICES:
        names = [n for n in names if len(folded[n].values) == 1]
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(folded[n].values for n in names))]


def fill(command: str, values: Mapping[str, str]) -> str:
    """``command`` with the placeholders of ``values`` replaced as Azure ML does: textually, the value as written
    (a value holding shell syntax is read as shell, as bash will). The others are left for the reader (unknown)."""
    return PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), command)
