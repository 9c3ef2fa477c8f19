"""Environment rules: registered environment versions build from images that cannot change under them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from azurefacts.resource_types import ENVIRONMENT_VERSION
from policies.rule import resource_rule
from policies.wire import get, inputs, known

ENVIRONMENT_DOCS = "https://learn.microsoft.com/en-us/azure/machine-learning/concept-environments"
ENVIRONMENT_COMPONENT = "aml-gpu-training:infra:Environment"
BUILD_SECRETS = "https://docs.docker.com/build/building/secrets/"


def image_tag(image: str) -> str | None:
    """The tag of an image reference (None when it has none, or is pinned by digest only)."""
    last = image.rsplit("/", 1)[-1].split("@", 1)[0]
    return last.split(":", 1)[1] if ":" in last else None


@resource_rule(
    id="environment-image-pinned",
    types=[ENVIRONMENT_VERSION],
    title="Environment images are pinned to a tag or digest, never latest",
    severity="medium",
    enforcement="advisory",
    hygiene=True,
    rationale="An environment version is immutable in Azure ML, but an untagged or ':latest' base image is "
    "not: the same version silently changes CUDA, NCCL or PyTorch between runs and between nodes.",
    remediation="Reference the image with an explicit version tag or an @sha256 digest.",
    reference=ENVIRONMENT_DOCS,
    config_key=("image",),
)
def environment_image_pinned(resource: Mapping[str, Any]) -> list[str]:
    image = get(inputs(resource), "properties.image")
    if not isinstance(image, str) or not known(image) or "@sha256:" in image:
        return []
    tag = image_tag(image)
    if tag is None:
        return [f"image {image} has no tag (Docker pulls :latest)"]
    if tag == "latest":
        return [f"image {image} is pinned to the moving tag :latest"]
    return []


@resource_rule(
    id="environment-image-digest",
    types=[ENVIRONMENT_VERSION],
    title="Environment images are pinned by digest",
    severity="low",
    enforcement="advisory",
    rationale="Tags can be re-pushed; only a digest guarantees every node of every run gets the same bytes. "
    "Curated images are re-published under the same tag with patched libraries.",
    remediation="Append the image's @sha256 digest (keep the tag for readability: repo:tag@sha256:...).",
    reference=ENVIRONMENT_DOCS,
    config_key=("image",),
)
def environment_image_digest(resource: Mapping[str, Any]) -> list[str]:
    image = get(inputs(resource), "properties.image")
    if not isinstance(image, str) or not known(image) or "@sha256:" in image:
        return []
    return [f"image {image} is pinned by tag, not digest"]


@resource_rule(
    id="environment-secrets-in-build-context",
    types=[ENVIRONMENT_COMPONENT],
    title="Environment build contexts hold no private keys or tokens",
    severity="critical",
    enforcement="mandatory",
    rationale="The build context is uploaded to the workspace's storage account and built into an image in the "
    "workspace's registry: its files are readable by everyone with access to either, and a Dockerfile's ENV and "
    "ARG values persist in the image's layers and history (Docker: build arguments and environment variables "
    "are inappropriate for passing secrets). Judged by value, as for runs: id_rsa and key stores by name, known "
    "token shapes in any file, credential-named .env and ENV/ARG values with a high-entropy literal.",
    remediation="Delete the file or the value from the build context and rotate the credential; a job reads its "
    "secrets at run time from the workspace key vault with its own identity, never from the image.",
    reference=BUILD_SECRETS,
    config_key=("build", "path"),
)
def environment_secrets_in_build_context(resource: Mapping[str, Any]) -> list[str]:
    props = inputs(resource)
    return [f"build context {props.get('build_path')!r} holds a credential in {path}"
            for path in props.get("context_secrets") or []]
