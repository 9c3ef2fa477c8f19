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

import pulumi
import pulumi_azure_native.machinelearningservices as ml
import pulumi_azure_native.storage as storage

from infra.model import Environment as EnvironmentConfig
from infra.paths import files_inside

TYPE = "aml-gpu-training:infra:Environment"
BUILD_CONTAINER = "environment-builds"


@dataclass(frozen=True)
class EnvironmentArgs:
    config: EnvironmentConfig
    root: Path
    """Project root: build contexts and conda files are relative to it."""
    workspace_name: pulumi.Input[str]
    resource_group_name: pulumi.Input[str]
    storage_account_name: pulumi.Input[str]
    build_container_name: pulumi.Input[str]


def _build_files(folder: Path) -> list[Path]:
    # Sorted so the plan (and the upload order) is the same on every machine. A link that leads outside
    # the build context is not uploaded: the context is the stack's, the rest of the machine is not.
    return sorted(files_inside(folder))


class Environment(pulumi.ComponentResource):
    asset_id: pulumi.Output[str]

    def __init__(self, name: str, args: EnvironmentArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE, name, None, opts)
        cfg = args.config
        if cfg.reference is not None:
            self.asset_id = pulumi.Output.from_input(cfg.reference)
            self.register_outputs({"assetId": self.asset_id})
            return

        child = pulumi.ResourceOptions(parent=self)
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
        if cfg.build is not None:
            context = args.root / cfg.build.path
            prefix = f"{cfg.name}/{cfg.version}"
            for file in _build_files(context):
                relative = file.relative_to(context).as_posix()
                storage.Blob(
                    f"{name}-{cfg.version}-ctx-{relative}",
                    account_name=args.storage_account_name,
                    container_name=args.build_container_name,
                    resource_group_name=args.resource_group_name,
                    blob_name=f"{prefix}/{relative}",
                    type="Block",
                    # Relative to the project root, where Pulumi runs the program: the plan stays the same
                    # on every machine.
                    source=pulumi.FileAsset((Path(cfg.build.path) / relative).as_posix()),
                    opts=child,
                )
            build = ml.BuildContextArgs(
                context_uri=pulumi.Output.concat(
                    "https://", args.storage_account_name, ".blob.core.windows.net/",
                    args.build_container_name, f"/{prefix}/",
                ),
                dockerfile_path=cfg.build.dockerfile_path,
            )

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
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True),
        )
        self.asset_id = version.id.apply(lambda _: cfg.asset_id)
        self.register_outputs({"assetId": self.asset_id})


def build_container(
    account_name: pulumi.Input[str], resource_group_name: pulumi.Input[str], parent: pulumi.Resource
) -> storage.BlobContainer:
    """The private container build contexts are uploaded to (one per workspace)."""
    return storage.BlobContainer(
        f"{BUILD_CONTAINER}",
        container_name=BUILD_CONTAINER,
        account_name=account_name,
        resource_group_name=resource_group_name,
        public_access="None",
        opts=pulumi.ResourceOptions(parent=parent),
    )
