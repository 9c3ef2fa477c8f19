"""``amlgpu components pull --stack NAME``: the registered components the stack's pipelines name, pulled into the
project so the gate can judge the steps that run them.

For every step whose ``component`` is ``azureml:<name>:<version>`` (the workspace's) or
``azureml://registries/<registry>/components/<name>/versions/<version>``, the spec is read through azure-ai-ml and
written as component YAML under ``components/registered/`` (``workspace/<name>/<version>.yml``,
``registries/<registry>/<name>/<version>.yml``), with ``components/registered/lock.json`` recording where each came
from, its asset id, its version and the hashes of its spec and file. Commit both: ``amlgpu plan`` judges each step
against its file as it judges an inline component, and ``amlgpu submit`` refuses a pipeline whose registered
components no longer match the lock.

The workspace comes from the stack's outputs, as for ``amlgpu submit`` (the Pulumi CLI's, else the plan's
``outputs.json`` with AZURE_SUBSCRIPTION_ID). Exit 0 when pulled, 2 on bad input or when Azure refused.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from stack.project import load_stack


def register(sub: Any) -> None:
    parser = sub.add_parser("components", help="pull the registered components the stack's pipelines run",
                            description=__doc__)
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    pull = actions.add_parser("pull", help="write each registered component's spec and the lock into the project",
                              description=__doc__)
    pull.add_argument("--stack", "-s", required=True, help="stack name: reads Pulumi.<stack>.yaml")
    pull.add_argument("--plan-dir", type=Path, help="the plan folder whose outputs.json names the workspace")
    pull.set_defaults(func=run)


def run(args: argparse.Namespace, *, credential: Any = None, **client_options: Any) -> int:
    """``credential`` and ``client_options`` (``transport``): what the clients are built with (tests)."""
    from jobs import components, remote, workspace

    stack = load_stack(args.stack)
    found = components.references(stack.config)
    if not found:
        print(f"No pipeline of stack {stack.name!r} names a registered component: nothing to pull.", file=sys.stderr)
        return 0
    outputs = workspace.stack_outputs(stack.name, stack.root, args.plan_dir)
    where = workspace.require_subscription(workspace.workspace_of(outputs))
    client = remote.ml_client(where, credential=credential, **client_options)
    entries = components.pull(stack.config, stack.root, components.client_factory(client, **client_options))
    for entry in entries:
        print(f"pulled {entry['reference']} ({entry['source']}) -> {entry['file']}  {entry['spec_sha256']}")
    print(f"Wrote {len(entries)} component(s) and components/registered/lock.json: review and commit them, then "
          f"`amlgpu plan --stack {stack.name}`.", file=sys.stderr)
    return 0
