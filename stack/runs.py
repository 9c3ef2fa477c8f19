"""The run model: a distributed training run, declared in Azure ML's CLI v2 ``commandJob`` vocabulary.

The same model serves stack files (``aml-gpu-training:jobs``) and Python::

    from stack.runs import Run
    Run(name="cifar-ddp", code="jobs/workloads", command="python train.py",
        environment="acpt", compute="gpu-a100",
        resources={"instance_count": 2}, distribution={"type": "pytorch"})

Only the shape of a run is checked here. Whether it fits its cluster and environment (processes per
GPU, InfiniBand, MPI in the image...) is judged by the policy pack, and references to the stack's
clusters and environments are resolved by :mod:`jobs.resolve`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)

from azurefacts import naming
from azurefacts.enums import AnyCase, CamelOrSnakeCase, lower
from kernel import regex as linear
from stack.infrastructure import BuildContext, Capability, Model, is_reference

PositiveCount = Annotated[StrictInt, Field(ge=1)]

# ------------------------------------------------------------------------------------------ distribution


class PyTorchDistribution(Model):
    """Azure ML starts ``instance_count x process_count_per_instance`` processes and sets
    MASTER_ADDR, MASTER_PORT, WORLD_SIZE, NODE_RANK, RANK and LOCAL_RANK for each."""

    type: Literal["pytorch"]
    process_count_per_instance: PositiveCount | None = None


class MpiDistribution(Model):
    """Azure ML runs ``mpirun`` with ``process_count_per_instance`` ranks per node; each rank sees
    OMPI_COMM_WORLD_* and AZ_BATCH_MASTER_NODE."""

    type: Literal["mpi"]
    process_count_per_instance: PositiveCount | None = None


class TensorFlowDistribution(Model):
    """Azure ML sets TF_CONFIG for ``worker_count`` workers and ``parameter_server_count`` servers."""

    type: Literal["tensorflow"]
    worker_count: PositiveCount | None = None
    parameter_server_count: Annotated[StrictInt, Field(ge=0)] = 0


def _distribution_any_case(value: Any) -> Any:
    """A ``distribution`` mapping with its ``type`` in lower case, before the discriminator reads the tag:
    azure-ai-ml accepts ``type: MPI`` as ``mpi``."""
    if isinstance(value, dict) and isinstance(value.get("type"), str):
        return {**value, "type": lower(value["type"])}
    return value


Distribution = Annotated[
    PyTorchDistribution | MpiDistribution | TensorFlowDistribution,
    Field(discriminator="type"),
    BeforeValidator(_distribution_any_case),
]
"""How Azure ML starts the processes, by ``type`` (read in any letter case)."""

# ------------------------------------------------------------------------------------------ data

InputMode = Annotated[Literal["ro_mount", "download", "direct", "eval_mount", "eval_download"], AnyCase]
OutputMode = Annotated[Literal["rw_mount", "upload", "direct"], AnyCase]
DataType = Annotated[
    Literal["uri_file", "uri_folder", "mltable", "custom_model", "mlflow_model", "triton_model"], AnyCase
]


# Where data lives: a data asset (azureml:<name>:<version>), a datastore/registry/job URI
# (azureml://...) or storage URLs. A local path would be uploaded from whichever machine submits, and
# azure-ai-ml resolves it against the YAML file's folder: declare a data asset instead.
_DATA_URI = linear.compile(r"^(azureml:|https?://|wasbs?://|abfss?://|adl://|gs://|s3://)")


def is_remote_path(value: str) -> bool:
    """A data asset or URI (what a run may read), not a local path."""
    return bool(_DATA_URI.match(value))


def _remote_path(value: str) -> str:
    if not _DATA_URI.match(value):
        raise ValueError(
            f"path {value!r} is not a data asset or URI: register local data as a data asset "
            "(azureml:<name>:<version>) or give an azureml://datastores/... or https:// URI"
        )
    return value


RemotePath = Annotated[StrictStr, AfterValidator(_remote_path)]
"""Where data lives: a data asset or a URI (:func:`is_remote_path`)."""


class DataInput(Model):
    """A data input as CLI v2 writes it (job inputs carry no description: azure-ai-ml rejects one)."""

    type: DataType = "uri_folder"
    path: RemotePath
    mode: InputMode | None = None


class DataOutput(Model):
    type: DataType = "uri_folder"
    path: RemotePath | None = None
    mode: OutputMode | None = None


Literal_ = StrictBool | StrictInt | StrictFloat | StrictStr
"""Literal inputs. Booleans are accepted as CLI v2 accepts them; Azure ML sends ``true`` as ``1`` (the
rendered job file says so, and the plan output notes it per run)."""
Input = Literal_ | DataInput

# ------------------------------------------------------------------------------------------ the rest

SHM_SIZE = linear.compile(r"^[1-9][0-9]*[bkmgBKMG]$")


class Resources(Model):
    instance_count: PositiveCount = 1
    shm_size: str | None = None
    docker_args: str | None = None

    @field_validator("shm_size")
    @classmethod
    def _shm(cls, value: str | None) -> str | None:
        if value is not None and not SHM_SIZE.match(value):
            raise ValueError(f"shm_size {value!r} is not <number><b|k|m|g>, e.g. '16g'")
        return value


class Limits(Model):
    timeout: PositiveCount | None = None
    """Seconds before Azure ML cancels the run."""


class JobIdentity(Model):
    """Whose identity the run's code uses for data and Azure access. A user-assigned managed identity is
    chosen by ``client_id`` or ``object_id`` (azure-ai-ml cannot carry ``msi_resource_id``)."""

    type: Annotated[Literal["user_identity", "managed", "aml_token"], CamelOrSnakeCase]
    client_id: str | None = None
    object_id: str | None = None

    @model_validator(mode="after")
    def _ids_only_for_managed(self) -> JobIdentity:
        if self.type != "managed" and (self.client_id or self.object_id):
            raise ValueError(f"client_id/object_id select a managed identity; type is {self.type!r}")
        return self


class QueueSettings(Model):
    job_tier: Annotated[Literal["spot", "basic", "standard", "premium"], AnyCase] | None = None
    priority: Annotated[Literal["low", "medium", "high"], AnyCase] | None = None


class Service(Model):
    """An interactive endpoint on the run's nodes (CLI v2 ``services``)."""

    type: Annotated[Literal["ssh", "jupyter_lab", "tensor_board", "vs_code"], AnyCase]
    nodes: Literal["all"] | None = None
    port: Annotated[StrictInt, Field(ge=1, le=65535)] | None = None
    properties: dict[str, str] = {}
    ssh_public_keys: str | None = None
    """ssh only: the public key allowed in."""
    log_dir: str | None = None
    """tensor_board only: the folder TensorBoard reads."""

    @model_validator(mode="after")
    def _type_specific_keys(self) -> Service:
        if self.ssh_public_keys is not None and self.type != "ssh":
            raise ValueError(f"ssh_public_keys is for type 'ssh', not {self.type!r}")
        if self.log_dir is not None and self.type != "tensor_board":
            raise ValueError(f"log_dir is for type 'tensor_board', not {self.type!r}")
        return self


class InlineEnvironment(Model):
    """An environment written inside the run, as CLI v2 allows: an ``image`` (optionally with a
    ``conda_file``) or a Docker ``build`` context. Azure ML registers it anonymously at submission.
    ``provides`` is this project's: capabilities the policy pack may rely on, added to what it infers."""

    image: str | None = None
    """A Docker image (``mcr.microsoft.com/azureml/...:<tag>``); give a tag or digest."""
    build: BuildContext | None = None
    """A Docker build context (folder relative to the project root) that Azure ML builds at submission."""
    conda_file: str | None = None
    """A conda file (relative to the project root) installed on top of ``image``."""
    name: str | None = None
    """Ignored by Azure ML for an inline environment (it registers it anonymously); kept as written."""
    version: str | None = None
    """Ignored by Azure ML for an inline environment (the version is derived from the content)."""
    description: str | None = None
    """Free text."""
    tags: dict[str, str] | None = None
    """Tags on the environment Azure ML registers (a ``file:`` environment's ``tags`` too)."""
    provides: list[Capability] | None = None
    """Capabilities the policy pack may rely on (MPI, DeepSpeed...), added to what it infers from the image
    and the build context; never sent to Azure ML."""

    @model_validator(mode="after")
    def _one_source(self) -> InlineEnvironment:
        if (self.image is None) == (self.build is None):
            raise ValueError("an inline environment needs exactly one of image or build")
        if self.build is not None and self.conda_file is not None:
            raise ValueError("conda_file goes with image; a build context installs its own packages")
        return self


FILE_PREFIX = "file:"


def _environment_reference(value: str) -> str:
    """A run's ``environment`` string: a stack environment's name, ``file:<environment YAML>``, or a
    workspace/curated/registry reference."""
    if value.startswith(FILE_PREFIX):
        path = PurePosixPath(value[len(FILE_PREFIX):].replace("\\", "/"))
        if not path.parts or path.is_absolute() or ".." in path.parts:
            raise ValueError(f"environment {value!r}: the file must be inside the project, relative to its root")
    elif value.startswith("azureml:") and not is_reference(value):
        raise ValueError(
            f"environment {value!r} is not a reference: azureml:<name>:<version>, azureml:<name>@latest or "
            "azureml://registries/<registry>/environments/<name>/versions/<version>"
        )
    return value


MAX_COMMAND = 1 << 16
"""Characters of a run's command the gate reads (64 KiB: Linux takes at most 128 KiB in one argument, and
no command line a person writes comes near); a longer one is bad input, so a hostile stack file cannot make
every reader of the command (launchers, shell words, secrets) walk megabytes."""
PLACEHOLDER = linear.compile(r"\$\{\{\s*(inputs|outputs)\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_DRIVE = linear.compile(r"^[A-Za-z]:")
_IDENTIFIER = linear.compile(r"[A-Za-z_][A-Za-z0-9_]*")
OPTIONAL_SEGMENT = linear.compile(r"(?s)\$\[\[.*?\]\]")
"""``$[[--flag ${{inputs.x}}]]``: a command segment Azure ML drops when its optional input is not given."""

WITHOUT_DISTRIBUTION = ("Azure ML runs the command once on each node with none of the launch variables (MASTER_ADDR, "
                        "MASTER_PORT, WORLD_SIZE, NODE_RANK, RANK, LOCAL_RANK): the nodes never meet")
"""What a run, pipeline step or sweep trial without ``distribution`` does in Azure ML: the one wording the stack
file's error and ``amlgpu import``'s note share."""
WRITE_DISTRIBUTION = ("write distribution: {type: pytorch, process_count_per_instance: 1} for one process per node "
                      "(a launcher such as torchrun starts the GPU processes), or process_count_per_instance: <GPUs "
                      "per node> for one process per GPU; type mpi and tensorflow: docs/jobs.md")
"""What to write instead (the error's fix)."""
MISSING_DISTRIBUTION = f"distribution is required: without it {WITHOUT_DISTRIBUTION}; {WRITE_DISTRIBUTION}"
"""The error of a run, step or trial that leaves ``distribution`` out (stack.diagnostics, stack.pipelines)."""


def _strip_compute_prefix(value: str) -> str:
    return value.removeprefix("azureml:")


Compute = Annotated[str, AfterValidator(_strip_compute_prefix)]
"""A stack cluster's name (``azureml:<name>`` is read as ``<name>``)."""


class Run(Model):
    """A declared distributed run; field names and meanings are Azure ML's ``commandJob``'s."""

    name: naming.RunName
    display_name: str | None = None
    experiment_name: str | None = None
    description: str | None = None
    tags: dict[str, str] = {}
    properties: dict[str, str] = {}
    """Azure ML job properties: name-value pairs kept with the job, like tags but set once at submission."""
    code: str | None = None
    """Folder relative to the project root, uploaded as the run's snapshot (none: the command needs only
    the environment)."""
    command: Annotated[str, Field(min_length=1)]
    environment: str | InlineEnvironment
    """A stack environment's name, ``file:<environment YAML>``, ``azureml:<name>:<version>``,
    ``azureml:<name>@latest``, a registry reference, or an inline environment (image/build)."""
    compute: Compute
    """A stack cluster's name (``azureml:<name>`` is accepted too)."""
    inputs: dict[str, Input] = {}
    outputs: dict[str, DataOutput] = {}
    environment_variables: dict[str, str] = {}
    resources: Resources = Resources()
    distribution: Distribution
    limits: Limits = Limits()
    identity: JobIdentity | None = None
    services: dict[str, Service] = {}
    queue_settings: QueueSettings | None = None

    @field_validator("command")
    @classmethod
    def _command_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("command is empty")
        if len(value) > MAX_COMMAND:
            raise ValueError(f"command is {len(value):,} characters, more than the {MAX_COMMAND:,} the gate reads: "
                             "put the steps in a script in the code folder and run that")
        return value

    @field_validator("environment")
    @classmethod
    def _environment_form(cls, value: str | InlineEnvironment) -> str | InlineEnvironment:
        return _environment_reference(value) if isinstance(value, str) else value

    @field_validator("code")
    @classmethod
    def _code_inside_project(cls, value: str | None) -> str | None:
        if value is None:
            return None
        path = PurePosixPath(value.replace("\\", "/"))
        if not value.strip() or path.is_absolute() or _DRIVE.match(value) or ".." in path.parts:
            raise ValueError(f"code {value!r} must be a folder inside the project, relative to its root")
        return value

    @field_validator("inputs", "outputs")
    @classmethod
    def _identifier_keys(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            if not _IDENTIFIER.fullmatch(key):
                raise ValueError(f"{key!r} is not a valid input/output name (letters, digits, '_')")
        return value

    def placeholders(self, *, required_only: bool = False) -> list[tuple[str, str]]:
        """The ``${{inputs.x}}`` / ``${{outputs.x}}`` references in ``command``, in order;
        ``required_only`` leaves out those inside ``$[[...]]`` optional segments."""
        command = OPTIONAL_SEGMENT.sub("", self.command) if required_only else self.command
        return [(m.group(1), m.group(2)) for m in PLACEHOLDER.finditer(command)]

    def undeclared_placeholders(self) -> list[str]:
        """Placeholders outside optional segments with no declared input/output (an optional segment whose
        input is left out is dropped by Azure ML, as CLI v2 documents)."""
        declared: dict[str, Mapping[str, object]] = {"inputs": self.inputs, "outputs": self.outputs}
        return [f"${{{{{kind}.{key}}}}}" for kind, key in self.placeholders(required_only=True)
                if key not in declared[kind]]
