"""The policy pack: rules over the planned stack and its runs (:mod:`policies.rules`), evaluated offline
by :func:`policies.engine.evaluate` (SARIF and Markdown reports) and by CrossGuard through
:mod:`policies.crossguard` (``pulumi preview --policy-pack policies``)."""
