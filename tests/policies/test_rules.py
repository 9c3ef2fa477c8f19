"""Every rule: a compliant and a violating case, each made by mutating the one compliant baseline, and
the violating case fails for the right resource (by its declared name) with the rule's id.

Plus the seed documents' examples that are wrong for their cluster, planned through the real program.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from jobs.pipelines import PIPELINE_TYPE, SWEEP_TYPE
from policies.catalogue import BY_ID, RULES
from policies.engine import Finding, evaluate
from stack.config import build
from stack.resolved import RUN_TYPE, ResolvedRun
from tests.conftest import ROOT, dev_config
from tests.policies.test_baseline import TODAY, Baseline, baseline

WS = "azure-native:machinelearningservices:Workspace"
COMPUTE = "azure-native:machinelearningservices:Compute"
ENV_VERSION = "azure-native:machinelearningservices:EnvironmentVersion"
STORAGE = "azure-native:storage:StorageAccount"
VAULT = "azure-native:keyvault:Vault"
ACR = "azure-native:containerregistry:Registry"
NSG = "azure-native:network:NetworkSecurityGroup"
SUBNET = "azure-native:network:Subnet"
PE = "azure-native:network:PrivateEndpoint"
DNS_GROUP = "azure-native:network:PrivateDnsZoneGroup"
DIAG = "azure-native:monitor:DiagnosticSetting"
CONTAINER = "azure-native:storage:BlobContainer"
INSIGHTS = "azure-native:applicationinsights:Component"
LOGS = "azure-native:operationalinsights:Workspace"
VNET = "azure-native:network:VirtualNetwork"
UPLOAD = "pulumi-python:dynamic/amlgpu:BuildContextUpload"
ASSIGNMENT = "azure-native:authorization:RoleAssignment"

WORKSPACE = "mlw-gpu-dev"
CLUSTER = "gpu-a100"

Mutation = Callable[[Baseline], None]


def nothing(_: Baseline) -> None:
    """The baseline as it is."""


def aml(b: Baseline) -> dict[str, Any]:
    return b.inputs(COMPUTE, CLUSTER)["properties"]["properties"]


def _set(target: dict[str, Any], path: str, value: Any) -> None:
    """Set (or, with value ``...``, delete) the key at dotted ``path`` under ``target``."""
    *parents, last = path.split(".")
    for part in parents:
        target = target.setdefault(part, {})
    if value is ...:
        target.pop(last, None)
    else:
        target[last] = value


def setting(token: str, path: str, value: Any, name: str | None = None) -> Mutation:
    """Set (or, with value ``...``, delete) the input at dotted ``path`` of one resource."""
    return lambda b: _set(b.inputs(token, name), path, value)


def run_setting(run: str, path: str, value: Any) -> Mutation:
    """Set (or delete, with ``...``) a prop of a resolved run (``spec.resources.instance_count``...)."""
    return lambda b: _set(b.run(run), path, value)


def job_setting(token: str, name: str, path: str, value: Any) -> Mutation:
    """Set (or delete, with ``...``) a key of a pipeline's or sweep's spec (``limits.timeout``...)."""
    return lambda b: _set(b.job(token, name), path, value)


def priced_h100(b: Baseline) -> None:
    """The cluster on Standard_ND96isr_H100_v5 in eastus2: priced in the shipped table (98.32 USD/h)."""
    b.inputs(COMPUTE, CLUSTER)["location"] = "eastus2"
    aml(b)["vmSize"] = "Standard_ND96isr_H100_v5"


def both(*mutations: Mutation) -> Mutation:
    def mutate(b: Baseline) -> None:
        for m in mutations:
            m(b)

    return mutate


def drop(token: str, name: str) -> Mutation:
    return lambda b: b.drop(token, name)


def unwait(token: str, name: str, *types: str) -> Mutation:
    """The resource no longer waits for its dependencies of ``types`` (as the program planned before)."""

    def mutate(b: Baseline) -> None:
        options = b.one(token, name)["options"]
        options["dependsOn"] = [d for d in options["dependsOn"] if d["type"] not in types]

    return mutate


def without_capability(run: str, capability: str, *, known: bool = True) -> Mutation:
    """The run's environment without ``capability``: known to lack it, or (``known=False``) unknown."""
    def mutate(b: Baseline) -> None:
        env = b.run(run)["environment"]
        if capability in env["capabilities"]:
            env["capabilities"].remove(capability)
        if known:
            env.setdefault("absent", []).append(capability)

    return mutate


def launch_setting(run: str, **fields: Any) -> Mutation:
    """Change the first launch a run's command starts (its :class:`analysis.topology.Launch` props)."""
    def mutate(b: Baseline) -> None:
        b.run(run)["launches"][0].update(fields)

    return mutate


def every_run(key: str, value: Any) -> Mutation:
    """Set a fact of every run (the baseline's synthetic code folder lacks its scripts, say)."""
    def mutate(b: Baseline) -> None:
        for r in b.resources:
            if r["type"] == RUN_TYPE:
                r["inputs"][key] = value

    return mutate


def with_capability_everywhere(capability: str) -> Mutation:
    def mutate(b: Baseline) -> None:
        for r in b.resources:
            if r["type"] == RUN_TYPE:
                env = r["inputs"]["environment"]
                env["capabilities"] = sorted({*env["capabilities"], capability})

    return mutate


def on_cluster(run: str, size: str, gpus: int, *, rdma: bool, sriov: bool, vendor: str = "nvidia") -> Mutation:
    """The run resolved against a cluster of another size (its facts only; the plan keeps gpu-a100)."""
    return run_setting(run, "cluster", {
        "name": CLUSTER, "size": size, "gpus": gpus, "gpu_vendor": vendor, "rdma": rdma, "sriov": sriov,
        "infiniband": rdma and sriov, "min_instances": 0, "max_instances": 2, "tier": "dedicated",
    })


def compute_instance(idle: str | None) -> Mutation:
    def mutate(b: Baseline) -> None:
        props: dict[str, Any] = {
            "vmSize": "Standard_NC4as_T4_v3", "subnet": {"id": "/subscriptions/x/subnets/training"},
            "enableNodePublicIp": False,
        }
        if idle:
            props["idleTimeBeforeShutdown"] = idle
        b.resources.append({
            "type": COMPUTE, "name": "notebook", "parent": WORKSPACE, "parentType": "aml-gpu-training:infra:Workspace",
            "options": {},
            "inputs": {"computeName": "notebook", "identity": {"type": "SystemAssigned"},
                       "properties": {"computeType": "ComputeInstance", "disableLocalAuth": True, "properties": props}},
        })

    return mutate


def add_nsg_rule(source: str, port: str) -> Mutation:
    def mutate(b: Baseline) -> None:
        b.inputs(NSG)["securityRules"].append({
            "name": "allow-admin", "priority": 200, "direction": "Inbound", "access": "Allow", "protocol": "Tcp",
            "sourceAddressPrefix": source, "sourcePortRange": "*", "destinationAddressPrefix": "*",
            "destinationPortRange": port,
        })

    return mutate


def deny_internet_out(b: Baseline) -> None:
    b.inputs(NSG)["securityRules"].append({
        "name": "deny-internet-out", "priority": 4000, "direction": "Outbound", "access": "Deny", "protocol": "*",
        "sourceAddressPrefix": "VirtualNetwork", "sourcePortRange": "*", "destinationAddressPrefix": "Internet",
        "destinationPortRange": "*",
    })


def open_egress(b: Baseline) -> None:
    b.inputs(NSG)["securityRules"] = [r for r in b.inputs(NSG)["securityRules"] if r["name"] != "deny-internet-out"]


MANAGED_NETWORK = {"isolationMode": "AllowOnlyApprovedOutbound", "outboundRules": {
    "storage": {"type": "PrivateEndpoint",
                "destination": {"serviceResourceId": "/subscriptions/x", "subresourceTarget": "blob"}},
}}
FQDN_ONLY = {"isolationMode": "AllowInternetOutbound", "outboundRules": {
    "pypi": {"type": "FQDN", "destination": "pypi.org"},
}}
HF_TOKEN = "hf_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7"


@dataclass(frozen=True)
class Case:
    rule: str
    violate: Mutation
    owner: str
    says: str
    """A phrase of the violation message."""
    comply: Mutation = nothing
    """Turns the baseline compliant *and applicable* for rules the baseline fails or does not exercise;
    the violating case is ``violate`` applied after it."""
    pack_config: dict[str, Any] = field(default_factory=dict)


CASES = [
    # workspace
    Case("workspace-public-network-disabled", setting(WS, "publicNetworkAccess", "Enabled"), WORKSPACE, "is Enabled"),
    Case("workspace-no-public-access-behind-vnet", setting(WS, "allowPublicAccessWhenBehindVnet", True), WORKSPACE,
         "reachable from the Internet"),
    Case("workspace-customer-managed-key", setting(WS, "encryption", ...), WORKSPACE, "Microsoft-managed keys",
         comply=setting(WS, "encryption", {"status": "Enabled", "keyVaultProperties": {"keyIdentifier": "k"}})),
    Case("workspace-user-assigned-identity", setting(WS, "primaryUserAssignedIdentity", ...), WORKSPACE,
         "no primary user-assigned identity",
         comply=setting(WS, "primaryUserAssignedIdentity", "/subscriptions/x/userAssignedIdentities/ml")),
    Case("workspace-identity-datastores", setting(WS, "systemDatastoresAuthMode", "accessKey"), WORKSPACE,
         "authenticate with accessKey"),
    Case("workspace-managed-network-private-endpoint-rule", setting(WS, "managedNetwork", FQDN_ONLY), WORKSPACE,
         "no PrivateEndpoint outbound rule", comply=setting(WS, "managedNetwork", MANAGED_NETWORK)),
    Case("workspace-private-link", drop(PE, "mlw-gpu-dev-workspace-pe"), WORKSPACE, "no private endpoint"),
    Case("workspace-dependencies-private-endpoints", drop(PE, "mlw-gpu-dev-key-vault-pe"), WORKSPACE,
         "key vault has no private endpoint"),
    Case("workspace-diagnostic-logs", drop(DIAG, "mlw-gpu-dev-diagnostics"), WORKSPACE, "no diagnostic setting"),
    Case("workspace-hbi-storage-private",
         both(setting(WS, "hbiWorkspace", True), setting(STORAGE, "publicNetworkAccess", "Enabled"),
              setting(STORAGE, "networkRuleSet.ipRules", [{"iPAddressOrRange": "203.0.113.7", "action": "Allow"}])),
         WORKSPACE, "admits 1 public IP range", comply=setting(WS, "hbiWorkspace", True)),
    Case("workspace-image-build-compute", setting(WS, "imageBuildCompute", ...), WORKSPACE,
         "imageBuildCompute is not set"),
    # deploy order (policies/rules/deploy_order.yaml)
    Case("deploy-order-compute-after-workspace-endpoint", unwait(COMPUTE, CLUSTER, PE, DNS_GROUP), CLUSTER,
         "created without waiting for the workspace's private endpoint 'mlw-gpu-dev-workspace-pe'"),
    Case("deploy-order-upload-after-blob-endpoint", unwait(UPLOAD, "horovod-1-context", PE, DNS_GROUP), "horovod",
         "without waiting for the DNS zone group of the blob private endpoint 'mlw-gpu-dev-storage-blob-dns'"),
    Case("deploy-order-upload-after-data-role", unwait(UPLOAD, "tf-gpu-1-context", ASSIGNMENT), "tf-gpu",
         "without waiting for the Storage Blob Data Contributor assignment on the container"),
    Case("data-resources-protected", lambda b: b.one(STORAGE)["options"].pop("protect"), WORKSPACE, "not protected"),
    # storage, key vault, registry
    Case("storage-no-public-blob-access", setting(STORAGE, "allowBlobPublicAccess", True), WORKSPACE, "allowed"),
    Case("storage-https-only", setting(STORAGE, "enableHttpsTrafficOnly", False), WORKSPACE, "plain HTTP"),
    Case("storage-minimum-tls-1-2", setting(STORAGE, "minimumTlsVersion", "TLS1_0"), WORKSPACE, "TLS1_0"),
    Case("storage-shared-key-disabled", setting(STORAGE, "allowSharedKeyAccess", True), WORKSPACE, "enabled"),
    Case("storage-network-default-deny",
         both(setting(STORAGE, "publicNetworkAccess", "Enabled"), setting(STORAGE, "networkRuleSet.defaultAction",
                                                                           "Allow")),
         WORKSPACE, "default action is Allow"),
    # Azure Policy built-ins an enterprise may assign with Deny (docs/azure-policy.md).
    Case("storage-public-network-disabled", setting(STORAGE, "publicNetworkAccess", "Enabled"), WORKSPACE,
         "public network access is Enabled"),
    Case("storage-sas-policy", setting(STORAGE, "sasPolicy", ...), WORKSPACE, "no SAS expiration policy"),
    Case("storage-replication-redundant", setting(STORAGE, "sku.name", "Standard_ZRS"), WORKSPACE,
         "replication is Standard_ZRS", comply=setting(STORAGE, "sku.name", "Standard_GZRS")),
    Case("monitoring-public-access-disabled", setting(INSIGHTS, "publicNetworkAccessForQuery", "Enabled"), WORKSPACE,
         "queried from public networks"),
    Case("monitoring-public-ingestion-disabled", setting(LOGS, "publicNetworkAccessForIngestion", "Enabled"),
         WORKSPACE, "accepted from public networks"),
    Case("monitoring-local-auth-disabled", setting(INSIGHTS, "disableLocalAuth", False), WORKSPACE,
         "instrumentation keys"),
    Case("log-analytics-local-auth-disabled", setting(LOGS, "features.disableLocalAuth", ...), WORKSPACE,
         "workspace keys"),
    Case("registry-exports-disabled", setting(ACR, "policies.exportPolicy.status", "enabled"), WORKSPACE,
         "images can be exported"),
    Case("registry-arm-audience-tokens-disabled", setting(ACR, "policies.azureADAuthenticationAsArmPolicy", ...),
         WORKSPACE, "azureADAuthenticationAsArmPolicy is not set"),
    Case("registry-zone-redundant", setting(ACR, "zoneRedundancy", "Disabled"), WORKSPACE, "not zone redundant"),
    Case("network-subnet-private", setting(SUBNET, "defaultOutboundAccess", True), "network",
         "default outbound access", comply=setting(SUBNET, "defaultOutboundAccess", False)),
    Case("required-tags", setting(COMPUTE, "tags", {"project": "aml-gpu-training"}, CLUSTER), CLUSTER,
         "lacks tag(s) cost-center, environment"),
    Case("private-dns-zones-on-existing-network", lambda b: b.drop(VNET, "mlw-gpu-dev-vnet"), WORKSPACE,
         "and links it to"),
    Case("storage-container-private", setting(CONTAINER, "publicAccess", "Blob"), WORKSPACE, "public access is Blob"),
    Case("key-vault-purge-protection", setting(VAULT, "properties.enablePurgeProtection", False), WORKSPACE,
         "purge protection"),
    Case("key-vault-rbac-authorization", setting(VAULT, "properties.enableRbacAuthorization", False), WORKSPACE,
         "access policies"),
    Case("key-vault-public-network-disabled",
         both(setting(VAULT, "properties.publicNetworkAccess", "Enabled"),
              setting(VAULT, "properties.networkAcls.defaultAction", "Allow")), WORKSPACE, "allows by default"),
    Case("registry-admin-user-disabled", setting(ACR, "adminUserEnabled", True), WORKSPACE, "admin user"),
    Case("registry-anonymous-pull-disabled", setting(ACR, "anonymousPullEnabled", True), WORKSPACE, "anonymous pull"),
    Case("registry-public-network-disabled", setting(ACR, "publicNetworkAccess", "Enabled"), WORKSPACE, "Enabled"),
    Case("registry-sku-supports-private-link", setting(ACR, "sku.name", "Standard"), WORKSPACE, "SKU is Standard"),
    # network
    Case("nsg-no-internet-inbound", add_nsg_rule("Internet", "22"), "network", "22 (SSH)",
         comply=add_nsg_rule("AzureMachineLearning", "44224")),
    Case("egress-restricted-for-hbi", open_egress, "network", "reach the whole Internet",
         comply=both(setting(WS, "hbiWorkspace", True), deny_internet_out)),
    Case("subnet-has-nsg", setting(SUBNET, "networkSecurityGroup", ...), "network", "no network security group"),
    Case("private-endpoint-dns", drop(DNS_GROUP, "mlw-gpu-dev-registry-dns"), WORKSPACE, "no private DNS zone group"),
    # compute
    Case("compute-local-auth-disabled", setting(COMPUTE, "properties.disableLocalAuth", False, CLUSTER), CLUSTER,
         "local authentication is enabled"),
    Case("compute-in-virtual-network", lambda b: aml(b).pop("subnet"), CLUSTER, "not in a virtual network"),
    Case("compute-no-node-public-ip", lambda b: aml(b).update(enableNodePublicIp=True), CLUSTER, "enabled"),
    Case("compute-ssh-disabled", lambda b: aml(b).update(remoteLoginPortPublicAccess="Enabled"), CLUSTER,
         "SSH public access is Enabled"),
    Case("compute-managed-identity", setting(COMPUTE, "identity", ..., CLUSTER), CLUSTER, "no managed identity"),
    Case("compute-scale-settings-valid", lambda b: aml(b)["scaleSettings"].update(minNodeCount=3), CLUSTER,
         "minNodeCount 3 is greater than maxNodeCount 2"),
    Case("compute-scale-to-zero", lambda b: aml(b)["scaleSettings"].update(minNodeCount=1), CLUSTER,
         "keeps 1 Standard_ND96asr_v4 node(s) running"),
    Case("compute-idle-scale-down", lambda b: aml(b)["scaleSettings"].update(nodeIdleTimeBeforeScaleDown="PT2H"),
         CLUSTER, "120 minutes"),
    Case("compute-instance-idle-shutdown", compute_instance(None), WORKSPACE, "no idle shutdown",
         comply=compute_instance("PT60M")),
    Case("compute-size-offered-in-region", setting(COMPUTE, "location", "brazilsouth", CLUSTER), CLUSTER,
         "Standard_ND96asr_v4 is not sold in brazilsouth (Microsoft's products-by-region table as read 2026-02-12); "
         "it is listed in "),
    Case("compute-allowed-sizes", lambda b: aml(b).update(vmSize="Standard_NV36ads_A10_v5"), CLUSTER,
         "Standard_NV36ads_A10_v5 is not in the allowed sizes"),
    Case("compute-size-not-retired", lambda b: aml(b).update(vmSize="Standard_NC24rs_v3"), CLUSTER,
         "retired (2025-09-30)"),
    Case("compute-max-nodes", lambda b: aml(b)["scaleSettings"].update(maxNodeCount=64), CLUSTER,
         "64 nodes, above the cap of 32"),
    # environments
    Case("environment-secrets-in-build-context",
         setting("aml-gpu-training:infra:Environment", "context_secrets", [".env", "id_rsa"], "tf-gpu"), "tf-gpu",
         "build context 'environments/tensorflow' holds a credential in id_rsa"),
    Case("environment-image-pinned",
         setting(ENV_VERSION, "properties.image", "mcr.microsoft.com/azureml/curated/acpt-pytorch:latest",
                 "acpt-pytorch-1"), "acpt-pytorch", ":latest"),
    Case("environment-image-digest",
         setting(ENV_VERSION, "properties.image", "mcr.microsoft.com/azureml/curated/acpt-pytorch-2.2-cuda12.1:18",
                 "acpt-pytorch-1"), "acpt-pytorch", "pinned by tag, not digest",
         comply=lambda b: [v["inputs"]["properties"].update(image=v["inputs"]["properties"]["image"] + "@sha256:ab")
                           for v in b.resources if v["type"] == ENV_VERSION and "image" in v["inputs"]["properties"]]),
    # runs
    Case("run-counts-valid", run_setting("ddp-per-process", "spec.resources.instance_count", 0), "ddp-per-process",
         "instance_count is 0"),
    Case("run-processes-exceed-gpus",
         run_setting("ddp-per-process", "spec.distribution.process_count_per_instance", 16), "ddp-per-process",
         "16 processes per node"),
    Case("run-gpus-left-idle", run_setting("ddp-per-process", "spec.distribution.process_count_per_instance", 4),
         "ddp-per-process", "4 of 8 GPUs stay idle"),
    Case("run-launcher-on-per-process-launch",
         run_setting("torchrun-per-node", "spec.distribution.process_count_per_instance", 8), "torchrun-per-node",
         "started 8 times per node"),
    Case("run-instance-count-exceeds-max-nodes", run_setting("ddp-per-process", "spec.resources.instance_count", 3),
         "ddp-per-process", "scales to at most 2"),
    Case("run-multi-node-without-infiniband",
         on_cluster("ddp-per-process", "Standard_NC96ads_A100_v4", 8, rdma=False, sriov=False), "ddp-per-process",
         "has no InfiniBand"),
    Case("run-multi-node-rdma-without-sriov",
         on_cluster("ddp-per-process", "Standard_NC24r", 8, rdma=True, sriov=False), "ddp-per-process",
         "RDMA without SR-IOV"),
    Case("run-infiniband-disabled", run_setting("torchrun-per-node", "spec.environment_variables.NCCL_IB_DISABLE", "1"),
         "torchrun-per-node", "NCCL_IB_DISABLE='1' (environment_variables) disables InfiniBand"),
    Case("run-infiniband-setting-unclear",
         run_setting("torchrun-per-node", "spec.environment_variables.NCCL_IB_DISABLE", "true"), "torchrun-per-node",
         "has no effect: NCCL reads it as 0"),
    Case("run-docker-args-confined", run_setting("torchrun-per-node", "spec.resources.docker_args", "--privileged"),
         "torchrun-per-node", "--privileged gives the container every capability"),
    Case("run-ssh-service-has-key", run_setting("torchrun-per-node", "spec.services", {"debug": {"type": "ssh"}}),
         "torchrun-per-node", "opens SSH on the nodes with no ssh_public_keys"),
    Case("run-notebook-service-user-identity",
         run_setting("torchrun-per-node", "spec.services", {"nb": {"type": "jupyter_lab"}}), "torchrun-per-node",
         "runs with identity unset, not user_identity"),
    Case("identity-attached-allowed",
         setting(COMPUTE, "identity", {"type": "SystemAssigned,UserAssigned", "userAssignedIdentities": [
             "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg-github-oidc/providers/"
             "Microsoft.ManagedIdentity/userAssignedIdentities/id-aml-gpu-deployer"]}, CLUSTER),
         CLUSTER, "attaches user-assigned identity /subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/"
         "rg-github-oidc/providers/Microsoft.ManagedIdentity/userAssignedIdentities/id-aml-gpu-deployer"),
    Case("stack-provider-settings-allowed",
         lambda b: b.config.__setitem__("azure-native:clientId", "44444444-4444-4444-4444-444444444444"),
         WORKSPACE, "sets azure-native:clientId, a provider or engine setting the pack config does not allow"),
    Case("storage-operator-ranges-not-open",
         setting(STORAGE, "networkRuleSet.ipRules", [{"iPAddressOrRange": "0.0.0.0/0", "action": "Allow"}]),
         WORKSPACE, "lets the whole internet through the storage firewall",
         comply=setting(STORAGE, "networkRuleSet.ipRules",
                        [{"iPAddressOrRange": "203.0.113.0/24", "action": "Allow"}])),
    Case("run-launcher-variables-overridden",
         run_setting("torchrun-per-node", "spec.environment_variables.MASTER_PORT", "29500"), "torchrun-per-node",
         "sets MASTER_PORT"),
    Case("run-mpi-environment", without_capability("horovod-mpi", "mpi"), "horovod-mpi", "known not to provide MPI"),
    Case("run-horovod-environment", without_capability("horovod-mpi", "horovod"), "horovod-mpi",
         "known not to provide it"),
    Case("run-deepspeed-environment", without_capability("deepspeed-per-process", "deepspeed"),
         "deepspeed-per-process", "uses DeepSpeed"),
    Case("run-environment-infiniband", without_capability("ddp-per-process", "infiniband"), "ddp-per-process",
         "known not to provide InfiniBand libraries"),
    Case("run-environment-capability-unknown", without_capability("deepspeed-per-process", "deepspeed", known=False),
         "deepspeed-per-process", "DeepSpeed needs deepspeed; whether environment",
         comply=with_capability_everywhere("infiniband")),
    Case("run-secrets-in-command",
         run_setting("torchrun-per-node", "spec.command",
                     "torchrun --nproc_per_node 8 train.py --hf-token " + HF_TOKEN),
         "torchrun-per-node", "command argument --hf-token (holds a Hugging Face token)"),
    Case("run-entry-script-exists", run_setting("ddp-per-process", "missing_scripts", ["third_party/train.py"]),
         "ddp-per-process", "runs third_party/train.py, which is not in code folder",
         comply=every_run("missing_scripts", [])),
    Case("run-gpu-vendor-environment",
         on_cluster("ddp-per-process", "Standard_ND96isr_MI300X_v5", 8, rdma=True, sriov=True, vendor="amd"),
         "ddp-per-process", "has AMD GPUs"),
    Case("run-environment-pinned",
         both(run_setting("ddp-per-process", "environment.pinned", False),
              run_setting("ddp-per-process", "environment.id", "azureml:acpt-pytorch@latest")),
         "ddp-per-process", "not pinned"),
    Case("run-shm-size-sufficient", run_setting("deepspeed-per-process", "spec.resources.shm_size", "2g"),
         "deepspeed-per-process", "give at least 8g"),
    Case("run-timeout-set", run_setting("ddp-per-process", "spec.limits", ...), "ddp-per-process", "no limits.timeout"),
    Case("run-secrets-in-environment-variables",
         run_setting("torchrun-per-node", "spec.environment_variables.HF_TOKEN", HF_TOKEN), "torchrun-per-node",
         "HF_TOKEN (holds a Hugging Face token)"),
    Case("run-secrets-in-code", run_setting("ddp-per-process", "code_findings", ["ssh/id_rsa"]), "ddp-per-process",
         "holds a credential in ssh/id_rsa"),
    Case("secrets-scan-incomplete", run_setting("ddp-per-process", "code_unscanned", ["data/weights.bin"]),
         "ddp-per-process", "1 file(s) past the 256 MiB scan budget were not read to the end: data/weights.bin"),
    Case("run-low-priority-multi-node", run_setting("ddp-per-process", "cluster.tier", "low_priority"),
         "ddp-per-process", "one preemption ends the run"),
    Case("run-tensorflow-task-count", run_setting("tf-multiworker", "spec.distribution.worker_count", 3),
         "tf-multiworker", "3 worker(s) on 2 node(s): Azure ML runs one worker per node",
         comply=run_setting("tf-multiworker", "spec.distribution.parameter_server_count", 1)),
    Case("run-tensorflow-parameter-servers",
         both(run_setting("tf-multiworker", "spec.distribution.worker_count", 1),
              run_setting("tf-multiworker", "spec.distribution.parameter_server_count", 1)),
         "tf-multiworker", "uses 1 parameter server"),
    Case("run-tensorflow-task-names",
         run_setting("tf-multiworker", "spec.command", "python tf_mnist_multiworker.py --task_type master"),
         "tf-multiworker",
         "'master'"),
    # pipelines and sweeps: the composition of runs
    Case("pipeline-binding-unknown",
         job_setting(PIPELINE_TYPE, "train-eval", "jobs.evaluate.inputs.checkpoints",
                     "${{parent.jobs.trian.outputs.checkpoints}}"),
         "train-eval/evaluate", "the pipeline has no step 'trian' (steps: evaluate, train)"),
    Case("pipeline-component-not-pulled",
         both(job_setting(PIPELINE_TYPE, "train-eval", "jobs.evaluate.component", "azureml:evaluate:1"),
              lambda b: b.one(PIPELINE_TYPE, "train-eval")["inputs"]["runs"].remove("train-eval/evaluate"),
              lambda b: b.drop(RUN_TYPE, "train-eval/evaluate")),
         "train-eval", "step 'evaluate' runs registered component azureml:evaluate:1, whose spec is not in the "
         "project: run `amlgpu components pull --stack baseline`"),
    Case("resource-secrets-in-settings", setting(WS, "tags", {"team": "vision", "owner": HF_TOKEN}), WORKSPACE,
         "tags.owner (holds a Hugging Face token)"),
    Case("pipeline-secrets-in-definition",
         job_setting(SWEEP_TYPE, "lr-sweep", "search_space.batch.values", [32, HF_TOKEN]),
         "lr-sweep", "sweep search_space.batch.values[1] (holds a Hugging Face token)"),
    Case("pipeline-step-cycle",
         job_setting(PIPELINE_TYPE, "train-eval", "jobs.train.inputs.report",
                     "${{parent.jobs.evaluate.outputs.report}}"),
         "train-eval", "steps evaluate -> train -> evaluate wait on each other's outputs"),
    Case("sweep-concurrent-trials-exceed-cluster",
         job_setting(SWEEP_TYPE, "lr-sweep", "limits.max_concurrent_trials", 4),
         "lr-sweep", "4 concurrent trial(s) of 2 node(s) need 8 nodes; cluster gpu-a100 scales to 2: 1 trial(s) run at "
         "once, the other 3 wait in the queue"),
    Case("sweep-timeout-below-trial-timeout", job_setting(SWEEP_TYPE, "lr-sweep", "limits.timeout", 3600), "lr-sweep",
         "limits.timeout 3600s cancels the sweep before a trial reaches its trial_timeout of 7200s"),
    Case("run-gpu-nodes-unused", run_setting("ddp-per-process", "scripts_without_gpu", ["train_ddp.py"]),
         "ddp-per-process", "train_ddp.py import(s) nothing that opens a GPU, yet the run holds 2 "
         "Standard_ND96asr_v4 node(s) of 8 GPU(s) each"),
    Case("run-copies-without-process-group",
         run_setting("ddp-per-process", "scripts_without_process_group", ["prep.py"]), "ddp-per-process",
         "prep.py joins no process group and is started 16 times: 15 duplicate copies"),
    Case("run-image-cuda-supports-gpu",
         both(run_setting("ddp-per-process", "environment.cuda", "10.2"),
              run_setting("ddp-per-process", "environment.cuda_from", "image nvidia/cuda:10.2-cudnn7-devel"),
              run_setting("ddp-per-process", "environment.cuda_certain", True)),
         "ddp-per-process", "image nvidia/cuda:10.2-cudnn7-devel is CUDA 10.2; Standard_ND96asr_v4 (A100, Ampere "
         "sm_80) needs CUDA 11.0 or later"),
    Case("run-image-cuda-hint",
         both(run_setting("ddp-per-process", "environment.cuda", "10.1"),
              run_setting("ddp-per-process", "environment.cuda_from", "image azureml:AzureML-pytorch-cuda10.1:1")),
         "ddp-per-process", "the name says so, which may not be the content: image azureml:AzureML-pytorch-cuda10.1:1 "
         "is CUDA 10.1"),
    Case("run-runtime-override",
         run_setting("torchrun-per-node", "spec.environment_variables.AZUREML_CR_BOOTSTRAPPER_CONFIG_OVERRIDE",
                     '{"capabilities_registry": {"registry": {"url": "commonruntimedev.azurecr.io"}, '
                     '"regional_tag_prefix": false}}'),
         "torchrun-per-node", "sets AZUREML_CR_BOOTSTRAPPER_CONFIG_OVERRIDE: Azure ML's job runtime is pulled from "
         "another registry to commonruntimedev.azurecr.io"),
    Case("run-legacy-batchai-variables",
         run_setting("ddp-per-process", "legacy_variables", ["train.py:3 AZ_BATCHAI_MPI_MASTER_NODE"]),
         "ddp-per-process", "the current runtime does not set: train.py:3 AZ_BATCHAI_MPI_MASTER_NODE"),
    Case("run-launcher-node-count", launch_setting("torchrun-per-node", nodes=[4, 4], nodes_from="--nnodes 4"),
         "torchrun-per-node", "waits for 4 node(s) (--nnodes 4); the run has 2 (resources.instance_count)"),
    Case("run-launcher-rendezvous",
         launch_setting("torchrun-per-node", rendezvous="each node alone", rendezvous_from="--standalone"),
         "torchrun-per-node", "--standalone: each node waits on its own localhost for 2 node(s) that never come"),
    Case("run-launch-variable-empty",
         launch_setting("torchrun-per-node", node_rank="unknown", node_rank_from="--node_rank $NODERANK"),
         "torchrun-per-node", "--node_rank $NODERANK reads $NODERANK, which is certainly empty: Azure ML never sets "
         "it and neither the command nor environment_variables assign it. Did you mean $NODE_RANK?"),
    Case("run-launch-topology-unknown",
         launch_setting("torchrun-per-node", unknown=["--nnodes $N: the nodes it waits for: `$N` is only known"]),
         "torchrun-per-node", "cannot tell: `torchrun --nproc_per_node 8 --nnodes 2"),
    Case("run-cluster-matches-plan", run_setting("ddp-per-process", "cluster.max_instances", 4), "ddp-per-process",
         "resolved against max nodes 4"),
    Case("run-environment-matches-plan", run_setting("ddp-per-process", "environment.id", "azureml:acpt-pytorch:2"),
         "ddp-per-process", "is not registered by this stack"),
    # budgets: the cluster moved to a size and region the shipped pricing table prices (H100, eastus2)
    Case("stack-hourly-ceiling", lambda b: aml(b)["scaleSettings"].update(maxNodeCount=4), WORKSPACE,
         "all clusters at max nodes cost $393.55 per hour, over the budget of $250.00 per hour",
         comply=priced_h100, pack_config={"stack-hourly-ceiling": {"max_usd_per_hour": 250}}),
    Case("run-cost-ceiling", run_setting("ddp-per-process", "spec.resources.instance_count", 4), "ddp-per-process",
         "4 node(s) x $98.32 per hour x 2 h timeout = $786.56, over the budget of $500.00 per run",
         # The sweep is judged whole (4 trials x 2 nodes x 2 h is over $500): one trial keeps it within.
         comply=both(priced_h100, job_setting(SWEEP_TYPE, "lr-sweep", "limits.max_total_trials", 1)),
         pack_config={"run-cost-ceiling": {"max_usd_per_run": 500}}),
    Case("cluster-idle-floor", lambda b: aml(b)["scaleSettings"].update(minNodeCount=2), CLUSTER,
         "$143,547.20 per month, over the budget of $100,000.00 per month",
         comply=both(priced_h100, lambda b: aml(b)["scaleSettings"].update(minNodeCount=1)),
         pack_config={"cluster-idle-floor": {"max_usd_per_month": 100000}}),
]


def findings_of(case: Case, mutation: Mutation) -> list[Finding]:
    b = baseline()
    mutation(b)
    report = b.evaluate(pack_config=case.pack_config)
    return [f for f in report.findings if f.rule.id == case.rule]


def test_every_rule_has_a_case() -> None:
    assert sorted(c.rule for c in CASES) == sorted(BY_ID)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.rule)
def test_compliant_case_passes(case: Case) -> None:
    assert findings_of(case, case.comply) == []


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.rule)
def test_violating_case_fails_for_the_right_resource(case: Case) -> None:
    found = findings_of(case, both(case.comply, case.violate))
    assert found, f"{case.rule} did not fire"
    assert {f.owner.name for f in found} == {case.owner}
    assert any(case.says in f.message for f in found), [f.message for f in found]
    rule = BY_ID[case.rule]
    assert all(f.enforcement == rule.enforcement and f.level == ("error" if rule.enforcement == "mandatory" else
                                                                  "warning") for f in found)


def test_rule_metadata_is_complete() -> None:
    for rule in RULES:
        assert rule.title and rule.rationale and rule.remediation, rule.id
        assert rule.reference.startswith("https://"), rule.id
        assert rule.severity in ("critical", "high", "medium", "low")


@pytest.mark.parametrize(("today", "retired"), [(dt.date(2025, 9, 29), False), (dt.date(2025, 9, 30), True)])
def test_size_retirement_follows_the_evaluation_date(today: dt.date, retired: bool) -> None:
    b = baseline()
    aml(b).update(vmSize="Standard_NC24rs_v3")
    found = [f for f in b.evaluate(today=today).findings if f.rule.id == "compute-size-not-retired"]
    assert bool(found) is retired


def test_secret_values_never_appear_in_findings() -> None:
    found = findings_of(CASES[[c.rule for c in CASES].index("run-secrets-in-environment-variables")],
                        run_setting("torchrun-per-node", "spec.environment_variables.HF_TOKEN", HF_TOKEN))
    assert found and all(HF_TOKEN not in f.text for f in found)


@pytest.mark.parametrize(("name", "value", "flagged"), [
    ("TOKENIZERS_PARALLELISM", "false", False),
    ("WANDB_API_KEY", "0123456789abcdef", True),
    ("AZUREML_SSH_KEY", "generated-key", False),  # a file name (azureml-examples' DeepSpeed autotuning job)
    ("WANDB_API_KEY", "wandb-key-file.txt", False),
    ("MODEL", "hf_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7", True),  # by value, whatever the name
    ("WANDB_API_KEY", "${{inputs.key}}", False),
    ("DB_PASSWORD", "hunter2", True),
    ("STORAGE", "DefaultEndpointsProtocol=https;AccountKey=" + "A" * 86 + "==", True),
    ("NCCL_SOCKET_IFNAME", "eth0", False),
])
def test_secret_variable_detection(name: str, value: str, flagged: bool) -> None:
    b = baseline()
    run_setting("ddp-per-process", f"spec.environment_variables.{name}", value)(b)
    found = [f for f in b.evaluate().findings if f.rule.id == "run-secrets-in-environment-variables"]
    assert bool(found) is flagged


@pytest.mark.parametrize(
    ("variable", "value"), [("NCCL_NET", "Socket"), ("UCX_TLS", "tcp,self,sm"), ("UCX_TLS", "^rc,dc")]
)
def test_infiniband_switches(variable: str, value: str) -> None:
    b = baseline()
    run_setting("torchrun-per-node", f"spec.environment_variables.{variable}", value)(b)
    found = [f for f in b.evaluate().findings if f.rule.id == "run-infiniband-disabled"]
    assert [f.owner.name for f in found] == ["torchrun-per-node"]


def test_infiniband_switch_in_the_command_is_caught() -> None:
    b = baseline()
    run_setting("ddp-per-process", "spec.command", "export NCCL_IB_DISABLE=1; python train_ddp.py")(b)
    found = [f for f in b.evaluate().findings if f.rule.id == "run-infiniband-disabled"]
    assert [f.message for f in found] == ["NCCL_IB_DISABLE='1' (the command, line 1) disables InfiniBand (NCCL reads "
                                          "it as 1) on Standard_ND96asr_v4"]


def test_unknown_values_are_never_violations() -> None:
    # What `pulumi preview` of a new stack sees: ids and generated names are not known yet.
    b = baseline()
    aml(b)["subnet"]["id"] = "[unknown]"
    setting(WS, "publicNetworkAccess", "[unknown]")(b)
    for group in (r for r in b.resources if r["type"] == DNS_GROUP):
        group["inputs"]["privateEndpointName"] = "[unknown]"
    for pe in (r for r in b.resources if r["type"] == PE):
        pe["inputs"]["privateLinkServiceConnections"][0]["privateLinkServiceId"] = "[unknown]"
    for setting_ in (r for r in b.resources if r["type"] == DIAG):
        setting_["inputs"]["resourceUri"] = "[unknown]"
    assert b.evaluate().mandatory_failures == 0


# ------------------------------------------------------------------ the seed documents' wrong examples


SEED_CLUSTERS = [
    {"name": "v100-ib", "size": "Standard_NC24rs_v3", "max_instances": 2},
    {"name": "v100-eth", "size": "Standard_NC24s_v3", "max_instances": 2},
    {"name": "a100-pcie", "size": "Standard_NC96ads_A100_v4", "max_instances": 2},
    {"name": "k80-rdma", "size": "Standard_NC24r", "max_instances": 2},
]


def _seed_run(name: str, command: str, compute: str, procs: int, nodes: int = 1) -> dict[str, Any]:
    return {"name": name, "code": "jobs/workloads", "command": command, "environment": "acpt-pytorch",
            "compute": compute, "resources": {"instance_count": nodes}, "limits": {"timeout": 3600},
            "distribution": {"type": "pytorch", "process_count_per_instance": procs}}


SEED_RUNS = [
    # azureml-examples' DeepSpeed job: the deepspeed launcher, with Azure ML also starting one process per GPU.
    (_seed_run("ds-under-per-process", "deepspeed --num_gpus 4 train_ddp.py --deepspeed ds.json", "v100-ib", 4),
     "run-launcher-on-per-process-launch"),
    (_seed_run("two-per-node", "python train_ddp.py", "v100-ib", 2), "run-gpus-left-idle"),
    (_seed_run("multi-node-nc24s", "python train_ddp.py", "v100-eth", 4, nodes=2), "run-multi-node-without-infiniband"),
    (_seed_run("multi-node-nc96ads", "python train_ddp.py", "a100-pcie", 4, nodes=2),
     "run-multi-node-without-infiniband"),
    (_seed_run("multi-node-nc24r", "python train_ddp.py", "k80-rdma", 4, nodes=2), "run-multi-node-rdma-without-sriov"),
]


def _add_seeds(config: dict[str, Any]) -> None:
    config["aml-gpu-training:clusters"] += SEED_CLUSTERS
    config["aml-gpu-training:jobs"] = [run for run, _ in SEED_RUNS]


def test_seed_examples_wrong_for_their_cluster_are_caught(plan_variant: Any) -> None:
    plan = plan_variant(_add_seeds)
    resources = [r.to_json() for r in plan.resources]
    runs = [ResolvedRun.from_props(r["inputs"]) for r in resources if r["type"] == RUN_TYPE]
    stack_file = dev_config()
    _add_seeds(stack_file)
    values = {k.split(":", 1)[1]: v for k, v in stack_file.items() if k.startswith("aml-gpu-training:")}
    config = build(values, location="westeurope", file="Pulumi.test.yaml", root=ROOT)
    report = evaluate(resources, runs, config, today=TODAY)
    found = {(f.rule.id, f.owner.name) for f in report.findings if f.enforcement == f.rule.enforcement}
    for run, rule in SEED_RUNS:
        assert (rule, run["name"]) in found, f"{run['name']}: {sorted(found)}"


def test_a_pipeline_step_is_found_located_and_waived_by_its_qualified_name() -> None:
    b = baseline()
    b.run("train-eval/train")["spec"]["environment_variables"] = {"NCCL_IB_DISABLE": "1"}
    (finding,) = [f for f in b.evaluate().findings if f.rule.id == "run-infiniband-disabled"]
    assert finding.text.startswith("run 'train-eval/train': NCCL_IB_DISABLE='1'")
    index = [job["name"] for job in b.config["aml-gpu-training:jobs"]].index("train-eval")
    assert finding.location == ("aml-gpu-training:jobs", index, "jobs", "train", "environment_variables")
    b.config["aml-gpu-training:waivers"] = [{
        "rule": "run-infiniband-disabled", "resource": "train-eval/train", "expires": "2026-07-01",
        "reason": "INC-1234: the fabric of this cluster is being replaced; TCP until the new one is certified",
        "fingerprint": finding.fingerprint,
    }]
    (waived,) = [f for f in b.evaluate().findings if f.rule.id == "run-infiniband-disabled"]
    assert waived.waived and waived.owner.name == "train-eval/train"


def test_a_pipelines_sweep_step_search_space_is_checked_for_secrets() -> None:
    b = baseline()
    node = {"type": "sweep", "search_space": {"token": {"type": "choice", "values": ["a", HF_TOKEN]}},
            "trial": {"command": "python train.py --token ${{inputs.token}}"}}
    b.job(PIPELINE_TYPE, "train-eval")["jobs"]["tune"] = node
    found = [f for f in b.evaluate().findings if f.rule.id == "pipeline-secrets-in-definition"]
    assert [f.owner.name for f in found] == ["train-eval"]
    assert found[0].message.startswith("sweep step 'tune' search_space.token") and HF_TOKEN not in found[0].message
