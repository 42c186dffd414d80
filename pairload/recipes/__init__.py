"""Example consumers of the loaders, not library API: the reference DDP + AMP training loop (`train`), its model,
metrics, distributed set-up and data-wait timing, and the embedded demo (`demo`)."""
