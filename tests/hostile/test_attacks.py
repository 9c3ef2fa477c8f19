"""The attack corpus of docs/security.md ("Hardening II"): one table per class, hidden variants included.

The attacker can write one team's stack file in the multi-team layout (examples/multi-team: each team alone
owns its ``Pulumi.<team>.yaml``, the platform owns ``policies/``), and its code folders and job files. Each
row is an attempt and what the product must answer: a critical finding (exit 1), a refusal naming the file
and key (exit 2), a stale waiver, an inert line. Rule-level rows run the policy engine on the recorded
baseline plan (fast); the end-to-end rows run ``amlgpu`` as a user would.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from amlgpu.terminal import CleanStream, clean
from kernel import bounded
from policies.crossguard import policies as crossguard_policies
from policies.markdown import code, text
from tests import cli
from tests.conftest import NS, ROOT, make_project
from tests.policies.test_baseline import Baseline, baseline, fingerprint_of, sarif_fingerprint
from tests.policies.test_crossguard import pulumi_config, reported
from tests.reliability.test_corpus import assert_clean_refusal, plan_in_process

MULTI_TEAM = ROOT / "examples" / "multi-team"
COMPUTE = "azure-native:machinelearningservices:Compute"
WORKSPACE = "azure-native:machinelearningservices:Workspace"
STORAGE = "azure-native:storage:StorageAccount"


def uai(group: str, name: str, subscription: str = "33333333-3333-3333-3333-333333333333") -> str:
    return (f"/subscriptions/{subscription}/resourceGroups/{group}/providers/Microsoft.ManagedIdentity/"
            f"userAssignedIdentities/{name}")


DEPLOYER = uai("rg-github-oidc", "id-aml-gpu-deployer", "00000000-0000-0000-0000-000000000000")
"""The identity docs/gitops.md gives Contributor and RBAC Administrator on the subscription."""
RESEARCH = uai("rg-identity", "id-ml-research")
"""The research team's identity, allow-listed for the research stack only."""


def team_project(tmp_path: Path, team: str, mutate: Callable[[dict[str, Any]], None] | None = None) -> Path:
    """The multi-team layout adopted as its README says (stack files at the root, the platform's pack config
    as policies/config.json), with ``team``'s stack file changed by ``mutate``."""
    project = make_project(tmp_path / "project", {}, stack=team)
    for path in MULTI_TEAM.glob("Pulumi.*.yaml"):
        shutil.copy(path, project / path.name)
    (project / "policies").mkdir(exist_ok=True)
    shutil.copy(MULTI_TEAM / "policy-config.json", project / "policies" / "config.json")
    if mutate is not None:
        stack_file = project / f"Pulumi.{team}.yaml"
        document = yaml.safe_load(stack_file.read_text())
        mutate(document["config"])
        stack_file.write_text(yaml.safe_dump(document, sort_keys=False))
    return project


def findings(b: Baseline, rule: str, pack: dict[str, Any] | None = None) -> list[str]:
    return [f.message for f in b.evaluate(pack_config=pack).findings if f.rule.id == rule and not f.waived]


# ------------------------------------------------------------------------------------------ 1. identities


def _cluster_identity(*ids: str) -> Callable[[Baseline], None]:
    def mutate(b: Baseline) -> None:
        b.inputs(COMPUTE, "gpu-a100")["identity"] = {"type": "SystemAssigned,UserAssigned",
                                                    "userAssignedIdentities": list(ids)}
    return mutate


def _workspace_identity(rid: str, *, primary: bool = True, arm_map: bool = False) -> Callable[[Baseline], None]:
    def mutate(b: Baseline) -> None:
        ws = b.inputs(WORKSPACE)
        ws["identity"] = {"type": "SystemAssigned,UserAssigned",
                          "userAssignedIdentities": {rid: {}} if arm_map else [rid]}
        if primary:
            ws["primaryUserAssignedIdentity"] = rid
    return mutate


def _cmk_identity(rid: str) -> Callable[[Baseline], None]:
    def mutate(b: Baseline) -> None:
        b.inputs(WORKSPACE).setdefault("encryption", {})["identity"] = {"userAssignedIdentity": rid}
    return mutate


IDENTITY_ATTACKS = [
    ("the deployer's identity on a cluster", _cluster_identity(DEPLOYER), None, [DEPLOYER]),
    ("another team's identity on a cluster", _cluster_identity(RESEARCH), None, [RESEARCH]),
    ("the deployer's identity on the workspace (primary too: named once)", _workspace_identity(DEPLOYER), None,
     [DEPLOYER]),
    ("ARM's map form of userAssignedIdentities", _workspace_identity(DEPLOYER, primary=False, arm_map=True), None,
     [DEPLOYER]),
    ("a customer-managed key's identity", _cmk_identity(DEPLOYER), None, [DEPLOYER]),
    ("an allowed id hidden among others", _cluster_identity(RESEARCH, DEPLOYER),
     {"allowed_identities": [f"baseline:{RESEARCH}"]}, [DEPLOYER]),
    ("an identity allowed for another stack only", _cluster_identity(RESEARCH),
     {"allowed_identities": [f"research:{RESEARCH}"]}, [RESEARCH]),
    # Allowed: what the platform approved, for this stack or every stack; ARM ids are case-insensitive.
    ("allowed for this stack", _cluster_identity(RESEARCH), {"allowed_identities": [f"baseline:{RESEARCH}"]}, []),
    ("allowed for every stack", _cluster_identity(RESEARCH), {"allowed_identities": [RESEARCH]}, []),
    ("allowed, written in another case", _cluster_identity(RESEARCH.upper()),
     {"allowed_identities": [f"baseline:{RESEARCH}"]}, []),
    ("system-assigned only", lambda b: None, None, []),
]


@pytest.mark.parametrize(("attack", "mutate", "params", "named"), IDENTITY_ATTACKS,
                         ids=[a[0] for a in IDENTITY_ATTACKS])
def test_identities_on_clusters_and_the_workspace(
    attack: str, mutate: Callable[[Baseline], None], params: dict[str, Any] | None, named: list[str]
) -> None:
    b = baseline()
    mutate(b)
    pack = {"identity-attached-allowed": params} if params else None
    found = findings(b, "identity-attached-allowed", pack)
    assert [rid for rid in named if any(rid in m for m in found)] == named and len(found) == len(named), found
    report = b.evaluate(pack_config=pack)
    assert report.mandatory_failures >= len(named)
    for message in found:
        assert "identity-attached-allowed.allowed_identities" in message and '"baseline:/subscriptions/' in message


def test_crossguard_refuses_the_identity_the_offline_gate_refuses(tmp_path: Path) -> None:
    b = baseline()
    _cluster_identity(DEPLOYER)(b)
    pack = {p.name: p for p in crossguard_policies(tmp_path, stack="baseline")}
    (message,) = [m for m, _ in reported(pack["identity-attached-allowed"], b)]
    assert DEPLOYER in message and message.startswith("cluster 'gpu-a100'")


def test_a_team_attaching_another_teams_identity_fails_its_plan(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """vision's stack file names research's identity on its A100 cluster: exit 1, naming the id and the fix."""
    def mutate(config: dict[str, Any]) -> None:
        config[f"{NS}:clusters"][0]["identity"] = {"type": "system_assigned,user_assigned",
                                                   "user_assigned_identities": [{"resource_id": RESEARCH}]}

    outcome = plan_in_process(team_project(tmp_path, "vision", mutate), capsys, stack="vision")
    assert outcome.code == 1, outcome.err
    line = next(line for line in outcome.out.splitlines() if "identity-attached-allowed" in line)
    assert line.startswith("Pulumi.vision.yaml:") and "[critical]" in line and RESEARCH in line
    assert '"vision:' + RESEARCH + '"' in line  # the entry the platform would add to approve it
    # The research stack itself, whose identity the platform allow-listed, still passes.
    assert plan_in_process(team_project(tmp_path / "r", "research"), capsys, stack="research").code == 0


# ------------------------------------------------------------------------------------------ 2. provider settings


PROVIDER_ATTACKS = [
    ("another subscription", "azure-native:subscriptionId", "44444444-4444-4444-4444-444444444444",
     "does not allow for this stack"),
    ("another principal", "azure-native:clientId", "55555555-5555-5555-5555-555555555555", "does not allow"),
    ("another tenant", "azure-native:tenantId", "66666666-6666-6666-6666-666666666666", "does not allow"),
    ("extra tenants", "azure-native:auxiliaryTenantIds", ["77777777-7777-7777-7777-777777777777"], "does not allow"),
    ("managed identity sign-in", "azure-native:useMsi", "true", "does not allow"),
    ("the engine's default providers off", "pulumi:disable-default-providers", ["*"], "does not allow"),
    ("the classic provider", "azure:subscriptionId", "44444444-4444-4444-4444-444444444444", "does not allow"),
    ("another namespace's case", "Azure-Native:subscriptionId", "44444444-4444-4444-4444-444444444444",
     "does not allow"),
    ("an encrypted subscription (cannot be checked)", "azure-native:subscriptionId", "[secret]", "encrypted value"),
]


@pytest.mark.parametrize(("attack", "key", "value", "says"), PROVIDER_ATTACKS, ids=[a[0] for a in PROVIDER_ATTACKS])
def test_provider_and_engine_settings_only_where_the_pack_config_allows(
    attack: str, key: str, value: Any, says: str
) -> None:
    pack = {"stack-provider-settings-allowed": {"allowed_keys": [
        "azure-native:location", "baseline/azure-native:subscriptionId=22222222-2222-2222-2222-222222222222"]}}
    b = baseline()
    assert findings(b, "stack-provider-settings-allowed", pack) == []
    b.config[key] = value
    (found,) = findings(b, "stack-provider-settings-allowed", pack)
    assert key in found and says in found
    assert "4444" not in found and "5555" not in found  # values are compared, never shown


def test_the_pinned_subscription_and_patterns_pass() -> None:
    pack = {"stack-provider-settings-allowed": {"allowed_keys": [
        "azure-native:location", "baseline/azure-native:subscriptionId=22222222-2222-2222-2222-222222222222",
        "pulumi:tags*"]}}
    b = baseline()
    b.config["azure-native:subscriptionId"] = "22222222-2222-2222-2222-222222222222"
    b.config["pulumi:tags"] = {"team": "vision"}
    assert findings(b, "stack-provider-settings-allowed", pack) == []


def test_a_team_moving_its_stack_to_another_subscription_fails_its_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = team_project(tmp_path, "vision", lambda c: c.__setitem__("azure-native:subscriptionId",
                                                                       "22222222-2222-2222-2222-222222222222"))
    outcome = plan_in_process(project, capsys, stack="vision")
    assert outcome.code == 1
    assert any("stack-provider-settings-allowed" in line and "azure-native:subscriptionId" in line
               for line in outcome.out.splitlines())


def test_crossguard_reads_the_config_pulumi_up_really_runs_with(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """PULUMI_CONFIG (what Pulumi hands a policy pack) holds the subscription wherever it was set."""
    b = baseline()
    pack = {p.name: p for p in crossguard_policies(tmp_path, stack="baseline")}
    monkeypatch.setenv("PULUMI_CONFIG", pulumi_config(b))
    assert reported(pack["stack-provider-settings-allowed"], b) == []
    b.config["azure-native:clientId"] = "55555555-5555-5555-5555-555555555555"
    monkeypatch.setenv("PULUMI_CONFIG", pulumi_config(b))
    (message,) = [m for m, _ in reported(pack["stack-provider-settings-allowed"], b)]
    assert "azure-native:clientId" in message


# ------------------------------------------------------------------------------------------ 3. other stack files


STACK_FILE_ATTACKS = [
    ("a Pulumi.json project file (Pulumi reads it before Pulumi.yaml)", "Pulumi.json", "Pulumi.json"),
    ("a Pulumi.yml project file", "Pulumi.yml", "Pulumi.yml"),
    ("the stack's settings as JSON", "Pulumi.vision.json", "Pulumi.vision.json"),
    ("the stack's settings as .yml", "Pulumi.vision.yml", "Pulumi.vision.yml"),
]


@pytest.mark.parametrize(("attack", "name", "file"), STACK_FILE_ATTACKS, ids=[a[0] for a in STACK_FILE_ATTACKS])
@pytest.mark.parametrize("as_link", [False, True], ids=["file", "symlink"])
def test_stack_settings_the_gate_would_not_judge_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], attack: str, name: str, file: str, as_link: bool
) -> None:
    project = team_project(tmp_path, "vision")
    settings = json.dumps({"config": {"azure-native:subscriptionId": "22222222-2222-2222-2222-222222222222"}})
    if as_link:
        (tmp_path / "elsewhere.json").write_text(settings)
        (project / name).symlink_to(tmp_path / "elsewhere.json")
    else:
        (project / name).write_text(settings)
    outcome = plan_in_process(project, capsys, stack="vision")
    assert_clean_refusal(outcome)
    assert outcome.error_line.startswith(f"error: {file}: ")
    assert not (project / "build").exists()


# ------------------------------------------------------------------------------------------ 4. operator ranges


RANGE_ATTACKS = [
    ("all of IPv4 as 256 /8s", [f"{i}.0.0.0/8" for i in range(256)], "the whole internet"),
    ("two halves", ["0.0.0.0/1", "128.0.0.0/1"], "the whole internet"),
    ("three /9s: more than one /8", ["52.0.0.0/9", "52.128.0.0/9", "53.0.0.0/9"], "25,165,824 addresses"),
    ("IPv4 written as IPv4-mapped IPv6", ["::ffff:0.0.0.0/96"], "the whole internet"),
    ("all of IPv6", ["::/0"], "all of IPv6"),
    ("a global unicast /3", ["2000::/3"], "2^125 addresses"),
    ("padded with blanks", [" 0.0.0.0/0 "], "the whole internet"),
    ("host bits set", ["1.2.3.4/0"], "the whole internet"),
]
RANGES_ALLOWED = [
    ("one /8", ["52.0.0.0/8"]),
    ("two /9s that make one /8", ["52.0.0.0/9", "52.128.0.0/9"]),
    ("the same /8 twice", ["52.0.0.0/8", "52.0.0.0/8"]),
    ("operator addresses", ["203.0.113.7", "198.51.100.0/24", "2001:db8::/48"]),
]


def _ranges(b: Baseline, ranges: list[str]) -> Baseline:
    b.inputs(STORAGE)["networkRuleSet"]["ipRules"] = [{"iPAddressOrRange": r, "action": "Allow"} for r in ranges]
    return b


@pytest.mark.parametrize(("attack", "ranges", "says"), RANGE_ATTACKS, ids=[a[0] for a in RANGE_ATTACKS])
def test_operator_ranges_are_judged_together(attack: str, ranges: list[str], says: str) -> None:
    (found,) = findings(_ranges(baseline(), ranges), "storage-operator-ranges-not-open")
    assert f"let{'s' if len(ranges) == 1 else ''} {says} through the storage firewall" in found


@pytest.mark.parametrize(("case", "ranges"), RANGES_ALLOWED, ids=[c[0] for c in RANGES_ALLOWED])
def test_operator_ranges_that_stay_small_pass(case: str, ranges: list[str]) -> None:
    assert findings(_ranges(baseline(), ranges), "storage-operator-ranges-not-open") == []


# ------------------------------------------------------------------------------------------ 5. docker_args


DOCKER_DOORS = [
    ("-v /:/host", "mounts the node's /"),
    ("-itv/:/host", "mounts the node's /"),  # pflag: switches grouped, the value attached
    ("-v=/:/host", "mounts the node's /"),
    ("--volume=/etc:/etc:ro", "mounts the node's /etc"),
    ("-v ~/.ssh:/keys", "mounts the node's ~/.ssh"),
    ("-v ./:/x", "mounts the node's ./"),
    ("-v $HOME:/home", "mounts the node's $HOME"),
    ("--mount type=bind,src=/,dst=/h", "binds the node's /"),
    ("--mount src=/var/run,dst=/r,type=bind", "binds the node's /var/run"),
    ("--mount type=BIND,source=/,target=/h", "binds the node's /"),
    ('--mount "type=volume,volume-opt=type=none,volume-opt=o=bind,volume-opt=device=/,dst=/h"',
     "makes a volume of the node's /"),
    ("--volumes-from azureml-agent", "mounts another container's volumes"),
    ("--device-cgroup-rule='a *:* rwm'", "a privileged-equivalent"),
    ("--device /dev/mem", "hands a host device"),
    ("--privileged", "every capability"),
    ("--privileged=true", "every capability"),
    ("--privileged=1", "every capability"),
    ("--cap-add=ALL", "adds kernel capabilities"),
    ("--pid=host", "namespace"),
    ("--userns host", "namespace"),
    ("--cgroupns=host", "namespace"),
    ("--security-opt seccomp=unconfined", "lifts the container's confinement"),
    ("--security-opt=seccomp:unconfined", "lifts the container's confinement"),
    ("--security-opt apparmor=unconfined", "lifts the container's confinement"),
]
DOCKER_BENIGN = ["--shm-size 16g", "-v data:/data", "--mount type=volume,src=cache,dst=/cache",
                 "--mount type=tmpfs,dst=/scratch", "--privileged=false", "--privileged=0", "--ipc host",
                 "-e TZ=UTC --ulimit memlock=-1", "-it"]


def _docker(args: str) -> list[str]:
    b = baseline()
    b.run("torchrun-per-node")["spec"]["resources"]["docker_args"] = args
    return findings(b, "run-docker-args-confined")


@pytest.mark.parametrize(("args", "says"), DOCKER_DOORS, ids=[d[0] for d in DOCKER_DOORS])
def test_docker_args_that_reach_the_node(args: str, says: str) -> None:
    found = _docker(args)
    assert len(found) == 1 and says in found[0], found


@pytest.mark.parametrize("args", DOCKER_BENIGN)
def test_docker_args_that_stay_in_the_container_pass(args: str) -> None:
    assert _docker(args) == []


# ------------------------------------------------------------------------------------------ 6. waiver fingerprints


def _warm(b: Baseline, nodes: int = 1, size: str | None = None) -> Baseline:
    scale = b.inputs(COMPUTE, "gpu-a100")["properties"]["properties"]
    scale["scaleSettings"]["minNodeCount"] = nodes
    if size:
        scale["vmSize"] = size
    return b


def _waived(b: Baseline, fingerprint: str | None) -> Any:
    entry: dict[str, Any] = {"rule": "compute-scale-to-zero", "resource": "gpu-a100", "expires": "2026-07-31",
                             "reason": "One warm node for the interactive-debugging pilot (RES-142)"}
    if fingerprint is not None:
        entry["fingerprint"] = fingerprint
    b.config[f"{NS}:waivers"] = [entry]
    return b.evaluate()


APPROVED = fingerprint_of(_warm(baseline()), "compute-scale-to-zero")
"""The fingerprint a reviewer approved: one warm Standard_ND96asr_v4 node."""

WAIVER_ATTACKS = [
    ("sixteen warm nodes under the waiver for one", lambda b: _warm(b, 16), APPROVED),
    ("the size changed under the waiver", lambda b: _warm(b, 1, "Standard_ND96isr_H100_v5"), APPROVED),
    ("a waiver naming no fingerprint", lambda b: _warm(b), None),
    ("another finding's fingerprint copied", lambda b: _warm(b), "0" * 32),
]


@pytest.mark.parametrize(("attack", "mutate", "fingerprint"), WAIVER_ATTACKS, ids=[a[0] for a in WAIVER_ATTACKS])
def test_a_waiver_covers_only_the_finding_it_was_approved_for(
    attack: str, mutate: Callable[[Baseline], None], fingerprint: str | None
) -> None:
    b = baseline()
    mutate(b)
    report = _waived(b, fingerprint)
    (found,) = [f for f in report.findings if f.rule.id == "compute-scale-to-zero"]
    assert not found.waived
    (stale,) = report.stale_waivers
    assert stale.finding is found and found.fingerprint in stale.why and "not applied" in stale.why
    assert report.unused_waivers == ()


def test_the_approved_finding_stays_waived_by_a_prefix_of_its_fingerprint() -> None:
    report = _waived(_warm(baseline()), APPROVED[:12])
    assert report.waived == 1 and report.stale_waivers == ()


@pytest.mark.parametrize("fingerprint", ["abc", APPROVED.upper(), APPROVED + "0", "g" * 16])
def test_a_malformed_fingerprint_is_bad_input(fingerprint: str) -> None:
    from stack.waivers import Waiver

    with pytest.raises(ValueError, match="fingerprint"):
        Waiver.model_validate({"rule": "compute-scale-to-zero", "resource": "gpu-a100", "expires": "2026-07-31",
                               "reason": "One warm node for the pilot (RES-142)", "fingerprint": fingerprint})


def test_a_mandatory_finding_grown_under_its_waiver_fails_the_plan(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """End to end on the multi-team example: research's waiver for one warm H200 node, then sixteen."""
    project = team_project(tmp_path, "research")
    assert plan_in_process(project, capsys, stack="research").code == 0
    pack = json.loads((project / "policies" / "config.json").read_text())
    pack["compute-scale-to-zero"] = "mandatory"  # the platform makes warm nodes block
    (project / "policies" / "config.json").write_text(json.dumps(pack))
    assert plan_in_process(project, capsys, stack="research").code == 0  # the approved one warm node

    def sixteen(config: dict[str, Any]) -> None:
        cluster = next(c for c in config[f"{NS}:clusters"] if c["name"] == "h200-ib")
        cluster["min_instances"] = cluster["max_instances"] = 16

    stack_file = project / "Pulumi.research.yaml"
    document = yaml.safe_load(stack_file.read_text())
    sixteen(document["config"])
    stack_file.write_text(yaml.safe_dump(document, sort_keys=False))
    outcome = plan_in_process(project, capsys, stack="research")
    assert outcome.code == 1
    assert "note: waiver of compute-scale-to-zero for 'h200-ib' (pack config) was approved for finding" in outcome.out
    policy = (project / "build" / "research" / "policy.md").read_text()
    assert "### Stale waivers" in policy and "keeps 16 Standard_ND96isr_H200_v5 node(s)" in policy


# ------------------------------------------------------------------------------------------ 7. one pack config


def test_crossguard_enforces_the_stacks_own_profile(tmp_path: Path) -> None:
    """prod's pack config (the strict profile, its identity allow-list) is what the pack registers when
    Pulumi starts it for prod; dev gets the defaults."""
    shutil.copytree(ROOT / "policies", tmp_path / "policies", ignore=shutil.ignore_patterns("__pycache__"))
    prod = {p.name: p for p in crossguard_policies(tmp_path, stack="prod")}
    dev = {p.name: p for p in crossguard_policies(tmp_path, stack="dev")}
    assert prod["run-timeout-set"].enforcement_level.value == "mandatory"  # hygiene, strict in prod
    assert dev["run-timeout-set"].enforcement_level.value == "advisory"
    allowed = prod["identity-attached-allowed"].config_schema.properties["allowed_identities"]["default"]
    assert allowed == [f"prod:{uai('rg-identity', 'id-aml-prod', '22222222-2222-2222-2222-222222222222')}"]
    assert dev["identity-attached-allowed"].config_schema.properties["allowed_identities"]["default"] == []


def test_the_pack_reads_the_stack_pulumi_started_it_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(ROOT / "policies", tmp_path / "policies", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv("PULUMI_STACK", "my-org/aml-gpu-training/prod")
    pack = {p.name: p for p in crossguard_policies(tmp_path)}
    assert pack["run-timeout-set"].enforcement_level.value == "mandatory"


# ------------------------------------------------------------------------------------------ 8. output injection


INJECTIONS = [
    ("a newline then a workflow command", "x\n::error file=Pulumi.yaml::owned", "x\nerror file=Pulumi.yaml::owned"),
    ("a carriage return (the runner splits lines at it)", "x\r::warning::owned", "x::warning::owned"),
    ("blanks before the command", "x\n   ::add-mask::secret", "x\n   add-mask::secret"),
    ("stop-commands", "\n::stop-commands::token", "\nstop-commands::token"),
    ("the old ##[ form, anywhere in a line", "see ##[error]owned", "see ##error]owned"),
    ("terminal escape sequences", "\x1b[2J\x1b]0;title\x07x", "[2J]0;titlex"),
    ("bidirectional overrides", "safe\u202edne.exe", "safedne.exe"),
    ("C1 controls", "x\x85y\x9b", "xy"),
]


@pytest.mark.parametrize(("attack", "value", "printed"), INJECTIONS, ids=[i[0] for i in INJECTIONS])
def test_printed_text_is_inert(attack: str, value: str, printed: str) -> None:
    assert clean(value) == printed


@pytest.mark.parametrize("pieces", [["::", "error::x\n"], ["  :", ":warning::x\n"], ["a ##", "[error]b\n"],
                                    ["ok\n::", "set-output name=a::b\n"]])
def test_a_command_split_across_writes_and_flushes_is_still_caught(pieces: list[str]) -> None:
    import io

    sink = io.StringIO()
    stream = CleanStream(sink)
    for piece in pieces:
        stream.write(piece)
        stream.flush()
    stream.finish()
    for line in sink.getvalue().splitlines():
        assert not line.lstrip().startswith("::") and "##[" not in line, sink.getvalue()


def test_a_stack_key_cannot_print_an_annotation(tmp_path: Path) -> None:
    """The console script, as the pull-request workflow runs it: a stack key carrying a newline and a command."""
    project = make_project(tmp_path / "project", {}, stack="inj")
    (project / "Pulumi.inj.yaml").write_text(
        'config:\n  azure-native:location: westeurope\n'
        '  "aml-gpu-training:x\\n::error file=Pulumi.yaml,line=1::approved by security": 1\n'
        '  "aml-gpu-training:y\\r##[warning]z": 2\n')
    done = cli.amlgpu(project, "plan", "--stack", "inj")
    assert done.returncode == 2
    for line in (done.stdout + done.stderr).split("\n"):
        assert not line.lstrip().startswith("::") and "##[" not in line and "\r" not in line, line
    assert "error file=Pulumi.yaml,line=1::approved by security" in done.stderr  # shown, inert


def test_a_file_name_in_a_code_folder_cannot_print_an_annotation(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from tests.reliability.test_corpus import good_config

    project = make_project(tmp_path / "project", good_config(), stack="case")
    (tmp_path / "outside").write_text("x")
    (project / "jobs" / "workloads" / "x\n::error::owned").symlink_to(tmp_path / "outside")
    outcome = plan_in_process(project, capsys, stack="case")
    assert "symbolic links leading outside it" in outcome.err and "error::owned" in outcome.err
    for line in (outcome.out + outcome.err).split("\n"):
        assert not line.lstrip().startswith("::"), line


MARKDOWN_INJECTIONS = [
    ("HTML", "<img src=x onerror=alert(1)> <details open>", "&lt;img src=x onerror=alert(1)&gt;"),
    ("a link hiding its target", "[the fix](https://evil.example)", "\\[the fix\\](https://evil.example)"),
    ("a tracking image", "![](https://evil.example/p.png)", "!\\[\\](https://evil.example/p.png)"),
    ("a mention", "ping @platform-team now", "ping `@platform-team` now"),
    ("a table break", "a | b", "a \\| b"),
    ("a code span break", "a`b", "a\\`b"),
    ("an autolink", "<https://evil.example>", "&lt;https://evil.example&gt;"),
    ("newlines (a new paragraph, a heading)", "x\n\n# Approved", "x # Approved"),
]


@pytest.mark.parametrize(("attack", "value", "shown"), MARKDOWN_INJECTIONS, ids=[m[0] for m in MARKDOWN_INJECTIONS])
def test_free_text_in_policy_md_is_inert(attack: str, value: str, shown: str) -> None:
    assert shown in text(value)


@pytest.mark.parametrize("name", ["plain", "a`b", "``x", "a|b", "x\ny"])
def test_names_stay_one_code_span(name: str) -> None:
    span = code(name)
    fence = span[: len(span) - len(span.lstrip("`"))]
    assert span.endswith(fence) and fence not in span[len(fence):-len(fence)] and "\n" not in span


def test_a_waiver_reason_cannot_inject_into_the_comment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def mutate(config: dict[str, Any]) -> None:
        config[f"{NS}:clusters"][0]["min_instances"] = 1

    project = make_project(tmp_path / "project", {}, stack="dev")
    shutil.copy(ROOT / "Pulumi.dev.yaml", project / "Pulumi.dev.yaml")
    document = yaml.safe_load((project / "Pulumi.dev.yaml").read_text())
    mutate(document["config"])
    (project / "Pulumi.dev.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    assert plan_in_process(project, capsys, stack="dev").code == 0
    found = sarif_fingerprint(project / "build" / "dev", "compute-scale-to-zero")

    document["config"][f"{NS}:waivers"] = [{
        "rule": "compute-scale-to-zero", "resource": document["config"][f"{NS}:clusters"][0]["name"],
        "expires": (dt.date.today() + dt.timedelta(days=30)).isoformat(), "fingerprint": found,
        "reason": "Approved <img src=x onerror=alert(1)> see [details](https://evil.example) cc @security-team | x"}]
    (project / "Pulumi.dev.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    assert plan_in_process(project, capsys, stack="dev").code == 0
    policy = (project / "build" / "dev" / "policy.md").read_text()
    assert "Approved &lt;img src=x onerror=alert(1)&gt; see \\[details\\](https://evil.example) cc " \
           "`@security-team` \\| x" in policy
    assert "<img" not in policy and "[details](" not in policy and " @security-team" not in policy


# ------------------------------------------------------------------------------------------ 9. bounded input


def _alias_bomb(levels: int = 8) -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for previous, name in zip("abcdefghijklmnop", "bcdefghijklmnopq", strict=False):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
        if len(lines) > levels:
            break
    return "\n".join(lines) + f"\ndependencies: *{name}\n"


YAML_ATTACKS = [
    ("an alias bomb", _alias_bomb(), "expands to more than 100,000 values"),
    ("nesting 100,000 deep", "dependencies: " + "[" * 100_000 + "]" * 100_000 + "\n", "nested more than 64 levels"),
    ("a file of 2 MiB", "dependencies:\n" + "  - x\n" * 400_000, "larger than 1,048,576 bytes"),
    ("a value that contains itself", "a: &a [1, *a]\n", "inside its own anchor"),
    ("not UTF-8", "dependencies: [\xff]\n", "not UTF-8"),
]


def _stack_naming(project: Path, where: str) -> None:
    stack_file = project / "Pulumi.case.yaml"
    document = yaml.safe_load(stack_file.read_text())
    run = document["config"][f"{NS}:jobs"][0]
    if where == "inline environment":
        run["environment"] = {"image": "mcr.microsoft.com/azureml/curated/acpt-pytorch-2.2-cuda12.1:18",
                              "conda_file": "environments/evil.yml"}
    elif where == "declared environment":
        document["config"][f"{NS}:environments"].append(
            {"name": "evil", "image": "mcr.microsoft.com/azureml/curated/acpt-pytorch-2.2-cuda12.1:18",
             "conda_file": "environments/evil.yml"})
    else:  # a CLI v2 environment file, whose own YAML is hostile
        run["environment"] = "file:environments/evil.yml"
    stack_file.write_text(yaml.safe_dump(document, sort_keys=False))


@pytest.mark.parametrize(("attack", "content", "says"), YAML_ATTACKS, ids=[a[0] for a in YAML_ATTACKS])
@pytest.mark.parametrize("where", ["inline environment", "declared environment", "environment file"])
def test_every_yaml_the_stack_names_is_read_within_bounds(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          attack: str, content: str, says: str, where: str) -> None:
    """Before: a conda_file alias bomb a run names took 23 s and 2.6 GB to a MemoryError traceback (exit 1).
    The bomb runs the console script under a 1 GiB address-space cap; the other rows run in process."""
    from tests.reliability.test_corpus import Outcome, good_config

    project = make_project(tmp_path / "project", good_config(), stack="case")
    data = content.encode("latin-1") if attack == "not UTF-8" else content.encode()
    (project / "environments" / "evil.yml").write_bytes(data)
    _stack_naming(project, where)
    if attack == "an alias bomb":
        done = cli.amlgpu(project, "plan", "--stack", "case", timeout=120, address_space=cli.ONE_GIB)
        outcome = Outcome(done.returncode, done.stdout, done.stderr)
    else:
        outcome = plan_in_process(project, capsys, stack="case")
    assert_clean_refusal(outcome)
    assert "environments/evil.yml" in outcome.err and says in outcome.err, outcome.err[-2000:]
    assert not (project / "build").exists()


def test_the_project_file_is_read_within_bounds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.reliability.test_corpus import good_config

    project = make_project(tmp_path / "project", good_config(), stack="case")
    bomb = "x:\n  " + _alias_bomb().rstrip().replace("\n", "\n  ") + "\n"
    (project / "Pulumi.yaml").write_text((project / "Pulumi.yaml").read_text() + bomb)
    outcome = plan_in_process(project, capsys, stack="case")
    assert_clean_refusal(outcome)
    assert outcome.error_line.startswith("error: Pulumi.yaml: cannot read the project file:")


IMPORT_ATTACKS = [
    ("a job file alias bomb", "job.yml", "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{n}: &{n} [{','.join(['*' + p] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True))
     + "command: python x\ncompute: c\ninputs: *i\n", "expands to more than 100,000 values"),
    ("a job file nested 5,000 deep", "job.yml", "command: " + "[" * 5000 + "]" * 5000 + "\n", "nested more than 64"),
    ("a job file of 2 MiB", "job.yml", "command: python x\n" + "#" * (2 << 20) + "\n", "larger than 1,048,576"),
    ("a script of 300,000 chained additions", "deep.py", "x = " + "+".join(["1"] * 300_000) + "\n",
     "nested too deeply for Python to read"),
    ("a script nested 150 deep", "nest.py", "from azure.ai.ml import command\nx = " + "[" * 150 + "1" + "]" * 150
     + "\njob = command(command='python x', compute='c', environment='azureml:e:1')\n", "nested more than 100 levels"),
    ("a script of 250,000 list items", "wide.py", "x = [" + "1," * 250_000 + "]\n", "more than 200,000 syntax nodes"),
    ("a script that doubles its values", "grow.py", "from azure.ai.ml import command\ns = 'a' * 1\nl = [1]\n"
     + "l.extend(l)\n" * 60 + "job = command(command='python x', compute='c', environment='azureml:e:1')\n",
     "takes more work to follow than a submission script"),
    ("a script of 2 MiB", "big.py", "#" * (2 << 20) + "\n", "larger than 1,048,576 bytes"),
]


@pytest.mark.parametrize(("attack", "name", "content", "says"), IMPORT_ATTACKS, ids=[a[0] for a in IMPORT_ATTACKS])
def test_import_of_hostile_files_is_bounded(tmp_path: Path, attack: str, name: str, content: str, says: str) -> None:
    (tmp_path / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    (tmp_path / name).write_text(content)
    done = cli.amlgpu(tmp_path, "import", name, timeout=120, address_space=cli.ONE_GIB)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert line.startswith(f"error: {name}: ") and says in line


@pytest.mark.parametrize(("template", "followed"), [
    ("'{:>999999999}'.format(1)", False), ("'%999999999d' % 1", False), ("'%*d' % (999999999, 1)", False),
    ("'{:{w}}'.format(1, w=999999999)", False), ("'lr-%.3f' % 0.001", True), ("'{:>8}'.format('ok')", True),
])
def test_import_follows_formatting_only_within_bounds(tmp_path: Path, template: str, followed: bool) -> None:
    from importer.static import evaluate

    module = evaluate(f"x = {template}\n", str(tmp_path / "s.py"))
    assert isinstance(module.names["x"], str) is followed


def test_the_bounded_reader_refuses_before_building_anything() -> None:
    with pytest.raises(bounded.BoundedInputError, match="expands to more than 100,000 values") as err:
        bounded.load(_alias_bomb(), bounded.CONDA_FILE)
    assert err.value.line is not None


# ------------------------------------------------------------------------------ linear time, bounded reads


def _code_folder_attack(tmp_path: Path, command: str, files: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``amlgpu plan`` (the console script) of a stack whose run starts ``command`` in a code folder holding
    ``files``."""
    from tests.reliability.test_corpus import J, good_config

    config = good_config()
    config[J][0]["command"] = command
    project = make_project(tmp_path / "project", config, stack="case")
    for name, content in files.items():
        (project / "jobs" / "workloads" / name).write_text(content)
    return cli.amlgpu(project, "plan", "--stack", "case", timeout=600)


@pytest.mark.slow
def test_a_script_of_a_million_commas_after_a_brace_gets_its_answer(tmp_path: Path) -> None:
    """Before: the brace-expansion pattern backtracked over the commas for each one (Python's re): 40,000
    took 2.7 s, the million a 1 MiB script holds about half an hour. On RE2 the plan answers as usual."""
    done = _code_folder_attack(tmp_path, "bash run.sh", {"run.sh": "torchrun train_ddp.py a{" + "," * 1_000_000 + "\n"})
    assert done.returncode in (0, 1), done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert (tmp_path / "project" / "build" / "case" / "outputs.json").is_file()


@pytest.mark.parametrize("script", [
    "import torch\nx = a" + ".b" * 600 + "\n",  # a tree 600 levels deep: the recursive walk failed past about 450
    "import torch\nif a:\n    pass\n" + "elif a:\n    pass\n" * 600,
    "import torch\nx = a" + ".b" * 100_000 + "\n",  # deeper than Python's parser builds
], ids=["attribute-chain", "elif-chain", "beyond-the-parser"])
@pytest.mark.slow
def test_a_code_folder_script_nested_deeper_than_a_recursive_walk_gets_its_answer(tmp_path: Path, script: str) -> None:
    """Before: a RecursionError traceback (exit 1) from the walk over the run's entry script."""
    done = _code_folder_attack(tmp_path, "python train_ddp.py", {"train_ddp.py": script})
    assert done.returncode in (0, 1), done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert (tmp_path / "project" / "build" / "case" / "outputs.json").is_file()


NESTED_JSON = "[" * 100_000 + "]" * 100_000
"""Deeper than Python's JSON reader follows: a RecursionError unless it is read through the bounded reader."""


@pytest.mark.parametrize(("content", "says"), [
    (NESTED_JSON, "nested too deeply to be a pricing table"),
    ('{"_about": "x", "pad": "' + "x" * (9 << 20) + '"}', "larger than 8,388,608 bytes"),
], ids=["nested", "9 MiB"])
def test_a_hostile_pricing_table_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str,
                                               says: str) -> None:
    """``--prices`` names a file of the repository, which a pull request writes. Before: a RecursionError
    traceback (exit 1) for the nested one; the large one was read whole."""
    from tests.reliability.test_corpus import good_config

    project = make_project(tmp_path / "project", good_config(), stack="case")
    (project / "prices.json").write_text(content)
    outcome = plan_in_process(project, capsys, "--prices", "prices.json", stack="case")
    assert_clean_refusal(outcome)
    assert "prices.json" in outcome.error_line and says in outcome.error_line, outcome.err[-2000:]
    assert not (project / "build").exists()


def test_a_plan_folder_whose_outputs_nest_too_deeply_is_bad_input(tmp_path: Path) -> None:
    """``submit``/``job`` read ``build/<stack>/outputs.json``. Before: a RecursionError."""
    from jobs.workspace import plan_outputs
    from kernel.errors import UserError

    (tmp_path / "outputs.json").write_text(NESTED_JSON)
    with pytest.raises(UserError, match="nested too deeply to be a plan's outputs"):
        plan_outputs(tmp_path)


def test_a_config_value_pulumi_hands_over_nested_too_deeply_is_a_config_error() -> None:
    """Under ``pulumi up`` the engine hands structured values as JSON text. Before: a RecursionError traceback."""
    from pulumi.runtime.config import set_all_config

    from kernel.errors import ConfigError
    from stack.config import from_pulumi_config

    set_all_config({f"{NS}:jobs": NESTED_JSON}, [])
    try:
        with pytest.raises(ConfigError) as raised:
            from_pulumi_config("case", ROOT)
    finally:
        set_all_config({}, [])
    assert raised.value.key == f"{NS}:jobs" and "nested too deeply" in raised.value.message


def test_a_copy_pattern_never_lists_what_is_outside_the_build_context(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``COPY`` source is a pattern of the build context. Before: ``../`` in it listed the folders above the
    context (``../../../*/*/*`` the machine's), and every match was collected before the bound was applied."""
    import os

    from analysis import dockerfile

    context = tmp_path / "context"
    context.mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "nccl.conf").write_text("NCCL_IB_DISABLE=1\n")
    listed: list[str] = []
    scandir = os.scandir

    def spy(path: Any = ".") -> Any:
        listed.append(os.fspath(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", spy)
    image = dockerfile.evaluate("FROM x\nCOPY ../outside/*.conf ../*/nccl.* /etc/\n", context=context,
                                wanted=["/etc/nccl.conf"])
    assert [p for p in listed if not Path(p).resolve().is_relative_to(context.resolve())] == []
    assert image.files == ()


_LOOPS = "for a in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do " * 4 + "echo $a; " + "done; " * 4
"""About 330 bytes of nested loops, more than the shell evaluator's step bound (issue 36)."""


def test_a_setting_after_loops_that_spend_the_step_bound_is_judged_as_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 36: nested loops before ``export NCCL_IB_DISABLE=1`` spent the step bound, and the plan exited 0 with
    only "cannot tell". A bound now stops exploring inside the loop (or the command substitution), never the rest:
    each 2-node InfiniBand run gets the mandatory finding, and the loop is named as what cannot be told."""
    import copy

    from tests.reliability.test_corpus import J, good_config

    config = good_config()
    run = config[J][0]
    before = {"for": _LOOPS, "substitution": f"X=$({_LOOPS}); ", "while": f"while true; do {_LOOPS}done; "}
    config[J] = [{**copy.deepcopy(run), "name": f"ddp-{name}",
                  "command": f"{loops}export NCCL_IB_DISABLE=1; {run['command']}"} for name, loops in before.items()]
    outcome = plan_in_process(make_project(tmp_path / "project", config, stack="case"), capsys, stack="case")
    assert outcome.code == 1, outcome.out + outcome.err
    assert "Traceback" not in outcome.out + outcome.err
    failures = [line for line in outcome.out.splitlines() if "run-infiniband-disabled  [high]" in line]
    assert [line.split("run '")[1].split("'")[0] for line in failures] == ["ddp-for", "ddp-substitution", "ddp-while"]
    assert all("NCCL_IB_DISABLE='1' (the command, line 1) disables InfiniBand" in line for line in failures)
    report = (tmp_path / "project" / "build" / "case" / "policy.md").read_text()
    unclear = [row for row in report.splitlines() if "`run-infiniband-setting-unclear`" in row]
    assert len(unclear) == 3  # one per run: the outermost construct stopped, named with its line
    assert all("(stopped inside it: too many evaluation steps)\\` at line 1 of the command" in row for row in unclear)


DOCKERFILE_ATTACKS = [
    ("47 doubling ENV lines", "ENV A=x\n" + "ENV A=$A$A\n" * 47, "(a value longer than 65,536 characters)"),
    ("3,000 nested ${U:-...}", "ENV U=1\nENV A=" + "${U:-" * 3000 + "x" + "}" * 3000 + "\n",
     "(${...} nested more than 48 deep)"),
]


@pytest.mark.slow  # the console script plans a stack under an address-space cap: about 6 CPU s each
@pytest.mark.parametrize(("attack", "lines", "says"), DOCKERFILE_ATTACKS, ids=[a[0] for a in DOCKERFILE_ATTACKS])
def test_a_hostile_dockerfile_is_planned_within_bounds(tmp_path: Path, attack: str, lines: str, says: str) -> None:
    """Issue 36: the Dockerfile a 2-node InfiniBand run builds, ``ENV A=$A$A`` doubled 47 times (4.3 GB, then a
    MemoryError traceback) or 3,000 nested ``${U:-...}`` (a RecursionError traceback). Planned by the console
    script under a 2 GiB address-space cap: an answer, the value unknown and said so, no traceback."""
    from tests.conftest import dev_config
    from tests.reliability.test_corpus import Outcome

    project = make_project(tmp_path / "project", dev_config(), stack="case")
    dockerfile = project / "environments" / "tensorflow" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "\n" + lines)
    done = cli.amlgpu(project, "plan", "--stack", "case", address_space=cli.TWO_GIB)
    outcome = Outcome(done.returncode, done.stdout, done.stderr)
    assert outcome.code in (0, 1), outcome.err[-2000:]
    assert "Traceback" not in outcome.out + outcome.err
    report = (project / "build" / "case" / "policy.md").read_text()
    assert any(says in row and "in the Dockerfile" in row for row in report.splitlines()
               if "`run-infiniband-setting-unclear`" in row), report[-3000:]


# ------------------------------------------------------------------------------------------ masked, so flagged


def _token(n: int, prefix: str = "ghp_") -> str:
    """A GitHub-shaped token of its own for each attack (a known shape: masked wherever it shows)."""
    return prefix + f"{n:02d}Zq8Lm2Nx4Rt6Vb1Kc3Jd5Hf7Gs9Pw0Ya4Qe6"


def _run(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "command": "echo hello", "environment": "acpt-pytorch", "compute": "gpu-a100",
            "distribution": {"type": "pytorch", "process_count_per_instance": 1},
            "resources": {"instance_count": 1}, "limits": {"timeout": 600}, **fields}


def _pipeline(name: str, step: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    from tests.jobs.test_pipelines import pipeline

    job = pipeline(name=name, **fields)
    if step:
        job["jobs"]["evaluate"].update(step)
    return job


def _sweep(name: str, values: list[Any]) -> dict[str, Any]:
    from tests.jobs.test_pipelines import sweep

    return sweep(name=name, search_space={"lr": {"type": "loguniform", "min_value": -9.2, "max_value": -4.6},
                                          "batch": {"type": "choice", "values": values}})


def _b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode()


SPLIT = _token(13)
MASKED_ATTACKS: list[tuple[str, dict[str, Any], str, str]] = [
    # (attack, the job, the secret, what the finding names)
    ("a token in a pipeline input", _pipeline("atk-pipe-input", inputs={"epochs": 3, "token": _token(1)}),
     _token(1), "pipeline 'atk-pipe-input': pipeline input token (holds a GitHub token)"),
    ("a token in a sweep choice", _sweep("atk-choice", [32, _token(2)]), _token(2),
     "sweep 'atk-choice': sweep search_space.batch.values[1] (holds a GitHub token)"),
    ("a token in a description", _run("atk-desc", description=f"owner token {_token(3)}"), _token(3),
     "run 'atk-desc': description (holds a GitHub token)"),
    ("a token as a display name", _run("atk-display", display_name=_token(4)), _token(4),
     "run 'atk-display': display_name (holds a GitHub token)"),
    ("a token as the experiment name", _run("atk-experiment", experiment_name=_token(5)), _token(5),
     "run 'atk-experiment': experiment_name (holds a GitHub token)"),
    ("a token in a pipeline tag", _pipeline("atk-pipe-tag", tags={"owner": _token(6)}), _token(6),
     "pipeline 'atk-pipe-tag': pipeline tag owner (holds a GitHub token)"),
    ("a token in a component's description", _pipeline("atk-component", step={
        "command": None, "environment": None, "code": None, "outputs": {}, "inputs": {},
        "component": {"command": "echo evaluate", "environment": "azureml:acpt-pytorch:1",
                      "description": f"maintained by {_token(7)}"}}), _token(7),
     "run 'atk-component/evaluate': description (holds a GitHub token)"),
    ("a token as a tag's key name", _run("atk-key", tags={_token(8): "owner"}), _token(8),
     "run 'atk-key': tags.[secret] (its key name holds a GitHub token)"),
    ("a token in a URL's query", _run("atk-query", inputs={"data": {
        "type": "uri_file", "path": "https://data.example.com/train.csv?token=Q2x7Vb9Kd4Lm8Np3Rt6Wz1Yc5"}}),
     "Q2x7Vb9Kd4Lm8Np3Rt6Wz1Yc5", "run 'atk-query': input data (a URL query parameter token"),
    ("a token in a service's properties", _run("atk-service", services={
        "notebook": {"type": "jupyter_lab", "properties": {"owner": _token(10)}}}), _token(10),
     "run 'atk-service': services.notebook.properties.owner (holds a GitHub token)"),
    ("a password with - and .", _run("atk-password", environment_variables={"DB_PASSWORD": "s3cr.et-pa55"}),
     "s3cr.et-pa55", "run 'atk-password': environment variable DB_PASSWORD (a password name with a literal value)"),
    ("a base64-wrapped token", _run("atk-base64", command=f"echo {_b64(_token(12))} | base64 -d > ~/.token"),
     _b64(_token(12)), "run 'atk-base64': command argument (holds a GitHub token, base64-encoded)"),
    ("a token split into quoted pieces", _run("atk-split", command=f"python -c 't=\"{SPLIT[:9]}\"\"{SPLIT[9:]}\"'"),
     SPLIT[9:], "run 'atk-split': command argument (holds a GitHub token, split into concatenated pieces)"),
    # Variants the issue does not list: a base64-wrapped token as a sweep choice, a dotted password after a
    # flag in a pipeline step's command, a client secret under its own name in a pipeline step's input.
    ("a base64-wrapped token as a sweep choice", _sweep("atk-choice-b64", [_b64(_token(14, "hf_"))]),
     _b64(_token(14, "hf_")), "sweep 'atk-choice-b64': sweep search_space.batch.values[0] (holds a Hugging Face "
     "token, base64-encoded)"),
    ("a dotted password after a flag in a step", _pipeline("atk-step-flag", step={
        "command": "python evaluate.py --checkpoint-dir ${{inputs.checkpoints}} --report-dir ${{outputs.report}} "
                   "--db-passwd=my.dotted-pass"}), "my.dotted-pass",
     "run 'atk-step-flag/evaluate': command argument --db-passwd (a password name with a literal value)"),
    ("a password under a secret name in a pipeline input",
     _pipeline("atk-secret-input", inputs={"epochs": 3, "client_secret": "a.b-c~d.e"}),
     "a.b-c~d.e", "pipeline 'atk-secret-input': pipeline input client_secret (a password name with a literal value)"),
]


@pytest.fixture(scope="module")
def masked_attacks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, str], frozenset[str]]:
    """Every attack above in one stack, planned in-process: the outcome, every file under build/, and what the
    masker remembered to hide."""
    from kernel import secrets
    from tests.reliability.test_corpus import good_config, snapshot

    config = good_config()
    config[f"{NS}:jobs"] += [job for _, job, _, _ in MASKED_ATTACKS]
    project = make_project(tmp_path_factory.mktemp("masked") / "project", config, stack="case")
    secrets.forget_all()
    capture = _Capture()
    outcome = capture.plan(project)
    hidden = frozenset(secrets._values)
    files = {name: data.decode("utf-8") for name, data in snapshot(project / "build").items()}
    return outcome, files, hidden


class _Capture:
    def plan(self, project: Path) -> Any:
        import contextlib
        import io

        from amlgpu.cli import main
        from tests.reliability.test_corpus import Outcome

        out, err = io.StringIO(), io.StringIO()
        with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            patch.chdir(project)
            code = main(["plan", "--stack", "case"])
        return Outcome(code, out.getvalue(), err.getvalue())


@pytest.mark.parametrize(("attack", "job", "secret", "named"), MASKED_ATTACKS, ids=[a[0] for a in MASKED_ATTACKS])
def test_what_is_masked_is_flagged(masked_attacks: tuple[Any, dict[str, str], frozenset[str]], attack: str,
                                   job: dict[str, Any], secret: str, named: str) -> None:
    outcome, files, _ = masked_attacks
    assert outcome.code == 1, outcome.err
    lines = [line for line in outcome.out.splitlines() if named in line]
    assert lines and all("[critical]" in line and "secrets-in-" in line for line in lines), outcome.out
    for where, shown in {**files, "stdout": outcome.out, "stderr": outcome.err}.items():
        assert secret not in shown, f"{where} shows the secret of {attack!r}"


def _strings(data: Any) -> list[str]:
    if isinstance(data, dict):
        return [s for key, value in data.items() for s in (str(key), *_strings(value))]
    if isinstance(data, list):
        return [s for item in data for s in _strings(item)]
    return [data] if isinstance(data, str) else []


def test_every_value_the_masker_hides_has_a_finding(masked_attacks: tuple[Any, dict[str, str], frozenset[str]]
                                                    ) -> None:
    """One walk, two uses: each value the plan hides belongs to a job with a secret finding of its own."""
    outcome, _, hidden = masked_attacks
    flagged = {line.split("'")[1].split("/")[0] for line in outcome.out.splitlines()
               if "secrets-in-" in line and "[critical]" in line}
    assert hidden
    for value in hidden:
        holders = [job["name"] for _, job, _, _ in MASKED_ATTACKS if any(value in s for s in _strings(job))]
        assert holders, f"a hidden value {value[:6]}... is in no attack: masked outside the jobs"
        assert set(holders) <= flagged, f"{holders} hide a value but have no secret finding"
    assert flagged == {job["name"] for _, job, _, _ in MASKED_ATTACKS}


# ------------------------------------------------------------------------- what bash and the launchers follow

_TRAIN = "python train_ddp.py --epochs 1"
_CODE_FILES = {
    "env.sh": "export NCCL_IB_DISABLE=1\n",
    "ok.sh": "export NCCL_IB_DISABLE=0\n",
    "launch.sh": f"#!/bin/bash\nexport NCCL_NET=Socket\n{_TRAIN}\n",
    "conf/nccl.conf": "NCCL_IB_DISABLE=1\n",
    "conf/mca.conf": "pml = ob1\n",
    ".deepspeed_env": "NCCL_IB_DISABLE=1\nPYTHONPATH=.\n",
    "hostfile": "worker-0 slots=8\nworker-1 slots=8\n",
    "loop.sh": ". ./loop.sh\nbash loop.sh\n",
}
"""Files of the run's code folder (``jobs/workloads`` in the test project) the attacks below name."""

FOLLOW_ATTACKS: list[tuple[str, str, dict[str, str], str]] = [
    # (attack, command, environment_variables, what the finding names)
    ("BASH_ENV as a prefix of bash -c", f"BASH_ENV=./env.sh bash -c '{_TRAIN}'", {}, "in BASH_ENV ./env.sh"),
    ("BASH_ENV in environment_variables", _TRAIN, {"BASH_ENV": "./env.sh"}, "in BASH_ENV ./env.sh"),
    ("BASH_ENV naming a file the command wrote",
     f"echo 'export NCCL_NET=Socket' > /tmp/e.sh && BASH_ENV=/tmp/e.sh bash -c '{_TRAIN}'", {},
     "NCCL_NET='Socket' (the command, line 1 (in BASH_ENV /tmp/e.sh)"),
    ("~/.nccl.conf under a changed HOME",
     f"mkdir -p /tmp/x && echo NCCL_IB_DISABLE=1 > /tmp/x/.nccl.conf && HOME=/tmp/x {_TRAIN}", {},
     "/tmp/x/.nccl.conf (written by the command"),
    ("a relative write after cd in a subshell",
     f"(cd /tmp && echo NCCL_IB_DISABLE=1 > .nccl.conf); HOME=/tmp {_TRAIN}", {}, "/tmp/.nccl.conf (written by"),
    ("NCCL_CONF_FILE through /proc/self/cwd",
     f"echo NCCL_IB_DISABLE=1 > my.conf; NCCL_CONF_FILE=/proc/self/cwd/my.conf {_TRAIN}", {},
     "my.conf (written by the command"),
    ("bash ./launch.sh", "bash ./launch.sh", {}, "(in bash ./launch.sh)"),
    ("sh launch.sh", "sh launch.sh", {}, "(in sh launch.sh)"),
    ("./launch.sh run as a program", "./launch.sh", {}, "(in bash ./launch.sh)"),
    (". ./env.sh", f". ./env.sh && {_TRAIN}", {}, "(in . ./env.sh)"),
    ("source env.sh", f"source env.sh; {_TRAIN}", {}, "(in source env.sh)"),
    ("source of a file the command wrote",
     f"printf 'export NCCL_IB_DISABLE=1' > /tmp/e.sh; . /tmp/e.sh; {_TRAIN}", {}, "(in . /tmp/e.sh)"),
    ("busybox sh -c", f"busybox sh -c 'export NCCL_IB_DISABLE=1; {_TRAIN}'", {}, "(in sh -c at line 1)"),
    ("su -c", f"su -c 'NCCL_IB_DISABLE=1 {_TRAIN}'", {}, "(in bash -c at line 1)"),
    ("su --login root -c", f"su --login root -c 'cd /tmp && NCCL_NET=socket {_TRAIN}'", {}, "NCCL_NET='socket'"),
    ("xargs env", "echo --epochs 1 | xargs env NCCL_IB_DISABLE=1 python train_ddp.py", {}, "NCCL_IB_DISABLE='1'"),
    ("mpiexec -genv (Hydra)", f"mpiexec -genv NCCL_IB_DISABLE 1 -n 2 {_TRAIN}", {}, "mpirun options"),
    ("mpirun -x", f"mpirun -x NCCL_IB_DISABLE=1 -np 2 {_TRAIN}", {}, "mpirun options"),
    ("Open MPI parameter file of the code folder", f"mpirun -np 2 {_TRAIN}",
     {"OMPI_MCA_mca_base_param_files": "conf/mca.conf"}, "conf/mca.conf (a file of the code folder)"),
    ("env -S", f"env -S 'NCCL_IB_DISABLE=1 {_TRAIN}'", {}, "NCCL_IB_DISABLE='1'"),
    (".deepspeed_env of the code folder", "deepspeed --hostfile hostfile train_ddp.py --epochs 1", {},
     ".deepspeed_env (a file of the code folder), exported by deepspeed"),
    ("brace expansion of a name", f"env NCCL_{{IB_DISABLE,DEBUG}}=1 {_TRAIN}", {}, "NCCL_IB_DISABLE='1'"),
    ("brace expansion of a file name", f"echo NCCL_NET=Socket | tee {{/etc/nccl.conf,/dev/null}}; {_TRAIN}", {},
     "/etc/nccl.conf (written by the command"),
    ("NCCL_CONF_FILE naming a file of the code folder", _TRAIN, {"NCCL_CONF_FILE": "conf/nccl.conf"},
     "conf/nccl.conf (a file of the code folder)"),
    ("a script sourcing itself before the setting (the nesting bound)", f". ./loop.sh; NCCL_IB_DISABLE=1 {_TRAIN}", {},
     "NCCL_IB_DISABLE='1' (the command, line 1)"),
]

FOLLOW_BENIGN: list[tuple[str, str, dict[str, str], int]] = [
    # (case, command, environment_variables, instance_count): followed, and InfiniBand stays on
    ("BASH_ENV naming a file that sets 0", f"BASH_ENV=./ok.sh bash -c '{_TRAIN}'", {}, 2),
    ("BASH_ENV under sh, which reads no startup file", f"BASH_ENV=./env.sh sh -c '{_TRAIN}'", {}, 2),
    ("BASH_ENV under bash --posix", f"BASH_ENV=./env.sh bash --posix -c '{_TRAIN}'", {}, 2),
    ("a sourced script that sets 0", f"source ok.sh && {_TRAIN}", {}, 2),
    ("a script outside the code folder: unknown, not missing", f"source /opt/env.sh && {_TRAIN}", {}, 2),
    ("env -S with ${NAME}: unknown, not missing", f"env -S 'NCCL_IB_DISABLE=${{X}} {_TRAIN}'", {}, 2),
    (".deepspeed_env without a hostfile: one node, the file not read", "deepspeed train_ddp.py --epochs 1", {}, 2),
    ("mpiexec -genv NCCL_IB_DISABLE 0", f"mpiexec -genv NCCL_IB_DISABLE 0 -n 2 {_TRAIN}", {}, 2),
    ("a single-node run sourcing env.sh", f"source env.sh; {_TRAIN}", {}, 1),
]


@pytest.mark.slow
def test_what_bash_and_the_launchers_follow_is_followed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 36 point 4: files bash sources (``BASH_ENV``, ``source``, ``bash script.sh``, ``./script.sh``),
    configuration files reached another way (a changed ``HOME``, ``cd`` in a subshell, ``/proc/self/cwd``, the code
    folder), shells and wrappers (``busybox sh``, ``su -c``, ``xargs``, ``env -S``), MPI launchers' options, DeepSpeed's
    ``.deepspeed_env`` and brace expansion. Each 2-node InfiniBand run that switches InfiniBand off fails the plan,
    the finding naming what was read; the benign ones pass that rule."""
    from tests.reliability.test_corpus import RUN, J, good_config

    config = good_config()
    runs = []
    for i, (_, command, variables, _) in enumerate(FOLLOW_ATTACKS):
        runs.append({**RUN, "name": f"attack-{i:02d}", "command": command, "environment_variables": variables})
    for i, (_, command, variables, nodes) in enumerate(FOLLOW_BENIGN):
        runs.append({**RUN, "name": f"benign-{i:02d}", "command": command, "environment_variables": variables,
                     "resources": {"instance_count": nodes}})
    config[J] = runs
    project = make_project(tmp_path / "project", config, stack="case")
    for relative, content in _CODE_FILES.items():
        path = project / "jobs" / "workloads" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    outcome = plan_in_process(project, capsys, stack="case")
    assert outcome.code == 1, outcome.out + outcome.err
    assert "Traceback" not in outcome.out + outcome.err
    failures: dict[str, list[str]] = {}
    for line in outcome.out.splitlines():
        if "run-infiniband-disabled  [high]" in line:
            failures.setdefault(line.split("run '")[1].split("'")[0], []).append(line)
    missed = [(attack, says, failures.get(f"attack-{i:02d}")) for i, (attack, _, _, says) in enumerate(FOLLOW_ATTACKS)
              if not any(says in line for line in failures.get(f"attack-{i:02d}", []))]
    assert missed == [], outcome.out[-4000:]
    alarms = {case: failures[f"benign-{i:02d}"] for i, (case, *_) in enumerate(FOLLOW_BENIGN)
              if f"benign-{i:02d}" in failures}
    assert alarms == {}
