"""A declared run resolved against its stack: the Azure ML job it becomes, and the facts policies judge.

References become what Azure ML expects: ``compute: gpu-a100`` -> ``azureml:gpu-a100``; a stack
environment's name -> its asset id (``azureml:<name>:<version>`` or its registry reference); any
other ``azureml:`` reference stays as written. ``code`` stays relative to the project root, POSIX
style (:mod:`jobs.render` rewrites it for the folder a job file is written to).

Defaults where Azure ML's are wrong for GPU training (each is visible in the resolved spec):

* ``distribution.process_count_per_instance`` left out (Azure ML: 1) -> the node's GPUs when Azure ML
  starts one process per GPU (a per-process PyTorch launch, Hugging Face Trainer, Horovod or other
  MPI ranks); 1 under a per-node launcher (torchrun, torch.distributed.launch, Lightning,
  accelerate, the deepspeed CLI), which starts the GPU processes itself.
* ``distribution.worker_count`` left out (TensorFlow) -> ``resources.instance_count``, Azure ML's
  own default, written out so the spec says what runs.
* ``resources.shm_size`` left out (Azure ML: 2g) -> :func:`default_shm_size`.

``limits.timeout`` gets no default: a run without one runs until cancelled, which the policy pack
reports rather than this module hiding it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from analysis import code_scan, interconnect, pyscan
from analysis.dockerfile import MAX_BYTES as DOCKERFILE_MAX_BYTES
from azurefacts import capabilities, cuda
from jobs.launchers import PER_NODE_LAUNCHERS, code_reader, infer_launcher, read_command
from kernel.paths import resolve_inside
from stack.config import StackConfig
from stack.infrastructure import Cluster, Environment, environment_evidence, image_pinned, reference_version
from stack.inputs import Folded
from stack.resolved import CODE_TEXTS_BYTES, CODE_TEXTS_FILES, ClusterFacts, EnvironmentFacts, ResolvedRun
from stack.runs import DataInput, InlineEnvironment, Run

SHM_GIB_PER_GPU = 4
"""/dev/shm per GPU on the node. PyTorch DataLoader workers hand batches to the training process
through shared memory: 8 workers x prefetch_factor 2 x an ImageNet-size batch (~150 MB) is ~2.4 GB per
process. Azure ML's 2g default is shared by all processes of a node, so an 8-GPU node starved."""


def default_shm_size(cluster: Cluster) -> str:
    """``4g`` per GPU on the node (32g on 8-GPU sizes), at most half the node's RAM (tmpfs's own cap).

    /dev/shm is a tmpfs: the size is a limit, memory is used only as DataLoaders fill it.
    """
    sku = cluster.sku
    return f"{min(SHM_GIB_PER_GPU * sku.gpus, sku.ram_gib // 2)}g"


def _code_path(code: str | None) -> str | None:
    if code is None:
        return None
    return PurePosixPath(code.replace("\\", "/")).as_posix()  # "./src/" -> "src", "" -> "."


def _distribution(run: Run, launcher: str, cluster: Cluster) -> dict[str, Any]:
    dist = run.distribution
    if dist.type == "tensorflow":
        return {
            "type": "tensorflow",
            "worker_count": dist.worker_count or run.resources.instance_count,
            "parameter_server_count": dist.parameter_server_count,
        }
    per_node = 1 if launcher in PER_NODE_LAUNCHERS else cluster.sku.gpus
    return {"type": dist.type, "process_count_per_instance": dist.process_count_per_instance or per_node}


def _input(value: Any) -> Any:
    if isinstance(value, DataInput):
        return value.model_dump(exclude_none=True)
    return value


def _spec(run: Run, config: StackConfig, launcher: str, environment_id: str | dict[str, Any]) -> dict[str, Any]:
    cluster = config.cluster(run.compute)
    resources: dict[str, Any] = {
        "instance_count": run.resources.instance_count,
        "shm_size": run.resources.shm_size or default_shm_size(cluster),
        "docker_args": run.resources.docker_args,
    }
    services = {
        name: service.model_dump(exclude_none=True, exclude_defaults=True)
        for name, service in run.services.items()
    }
    identity = None
    if run.identity is not None:
        # azure-ai-ml reads "managed" and writes "managed_identity": the spec says what the file says.
        kind = "managed_identity" if run.identity.type == "managed" else run.identity.type
        identity = run.identity.model_dump(exclude_none=True) | {"type": kind}
    spec: dict[str, Any] = {
        "type": "command",
        "name": run.name,
        "display_name": run.display_name,
        "experiment_name": run.experiment_name,
        "description": run.description,
        "tags": dict(run.tags),
        "properties": dict(run.properties),
        "code": _code_path(run.code),
        "command": run.command,
        "environment": environment_id,
        "compute": f"azureml:{cluster.name}",
        "inputs": {name: _input(value) for name, value in run.inputs.items()},
        "outputs": {name: out.model_dump(exclude_none=True) for name, out in run.outputs.items()},
        "environment_variables": dict(run.environment_variables),
        "resources": resources,
        "distribution": _distribution(run, launcher, cluster),
        "limits": {"timeout": run.limits.timeout},
        "identity": identity,
        "services": services,
        "queue_settings": run.queue_settings.model_dump(exclude_none=True) if run.queue_settings else None,
    }
    tidy: dict[str, Any] = _tidy(spec)
    return tidy


def _tidy(value: Any) -> Any:
    """Sorted keys, no None values, no empty mappings: the spec states only what is set."""
    if isinstance(value, dict):
        tidy = {k: _tidy(v) for k, v in sorted(value.items()) if v is not None}
        return {k: v for k, v in tidy.items() if v != {}}
    return value


def _bases(build_dir: Path, dockerfile: str) -> tuple[str, ...]:
    try:
        text = (build_dir / dockerfile).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ()
    return capabilities.read_dockerfile(text).bases


def _baked_fabric(environment: Environment | InlineEnvironment, root: Path) -> interconnect.Baked:
    """What a build context's Dockerfile bakes into the image for the interconnect (see analysis.interconnect)."""
    if environment.build is None:
        return interconnect.Baked()
    context = resolve_inside(root, environment.build.path)
    dockerfile = resolve_inside(context, environment.build.dockerfile_path) if context else None
    if dockerfile is None:
        return interconnect.Baked()  # the config check refuses paths leading outside the project
    try:
        with dockerfile.open("rb") as handle:  # analysis.dockerfile reads at most 1 MiB; one byte more says "too large"
            text = handle.read(DOCKERFILE_MAX_BYTES + 1).decode("utf-8", errors="replace")
    except OSError:
        return interconnect.Baked()  # the config check reports a missing Dockerfile; nothing baked is known
    return interconnect.baked(text, context)


def _cuda(named: str | None, bases: tuple[str, ...], *, as_is: bool) -> dict[str, Any]:
    """The CUDA an environment's image (or, for a build, its ``FROM`` image) names. Certain only for an
    image used as it is (``as_is``: no conda file on top) whose publisher's naming states its CUDA."""
    for what, reference, usable in ((f"image {named}", named, as_is), *((f"build FROM {b}", b, False) for b in bases)):
        found = cuda.image_cuda(reference) if reference else None
        if found is not None:
            return {"cuda": cuda.show(found.version), "cuda_from": what, "cuda_certain": found.certain and usable,
                    "cuda_at_most": found.at_most}
    return {}


def _facts(
    *, id: str, name: str | None, source: str, caps: capabilities.Capabilities, image: str | None,
    bases: tuple[str, ...] = (), pinned: bool, baked: interconnect.Baked | None = None, conda_file: bool = False,
) -> EnvironmentFacts:
    baked = baked or interconnect.Baked()
    named = image or (None if source in ("build", "inline") else id)
    return EnvironmentFacts(
        id=id, name=name, source=source, capabilities=tuple(sorted(caps.present)), pinned=pinned, image=image,
        absent=tuple(sorted(caps.absent)), bases=bases,
        fabric_settings=tuple((s.name, s.value, s.where, s.resolved) for s in baked.settings),
        fabric_files=tuple((f.path, f.content or "", f.how, f.content is not None) for f in baked.files),
        fabric_unknowns=baked.unknowns,
        **_cuda(named, bases, as_is=image is not None and not conda_file),
    )


def inline_environment(env: InlineEnvironment) -> dict[str, Any]:
    """An inline environment as the spec carries it: paths relative to the project root, no ``provides``."""
    dumped: dict[str, Any] = _tidy(env.model_dump(exclude={"provides"}, exclude_none=True, exclude_unset=True))
    return dumped


@dataclass(frozen=True)
class Content:
    """What an environment's files say: its Dockerfile's ``FROM`` images, the capabilities of the image (the
    Dockerfile, the conda file, ``provides``) and what the build bakes in for the interconnect."""

    bases: tuple[str, ...]
    caps: capabilities.Capabilities
    baked: interconnect.Baked


Contents = dict[tuple[object, ...], Content]
"""An environment's parts -> :class:`Content`: what its files say, read once per plan by the callers that
resolve a stack's runs."""


def _content(env: Environment | InlineEnvironment, root: Path, contents: Contents | None) -> Content:
    """``env``'s files read, or what ``contents`` holds from an environment of the same parts: a Dockerfile is
    evaluated once per plan, whatever number of runs use it (a hostile one takes seconds)."""
    reference = env.reference if isinstance(env, Environment) else None
    build = env.build
    key = (env.image, reference, build.path if build else None, build.dockerfile_path if build else None,
           env.conda_file, tuple(env.provides) if env.provides is not None else None)
    if contents is not None and key in contents:
        return contents[key]
    content = Content(
        bases=_bases(root / build.path, build.dockerfile_path) if build else (),
        caps=environment_evidence(image=env.image, reference=reference, build=build, conda_file=env.conda_file,
                                  provides=env.provides, root=root),
        baked=_baked_fabric(env, root),
    )
    if contents is not None:
        contents[key] = content
    return content


def _environment(run: Run, config: StackConfig, root: Path,
                 contents: Contents | None = None) -> tuple[str | dict[str, Any], EnvironmentFacts]:
    env = run.environment
    if isinstance(env, InlineEnvironment):
        content = _content(env, root, contents)
        bases = content.bases
        pinned = image_pinned(env.image) if env.image else all(image_pinned(b) for b in bases)
        label = env.image or f"build {env.build.path if env.build else ''}"
        return inline_environment(env), _facts(id=f"inline ({label})", name=None, source="inline",
                                               caps=content.caps, image=env.image, bases=bases, pinned=pinned,
                                               baked=content.baked, conda_file=env.conda_file is not None)
    declared: Environment | None = config.environment(env) or next(
        (e for e in config.environments if e.asset_id == env), None
    )
    if declared is not None:
        source = "image" if declared.image else "build" if declared.build else "reference"
        content = _content(declared, root, contents)
        bases = content.bases
        pinned = declared.is_pinned and all(image_pinned(b) for b in bases)
        return declared.asset_id, _facts(id=declared.asset_id, name=declared.name, source=source,
                                         caps=content.caps, image=declared.image, bases=bases,
                                         pinned=pinned, baked=content.baked,
                                         conda_file=declared.conda_file is not None)
    return env, _facts(id=env, name=None, source="external", caps=capabilities.of_reference(env), image=None,
                       pinned=reference_version(env) is not None)


def _cluster_facts(cluster: Cluster) -> ClusterFacts:
    sku = cluster.sku
    return ClusterFacts(
        name=cluster.name,
        size=sku.size,
        gpus=sku.gpus,
        gpu_vendor=sku.vendor,
        rdma=sku.rdma,
        sriov=sku.sriov,
        infiniband=sku.infiniband,
        min_instances=cluster.min_instances,
        max_instances=cluster.max_instances,
        tier=cluster.tier,
        gpu_model=sku.gpu_model,
    )


@dataclass(frozen=True)
class FolderFacts:
    """What is read once per code folder, whatever runs use it."""

    code_findings: tuple[str, ...] = ()
    code_unscanned: tuple[str, ...] = ()
    """What the credential scan's budget left unread (:class:`analysis.secret_scan.FolderScan`)."""
    legacy_variables: tuple[str, ...] = ()
    readings: dict[str, pyscan.Reading] = field(default_factory=dict, compare=False)
    """Each Python script of the folder some run starts, read once (:func:`pyscan.process_group_use`): runs
    of a stack share scripts (every fabric check starts the same one)."""


def folder_facts(root: Path, folder: str | None) -> FolderFacts:
    """The scans of a code folder (credentials, ``AZ_BATCHAI_*`` reads); nothing for a run without one."""
    if folder is None:
        return FolderFacts()
    path = root / folder
    scan = code_scan.scan(path)
    return FolderFacts(scan.findings, scan.unscanned, pyscan.legacy_variable_reads(path))


Scans = dict[str | None, FolderFacts]
"""Code folder -> its :class:`FolderFacts`, shared by the callers that resolve a stack's runs."""


def scanned(scans: Scans, root: Path, code: str | None) -> FolderFacts:
    """The facts of the code folder ``code``, read once per folder into ``scans``."""
    folder = _code_path(code)
    if folder not in scans:
        scans[folder] = folder_facts(root, folder)
    return scans[folder]


def _script_facts(root: Path, folder: str | None, scripts: list[tuple[str, str]],
                  readings: dict[str, pyscan.Reading]) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(frameworks the Python scripts use, scripts read completely that join no process group, scripts read
    completely that open no GPU); ``readings``: the folder's scripts read so far, filled in here."""
    if folder is None:
        return (), (), ()
    frameworks: set[str] = set()
    alone: list[str] = []
    no_gpu: list[str] = []
    for kind, script in scripts:
        if kind != "python":
            continue
        if script not in readings:
            readings[script] = pyscan.process_group_use(root / folder, script)
        reading = readings[script]
        frameworks |= reading.frameworks
        if reading.opaque is None and not reading.frameworks and script not in alone:
            alone.append(script)
        if reading.opaque is None and not reading.opens_gpu and script not in no_gpu:
            no_gpu.append(script)
    return tuple(sorted(frameworks)), tuple(alone), tuple(no_gpu)


def resolve_run(
    run: Run, config: StackConfig, root: Path, *, code_findings: tuple[str, ...] | None = None,
    facts: FolderFacts | None = None, contents: Contents | None = None, given: tuple[Folded, ...] = (),
) -> ResolvedRun:
    """``run`` as the Azure ML job it becomes in ``config``'s workspace (references already validated
    by :class:`stack.config.StackConfig`), with the facts the policy pack judges it by.

    ``facts``: the scans of the run's code folder when the caller already has them (None: scan it);
    ``code_findings`` alone overrides the credential scan. ``contents``: environments' files read so far in
    this plan (filled in here; None: read them). ``given``: what the run's pipeline or sweep gives its
    placeholders (:mod:`stack.inputs`), carried for the policy pack and used in reading the command.
    """
    cluster = config.cluster(run.compute)
    folder = _code_path(run.code)
    code = root / folder if folder is not None else None
    reading = read_command(run.command, run=run, code=code, gpus_per_node=cluster.sku.gpus, given=given)
    launcher, nproc = infer_launcher(run, gpus_per_node=cluster.sku.gpus, reading=reading)
    launcher_script = reading.launcher_script if launcher in PER_NODE_LAUNCHERS else None
    missing: list[str] = []
    present: list[tuple[str, str]] = []
    for ref in reading.scripts:
        if code is None:
            break
        if ref.cwd != "." and not (code / ref.cwd).is_dir():
            continue  # `cd` into a folder made at run time (git clone ... && cd repo): unknown, not missing
        if (code / ref.path).is_file():
            present.append((ref.kind, ref.path))
        elif ref.path not in missing:
            missing.append(ref.path)
    environment_id, environment = _environment(run, config, root, contents)
    if environment.cuda_certain and reading.installs_packages():
        environment = replace(environment, cuda_certain=False)  # what it installs may bring its own CUDA
    spec = _spec(run, config, launcher, environment_id)
    if facts is None:
        facts = folder_facts(root, folder)
    if code_findings is not None:
        facts = replace(facts, code_findings=code_findings)
    frameworks, alone, no_gpu = _script_facts(root, folder, present, facts.readings)
    cluster_facts = _cluster_facts(cluster)
    return ResolvedRun(
        name=run.name,
        spec=spec,
        launcher=launcher,
        launcher_nproc_per_node=nproc,
        cluster=cluster_facts,
        environment=environment,
        code_findings=facts.code_findings,
        code_unscanned=facts.code_unscanned,
        defaults=project_defaults(run, spec),
        missing_scripts=tuple(missing),
        launcher_script=launcher_script,
        legacy_variables=(*reading.variables_read(pyscan.LEGACY_PREFIX), *facts.legacy_variables),
        script_frameworks=frameworks,
        scripts_without_process_group=alone,
        scripts_without_gpu=no_gpu,
        launches=reading.launches,
        launch_unknowns=reading.unknown,
        code_texts=fabric_texts(spec, cluster_facts, environment, code),
        given_values=given,
    )


def fabric_texts(spec: dict[str, Any], cluster: ClusterFacts, environment: EnvironmentFacts,
                 code: Path | None) -> tuple[tuple[str, str], ...]:
    """The code folder's files the interconnect reading of a multi-node InfiniBand run reads (the rule
    ``run-infiniband-disabled`` judges no other run): read once here, through the launchers' reader (inside
    the folder only, bounded), at most :data:`~stack.resolved.CODE_TEXTS_FILES` files and
    :data:`~stack.resolved.CODE_TEXTS_BYTES` in all; a file past them is not read, as if absent."""
    read = code_reader(code)
    if read is None or int((spec.get("resources") or {}).get("instance_count", 1)) <= 1 or not cluster.infiniband:
        return ()
    texts: dict[str, str | None] = {}

    def record(path: str) -> str | None:
        if path not in texts:
            total = sum(len(t) for t in texts.values() if t is not None)
            found = read(path) if len(texts) < CODE_TEXTS_FILES else None
            texts[path] = found if found is not None and total + len(found) <= CODE_TEXTS_BYTES else None
        return texts[path]

    interconnect.assess(str(spec.get("command") or ""), variables=dict(spec.get("environment_variables") or {}),
                        docker_args=(spec.get("resources") or {}).get("docker_args"), image=environment.baked(),
                        adapters=max(1, cluster.gpus), read_file=record)
    return tuple(sorted((p, t) for p, t in texts.items() if t is not None))


def project_defaults(run: Run, spec: dict[str, Any]) -> tuple[str, ...]:
    """What the spec holds that the run did not write (the plan output lists them per run)."""
    out = []
    if run.resources.shm_size is None:
        out.append(f"resources.shm_size: {spec['resources']['shm_size']} (Azure ML's own default is 2g)")
    dist = run.distribution
    if dist.type in ("pytorch", "mpi") and dist.process_count_per_instance is None:
        out.append(f"distribution.process_count_per_instance: {spec['distribution']['process_count_per_instance']}"
                   " (Azure ML's own default is 1)")
    if dist.type == "tensorflow" and dist.worker_count is None:
        out.append(f"distribution.worker_count: {spec['distribution']['worker_count']} (resources.instance_count)")
    out += [f"inputs.{name}: {str(value).lower()} is sent as {int(value)} (Azure ML's encoding of booleans)"
            for name, value in run.inputs.items() if isinstance(value, bool)]
    return tuple(out)


def resolve_all(
    config: StackConfig, root: Path, *, scans: Scans | None = None
) -> list[ResolvedRun]:
    """Every run the stack declares, resolved, sorted by name (a pipeline's steps and a sweep's trial:
    :mod:`jobs.pipelines`). ``scans``: code folder scans to share with other callers (filled in here)."""
    # Runs mostly share a few code folders and environments: scan each folder once, read each environment's
    # files once, not once per run (a 1000-run stack read the same files 1000 times).
    scans = scans if scans is not None else {}
    contents: Contents = {}  # per call: what a file says is never kept from one plan to the next
    resolved = []
    for run in sorted(config.runs, key=lambda r: r.name):
        resolved.append(resolve_run(run, config, root, facts=scanned(scans, root, run.code), contents=contents))
    return resolved
