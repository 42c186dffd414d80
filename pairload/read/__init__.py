"""The read side without torch: one split read through memory maps (`dataset`), a mix of named splits (`mix`), the
interface loaders read both through (`source`), `verify` and `info`; `shards.open_shards` opens any of them.
Numpy only; the loader workers (`pairload.workers`) read through it."""

from .shards import ShardDataset, ShardMix, ShardSource, info, open_shards, verify  # noqa: F401
