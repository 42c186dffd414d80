"""The read side without torch: memory-mapped shards, verify and info (`shards`). Numpy only; the loader
workers (`pairload.workers`) read through it."""

from .shards import ShardDataset, info, open_shards, verify  # noqa: F401
