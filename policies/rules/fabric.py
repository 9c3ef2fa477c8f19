"""InfiniBand rules: multi-node runs that a setting quietly moves from InfiniBand to TCP.

The run still works, several times slower, and nothing says why. What each spelling does is NCCL's,
Open MPI's and UCX's own rule (:mod:`analysis.interconnect`, sources in docs/infiniband.md). The settings are
what each process the command starts will see: the image's ``ENV`` and configuration files, the run's
``environment_variables``, ``docker_args -e``, and the command evaluated as bash would
(:mod:`analysis.shell`), with NCCL's and Open MPI's configuration files read by their own precedence.
"""

from __future__ import annotations

import functools
from typing import Any

from analysis.interconnect import Baked, ConfigFile, Effect, Finding, Setting, assess
from policies.rule import run_rule
from stack.resolved import ResolvedRun

NCCL_ENV = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"


def image_of(run: ResolvedRun) -> Baked:
    """What the run's image bakes in, as the resolved run carries it."""
    env = run.environment
    return Baked(
        settings=tuple(Setting(str(n), str(v), str(w), bool(r)) for n, v, w, r in env.fabric_settings),
        files=tuple(ConfigFile(str(p), str(c) if known else None, str(h)) for p, c, h, known in env.fabric_files),
        unknowns=tuple(env.fabric_unknowns),
    )


def _effects(run: ResolvedRun, *wanted: Effect) -> list[str]:
    if run.instance_count <= 1 or not run.cluster.infiniband:
        return []
    spec = run.spec
    command = str(spec.get("command") or "")
    variables = dict(spec.get("environment_variables") or {})
    docker_args = (spec.get("resources") or {}).get("docker_args")
    image, adapters = image_of(run), max(1, run.cluster.gpus)
    try:
        key = (command, tuple(sorted(variables.items())), docker_args, image, adapters)
        hash(key)
    except TypeError:  # a value that is not plain data: judged on its own
        key = None
    if key is None or len(command) > _CACHED_COMMAND:
        findings: tuple[Finding, ...] = tuple(assess(command, variables=variables, docker_args=docker_args,
                                                     image=image, adapters=adapters))
    else:
        findings = _assessed(*key)
    return [f"{f.message} on {run.cluster.size}" for f in findings if f.effect in wanted]


_CACHED_COMMAND = 1 << 12
"""Longer commands are assessed each time (a cached one is held until the process ends)."""


@functools.lru_cache(maxsize=1024)
def _assessed(command: str, variables: tuple[tuple[str, Any], ...], docker_args: Any, image: Baked,
              adapters: int) -> tuple[Finding, ...]:
    """:func:`~analysis.interconnect.assess`, once per distinct input: both rules below read its findings, and
    the runs of a large stack share commands, variables and images. ``assess`` depends on its arguments alone
    (the variables in name order)."""
    return tuple(assess(command, variables=dict(variables), docker_args=docker_args, image=image, adapters=adapters))


@run_rule(
    id="run-infiniband-disabled",
    title="Multi-node runs on InfiniBand do not switch it off",
    severity="high",
    enforcement="mandatory",
    rationale="NCCL_IB_DISABLE with any non-zero value (NCCL reads it with strtoll(value, NULL, 0): '0x1' and "
    "'2' count), NCCL_NET=Socket, an NCCL_IB_HCA that excludes or misses every mlx5 adapter, "
    "OMPI_MCA_pml=ob1, a UCX_TLS without rc/dc or a UCX_NET_DEVICES without an mlx5 device make NCCL or MPI use "
    "TCP on an InfiniBand cluster: the run works, several times slower, and nothing says why (a curated image "
    "once shipped NCCL_IB_DISABLE=1). Set in environment_variables, docker_args -e, the command (evaluated as bash "
    "would: export, env, eval, bash -c...), mpirun -x/--mca, or baked into a built image (ENV, /etc/nccl.conf, "
    "~/.nccl.conf, NCCL_CONF_FILE, Open MPI's mca-params.conf files).",
    remediation="Remove the setting (from environment_variables, the command, the Dockerfile); to tune NCCL use "
    "NCCL_IB_PCI_RELAXED_ORDERING=1 and NCCL_TOPO_FILE instead.",
    reference=NCCL_ENV,
    config_key=("environment_variables",),
)
def run_infiniband_disabled(run: ResolvedRun) -> list[str]:
    return _effects(run, "off")


@run_rule(
    id="run-infiniband-setting-unclear",
    title="InfiniBand settings of multi-node runs mean what they seem to",
    severity="low",
    enforcement="advisory",
    rationale="NCCL_IB_DISABLE='true' or 'yes' looks like it disables InfiniBand but NCCL reads it as 0: the "
    "author meant something the run will not do. A value that comes through $VAR, a command substitution or "
    "read, a setting made on some of the command's paths only, what eval, source, a script piped into a shell or "
    "docker_args --env-file do, or an OMPI_MCA_btl that matters only if Open MPI lacks UCX, cannot be judged "
    "before the run: the finding names the construct and its line.",
    remediation="Write the value NCCL reads (0 or 1, or remove the variable); replace the named construct by the "
    "values it sets, or check the run's NCCL_DEBUG=INFO log for 'NET/IB' after it starts.",
    reference=NCCL_ENV,
    config_key=("environment_variables",),
)
def run_infiniband_setting_unclear(run: ResolvedRun) -> list[str]:
    return _effects(run, "no effect", "cannot tell")
