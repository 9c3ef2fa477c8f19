"""The CrossGuard policy pack: ``pulumi preview --policy-pack policies`` (from the project folder).

The only place a ``PolicyPack`` is built: constructing one starts the analyzer's gRPC server and
never returns, so nothing imports this module; tests exercise :mod:`policies.crossguard` instead.
Pulumi runs it with the project's virtualenv (see ``PulumiPolicy.yaml``) from this folder, hence
the project root is put on ``sys.path`` first.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pulumi_policy import EnforcementLevel, PolicyPack

from policies.crossguard import policies

PolicyPack(
    name="aml-gpu-training",
    description="Secure Azure ML infrastructure and distributed GPU runs that fit their clusters: "
    "the aml-gpu-training rules (docs/policies.md).",
    enforcement_level=EnforcementLevel.ADVISORY,
    policies=policies(),
)
