"""The rules, one module per family: workspace; storage (storage, key vault, registry); network;
compute; environments; runs. :mod:`policies.catalogue` collects them."""
