"""The JSON Schema of a stack file (``Pulumi.<stack>.yaml``), generated from :class:`stack.config.StackConfig`.

Editors (VS Code's YAML extension, JetBrains, any yaml-language-server client) use it to complete keys,
show what each one means and flag mistakes while typing::

    # yaml-language-server: $schema=schema/stack.schema.json

Shape, so typos fail in the editor as they fail in ``amlgpu plan``:

* ``config`` holds ``aml-gpu-training:<key>`` entries, one per :class:`StackConfig` field, plus
  ``azure-native:location``; other namespaces' keys (``azure-native:subscriptionId``...) pass through;
* every object of the namespace has ``additionalProperties: false``;
* Azure naming rules become ``pattern`` (with ``patternErrorMessage``, which yaml-language-server shows
  instead of the bare regex), GPU sizes an ``enum`` of the catalogue's spellings;
* no value of the namespace may be a secret (``{secure: ...}``): see ``stack.secrecy.NOT_A_SECRET``.

What a schema cannot express (cross-references between clusters and runs, files on disk, one of
``image``/``build``/``reference``) is checked by the model; the schema never rejects a stack the
model accepts: the enum values Azure ML reads in any letter case (``tier: Dedicated``, ``type: PyTorch``,
GPU sizes) or in camel case (``SystemAssigned``) are accepted so (:mod:`azurefacts.enums`).

Every key carries a description: the field's attribute docstring in the model where it has one (read by
pydantic: the models set ``use_attribute_docstrings``), else the entry in :data:`FIELD_DOCS`.
``tests/stack/test_schema.py`` fail on a field with neither.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema

from azurefacts import skus
from azurefacts.enums import AzureSpelling
from azurefacts.naming import NamingRule
from stack import NAMESPACE
from stack.config import StackConfig
from stack.keys import LOCATION_KEY, SUBSCRIPTION_KEY

SCHEMA_PATH = "schema/stack.schema.json"
"""Where the committed schema lives, relative to the project root."""

DRAFT = "https://json-schema.org/draft/2020-12/schema"

# Meanings of the fields whose model has no attribute docstring, keyed "Model.field". Written in the
# vocabulary of Azure ML's CLI v2 docs, which is the vocabulary of the stack file.
FIELD_DOCS: dict[str, str] = {
    "StackConfig.location": "Azure region of every resource, e.g. westeurope. Set as azure-native:location "
    "(the provider's own setting) or as workspace.location. ARM's name or the display name (West Europe), in any "
    "case; a name Azure does not have (azurefacts/regions.json) is refused with the closest ones.",
    "StackConfig.workspace": "The Azure ML workspace and its dependencies (storage, key vault, registry, "
    "monitoring).",
    "StackConfig.network": "The private network of the workspace and its clusters: a new virtual network, or "
    "an existing subnet.",
    "StackConfig.clusters": "GPU AmlCompute clusters (at least one).",
    "StackConfig.environments": "Training environments registered in the workspace.",
    "StackConfig.jobs": "Declared distributed runs in Azure ML CLI v2 commandJob keys, pipelines (type: pipeline) and "
    "sweeps (type: sweep): see docs/jobs.md.",
    "StackConfig.waivers": "Reviewed exceptions to a policy rule for one named resource or run: see "
    "docs/policies.md.",
    # workspace
    "Workspace.name": "Workspace name.",
    "Workspace.sku": "Workspace SKU.",
    "Workspace.description": "Free text shown in Azure ML studio.",
    "Workspace.public_network_access": "Whether the workspace answers on its public endpoint. Disabled: reachable "
    "only through its private endpoint.",
    "Workspace.identity": "The workspace's managed identity.",
    "Workspace.primary_user_assigned_identity": "Resource id of the user-assigned identity the workspace uses by "
    "default; one of identity.user_assigned_identities (the first one when not set).",
    "Workspace.high_business_impact": "Azure ML's high-business-impact flag: less diagnostic data collected by "
    "Microsoft, encrypted local scratch disks.",
    "Workspace.customer_managed_key": "Encrypt the workspace's data with this key instead of a Microsoft-managed "
    "one.",
    "Workspace.image_build_compute": "The CPU cluster that builds environment images when the workspace is "
    "private (Azure ML cannot build them on its own agents then).",
    "Workspace.tags": "Azure tags on the workspace and its dependencies.",
    "Workspace.log_retention_days": "Days the Log Analytics workspace keeps the workspace's logs and metrics.",
    "Identity.type": "Which managed identities: system_assigned, user_assigned, or both.",
    "Identity.user_assigned_identities": "The user-assigned identities attached (needed when type includes "
    "user_assigned).",
    "UserAssignedIdentity.resource_id": "ARM resource id of a user-assigned managed identity.",
    "CustomerManagedKey.key_vault": "ARM resource id of the key vault holding the key.",
    "CustomerManagedKey.key_uri": "The key's URI, with or without a version.",
    "ImageBuildCompute.name": "Name of the image-build cluster; must differ from every GPU cluster's name.",
    "ImageBuildCompute.size": "VM size of the image-build cluster (a CPU size is enough).",
    "ImageBuildCompute.max_instances": "Most nodes the image-build cluster scales to.",
    # network
    "Network.address_space": "Address space of a new virtual network (CIDR).",
    "Network.subnet_prefix": "The training subnet inside address_space (CIDR, /24 or larger).",
    "Network.subnet_id": "ARM resource id of an existing subnet to use instead of creating a network; "
    "replaces address_space and subnet_prefix.",
    # clusters
    "Cluster.name": "Compute name in the workspace; runs refer to it as compute.",
    "Cluster.size": "GPU VM size (Azure's spelling); it decides GPUs per node and whether nodes share InfiniBand.",
    "Cluster.min_instances": "Nodes kept running when idle; 0 lets the cluster scale to zero and cost nothing.",
    "Cluster.max_instances": "Most nodes the cluster scales to; a run's instance_count cannot exceed it.",
    "Cluster.tier": "dedicated VMs, or low_priority (preemptible, cheaper; a preemption stops the whole run).",
    "Cluster.idle_time_before_scale_down": "Seconds a node stays idle before the cluster releases it.",
    "Cluster.enable_node_public_ip": "Give nodes public IP addresses (off: nodes are reachable only inside the "
    "network).",
    "Cluster.ssh_public_access_enabled": "Open SSH to the nodes.",
    "Cluster.identity": "The cluster's managed identity, used by runs to reach data and the registry.",
    "Cluster.location": "Region of the cluster when it differs from the workspace's (an Azure region name, as "
    "for azure-native:location).",
    "Cluster.description": "Free text shown in Azure ML studio.",
    "Cluster.tags": "Azure tags on the cluster.",
    # environments
    "BuildContext.dockerfile_path": "The Dockerfile, relative to path.",
    "Environment.name": "Environment name in the workspace; runs refer to it as environment.",
    "Environment.version": "Environment version; left out, a SHA-256 of the image, conda file and build context "
    "(the same on every machine), as Azure ML versions anonymous environments.",
    "Environment.image": "A container image reference, e.g. "
    "mcr.microsoft.com/azureml/curated/acpt-pytorch-2.2-cuda12.1:18.",
    "Environment.build": "A Docker build context in this repository, built by Azure ML.",
    "Environment.conda_file": "A conda YAML file, relative to the project root, installed on top of image.",
    "Environment.description": "Free text shown in Azure ML studio.",
    "Environment.provides": "What the environment offers (MPI, NCCL, DeepSpeed...), which policies check runs "
    "against; added to what is inferred from the image and build context (azurefacts/environment-capabilities.yaml), "
    "never hiding it.",
    "Environment.tags": "Tags on the environment version.",
    # runs
    "Run.name": "Run name: unique in the stack, the name of its job file and stack output.",
    "Run.display_name": "Name shown in Azure ML studio.",
    "Run.experiment_name": "Experiment the run is filed under in Azure ML studio.",
    "Run.description": "Free text shown in Azure ML studio.",
    "Run.tags": "Tags on the job.",
    "Run.command": "The command each process runs; may use ${{inputs.x}} and ${{outputs.x}} placeholders.",
    "Run.inputs": "Named inputs: literal values (numbers, strings) or data (a data asset or URI).",
    "Run.outputs": "Named outputs, written by the run to a datastore.",
    "Run.environment_variables": "Variables set for every process; launcher-owned names (RANK, MASTER_ADDR, "
    "TF_CONFIG...) are Azure ML's.",
    "Run.resources": "Nodes and container settings.",
    "Run.distribution": "How Azure ML starts the processes: type pytorch, mpi or tensorflow.",
    "Run.limits": "Limits Azure ML enforces on the run.",
    "Run.identity": "Whose identity the run's code uses to reach data and Azure.",
    "Run.services": "Interactive endpoints on the run's nodes (SSH, JupyterLab, TensorBoard, VS Code).",
    "Run.queue_settings": "Job tier and priority (experimental in Azure ML).",
    "DataInput.type": "Kind of data.",
    "DataInput.path": "A data asset (azureml:<name>:<version>), an azureml:// datastore URI or a storage URL.",
    "DataInput.mode": "How the data reaches the nodes: mounted read-only, downloaded, or passed as a URI.",
    "DataOutput.type": "Kind of data.",
    "DataOutput.path": "Where to write: an azureml:// datastore URI or a storage URL (default: the workspace's "
    "default datastore).",
    "DataOutput.mode": "How the run writes it: mounted read-write, uploaded at the end, or a URI.",
    "Resources.instance_count": "Number of nodes.",
    "Resources.shm_size": "Shared memory of the container (/dev/shm), e.g. 16g; Azure ML's default of 2g is too "
    "small for DataLoaders with several workers.",
    "Resources.docker_args": "Extra docker run arguments.",
    "PyTorchDistribution.type": "pytorch: Azure ML starts the processes and sets MASTER_ADDR, MASTER_PORT, "
    "WORLD_SIZE, NODE_RANK, RANK and LOCAL_RANK.",
    "PyTorchDistribution.process_count_per_instance": "Processes per node: the node's GPU count for a "
    "per-process launch, 1 (or unset) when torchrun, Lightning or accelerate starts them.",
    "MpiDistribution.type": "mpi: Azure ML runs mpirun; ranks see OMPI_COMM_WORLD_* and AZ_BATCH_MASTER_NODE.",
    "MpiDistribution.process_count_per_instance": "MPI ranks per node, usually the node's GPU count.",
    "TensorFlowDistribution.type": "tensorflow: Azure ML sets TF_CONFIG for each process.",
    "TensorFlowDistribution.worker_count": "Workers in TF_CONFIG (default: instance_count).",
    "TensorFlowDistribution.parameter_server_count": "Parameter servers in TF_CONFIG.",
    "JobIdentity.type": "user_identity (the submitter's), managed (a managed identity) or aml_token.",
    "JobIdentity.client_id": "Client id of the user-assigned managed identity (type managed).",
    "JobIdentity.object_id": "Object id of the user-assigned managed identity (type managed).",
    "Service.type": "The endpoint: ssh, jupyter_lab, tensor_board or vs_code.",
    "Service.nodes": "all: open it on every node (default: the first node only).",
    "Service.port": "Port the endpoint listens on.",
    "Service.properties": "Extra settings passed to the service.",
    "QueueSettings.job_tier": "spot, basic, standard or premium.",
    "QueueSettings.priority": "low, medium or high.",
    # waivers
    "Waiver.rule": "Id of the policy rule waived (amlgpu policy list).",
}

class _Generator(GenerateJsonSchema):
    """Pydantic's generator, plus the naming rules (opaque ``AfterValidator`` functions to pydantic)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False  # titles like "Min Instances" repeat the key; descriptions say what it means

    def function_before_schema(self, schema: Any) -> dict[str, Any]:
        generated = super().function_before_schema(schema)
        spelling = getattr(schema["function"]["function"], "azure_spelling", None)
        if isinstance(spelling, AzureSpelling) and isinstance(generated.get("enum"), list):
            # The model takes the spellings azure-ai-ml takes (`Dedicated`, `SystemAssigned`): so does the editor.
            values: list[str] = generated["enum"]
            if spelling.any_case:
                return any_case(generated, values)
            spellings = sorted({s for v in values for s in spelling.spellings(v)} - set(values))
            return {**generated, "enum": [*values, *spellings]}
        return generated

    def function_after_schema(self, schema: Any) -> dict[str, Any]:
        generated = super().function_after_schema(schema)
        rule = getattr(schema["function"]["function"], "__self__", None)
        if isinstance(rule, NamingRule):
            return {
                **generated,
                "pattern": f"^(?:{rule.pattern.pattern})$",
                "patternErrorMessage": f"{rule.what}: {rule.explanation}",
            }
        return generated


def any_case(node: dict[str, Any], values: list[str]) -> dict[str, Any]:
    """``node`` (an ``enum``/``const`` of ``values``) accepting every letter case of them: the values stay
    offered for completion, a pattern (ECMA regexes have no case-insensitive flag) accepts the rest."""
    letters = "|".join("".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in v)
                       for v in values)
    kept = {k: v for k, v in node.items() if k not in ("enum", "const", "type")}
    return {**kept, "anyOf": [{"type": "string", "enum": values}, {"type": "string", "pattern": f"^(?:{letters})$"}]}


def models() -> Iterator[type[BaseModel]]:
    """Every model a stack file can contain, :class:`StackConfig` first, each once."""
    seen: list[type[BaseModel]] = []
    pending: list[type[BaseModel]] = [StackConfig]
    while pending:
        model = pending.pop(0)
        if model in seen:
            continue
        seen.append(model)
        yield model
        for field in model.model_fields.values():
            pending.extend(_models_in(field.annotation))


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def field_description(model: type[BaseModel], field: str) -> str | None:
    """What ``model.field`` means: the docstring written under the field in the model (pydantic's
    ``use_attribute_docstrings``), else its :data:`FIELD_DOCS` entry."""
    written = model.model_fields[field].description
    return _plain(written) if written else FIELD_DOCS.get(f"{model.__name__}.{field}")


def _plain(docstring: str) -> str:
    """A docstring as one line of Markdown: reST's double backticks become single ones."""
    return " ".join(docstring.replace("``", "`").split())


def _describe(model: type[BaseModel], node: dict[str, Any]) -> None:
    for name, prop in node.get("properties", {}).items():
        description = field_description(model, name)
        if description:
            prop["description"] = description


def _drop_titles(node: Any) -> None:
    if isinstance(node, dict):
        if isinstance(node.get("title"), str):  # a keyword, not a property named "title"
            del node["title"]
        for value in node.values():
            _drop_titles(value)
    elif isinstance(node, list):
        for value in node:
            _drop_titles(value)


def stack_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a whole ``Pulumi.<stack>.yaml`` file."""
    generated = StackConfig.model_json_schema(schema_generator=_Generator, ref_template="#/$defs/{model}")
    definitions: dict[str, Any] = generated.pop("$defs")
    by_name = {model.__name__: model for model in models()}
    for name, node in definitions.items():
        if "description" in node:  # the class docstring, written for Sphinx
            node["description"] = _plain(node["description"])
        _describe(by_name[name], node)
    _describe(StackConfig, generated)
    size = definitions["Cluster"]["properties"]["size"]
    description = size["description"] + " One of the catalogue's sizes, in any letter case (as Azure takes them)."
    definitions["Cluster"]["properties"]["size"] = {**any_case(size, sorted(skus.CATALOGUE)),
                                                    "description": description}
    for name in ("PyTorchDistribution", "MpiDistribution", "TensorFlowDistribution"):
        # azure-ai-ml reads `type: PyTorch` as `pytorch`, and so does the model (stack.runs).
        kind = definitions[name]["properties"]["type"]
        definitions[name]["properties"]["type"] = any_case(kind, [kind["const"]])

    fields: dict[str, Any] = generated["properties"]
    location = fields.pop("location")
    fields.pop("subscription_id")
    subscription = {
        "type": "string",
        "pattern": "^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$",
        "description": "The subscription `pulumi up` deploys to (the provider's own setting). When set, the "
        "customer-managed key's vault, network.subnet_id and the workspace's user-assigned identity must be in it.",
    }
    config_keys = {LOCATION_KEY: location, SUBSCRIPTION_KEY: subscription,
                   **{f"{NAMESPACE}:{name}": node for name, node in fields.items()}}
    required = [f"{NAMESPACE}:{name}" for name in generated["required"] if name != "location"]
    config = {
        "type": "object",
        "description": f"Stack configuration: {NAMESPACE}:<key> entries (this project's) and other namespaces' "
        "settings, e.g. azure-native:subscriptionId.",
        "properties": config_keys,
        "required": required,
        # Other namespaces pass through; an unknown key of ours is a typo.
        "patternProperties": {f"^(?!{NAMESPACE}:)[^:\\s]+:\\S+$": {}},
        "additionalProperties": False,
        # Without azure-native:location the region must come from workspace.location; the editor then
        # flags the workspace as missing `location`, which names a key the user can add.
        "if": {"not": {"required": [LOCATION_KEY]}},
        "then": {
            "properties": {
                f"{NAMESPACE}:workspace": {
                    "required": ["location"],
                    "properties": {"location": {"type": "string", "minLength": 1}},
                }
            }
        },
    }
    schema: dict[str, Any] = {
        "$schema": DRAFT,
        "title": f"Pulumi stack file of {NAMESPACE} (Pulumi.<stack>.yaml)",
        "description": "Generated from stack.config.StackConfig by `amlgpu schema`; do not edit by hand.",
        "type": "object",
        "properties": {
            "config": config,
            "secretsprovider": {"type": "string", "description": "Pulumi: the stack's secrets provider."},
            "encryptedkey": {"type": "string", "description": "Pulumi: the stack's encrypted data key."},
            "encryptionsalt": {"type": "string", "description": "Pulumi: salt of passphrase-encrypted secrets."},
            "environment": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Pulumi ESC environments imported into the stack's config.",
            },
        },
        "required": ["config"],
        "$defs": dict(sorted(definitions.items())),
    }
    _drop_titles(schema["properties"])
    _drop_titles(schema["$defs"])
    return schema


def undocumented_fields() -> list[str]:
    """``Model.field`` for every field without a description (the tests keep this empty)."""
    return [
        f"{model.__name__}.{name}"
        for model in models()
        for name in model.model_fields
        if not field_description(model, name)
    ]


def stale_field_docs() -> list[str]:
    """:data:`FIELD_DOCS` entries that name no field, or a field that now has its own docstring."""
    fields = {f"{model.__name__}.{name}": (model, name) for model in models() for name in model.model_fields}
    return sorted(
        key for key in FIELD_DOCS
        if key not in fields or fields[key][0].model_fields[fields[key][1]].description
    )
