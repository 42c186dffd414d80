"""The streaming loader for splits larger than memory or on shared storage: each rank reads its own block of the
epoch's shard order, a window of shards at a time (the "by_shard" deal of `pairload.plan.deals`).

Per epoch the shards are permuted; samples are shuffled within windows of consecutive shards holding
`shuffle_buffer` samples (default: as many pairs as fit in 1 GiB), and rank r takes the r-th contiguous block of
that order. So a rank reads only its fraction of the split and only one window at a time needs to be in the page
cache. Everything else is the planner's and the engine's, as for `ram`: every crop and flip, repeats, mixing
(each source's own chain of shard orders), schedules ('drop'), `len()`, and resuming mid-epoch on any world size
and any number of workers. The shards are the WebDataset tar files `pairload pack` writes; they are read at the
offsets the manifest records instead of being parsed member by member.
"""

from __future__ import annotations

import os

from ..errors import ConfigError
from ..units import human_bytes
from ..plan import Shards
from ..read.shards import ShardDataset
from .base import LoaderOptions, RemoteOptions
from .host import HostLoader

SHUFFLE_BYTES = 2**30  # by default, the pixels of one shuffle window


def auto_shuffle_buffer(pair_bytes: int) -> int:
    """Samples shuffled together when no `shuffle_buffer` is given: as many pairs as fit in SHUFFLE_BYTES."""
    return max(1, SHUFFLE_BYTES // max(1, pair_bytes))


def _check_window(ds: ShardDataset, shuffle_buffer: int, cache_limit: int) -> None:
    """A cache_limit must hold the shards of one shuffle window and the next shard, or streaming cannot go on."""
    per_sample = max(b / max(1, n) for b, n in zip(ds.shard_bytes, ds.shard_samples))
    need = int(min(len(ds), shuffle_buffer) * per_sample) + 2 * max(ds.shard_bytes)
    if cache_limit < need:
        raise ConfigError(f"{ds.where}: cache_limit={human_bytes(cache_limit)} cannot hold one shuffle window of "
                          f"shards ({shuffle_buffer} samples) and the next ones ({human_bytes(need)}); raise "
                          "cache_limit or lower shuffle_buffer")


class WdsLoader(HostLoader):
    """Packed shards streamed by shard (see the module's docstring)."""

    DEAL = "by_shard"
    NAME = "pairload-wds"

    def __init__(self, source: str | os.PathLike | ShardDataset | dict, opts: LoaderOptions, *,
                 shuffle_buffer: int | None = None, prefetch: int = 4, timeout: float = 300.0,
                 cache_dir: str | os.PathLike | None = None, cache_limit: int | None = None,
                 storage_options: dict | None = None):
        remote = RemoteOptions(cache_dir, cache_limit, storage_options, kind="wds")
        ds = remote.open(source, opts.split, whole=False)  # checks each manifest and that every shard is present
        if shuffle_buffer is not None and shuffle_buffer < 1:
            raise ConfigError(f"shuffle_buffer={shuffle_buffer}: expected at least 1 sample (1: shards in order, "
                              "samples in shard order)")
        if opts.plan.schedule and opts.plan.last_batch != "drop":
            raise ConfigError(f"a crop/batch schedule with last_batch={str(opts.plan.last_batch)!r}: wds plans "
                              "scheduled epochs with 'drop' only (every rank the same shapes at every step); use the "
                              "ram or dali-external loader for the others")
        pair_bytes = int((ds.sizes[:, 0] * ds.sizes[:, 1]).max()) * 6 if len(ds) else 1
        self.shuffle_buffer = shuffle_buffer or auto_shuffle_buffer(pair_bytes)
        if ds.remote and cache_limit is not None:
            _check_window(ds, self.shuffle_buffer, cache_limit)
        super().__init__(ds, opts, prefetch=prefetch, timeout=timeout,
                         shards=Shards(ds.shard_samples, self.shuffle_buffer), remote=remote, whole=False)
        if len(self) == 0:
            raise ConfigError(f"split {opts.split!r}: with {self.cfg.world_size} ranks no rank fills one batch of "
                              f"{self.cfg.batch_size}; lower batch_size or use last_batch='pad' or 'partial'")

    def _deal_name(self) -> str:
        return f"by_shard, shuffle buffer {self.shuffle_buffer}"

    @property
    def skipped(self) -> int:
        """Samples of the current epoch that this rank's block leaves out ('drop': every rank gets as many whole
        batches; the samples left out change with the epoch)."""
        total = self.cfg.epoch_length(self.samples)
        delivered = sum(len(bp) - int(bp.padded.sum()) for bp in self.plan())
        left, ws, r = max(0, total - delivered * self.cfg.world_size), self.cfg.world_size, self.cfg.rank
        return (r + 1) * left // ws - r * left // ws
