"""stack/inputs.py: the placeholder values the stack file states, folded once (issue 36, point 4)."""

from __future__ import annotations

from typing import Any

import pytest

from stack import inputs
from stack.inputs import Folded
from stack.runs import DataInput
from stack.sweeps import SearchParameter

DATA = DataInput(type="uri_file", path="azureml:ib:1")


@pytest.mark.parametrize(
    ("given", "folded"),
    [
        ({"ib": 1}, [("inputs.ib", ("1",))]),
        ({"ib": True, "off": False}, [("inputs.ib", ("1",)), ("inputs.off", ("0",))]),  # Azure ML's encoding
        ({"net": "Socket", "lr": 0.5}, [("inputs.net", ("Socket",)), ("inputs.lr", ("0.5",))]),
        ({"data": DATA, "dumped": {"type": "uri_file", "path": "azureml:ib:1"}}, []),  # data is no value
        ({"ib": "${{parent.inputs.ib}}", "out": "${{parent.jobs.a.outputs.b}}"}, []),  # a binding is no value
    ],
)
def test_literal_inputs_are_values_and_data_or_bindings_are_not(given: dict[str, Any],
                                                                folded: list[tuple[str, tuple[str, ...]]]) -> None:
    assert [(f.expression, f.values) for f in inputs.of_inputs(given)] == folded


@pytest.mark.parametrize(
    ("step", "pipeline", "folded"),
    [
        ({"ib": "${{parent.inputs.ib}}"}, {"ib": 1}, [("inputs.ib", ("1",))]),
        ({"x": "${{ parent.inputs.ib }}"}, {"ib": "Socket"}, [("inputs.x", ("Socket",))]),
        ({"ib": "${{parent.inputs.ib}}"}, {"ib": DATA}, []),  # bound to data: unknown
        ({"ib": "${{parent.inputs.ib}}"}, {}, []),  # the pipeline does not give it: unknown
        ({"ib": "${{parent.jobs.a.outputs.b}}"}, {"b": 1}, []),  # another step's output
        ({"ib": 1}, {"ib": 2}, []),  # the step's own literal: of_inputs's
    ],
)
def test_a_step_input_bound_to_a_literal_pipeline_input_is_its_value(
        step: dict[str, Any], pipeline: dict[str, Any], folded: list[tuple[str, tuple[str, ...]]]) -> None:
    assert [(f.expression, f.values) for f in inputs.of_pipeline(step, pipeline)] == folded


def test_component_defaults_and_sweep_choices() -> None:
    assert inputs.of_defaults({"ib": 1, "lr": 0.1}, {"lr": 0.2}) == [
        Folded("inputs.ib", ("1",), "the component's default of input ib")]
    space = {"ib": SearchParameter(type="choice", values=[0, 1, 1, True]),
             "lr": SearchParameter(type="uniform", min_value=0.1, max_value=0.2)}
    assert inputs.of_search_space(space) == [Folded("search_space.ib", ("0", "1"), "the sweep's choice ib")]


def test_values_are_filled_in_textually_and_the_others_left_for_the_reader() -> None:
    command = "export NCCL_IB_DISABLE=${{ inputs.ib }}; run --data ${{inputs.data}} --lr ${{search_space.lr}}"
    assert inputs.used(command) == {"inputs.ib", "inputs.data", "search_space.lr"}
    assert inputs.fill(command, {"inputs.ib": "1; export NCCL_NET=Socket"}) == (
        "export NCCL_IB_DISABLE=1; export NCCL_NET=Socket; run --data ${{inputs.data}} --lr ${{search_space.lr}}")


def test_the_combinations_judged_are_bounded() -> None:
    small = {"search_space.a": Folded("search_space.a", ("0", "1"), ""),
             "inputs.b": Folded("inputs.b", ("x",), "")}
    assert inputs.choices(small) == [{"inputs.b": "x", "search_space.a": "0"}, {"inputs.b": "x", "search_space.a": "1"}]
    wide = {f"search_space.p{i}": Folded(f"search_space.p{i}", tuple(map(str, range(5))), "") for i in range(3)}
    assert inputs.MAX_CHOICES < 5 ** 3  # 125 combinations: past the bound
    assert inputs.choices({**wide, **small}) == [{"inputs.b": "x"}]  # the several-valued ones left unknown
