"""Environment rules: registered environment versions build from images that cannot change under them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.rule import resource_rule
from policies.wire import get, inputs, known

ENVIRONMENT_VERSION = "azure-native:machinelearningservices:EnvironmentVersion"
ENVIRONMENT_DOCS = "https://learn.microsoft.com/en-us/azure/machine-learning/concept-environments"


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
