"""The write side, run once per dataset: write shards from the pairs `pairload.folders` finds and decodes (`writer`, the
entry point, over `local`, `shardplan`, `jobs`, `shardwrite`, `manifest` and `guard`), upload them into object
storage as they are written (`upload`). Never imports torch or DALI."""

from .writer import PackOptions, pack  # noqa: F401
