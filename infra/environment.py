"""The Environment component: a curated training environment registered in the workspace.

An image, or a Docker build context uploaded to the workspace's storage and built by Azure ML, plus
an optional conda file. A registry environment (``reference``) is shared, not created: the component
records it and creates nothing.

Asset versions are immutable in Azure ML, so each version is its own resource (named after it):
changing an environment means a new ``version``, and old versions are kept on ``pulumi destroy``/
updates (``retain_on_delete``) because finished and running jobs still reference them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi_azure_native.machinelearningservices as ml

from analysis.secret_scan import scan_folder
from infra.build_context import BuildContexts
from stack.infrastructure import Environment as EnvironmentConfig

TYPE = "aml-gpu-training:infra:Environment"


@dataclass(frozen=True)
class EnvironmentArgs:
    config: EnvironmentConfig
    root: Path
    """Project root: build contexts and conda files are relative to it."""
    workspace_name: pulumi.Input[str]
    resource_group_name: pulumi.Input[str]
    contexts: BuildContexts | None = None
    """Where build contexts go (required when the environment has ``build``)."""


def _context_scan(root: Path, cfg: EnvironmentConfig) -> dict[str, Any] | None:
    """What the environment's build context holds that must not be uploaded (the component's props, which
    the policy pack reads): ``context_secrets`` and ``context_unscanned``, relative paths; None without one."""
    if cfg.build is None:
        return None
    scanned = scan_folder(root / cfg.build.path, dockerfiles=frozenset({cfg.build.dockerfile_path}))
    return {"build_path": cfg.build.path, "context_secrets": list(scanned.findings),
            "context_unscanned": list(scanned.unscanned)}


class Environment(pulumi.ComponentResource):
    asset_id: pulumi.Output[str]

    def __init__(self, name: str, args: EnvironmentArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        cfg = args.config
        super().__init__(TYPE, name, _context_scan(args.root, cfg), opts)
        if cfg.reference is not None:
            self.asset_id = pulumi.Output.from_input(cfg.reference)
            self.register_outputs({"assetId": self.asset_id})
            return

        container = ml.EnvironmentContainer(
            f"{name}-container",
            name=cfg.name,
            workspace_name=args.workspace_name,
            resource_group_name=args.resource_group_name,
            properties=ml.EnvironmentContainerPropertiesArgs(
                description=cfg.description, tags=cfg.tags or None
            ),
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True),
        )

        build = None
        after: list[pulumi.Resource] = []
        if cfg.build is not None:
            if args.contexts is None:
                raise ValueError(f"environment {cfg.name!r} has a build context but no BuildContexts was given")
            upload = args.contexts.upload(
                f"{name}-{cfg.version}-context", cfg.name, str(cfg.version), args.root, cfg.build.path, self
            )
            build = ml.BuildContextArgs(
                context_uri=pulumi.Output.concat(
                    "https://", args.contexts.account_name, ".blob.core.windows.net/",
                    args.contexts.container.name, "/", upload.context_prefix,
                ),
                dockerfile_path=cfg.build.dockerfile_path,
            )
            # Azure ML builds the image from the context as soon as the version exists: upload first.
            after.append(upload)

        conda = (args.root / cfg.conda_file).read_text(encoding="utf-8") if cfg.conda_file else None
        version = ml.EnvironmentVersion(
            f"{name}-{cfg.version}",
            name=container.name,
            version=cfg.version,
            workspace_name=args.workspace_name,
            resource_group_name=args.resource_group_name,
            properties=ml.EnvironmentVersionPropertiesArgs(
                image=cfg.image,
                build=build,
                conda_file=conda,
                os_type="Linux",
                description=cfg.description,
                tags={**cfg.tags, "provides": ",".join(sorted(cfg.capabilities))} if cfg.capabilities else cfg.tags,
            ),
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True, depends_on=after),
        )
        self.asset_id = version.id.apply(lambda _: cfg.asset_id)
        self.register_outputs({"assetId": self.asset_id})

