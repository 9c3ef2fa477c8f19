"""The rules, one module per family (workspace, storage, network, deploy_order, compute, environments, runs,
launch, runtime, fabric, pipelines, hardening, budgets); ``runs`` is a package of subject modules.
:mod:`policies.catalogue` collects them."""
