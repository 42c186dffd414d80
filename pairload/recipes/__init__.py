"""Example consumers of the loaders, not library API: the reference DDP + AMP training loop (`train`, with `config`,
`data`, `loop`, `evaluate`, `checkpoint`), its model, metrics and data-wait timing. Never imports `pairload.bench`
(which uses `model` and `timing`); the embedded demo that runs both is `pairload.demo`."""
