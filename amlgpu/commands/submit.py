"""``amlgpu submit JOB --stack NAME``: send a declared run, pipeline or sweep to the stack's workspace and
follow it (a pipeline or sweep is sent as azure-ai-ml's ``load_job`` reads its job file).

The policy pack is evaluated for the run first, now, with the rules, pack config and waivers ``amlgpu plan``
uses for the stack: a run with a mandatory finding is refused (exit 1, the findings on the terminal), dry
run included. Waivers are the only way past, as in review.

What is sent is the run's job file as ``amlgpu plan`` writes it (``build/<stack>/jobs/<run>.yml``, or under
``--plan-dir``), with this submission's name, ``<run>-<UTC yyyymmdd-hhmmss>``. The workspace comes from the
stack's outputs: ``pulumi stack output --json`` when the Pulumi CLI is installed, else the offline plan's
``outputs.json``, whose subscription id is taken from AZURE_SUBSCRIPTION_ID. The run must be unchanged since
those outputs were written. The code folder is uploaded to the workspace's storage, which takes traffic only
from inside the network or from network.operator_ip_ranges. The job's logs stream to the end, with the
cause and fix of a known failure; ``amlgpu job`` shows, follows or cancels it later.

``--dry-run`` prints the workspace and the exact job file and signs in to nothing. It works offline: when
the Pulumi CLI is missing or fails, the workspace comes from the plan's outputs.json, or from the stack file
when nothing was planned yet, and without AZURE_SUBSCRIPTION_ID the subscription shown is a placeholder.

Exit 0 when the job completed (or the dry run printed), 1 when a mandatory policy failed or the job ended
otherwise, 2 on bad input or when Azure refused the job, 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from jobs import components, remote, submit, workspace
from kernel.errors import EXIT_POLICY, EXIT_USAGE
from kernel.interrupts import cleanup_on_interrupt
from planning import service
from planning.render import findings_text
from stack.project import LoadedStack, load_stack


def register(sub: Any) -> None:
    parser = sub.add_parser("submit", description=__doc__)
    parser.add_argument("job", metavar="JOB", help="the run's (pipeline's, sweep's) name in aml-gpu-training:jobs")
    parser.add_argument("--stack", "-s", required=True, help="stack name: reads Pulumi.<stack>.yaml")
    parser.add_argument("--dry-run", action="store_true", help="print the workspace and the job file; send nothing")
    parser.add_argument("--plan-dir", type=Path, help="the plan folder: its outputs.json and jobs/<run>.yml")
    parser.add_argument("--policy-config", type=Path,
                        help="policy pack config, as for amlgpu plan (default: policies/config.<stack>.json, else "
                        "policies/config.json, when the project has one)")
    parser.set_defaults(func=run)


def gate(stack: LoadedStack, job: str, plan_dir: Path, policy_config: Path | None) -> list[str]:
    """The open mandatory findings of the run (of a pipeline or sweep and its steps), evaluated now as
    ``amlgpu plan`` evaluates the stack, as the lines ``amlgpu plan`` prints them; empty when the gate lets
    the run through."""
    plan = service.plan_stack(stack, service.PlanOptions(plan_dir, service.pack_config(stack, policy_config)))
    return findings_text(service.job_report(plan, job), stack.file.display, stack.file.line_of)[:-1]


def run(args: argparse.Namespace, *, credential: Any = None, **client_options: Any) -> int:
    """``credential`` and ``client_options`` (``transport``): what the client is built with (tests)."""
    stack = load_stack(args.stack)
    plan_dir = args.plan_dir or stack.root / "build" / stack.name
    if args.dry_run:
        outputs = workspace.dry_run_outputs(stack.name, stack.root, args.plan_dir)
    else:
        outputs = workspace.stack_outputs(stack.name, stack.root, args.plan_dir)
    submission = submit.prepare(
        args.job, config=stack.config, stack_file=stack.file.display, outputs=outputs, root=stack.root,
        dry_run=args.dry_run,
    )
    print(f"Checking run {args.job!r} against the policy pack...", file=sys.stderr, flush=True)
    findings = gate(stack, args.job, plan_dir, args.policy_config)
    if findings:
        print("\n".join(findings), file=sys.stderr)
        print(f"submit refused: run {args.job!r} fails a mandatory policy (exit 1); fix it or waive the rule "
              "for the run (docs/policies.md)", file=sys.stderr)
        return EXIT_POLICY
    job = submit.job_file(submission, root=stack.root, plan_dir=plan_dir)
    if args.dry_run:
        return submit.dry_run(submission, job, root=stack.root)
    with cleanup_on_interrupt():  # a Ctrl-C during the upload still removes the copy of the code folder
        client = remote.ml_client(submission.workspace, credential=credential, **client_options)
        clients = components.client_factory(client, **client_options)
        stale = components.verify(stack.config, stack.root, args.job, clients, stack=stack.name)
        if stale:  # the plan judged the pulled specs: what Azure ML would run must still be those
            print("\n".join(f"error: {problem}" for problem in stale), file=sys.stderr)
            return EXIT_USAGE
        return submit.submit(submission, job, root=stack.root, client=client,
                             notice=submit.upload_notice(stack.config))
