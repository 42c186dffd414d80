"""Example consumers of the loaders, not library API: the reference DDP + AMP training loop (`train`), its model,
metrics, distributed set-up and data-wait timing. Never imports `pairload.bench` (which uses `model` and `timing`);
the embedded demo that runs both is `pairload.demo`."""
