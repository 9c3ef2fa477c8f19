"""``amlgpu submit JOB --stack NAME``: send a declared run, pipeline or sweep to the stack's workspace and
follow it (a pipeline or sweep is sent as azure-ai-ml's ``load_job`` reads its job file).

The workspace comes from the stack's outputs: ``pulumi stack output --json`` when the Pulumi CLI is
installed, else the offline plan's ``build/<stack>/outputs.json`` (or ``--plan-dir``), whose
subscription id is taken from AZURE_SUBSCRIPTION_ID. The run must be unchanged since those outputs
were written. Each submission gets its own job name, ``<run>-<UTC yyyymmdd-hhmmss>``, printed with the
studio link.

``--dry-run`` prints the workspace and the exact job file (with the name a submission would get now) and
signs in to nothing. It works offline: when the Pulumi CLI is missing or fails, the workspace comes from
the plan's outputs.json, or from the stack file when nothing was planned yet, and without
AZURE_SUBSCRIPTION_ID the subscription shown is a placeholder.

Exit 0 when the job completed (or the dry run printed), 1 when it ended otherwise, 2 on bad input.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from model.project import load_stack


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "submit",
        help="submit a declared run to the stack's Azure ML workspace and follow it to the end",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("job", metavar="JOB", help="the run's (pipeline's, sweep's) name in aml-gpu-training:jobs")
    parser.add_argument("--stack", "-s", required=True, help="stack name: reads Pulumi.<stack>.yaml")
    parser.add_argument("--dry-run", action="store_true", help="print the workspace and the job file; send nothing")
    parser.add_argument("--plan-dir", type=Path, help="take the workspace from this plan folder's outputs.json")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from jobs import submit

    stack = load_stack(args.stack)
    if args.dry_run:
        outputs = submit.dry_run_outputs(stack.name, stack.root, args.plan_dir)
    else:
        outputs = submit.stack_outputs(stack.name, stack.root, args.plan_dir)
    submission = submit.prepare(
        args.job, config=stack.config, stack_file=stack.file.display, outputs=outputs, root=stack.root,
        dry_run=args.dry_run,
    )
    if args.dry_run:
        return submit.dry_run(submission, root=stack.root)
    from amlgpu.interrupts import cleanup_on_interrupt

    with cleanup_on_interrupt():  # a Ctrl-C during the upload still removes the copy of the code folder
        return submit.submit(submission, root=stack.root, client=submit.ml_client(submission.workspace))
