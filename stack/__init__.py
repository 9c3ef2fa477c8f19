"""The stack file: the floor above analysis, azurefacts and kernel, below the features.

A stack file (``Pulumi.<stack>.yaml``) is read by :mod:`stack.stackfile` and validated into a
:class:`stack.config.StackConfig` (the infrastructure of :mod:`stack.infrastructure`, the runs of
:mod:`stack.runs`, pipelines and sweeps, waivers), its cross-references checked by :mod:`stack.references`
and its errors worded by :mod:`stack.diagnostics`. The layers: docs/development.md.
"""

NAMESPACE = "aml-gpu-training"
"""The Pulumi project name, which is also the config namespace of every stack file."""
