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

from analysis.interconnect import Baked, Effect, Finding, assess
from policies.rule import run_rule
from stack import inputs
from stack.inputs import Folded
from stack.resolved import ResolvedRun

NCCL_ENV = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"


def image_of(run: ResolvedRun) -> Baked:
    """What the run's image bakes in, as the resolved run carries it."""
    return run.environment.baked()


def _effects(run: ResolvedRun, *wanted: Effect) -> list[str]:
    return [f"{f.message} on {run.cluster.size}" for f in findings(run) if f.effect in wanted]


def findings(run: ResolvedRun) -> list[Finding]:
    """What each process of a multi-node InfiniBand run sees, judged (:func:`analysis.interconnect.assess`), with
    the placeholders whose values the stack file states filled in as Azure ML fills them (:mod:`stack.inputs`):
    judged as if written. A sweep's ``choice`` is judged value by value: a value that disables InfiniBand in every
    trial is mandatory, in some trials only it is named ("cannot tell") with the values that leave it on."""
    if run.instance_count <= 1 or not run.cluster.infiniband:
        return []
    spec = run.spec
    command = str(spec.get("command") or "")
    image = image_of(run)

    variables = dict(spec.get("environment_variables") or {})
    docker_args = (spec.get("resources") or {}).get("docker_args")
    adapters = max(1, run.cluster.gpus)

    def judged(text: str) -> list[Finding]:
        try:
            key = (text, tuple(sorted(variables.items())), docker_args, image, adapters, run.code_texts)
            hash(key)
        except TypeError:  # a value that is not plain data: judged on its own
            key = None
        if key is None or len(text) > _CACHED_COMMAND:
            return assess(text, variables=variables, docker_args=docker_args, image=image, adapters=adapters,
                          read_file=dict(run.code_texts).get)
        return list(_assessed(*key))

    folded = inputs.known(command, run.placeholder_values())
    if not folded:
        return judged(command)
    unfolded = set(judged(command))
    results = [(combo, judged(inputs.fill(command, combo))) for combo in inputs.choices(folded)]
    every_off = all(any(f.effect == "off" for f in found) for _, found in results)
    leaving_on = [combo for combo, found in results if not any(f.effect == "off" for f in found)]
    out: list[Finding] = []
    for combo, found in results:
        for finding in found:
            if finding in unfolded:
                out.append(finding)
            elif all(finding in other for _, other in results):  # the same whatever a choice draws
                out.append(Finding(finding.effect, f"{finding.message} ({_read(combo, folded, common=True)})"))
            elif finding.effect == "off" and not every_off:
                out.append(Finding("cannot tell", f"{finding.message} ({_read(combo, folded)}): in the trials "
                                   f"that draw it only; with {_values(leaving_on, folded)} InfiniBand stays on"))
            elif finding.effect == "off":
                out.append(Finding("off", f"{finding.message} ({_read(combo, folded)}; every value of "
                                   f"{_names(combo, folded)} disables InfiniBand: every trial runs without it)"))
            else:
                out.append(Finding(finding.effect, f"{finding.message} ({_read(combo, folded)})"))
    return list(dict.fromkeys(out))


def _read(combo: dict[str, str], folded: dict[str, Folded], *, common: bool = False) -> str:
    """``${{inputs.ib}} read as '1', the run's input ib``: what was filled in, and where it is written."""
    parts = []
    for expression in sorted(combo):
        f = folded[expression]
        if common and len(f.values) > 1:
            parts.append(f"${{{{{expression}}}}} read as each of {', '.join(map(repr, f.values))}, {f.source}")
        else:
            parts.append(f"${{{{{expression}}}}} read as {combo[expression]!r}, {f.source}")
    return "; ".join(parts)


def _names(combo: dict[str, str], folded: dict[str, Folded]) -> str:
    return ", ".join(f"${{{{{e}}}}}" for e in sorted(combo) if len(folded[e].values) > 1) or "the values"


def _values(combos: list[dict[str, str]], folded: dict[str, Folded]) -> str:
    """The several-valued placeholders' values in ``combos``: ``${{search_space.ib}} '0'``."""
    shown = []
    for combo in combos:
        several = [f"${{{{{e}}}}} {v!r}" for e, v in sorted(combo.items()) if len(folded[e].values) > 1]
        shown.append(" and ".join(several))
    return " or ".join(dict.fromkeys(shown)) or "the other values"


_CACHED_COMMAND = 1 << 12
"""Longer commands are assessed each time (a cached one is held until the process ends)."""


@functools.lru_cache(maxsize=1024)
def _assessed(command: str, variables: tuple[tuple[str, Any], ...], docker_args: Any, image: Baked,
              adapters: int, code_texts: tuple[tuple[str, str], ...]) -> tuple[Finding, ...]:
    """:func:`~analysis.interconnect.assess`, once per distinct input: both rules below read its findings, and
    the runs of a large stack share commands, variables and images. ``assess`` depends on its arguments alone
    (the variables in name order) and the code-folder files it may read."""
    return tuple(assess(command, variables=dict(variables), docker_args=docker_args, image=image, adapters=adapters,
                        read_file=dict(code_texts).get))


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
    "~/.nccl.conf, NCCL_CONF_FILE, Open MPI's mca-params.conf files, a tar archive ADD unpacks, a BASH_ENV file). "
    "${{inputs.x}} whose value the stack file states (a literal input, a component default, a literal pipeline "
    "input bound to it) is judged as written; a sweep choice value by value, mandatory when every value disables it.",
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
    "docker_args --env-file do, an OMPI_MCA_btl that matters only if Open MPI lacks UCX, some values of a sweep "
    "choice, or an image a custom # syntax= frontend builds, cannot be judged before the run: the finding names "
    "the construct and its line.",
    remediation="Write the value NCCL reads (0 or 1, or remove the variable); replace the named construct by the "
    "values it sets, or check the run's NCCL_DEBUG=INFO log for 'NET/IB' after it starts.",
    reference=NCCL_ENV,
    config_key=("environment_variables",),
)
def run_infiniband_setting_unclear(run: ResolvedRun) -> list[str]:
    return _effects(run, "no effect", "cannot tell")
