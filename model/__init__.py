"""The stack model: the floor every other package stands on.

A stack file (``Pulumi.<stack>.yaml``) is read by :mod:`model.stackfile`, validated into a
:class:`model.config.StackConfig` (which composes the infrastructure model of :mod:`infra.model`,
the run model of :mod:`model.runs` and the waivers of :mod:`model.waivers`), and the project is
found by :mod:`model.project`. Errors a user can fix are :mod:`model.errors`.

Imports point down only: ``amlgpu`` (the CLI) -> ``policies`` -> ``jobs`` -> ``model`` -> ``infra``.
Nothing here imports ``jobs``, ``policies`` or ``amlgpu``.
"""

NAMESPACE = "aml-gpu-training"
"""The Pulumi project name, which is also the config namespace of every stack file."""
