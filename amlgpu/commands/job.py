"""``amlgpu job show|stream|cancel NAME --stack S``: a submitted job, as ``az ml job show/stream/cancel``.

NAME is the job's name as ``amlgpu submit`` printed it (``<run>-<UTC timestamp>``), or any job of the
stack's workspace. The workspace comes from the stack's outputs, as for ``amlgpu submit``: ``pulumi stack
output --json`` when the Pulumi CLI is installed, else the plan's ``outputs.json`` (``--plan-dir``) with
AZURE_SUBSCRIPTION_ID.

* ``show``: status, display name, experiment, compute, creation time and the studio link.
* ``stream`` (alias ``logs``): the job's logs until it ends, then its status and the cause and fix of a known
  failure; exit 0 when it completed, 1 otherwise.
* ``cancel``: ask Azure ML to cancel it (``job stream`` follows it to ``Canceled``).

Exit 2 when the workspace is unknown or Azure refuses (sign-in, no such job).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from azure.ai.ml import MLClient

from jobs import remote, workspace
from jobs.diagnose import INFINIBAND
from stack.project import LoadedStack, load_stack


def register(sub: Any) -> None:
    parser = sub.add_parser("job", description=__doc__)
    actions = parser.add_actions()
    for action, aliases, text in (
        ("show", [], "the job's status and studio link"),
        ("stream", ["logs"], "the job's logs until it ends; exit 0 when it completed, 1 otherwise"),
        ("cancel", [], "ask Azure ML to cancel the job"),
    ):
        one = actions.add_parser(action, aliases=aliases, help=text, description=text)
        one.add_argument("name", metavar="NAME", help="the job's name (amlgpu submit prints it)")
        one.add_argument("--stack", "-s", required=True, help="stack name: reads Pulumi.<stack>.yaml")
        one.add_argument("--plan-dir", type=Path, help="take the workspace from this plan folder's outputs.json")
        one.set_defaults(func=run, action=action)


def run(args: argparse.Namespace, *, credential: Any = None, **client_options: Any) -> int:
    """``credential`` and ``client_options`` (``transport``): what the client is built with (tests)."""
    stack = load_stack(args.stack)
    outputs = workspace.stack_outputs(stack.name, stack.root, args.plan_dir)
    where = workspace.require_subscription(workspace.workspace_of(outputs))
    client = remote.ml_client(where, credential=credential, **client_options)
    if args.action == "show":
        return remote.show(client, args.name, workspace=where)
    if args.action == "cancel":
        return remote.cancel(client, args.name, workspace=where)
    return remote.follow(client, args.name, workspace=where, facts=_facts(stack, client, args.name, where))


def _facts(stack: LoadedStack, client: MLClient, name: str, where: workspace.WorkspaceRef) -> frozenset[str]:
    """What the diagnosis needs of the job's cluster, when the stack declares the cluster it runs on."""
    with remote.azure_errors(where, doing=f"reading job {name}"):
        compute = str(client.jobs.get(name).compute or "").rsplit("/", 1)[-1]
    declared = {cluster.name: cluster for cluster in stack.config.clusters}
    on_fabric = compute in declared and declared[compute].sku.infiniband
    return frozenset({INFINIBAND}) if on_fabric else frozenset()
