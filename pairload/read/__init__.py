"""The read side without torch: memory-mapped shards, verify and info (`shards`), and the host-side execution
of a batch plan that loader workers run (`assemble`). Numpy only."""

from .shards import ShardDataset, info, open_shards, verify  # noqa: F401
