"""The stack model: the floor every other package stands on.

A stack file (``Pulumi.<stack>.yaml``) is read by :mod:`stack.stackfile`, validated into a
:class:`stack.config.StackConfig` (which composes the infrastructure model of :mod:`stack.infrastructure`,
the run model of :mod:`stack.runs` and the waivers of :mod:`stack.waivers`), and the project is
found by :mod:`stack.project`. Errors a user can fix are :mod:`kernel.errors`.

Imports point down only: ``amlgpu`` (the CLI) -> ``policies`` -> ``jobs`` -> ``model`` -> ``infra``.
Nothing here imports ``jobs``, ``policies`` or ``amlgpu``.
"""

NAMESPACE = "aml-gpu-training"
"""The Pulumi project name, which is also the config namespace of every stack file."""
