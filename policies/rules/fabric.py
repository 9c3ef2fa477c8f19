"""InfiniBand rules: multi-node runs that a setting quietly moves from InfiniBand to TCP.

The run still works, several times slower, and nothing says why. What each spelling does is NCCL's,
Open MPI's and UCX's own rule (:mod:`analysis.interconnect`, sources in docs/infiniband.md). The settings are
what each process the command starts will see: the image's ``ENV`` and configuration files, the run's
``environment_variables``, ``docker_args -e``, and the command evaluated as bash would
(:mod:`analysis.shell`), with NCCL's and Open MPI's configuration files read by their own precedence.
"""

from __future__ import annotations

from analysis.interconnect import Baked, Effect, assess
from policies.rule import run_rule
from stack.resolved import ResolvedRun

NCCL_ENV = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"


def image_of(run: ResolvedRun) -> Baked:
    """What the run's image bakes in, as the resolved run carries it."""
    return run.environment.baked()


def _effects(run: ResolvedRun, *wanted: Effect) -> list[str]:
    if run.instance_count <= 1 or not run.cluster.infiniband:
        return []
    spec = run.spec
    findings = assess(str(spec.get("command") or ""), variables=dict(spec.get("environment_variables") or {}),
                      docker_args=(spec.get("resources") or {}).get("docker_args"), image=image_of(run),
                      adapters=max(1, run.cluster.gpus), read_file=dict(run.code_texts).get)
    return [f"{f.message} on {run.cluster.size}" for f in findings if f.effect in wanted]


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
