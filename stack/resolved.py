"""A run resolved against its stack: the Azure ML job spec plus the facts policies judge it by.

This is the contract between the job module (which builds it), the Pulumi program (which carries it
as the props of a ``DistributedRun`` component, so CrossGuard sees it at preview) and the policy
pack (which reads it back with :meth:`ResolvedRun.from_props`). Props round-trip through the engine,
which turns integers into floats: :meth:`from_props` restores them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from analysis.interconnect import Baked, ConfigFile, Setting
from analysis.topology import Launch
from stack.inputs import Folded, of_inputs

RUN_TYPE = "aml-gpu-training:jobs:DistributedRun"
"""The Pulumi type token of the component that carries a resolved run."""


@dataclass(frozen=True)
class ClusterFacts:
    name: str
    size: str
    gpus: int
    gpu_vendor: str
    rdma: bool
    sriov: bool
    infiniband: bool
    min_instances: int
    max_instances: int
    tier: str
    gpu_model: str = ""
    """The catalogue's GPU model (``A100``, ``H100 SXM``): its CUDA architecture is in :mod:`azurefacts.cuda`."""


@dataclass(frozen=True)
class EnvironmentFacts:
    id: str
    """How the job names it: ``azureml:<name>:<version>`` or a registry reference."""
    name: str | None
    """The stack environment's name; None for an external reference."""
    source: str
    """``image``, ``build``, ``reference`` (a stack registry environment) or ``external``."""
    capabilities: tuple[str, ...]
    """Capabilities known to be present (evidence table, build context, declared ``provides``)."""
    pinned: bool
    image: str | None = None
    absent: tuple[str, ...] = ()
    """Capabilities known to be absent; anything in neither list is unknown (see :mod:`azurefacts.capabilities`)."""
    bases: tuple[str, ...] = ()
    """A build context's ``FROM`` images."""

    def state(self, capability: str) -> str:
        """``present``, ``absent`` or ``unknown``."""
        if capability in self.capabilities:
            return "present"
        return "absent" if capability in self.absent else "unknown"

    def baked(self) -> Baked:
        """What the image bakes in for the interconnect, as these facts carry it
        (:func:`analysis.interconnect.baked`)."""
        return Baked(
            settings=tuple(Setting(str(n), str(v), str(w), bool(r)) for n, v, w, r in self.fabric_settings),
            files=tuple(ConfigFile(str(p), str(c) if known else None, str(h)) for p, c, h, known in self.fabric_files),
            unknowns=tuple(self.fabric_unknowns),
        )
    fabric_settings: tuple[tuple[str, str, str, bool], ...] = ()
    """Interconnect variables the image bakes in (a build context's Dockerfile ``ENV``): (name, value,
    where, resolved), see :mod:`analysis.interconnect`."""
    fabric_files: tuple[tuple[str, str, str, bool], ...] = ()
    """NCCL and Open MPI configuration files the image holds (written by ``RUN``, copied from the build
    context): (path, content, how, content known), see :mod:`analysis.interconnect`."""
    fabric_unknowns: tuple[str, ...] = ()
    """Build steps that may write those files but cannot be followed (``eval`` of an unknown string...)."""
    cuda: str | None = None
    """The CUDA release the image's name states (``11.8``, or ``11`` when only the major is named), see
    :func:`azurefacts.cuda.image_cuda`; None when no name says."""
    cuda_from: str = ""
    """Where :attr:`cuda` was read (``image nvidia/cuda:10.2-...``, ``environment name ...``)."""
    cuda_at_most: bool = False
    """:attr:`cuda` is an upper bound (the newest CUDA of the PyTorch release the name says)."""
    cuda_certain: bool = False
    """The image runs as named (no conda file or build on top, the command installs nothing) and its
    publisher's naming states its CUDA: a verdict from :attr:`cuda` is a fact, not a hint."""


@dataclass(frozen=True)
class ResolvedRun:
    name: str
    spec: dict[str, Any]
    """The Azure ML CLI v2 command job, exactly as exported and written to ``jobs/<name>.yml``."""
    launcher: str
    """How processes start: see :mod:`jobs.launchers` for the vocabulary."""
    launcher_nproc_per_node: int | None
    """``--nproc_per_node`` / ``--num_gpus`` / ``--num_processes`` given to a per-node launcher."""
    cluster: ClusterFacts
    environment: EnvironmentFacts
    code_findings: tuple[str, ...] = field(default=())
    """Relative paths in the code folder that hold private keys or tokens (never their content)."""
    code_unscanned: tuple[str, ...] = field(default=())
    """Relative paths in the code folder the secret scan did not read to the end (past its byte budget)."""
    defaults: tuple[str, ...] = field(default=())
    """Values the project added that the run did not write (for the plan output)."""
    missing_scripts: tuple[str, ...] = field(default=())
    """Scripts the command runs that are not in the code folder (e.g. a git submodule not checked out)."""
    launcher_script: str | None = None
    """The code folder's shell script that starts :attr:`launcher`, when the command does not show it."""
    part_of: str | None = None
    """The pipeline this run is a step of, or the sweep it is the trial of (its name is then
    ``<job>/<step>``); None for a run of its own (see :mod:`jobs.pipelines`)."""
    legacy_variables: tuple[str, ...] = field(default=())
    """``path:line NAME`` where the code folder reads ``AZ_BATCHAI_*`` variables (:mod:`analysis.pyscan`)."""
    script_frameworks: tuple[str, ...] = field(default=())
    """Distributed frameworks the command's Python scripts (and the code-folder modules they import) use."""
    scripts_without_process_group: tuple[str, ...] = field(default=())
    """Python scripts the command starts that were read completely and join no process group."""
    scripts_without_gpu: tuple[str, ...] = field(default=())
    """Python scripts the command starts that were read completely and import nothing that opens a GPU
    (:data:`analysis.pyscan.GPU_MODULES`)."""
    launches: tuple[Launch, ...] = field(default=())
    """Every launcher the command (or a shell script of its code folder) starts, read by :mod:`analysis.topology`."""
    launch_unknowns: tuple[str, ...] = field(default=())
    """What in the command could not be followed and may start processes (``eval``, ``source``, a script
    outside the code folder)."""
    code_texts: tuple[tuple[str, str], ...] = field(default=())
    """The code folder's files the interconnect reading of a multi-node InfiniBand run reads, (path relative to
    the folder, text): scripts it runs or sources, ``BASH_ENV``, NCCL and Open MPI configuration files,
    ``.deepspeed_env`` (:func:`analysis.interconnect.assess`); bounded by :data:`CODE_TEXTS_BYTES`. Carried
    so that the policy pack, which reads no file, sees what the plan read. Left out of the props when empty."""
    given_values: tuple[Folded, ...] = field(default=())
    """What the run's pipeline or sweep gives its placeholders and its spec does not show: a step input bound to
    a literal pipeline input, a sweep's ``choice`` values (:mod:`stack.inputs`). Its own literal inputs are in
    ``spec["inputs"]``."""

    def placeholder_values(self) -> list[Folded]:
        """Every placeholder value the stack file states for this run: its literal inputs, then what its
        pipeline or sweep gives (:mod:`stack.inputs`)."""
        whose = "the run's" if self.part_of is None else "the sweep's" if self.name.endswith("/trial") \
            else "the step's"
        return [*of_inputs(self.spec.get("inputs") or {}, whose), *self.given_values]

    @property
    def instance_count(self) -> int:
        return int(self.spec.get("resources", {}).get("instance_count", 1))

    @property
    def distribution(self) -> dict[str, Any]:
        return dict(self.spec["distribution"])

    @property
    def processes_per_node(self) -> int:
        """Processes Azure ML itself starts on each node."""
        dist = self.distribution
        if dist["type"] == "tensorflow":
            return 1
        return int(dist.get("process_count_per_instance") or 1)

    def to_props(self) -> dict[str, Any]:
        props = asdict(self)
        for key in ("capabilities", "absent", "bases"):
            props["environment"][key] = list(getattr(self.environment, key))
        for key in _STRING_TUPLES:
            props[key] = list(getattr(self, key))
        for key in ("fabric_settings", "fabric_files"):
            props["environment"][key] = [list(s) for s in getattr(self.environment, key)]
        props["environment"]["fabric_unknowns"] = list(self.environment.fabric_unknowns)
        props["launches"] = [launch.to_props() for launch in self.launches]
        if self.code_texts:
            props["code_texts"] = [list(t) for t in self.code_texts]
        else:
            del props["code_texts"]
        props.pop("given_values")
        if self.given_values:  # only where a pipeline or sweep gives values: every other run's props as before
            props["given_values"] = [f.to_props() for f in self.given_values]
        return props

    @classmethod
    def from_props(cls, props: dict[str, Any]) -> ResolvedRun:
        cluster: dict[str, Any] = {k: (int(v) if isinstance(v, float) else v) for k, v in props["cluster"].items()}
        # The engine drops None-valued props: restore the optional facts it left out.
        env = {"name": None, "image": None, **props["environment"]}
        for key in ("capabilities", "absent", "bases"):
            env[key] = tuple(env.get(key) or ())
        for key in ("fabric_settings", "fabric_files"):
            env[key] = tuple(tuple(s) for s in env.get(key) or ())
        env["fabric_unknowns"] = tuple(env.get("fabric_unknowns") or ())
        nproc = props.get("launcher_nproc_per_node")
        return cls(
            name=props["name"],
            spec=_restore_ints(props["spec"]),
            launcher=props["launcher"],
            launcher_nproc_per_node=None if nproc is None else int(nproc),
            cluster=ClusterFacts(**cluster),
            environment=EnvironmentFacts(**env),
            launcher_script=props.get("launcher_script"),
            part_of=props.get("part_of"),
            launches=tuple(Launch.from_props(launch) for launch in props.get("launches") or ()),
            code_texts=tuple((str(p), str(t)) for p, t in props.get("code_texts") or ()),
            given_values=tuple(Folded.from_props(f) for f in props.get("given_values") or ()),
            **{key: tuple(props.get(key) or ()) for key in _STRING_TUPLES},
        )


CODE_TEXTS_BYTES = 1 << 20
"""The most text :attr:`ResolvedRun.code_texts` carries for one run (1 MiB); a file past it is not read."""
CODE_TEXTS_FILES = 32
"""The most files :attr:`ResolvedRun.code_texts` carries for one run."""

_STRING_TUPLES = ("code_findings", "code_unscanned", "defaults", "missing_scripts", "legacy_variables",
                  "script_frameworks", "scripts_without_process_group", "scripts_without_gpu", "launch_unknowns")
"""Facts of a run that are tuples of strings (lists on the wire)."""


def _restore_ints(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _restore_ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_restore_ints(v) for v in value]
    return value
