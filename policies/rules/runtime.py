"""The job runtime a run meets on its nodes: the image's CUDA against the GPU, settings that swap Azure ML's
own runtime for another, and variables the current runtime no longer sets.

Each rule judges facts the run carries (:class:`~stack.resolved.ResolvedRun`): the CUDA its image names
(:mod:`azurefacts.cuda`), its ``environment_variables``, and what :mod:`analysis.pyscan` read in its code folder.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from azurefacts import cuda
from kernel import bounded
from policies.rule import Message, run_rule
from stack.resolved import ResolvedRun

CUDA_NOTES = "https://docs.nvidia.com/cuda/archive/11.8.0/cuda-toolkit-release-notes"
BOOTSTRAPPER_EVIDENCE = "https://github.com/jhirono/azureml-dlp"


def _cuda_verdict(run: ResolvedRun) -> str | None:
    """Why the image's CUDA cannot drive the cluster's GPU, or None (it can, or nothing says)."""
    env = run.environment
    arch = cuda.architecture(run.cluster.gpu_model)
    if env.cuda is None or arch is None:
        return None
    version = tuple(int(part) for part in env.cuda.split("."))
    if env.cuda_at_most:  # an upper bound: only "too old" can be told
        if version >= arch.minimum:
            return None
    elif cuda.supports(arch, version) is not False:
        return None
    gpu = f"{run.cluster.size} ({run.cluster.gpu_model}, {arch.name} {arch.sm})"
    if version < arch.minimum:
        said = (f"names a PyTorch release built for CUDA {env.cuda} at most" if env.cuda_at_most
                else f"is CUDA {env.cuda}")
        return (f"{env.cuda_from} {said}; {gpu} needs CUDA {cuda.show(arch.minimum)} or later: "
                "its libraries and framework builds carry no code for the GPU")
    assert arch.below is not None
    return (f"{env.cuda_from} is CUDA {env.cuda}; CUDA {cuda.show(arch.below)} dropped {arch.name} ({arch.sm}), "
            f"the GPU of {run.cluster.size}")


@run_rule(
    id="run-image-cuda-supports-gpu",
    title="The image's CUDA can drive the cluster's GPUs",
    severity="high",
    enforcement="mandatory",
    rationale="Each GPU architecture needs a CUDA release that knows it: Ampere (A100, sm_80) from CUDA 11.0, "
    "Hopper (H100, H200, sm_90) from 11.8, Blackwell (GB200, B300) from 12.8; CUDA 13.0 dropped Volta (V100). "
    "Code built with an older CUDA runs on a newer GPU only from PTX compiled at start-up (NVIDIA's "
    "compatibility guides); the libraries and framework builds of those CUDA releases carry kernels for the GPUs "
    "of their time (cuDNN's support matrix; PyTorch stops with '... with CUDA capability sm_90 is not compatible "
    "with the current PyTorch installation', kernels fail with 'no kernel image is available for execution on "
    "the device'), after every node has started. Judged "
    "only when it is certain: the image's publisher states its CUDA in its name (nvidia/cuda, Azure ML's "
    "openmpi*-cuda* bases, pytorch/pytorch) and the image runs as it is (no conda file on top, no build). "
    "The table and NVIDIA's release notes for each row: azurefacts/cuda-architectures.yaml.",
    remediation="Use an image built for a CUDA release that supports the GPU (e.g. an acpt-pytorch curated "
    "environment, or mcr.microsoft.com/azureml/openmpi5.0-cuda12.x bases), or a size whose GPU the image "
    "supports.",
    reference=CUDA_NOTES,
    config_key=("environment",),
)
def run_image_cuda_supports_gpu(run: ResolvedRun) -> list[str]:
    verdict = _cuda_verdict(run) if run.environment.cuda_certain else None
    return [verdict] if verdict else []


@run_rule(
    id="run-image-cuda-hint",
    title="An environment whose name points to a CUDA too old (or too new) for the cluster's GPUs",
    severity="medium",
    enforcement="advisory",
    rationale="A curated environment's or a team image's name often says its CUDA (cuda10.1, cu118), but names "
    "are not always the content (acpt-pytorch-2.2-cuda12.1 has shipped CUDA 11.8 and 12.6 under that name), "
    "and a conda file or a build on top of an image may bring its own CUDA libraries (pip wheels of PyTorch "
    "carry theirs). So what the name says is reported, not blocked: check the image before the run reserves "
    "its nodes.",
    remediation="Check the CUDA the environment really runs (`nvidia-smi` and `python -c 'import torch; "
    "print(torch.version.cuda, torch.cuda.get_arch_list())'` in the image); use one built for the GPU.",
    reference=CUDA_NOTES,
    config_key=("environment",),
)
def run_image_cuda_hint(run: ResolvedRun) -> list[str]:
    verdict = None if run.environment.cuda_certain else _cuda_verdict(run)
    return [f"the name says so, which may not be the content: {verdict}"] if verdict else []


BOOTSTRAPPER_OVERRIDE = "AZUREML_CR_BOOTSTRAPPER_CONFIG_OVERRIDE"
_MAX_OVERRIDE = 64 << 10


def _registries(value: str) -> list[str]:
    """Registry URLs named in a bootstrapper override (its JSON's ``registry.url`` values), bounded."""
    if len(value) > _MAX_OVERRIDE:
        return []
    try:
        data = bounded.load_json(value, "a bootstrapper config override")
    except ValueError:  # not JSON (json.JSONDecodeError), or nested too deeply (bounded.BoundedInputError)
        return []

    def urls(node: Any, depth: int = 0) -> Iterator[str]:
        if depth > 16:
            return
        if isinstance(node, dict):
            for key, item in node.items():
                if key == "url" and isinstance(item, str):
                    yield item
                else:
                    yield from urls(item, depth + 1)
        elif isinstance(node, list):
            for item in node:
                yield from urls(item, depth + 1)

    return sorted(set(urls(data)))


def _runtime_overrides(run: ResolvedRun) -> Iterator[tuple[str, str]]:
    for name, value in sorted((run.spec.get("environment_variables") or {}).items()):
        if name == BOOTSTRAPPER_OVERRIDE or (name.startswith("AZUREML_CR_") and name.endswith("_OVERRIDE")):
            yield name, str(value)


@run_rule(
    id="run-runtime-override",
    title="Runs do not point Azure ML's job runtime at another registry",
    severity="high",
    enforcement="mandatory",
    rationale="AZUREML_CR_BOOTSTRAPPER_CONFIG_OVERRIDE (and other AZUREML_CR_*_OVERRIDE settings) tell Azure ML's "
    "common runtime where to pull its own bootstrapper and capability images from: the code on every node that "
    "mounts data, fetches the job's tokens and starts the processes. Microsoft's instructions use it to move "
    "those images into a customer's registry for data-loss-prevention setups (copying the system images with "
    "import_acr.py and giving the registry's admin user and key in the value, jhirono/azureml-dlp); public "
    "labs and jobs have been published with it pointing at Microsoft's internal development registries "
    "(commonruntimedev.azurecr.io) and canary builds. Either way the runtime that holds the job's credentials "
    "comes from a registry outside the workspace's control, unsupported by Azure ML.",
    remediation="Remove the variable from environment_variables. A data-loss-prevention setup that mirrors the "
    "runtime into the organisation's own registry is waived for the run, with the reason and the registry.",
    reference=BOOTSTRAPPER_EVIDENCE,
    config_key=("environment_variables",),
)
def run_runtime_override(run: ResolvedRun) -> list[str]:
    out = []
    for name, value in _runtime_overrides(run):
        registries = _registries(value)
        where = f" to {', '.join(registries)}" if registries else ""
        out.append(f"sets {name}: Azure ML's job runtime is pulled from another registry{where}")
    return out


@run_rule(
    id="run-legacy-batchai-variables",
    title="Run code does not read Batch AI variables (AZ_BATCHAI_*)",
    severity="medium",
    enforcement="advisory",
    rationale="AZ_BATCHAI_* variables (AZ_BATCHAI_MPI_MASTER_NODE...), read in the command, its shell scripts or "
    "the code folder's Python, are the names of Azure Batch AI, Azure ML's "
    "predecessor; the current runtime sets AZ_BATCH_MASTER_NODE and, per distribution, MASTER_ADDR/NODE_RANK "
    "or OMPI_COMM_WORLD_*. Code that reads the old names fails with KeyError or falls back to a single node "
    "(Azure/azure-sdk-for-python#20285: 'AZ_BATCHAI_MPI_MASTER_NODE key error' in Azure's own Lightning "
    "example; microsoft/hi-ml#588 moved to AZ_BATCH_MASTER_NODE). Only reads with nothing to fall back on are "
    "reported (os.environ['AZ_BATCHAI_...'], a get() with no default that is not the 'or' of another read), "
    "read with Python's ast. Advisory: one on a path the run never takes does no harm.",
    remediation="Read AZ_BATCH_MASTER_NODE (distribution mpi) or MASTER_ADDR / MASTER_PORT / NODE_RANK "
    "(distribution pytorch) instead (see docs/jobs.md, 'What each process sees').",
    reference="https://github.com/Azure/azure-sdk-for-python/issues/20285",
    config_key=("command",),
)
def run_legacy_batchai_variables(run: ResolvedRun) -> list[str]:
    if not run.legacy_variables:
        return []
    shown = ", ".join(run.legacy_variables[:5])
    more = f" and {len(run.legacy_variables) - 5} more" if len(run.legacy_variables) > 5 else ""
    return [Message(f"the run reads Batch AI variables the current runtime does not set: {shown}{more}",
                    run.legacy_variables)]
