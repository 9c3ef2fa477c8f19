"""InfiniBand rules: multi-node runs that a variable quietly moves from InfiniBand to TCP.

The run still works, several times slower, and nothing says why. What each spelling does is NCCL's,
Open MPI's and UCX's own rule (:mod:`model.fabric`, sources in docs/infiniband.md); the settings come
from the run's ``environment_variables``, its command, and the image its build context bakes
(Dockerfile ``ENV``, ``/etc/nccl.conf``). The highest-precedence setting of each variable counts: the
command's, then the run's variables, then the image's ``ENV``, then ``/etc/nccl.conf`` (NCCL does not
overwrite a variable the environment already has).
"""

from __future__ import annotations

from jobs.resolved import ResolvedRun
from model.fabric import Effect, Setting, from_command, from_environment, judge
from policies.rule import run_rule

NCCL_ENV = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"

_PRECEDENCE = ("the command", "environment_variables", "Dockerfile ENV")
"""Later wins; anything else (an /etc/nccl.conf) ranks below all of these."""


def _rank(setting: Setting) -> int:
    return _PRECEDENCE.index(setting.where) if setting.where in _PRECEDENCE else len(_PRECEDENCE)


def effective_settings(run: ResolvedRun) -> list[Setting]:
    """Each watched variable's setting that the run's processes see, by precedence."""
    found = [Setting(*s) for s in run.environment.fabric_settings]
    found += from_environment(dict(run.spec.get("environment_variables") or {}))
    found += from_command(str(run.spec.get("command", "")))
    best: dict[str, Setting] = {}
    for setting in found:  # in file order: a later assignment of the same rank wins, as in a shell
        current = best.get(setting.name)
        if current is None or _rank(setting) <= _rank(current):
            best[setting.name] = setting
    return [best[name] for name in sorted(best)]


def _effects(run: ResolvedRun, *wanted: Effect) -> list[str]:
    if run.instance_count <= 1 or not run.cluster.infiniband:
        return []
    out = []
    for setting in effective_settings(run):
        verdict = judge(setting)
        if verdict is not None and verdict[0] in wanted:
            out.append(f"{verdict[1]} on {run.cluster.size}")
    return out


@run_rule(
    id="run-infiniband-disabled",
    title="Multi-node runs on InfiniBand do not switch it off",
    severity="high",
    enforcement="mandatory",
    rationale="NCCL_IB_DISABLE with any non-zero value (NCCL reads it with strtoll(value, NULL, 0): '0x1' and "
    "'2' count), NCCL_NET=Socket, an NCCL_IB_HCA that excludes or misses every mlx5 adapter, "
    "OMPI_MCA_pml=ob1, or a UCX_TLS without rc/dc make NCCL or MPI use TCP on an InfiniBand cluster: the run "
    "works, several times slower, and nothing says why (a curated image once shipped NCCL_IB_DISABLE=1). Set in "
    "environment_variables, in the command or baked into a built image (ENV, /etc/nccl.conf).",
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
    "author meant something the run will not do. A value that comes through $VAR in the command or the "
    "Dockerfile, or an OMPI_MCA_btl that matters only if Open MPI lacks UCX, cannot be judged before the run.",
    remediation="Write the value NCCL reads (0 or 1, or remove the variable); replace $VAR indirection by the "
    "value, or check the run's NCCL_DEBUG=INFO log for 'NET/IB' after it starts.",
    reference=NCCL_ENV,
    config_key=("environment_variables",),
)
def run_infiniband_setting_unclear(run: ResolvedRun) -> list[str]:
    return _effects(run, "no effect", "cannot tell")
