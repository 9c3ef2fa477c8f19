"""The first ``pulumi up`` of every shipped stack converges in one pass against a fake Azure that enforces the
documented preconditions and delays (tests/first_deploy.py, each rule with its source); the same replay fails on
the graph the program planned before the deploy-order preconditions, so it can fail."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from planning.engine import run_program
from stack.config import from_stackfile
from stack.stackfile import read
from tests.conftest import NS, ROOT, make_project
from tests.first_deploy import PROFILES, Deployer, FirstDeploy, Outcome, Subscription, deployer_of

STACKS = {
    "dev": ROOT / "Pulumi.dev.yaml",
    "prod": ROOT / "Pulumi.prod.yaml",
    **{f"multi-team/{p.stem.removeprefix('Pulumi.')}": p
       for p in sorted((ROOT / "examples/multi-team").glob("Pulumi.*.yaml"))},
}
REGISTERED = frozenset({"microsoft.machinelearningservices", "microsoft.storage", "microsoft.keyvault",
                        "microsoft.containerregistry", "microsoft.insights", "microsoft.operationalinsights",
                        "microsoft.network", "microsoft.managedidentity", "microsoft.documentdb", "microsoft.search"})
"""The resource providers the preflight asks for, registered."""

Planned = tuple[list[dict[str, Any]], Deployer]


@pytest.fixture(scope="module")
def planned() -> Callable[[str], Planned]:
    cache: dict[str, Planned] = {}

    def plan(stack: str) -> Planned:
        if stack not in cache:
            stackfile = read(STACKS[stack])
            resources = [r.to_json() for r in run_program(stack.rsplit("/", 1)[-1], stackfile, ROOT).resources]
            cache[stack] = (resources, deployer_of(from_stackfile(stackfile, ROOT)))
        return copy.deepcopy(cache[stack][0]), cache[stack][1]

    return plan


def replay(resources: list[dict[str, Any]], deployer: Deployer, profile: str = "azure-like",
           registered: frozenset[str] = REGISTERED) -> Outcome:
    return FirstDeploy(resources, root=ROOT, deployer=deployer, subscription=Subscription(registered),
                       profile=PROFILES[profile]).run()


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("stack", sorted(STACKS))
def test_the_first_up_converges_in_one_pass(planned: Callable[[str], Planned], stack: str, profile: str) -> None:
    resources, deployer = planned(stack)
    outcome = replay(resources, deployer, profile)
    assert outcome.failures() == [] and outcome.converged
    created = {k for k in outcome.finished}
    assert len(created) == sum(1 for r in resources if not r["type"].startswith("aml-gpu-training:"))


UPLOAD = "pulumi-python:dynamic/amlgpu:BuildContextUpload"
PRECONDITION_EDGES = {
    # subject type: the dependency types the program added for Azure's documented preconditions
    "azure-native:machinelearningservices:Compute": {"azure-native:network:PrivateEndpoint",
                                                     "azure-native:network:PrivateDnsZoneGroup"},
    UPLOAD: {"azure-native:network:PrivateEndpoint", "azure-native:network:PrivateDnsZoneGroup"},
    "azure-native:network:PrivateDnsZoneGroup": {"azure-native:privatedns:VirtualNetworkLink"},
}


def before_the_preconditions(resources: list[dict[str, Any]], *, subjects: Any = tuple(PRECONDITION_EDGES),
                              cmk_identity: bool = False) -> list[dict[str, Any]]:
    """What the program planned before: the same resources without the precondition edges of ``subjects`` (types),
    and with ``cmk_identity`` the customer-managed key without its identity."""
    for resource in resources:
        dropped = PRECONDITION_EDGES.get(resource["type"], set()) if resource["type"] in subjects else set()
        options = resource.get("options") or {}
        options["dependsOn"] = [d for d in options.get("dependsOn", []) if d["type"] not in dropped]
        if cmk_identity:
            (resource["inputs"].get("encryption") or {}).pop("identity", None)
    return resources


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_replay_fails_on_the_graph_planned_before(planned: Callable[[str], Planned], stack: str) -> None:
    resources, deployer = planned(stack)
    outcome = replay(before_the_preconditions(resources), deployer)
    assert not outcome.converged
    refused = outcome.failures()
    assert any(f.startswith("Compute") and "requires workspace private endpoint" in f for f in refused), refused


@pytest.fixture(scope="module")
def public_workspace(tmp_path_factory: pytest.TempPathFactory) -> Planned:
    """prod with a public workspace: no image-build cluster for the uploads to wait for, its storage still private,
    the deployer in the hub network."""
    config = yaml.safe_load(STACKS["prod"].read_text())["config"]
    config[f"{NS}:workspace"]["public_network_access"] = "Enabled"
    project = make_project(tmp_path_factory.mktemp("public-workspace"), config)
    stackfile = read(project / "Pulumi.test.yaml")
    resources = [r.to_json() for r in run_program("test", stackfile, project).resources]
    return resources, deployer_of(from_stackfile(stackfile, project))


def test_an_upload_that_races_its_network_path_is_refused_at_the_firewall(
        public_workspace: Planned, monkeypatch: pytest.MonkeyPatch) -> None:
    """Uploads without their endpoint edges, and the upload as it was (no retry of AuthorizationFailure): they start
    before the blob endpoint's DNS record exists and are refused."""
    resources, deployer = copy.deepcopy(public_workspace[0]), public_workspace[1]
    assert replay(copy.deepcopy(resources), deployer).converged
    monkeypatch.setattr("infra.build_context.RETRIED", frozenset({"AuthorizationPermissionMismatch"}))
    outcome = replay(before_the_preconditions(resources, subjects={UPLOAD}), deployer)
    refused = outcome.failures()
    assert refused and all(f.startswith("BuildContextUpload") and "refused the request at its firewall" in f
                           for f in refused), refused


def test_the_replay_fails_without_the_key_identity(planned: Callable[[str], Planned]) -> None:
    resources, deployer = planned("prod")
    outcome = replay(before_the_preconditions(resources, subjects=(), cmk_identity=True), deployer)
    assert outcome.failures() == [
        "Workspace mlw-gpu-prod-workspace: the workspace reached its customer-managed key with its system-assigned "
        "identity, which holds no access to the key vault (encryption.identity.userAssignedIdentity is not set)"]
    assert outcome.blocked  # everything that needs the workspace never starts


def test_the_stack_rules_flag_the_graph_planned_before(planned: Callable[[str], Planned]) -> None:
    from policies.engine import evaluate

    resources, _ = planned("prod")
    config = from_stackfile(read(STACKS["prod"]), ROOT)
    found = {f.rule.id for f in evaluate(before_the_preconditions(resources), [], config).findings
             if f.rule.family == "deploy_order"}
    assert found == {"deploy-order-compute-after-workspace-endpoint", "deploy-order-upload-after-blob-endpoint"}
    assert not [f for f in evaluate(planned("prod")[0], [], config).findings if f.rule.family == "deploy_order"]


def test_an_upload_that_races_its_network_path_is_retried_until_the_path_exists(public_workspace: Planned) -> None:
    """The same race, with today's upload: AuthorizationFailure is retried with the bounded wait, so the upload
    outlasts an endpoint that appears within it."""
    resources, deployer = copy.deepcopy(public_workspace[0]), public_workspace[1]
    outcome = replay(before_the_preconditions(resources, subjects={UPLOAD}), deployer)
    assert outcome.converged


def test_the_deployer_role_takes_effect_late_and_the_upload_outwaits_it(planned: Callable[[str], Planned]) -> None:
    # dev: in prod the uploads now come after the workspace, which waits for its identity's roles (above), by when
    # the deployer's role is old enough; dev has no such wait, and its uploads race the role.
    resources, deployer = planned("dev")
    deploy = FirstDeploy(resources, root=ROOT, deployer=deployer, subscription=Subscription(REGISTERED),
                         profile=PROFILES["azure-like"])
    outcome = deploy.run()
    uploads = [k for k in outcome.finished if k[0] == UPLOAD]
    role = outcome.finished[("azure-native:authorization:RoleAssignment", "build-contexts-uploader")]
    assert uploads
    for key in uploads:
        # Refused (AuthorizationPermissionMismatch) until the role's 10 minutes were over, then written at the
        # next retry, 15 s apart.
        assert outcome.started[key] < role + 600.0 <= outcome.finished[key] <= role + 600.0 + 15.0


@pytest.mark.parametrize(("change", "refusal"), [
    (lambda d: Deployer(d.public_ip, azure_region="westeurope"), "refused the request at its firewall"),
    (lambda d: Deployer("198.51.100.77"), "refused the request at its firewall"),
], ids=["same-region-azure-host-in-the-range", "address-outside-the-range"])
def test_an_allow_listed_address_is_a_path_only_from_outside_the_region(
        planned: Callable[[str], Planned], change: Callable[[Deployer], Deployer], refusal: str) -> None:
    resources, deployer = planned("dev")
    assert replay(resources, deployer).converged
    outcome = replay(resources, change(deployer))
    assert outcome.failures() and all(refusal in f for f in outcome.failures())


def test_a_new_network_without_an_operator_range_has_no_path(planned: Callable[[str], Planned]) -> None:
    resources, _ = planned("dev")
    config = from_stackfile(read(STACKS["dev"]), ROOT)
    nowhere = deployer_of(config.model_copy(update={"network": config.network.model_copy(
        update={"operator_ip_ranges": []})}))
    assert nowhere.network_id is None
    for resource in resources:  # the account as planned without operator ranges: public network access off
        if resource["type"] == "azure-native:storage:StorageAccount":
            resource["inputs"]["publicNetworkAccess"] = "Disabled"
    outcome = replay(resources, nowhere)
    assert {f.split(":")[0] for f in outcome.failures()} == {
        "BuildContextUpload acpt-pytorch-1-context", "BuildContextUpload horovod-1-context",
        "BuildContextUpload tf-gpu-1-context"}


@pytest.mark.parametrize("missing", ["microsoft.documentdb", "microsoft.search", "microsoft.network"])
def test_an_unregistered_provider_is_refused(planned: Callable[[str], Planned], missing: str) -> None:
    resources, deployer = planned("prod")
    outcome = replay(resources, deployer, registered=REGISTERED - {missing})
    assert outcome.failures() and all("MissingSubscriptionRegistration" in f for f in outcome.failures())
    assert any(missing in f for f in outcome.failures())


ROLES = "pulumi-python:dynamic/amlgpu:RolesEffective"
WORKSPACE = "azure-native:machinelearningservices:Workspace"


def test_the_workspace_waits_until_its_identitys_roles_are_in_force(planned: Callable[[str], Planned]) -> None:
    resources, deployer = planned("prod")
    outcome = replay(resources, deployer)
    assert outcome.converged
    grants = [k for k in outcome.finished if k[0] == "azure-native:authorization:RoleAssignment"
              and k[1].startswith("mlw-gpu-prod-identity-") and k[1] != "mlw-gpu-prod-identity-workspace-contributor"]
    assert len(grants) == 6
    workspace = outcome.started[(WORKSPACE, "mlw-gpu-prod-workspace")]
    # Polled every 15 s from the last grant until it is 10 minutes old.
    assert max(outcome.finished[g] for g in grants) + 600.0 <= workspace <= max(
        outcome.finished[g] for g in grants) + 600.0 + 15.0


def _without_the_wait(resources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kept = [r for r in resources if r["type"] != ROLES]
    for resource in kept:
        options = resource.get("options") or {}
        options["dependsOn"] = [d for d in options.get("dependsOn", []) if d["type"] != ROLES]
    return kept


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_the_replay_fails_without_the_role_wait(planned: Callable[[str], Planned], profile: str) -> None:
    resources, deployer = planned("prod")
    assert any(r["type"] == ROLES for r in resources)
    outcome = replay(_without_the_wait(resources), deployer, profile)
    assert [f.split(":")[0] for f in outcome.failures()] == ["Workspace mlw-gpu-prod-workspace"], outcome.failures()
    assert "default datastores were not created" in outcome.failures()[0]
    assert "not in force yet" in outcome.failures()[0]


def test_the_replay_fails_when_the_wait_does_not_wait(planned: Callable[[str], Planned],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The wait resource kept, its poll satisfied at once: the workspace is refused as without it."""
    monkeypatch.setattr("infra.role_wait.TAKES_EFFECT_S", 0.0)
    resources, deployer = planned("prod")
    outcome = replay(resources, deployer)
    assert [f.split(":")[0] for f in outcome.failures()] == ["Workspace mlw-gpu-prod-workspace"]


def test_stacks_without_a_user_assigned_identity_plan_no_wait(planned: Callable[[str], Planned]) -> None:
    resources, _ = planned("dev")
    assert not [r for r in resources if r["type"] == ROLES]
