"""One ``docker_args`` tokeniser (issue 35, point 3): docker/cli's reading, used by the hardening rule and by
the InfiniBand reader alike, so ``-ite X=1`` is an ``--env`` for both."""

from __future__ import annotations

from typing import Any

import pytest

from analysis import docker_run
from analysis.interconnect import Setting, docker_env
from policies.catalogue import BY_ID
from stack.resolved import ResolvedRun
from tests.policies.test_baseline import TODAY, baseline

ENV_FORMS = ["-ite NCCL_IB_DISABLE=1", "-e=NCCL_IB_DISABLE=1", "--env NCCL_IB_DISABLE=1", "--env=NCCL_IB_DISABLE=1",
             "-eNCCL_IB_DISABLE=1", "-e NCCL_IB_DISABLE=1", "-it -e NCCL_IB_DISABLE=1"]
VOLUME_FORMS = ["-itv /:/host", "-v=/:/host", "--volume /:/host", "--volume=/:/host", "-v/:/host"]


@pytest.mark.parametrize("args", ENV_FORMS)
def test_every_way_of_writing_an_env_option_reads_as_one(args: str) -> None:
    assert [o for o in docker_run.options(args.split()) if o[0] == "--env"] == [("--env", "NCCL_IB_DISABLE=1")]
    # The InfiniBand reader sees the setting in every form (`-ite X=1` was missed by its own shlex reading).
    assert docker_env(args) == ([Setting("NCCL_IB_DISABLE", "1", "docker_args")], [])


def _run_with(args: str) -> Any:
    b = baseline()
    b.run("ddp-per-process")["spec"].setdefault("resources", {})["docker_args"] = args
    return ResolvedRun.from_props(b.run("ddp-per-process"))


@pytest.mark.parametrize("args", VOLUME_FORMS)
def test_the_hardening_rule_reads_the_same_options(args: str) -> None:
    (door,) = BY_ID["run-docker-args-confined"].evaluate(_run_with(args), {}, TODAY)
    assert door == "-v /:/host mounts the node's / into the container"


@pytest.mark.parametrize("args", ENV_FORMS)
def test_both_uses_read_an_env_option_in_each_form(args: str) -> None:
    """The same words through both readers: the rule sees an --env (no door), the InfiniBand reader its value;
    a volume added to the group is a door for the rule and no setting for the reader."""
    assert BY_ID["run-docker-args-confined"].evaluate(_run_with(args), {}, TODAY) == []
    grouped = args.replace("-ite", "-itv /:/host -e") if args.startswith("-ite") else f"-v /:/host {args}"
    (door,) = BY_ID["run-docker-args-confined"].evaluate(_run_with(grouped), {}, TODAY)
    assert door.startswith("-v /:/host")
    assert docker_env(grouped) == ([Setting("NCCL_IB_DISABLE", "1", "docker_args")], [])
