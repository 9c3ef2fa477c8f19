"""InfiniBand switched off by other spellings (issue 19, item 6), and what each spelling really does.

The expectations follow the libraries' own parsing: NCCL's ``strtoll(value, NULL, 0)`` in
src/misc/param.cc and the NCCL_IB_HCA matching in src/transport/net_ib/init.cc (NVIDIA/nccl at
5067397c2676d5aed50042fc39e5c8ee96eb0027), Open MPI's network support notes (UCX PML only for
InfiniBand in v5) and UCX's transport names.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from model.fabric import Setting, from_command, from_dockerfile, judge, strtoll
from tests.test_policy_baseline import Baseline, baseline

RUN = "ddp-per-process"  # 2 nodes of Standard_ND96asr_v4 (InfiniBand) in the baseline


@pytest.mark.parametrize(
    ("value", "number"),
    [("1", 1), ("0x1", 1), ("0X10", 16), ("2", 2), ("010", 8), (" 1", 1), ("-1", -1), ("1abc", 1), ("+3", 3),
     ("true", 0), ("yes", 0), ("", 0), ("0", 0), ("0x", 0), ("08", 0), ("99999999999999999999", 0)],
)
def test_strtoll_reads_integers_as_nccl_does(value: str, number: int) -> None:
    assert strtoll(value) == number


def _effect(name: str, value: str, *, resolved: bool = True) -> str | None:
    verdict = judge(Setting(name, value, "environment_variables", resolved))
    return verdict[0] if verdict else None


@pytest.mark.parametrize(
    ("name", "value", "effect"),
    [
        ("NCCL_IB_DISABLE", "1", "off"),
        ("NCCL_IB_DISABLE", "0x1", "off"),
        ("NCCL_IB_DISABLE", "2", "off"),
        ("NCCL_IB_DISABLE", "010", "off"),
        ("NCCL_IB_DISABLE", "true", "no effect"),
        ("NCCL_IB_DISABLE", "yes", "no effect"),
        ("NCCL_IB_DISABLE", "0", None),
        ("NCCL_IB_DISABLE", "0x0", None),
        ("NCCL_IB_HCA", "^mlx5", "off"),
        ("NCCL_IB_HCA", "^mlx", "off"),
        ("NCCL_IB_HCA", "^mlx5_1", None),  # one device out, the others stay
        ("NCCL_IB_HCA", "^=mlx5_0", None),
        ("NCCL_IB_HCA", "=ib0", "off"),  # selects nothing Azure has
        ("NCCL_IB_HCA", "mlx5", None),
        ("NCCL_IB_HCA", "mlx5_0:1,mlx5_1:1", None),
        ("NCCL_NET", "Socket", "off"),
        ("NCCL_NET", "socket", "off"),
        ("NCCL_NET", "IB", None),
        ("OMPI_MCA_pml", "ob1", "off"),
        ("OMPI_MCA_pml", "^ucx", "off"),
        ("OMPI_MCA_pml", "ucx", None),
        ("OMPI_MCA_btl", "tcp,self,vader", "cannot tell"),
        ("OMPI_MCA_btl", "^openib", None),
        ("UCX_TLS", "tcp", "off"),
        ("UCX_TLS", "ud,sm,self", "off"),  # datagrams only: no connected transport
        ("UCX_TLS", "rc,sm,self", None),
        ("UCX_TLS", "dc_x,self", None),
        ("UCX_TLS", "all", None),
        ("UCX_TLS", "^rc", None),  # dc is still there
        ("UCX_TLS", "^rc,dc", "off"),
        ("NCCL_IB_DISABLE", "$IB_OFF", None),  # environment_variables are literal: "$IB_OFF" reads as 0...
    ],
)
def test_what_each_spelling_does(name: str, value: str, effect: str | None) -> None:
    expected = "no effect" if (name, value) == ("NCCL_IB_DISABLE", "$IB_OFF") else effect
    assert _effect(name, value) == expected


def test_an_unresolved_value_cannot_be_told() -> None:
    assert _effect("NCCL_IB_DISABLE", "$IB_OFF", resolved=False) == "cannot tell"


@pytest.mark.parametrize(
    ("command", "found"),
    [
        ("export NCCL_IB_DISABLE=0x1; python train.py", [("NCCL_IB_DISABLE", "0x1", True)]),
        ("NCCL_NET=Socket torchrun train.py", [("NCCL_NET", "Socket", True)]),
        ("env NCCL_IB_HCA='^mlx5' python train.py", [("NCCL_IB_HCA", "^mlx5", True)]),
        ('export UCX_TLS="tcp,self"', [("UCX_TLS", "tcp,self", True)]),
        ("export NCCL_IB_DISABLE=$IB_OFF && python x.py", [("NCCL_IB_DISABLE", "$IB_OFF", False)]),
        ("echo $MY_NCCL_IB_DISABLE=1", []),  # not an assignment of the watched name
        ("python train.py --nccl-ib-disable=1", []),
    ],
)
def test_assignments_in_a_command(command: str, found: list[tuple[str, str, bool]]) -> None:
    assert [(s.name, s.value, s.resolved) for s in from_command(command)] == found


def test_a_dockerfile_bakes_settings_by_env_and_nccl_conf(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "nccl.conf").write_text("NCCL_DEBUG=WARN\nNCCL_IB_HCA=^mlx5\n")
    dockerfile = (
        "FROM mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04:20240701.v1\n"
        "ENV NCCL_IB_DISABLE=2 OTHER=x\n"
        "ENV NCCL_NET Socket\n"
        "ENV UCX_TLS=${TLS}\n"
        "RUN echo 'OMPI_MCA_pml=ob1' >> /etc/nccl.conf && \\\n    echo done\n"
        "RUN NCCL_IB_DISABLE=1 python -c 'print(1)'\n"  # a build-time prefix: not baked
        "COPY conf/nccl.conf /etc/nccl.conf\n"
        "COPY ../outside.conf /etc/nccl.conf\n"
    )
    found = [(s.name, s.value, s.where, s.resolved) for s in from_dockerfile(dockerfile, tmp_path)]
    assert found == [
        ("NCCL_IB_DISABLE", "2", "Dockerfile ENV", True),
        ("NCCL_NET", "Socket", "Dockerfile ENV", True),
        ("UCX_TLS", "${TLS}", "Dockerfile ENV", False),
        ("OMPI_MCA_pml", "ob1", "/etc/nccl.conf (Dockerfile RUN)", True),
        ("NCCL_IB_HCA", "^mlx5", "/etc/nccl.conf (COPY conf/nccl.conf)", True),
    ]


def _messages(b: Baseline, rule: str) -> list[str]:
    return [f.message for f in b.evaluate().findings if f.rule.id == rule and f.owner.name == RUN]


def _set(b: Baseline, variables: dict[str, str] | None = None, command: str | None = None,
         baked: list[tuple[str, str, str, bool]] | None = None) -> Baseline:
    props = b.run(RUN)
    if variables:
        props["spec"].setdefault("environment_variables", {}).update(variables)
    if command:
        props["spec"]["command"] = command
    if baked is not None:
        props["environment"]["fabric_settings"] = [list(s) for s in baked]
    return b


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"variables": {"NCCL_IB_DISABLE": "0x1"}}, "NCCL_IB_DISABLE='0x1' (environment_variables) disables"),
        ({"variables": {"NCCL_IB_DISABLE": "2"}}, "NCCL reads it as 2"),
        ({"variables": {"NCCL_IB_HCA": "^mlx5"}}, "excludes every Mellanox (mlx5) HCA"),
        ({"variables": {"OMPI_MCA_pml": "ob1"}}, "MPI traffic goes over TCP"),
        ({"command": "env NCCL_NET=Socket python train.py"}, "NCCL_NET='Socket' (the command) makes NCCL use TCP"),
        ({"baked": [("NCCL_IB_DISABLE", "1", "Dockerfile ENV", True)]}, "(Dockerfile ENV) disables InfiniBand"),
    ],
)
def test_other_spellings_that_switch_infiniband_off_are_mandatory(change: dict[str, object], says: str) -> None:
    b = _set(baseline(), **change)  # type: ignore[arg-type]
    (message,) = _messages(b, "run-infiniband-disabled")
    assert says in message
    assert not b.evaluate().passed


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"variables": {"NCCL_IB_DISABLE": "true"}}, "has no effect: NCCL reads it as 0"),
        ({"variables": {"NCCL_IB_DISABLE": "yes"}}, "has no effect"),
        ({"command": "export NCCL_IB_DISABLE=$FLAG; python train.py"}, "only known at run time"),
        ({"baked": [("UCX_TLS", "${TLS}", "Dockerfile ENV", False)]}, "only known at run time"),
    ],
)
def test_spellings_without_effect_or_unresolved_are_advisory(change: dict[str, object], says: str) -> None:
    b = _set(baseline(), **change)  # type: ignore[arg-type]
    assert _messages(b, "run-infiniband-disabled") == []
    (message,) = _messages(b, "run-infiniband-setting-unclear")
    assert says in message
    assert b.evaluate().passed


def test_the_run_overrides_what_the_image_bakes() -> None:
    b = _set(baseline(), variables={"NCCL_IB_DISABLE": "0"},
             baked=[("NCCL_IB_DISABLE", "1", "Dockerfile ENV", True)])
    assert _messages(b, "run-infiniband-disabled") == []


def test_single_node_runs_are_not_judged() -> None:
    b = _set(baseline(), variables={"NCCL_IB_DISABLE": "0x1"})
    b.run(RUN)["spec"]["resources"]["instance_count"] = 1
    assert _messages(b, "run-infiniband-disabled") == []
