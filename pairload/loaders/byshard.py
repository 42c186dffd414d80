"""The by-shard deal of the shard loader (`shards.ShardLoader`; the `wds` kind), for splits larger than memory or on
shared storage: each rank reads its own block of the epoch's shard order, a shuffle buffer of shards at a time (the
"by_shard" deal of `pairload.plan.deals`).

Per epoch the shards are permuted; samples are shuffled within shuffle buffers of consecutive shards holding
`shuffle_buffer` samples (default: as many pairs as fit in 1 GiB), and rank r takes the r-th contiguous block of
that order. So a rank reads only its fraction of the split and only one shuffle buffer at a time needs to be in the page
cache. Everything else is the planner's and the engine's, as for `ram`: every crop and flip, repeats, mixing
(each source's own chain of shard orders), schedules ('drop'), `len()`, and resuming mid-epoch on any world size
and any number of workers. The shards are the WebDataset tar files `pairload pack` writes; they are read at the
offsets the manifest records instead of being parsed member by member.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..read.shards import ShardDataset
from ..units import human_bytes
from .base import LoaderOptions

SHUFFLE_BYTES = 2**30  # by default, the pixels of one shuffle buffer


def auto_shuffle_buffer(pair_bytes: int) -> int:
    """Samples shuffled together when no `shuffle_buffer` is given: as many pairs as fit in SHUFFLE_BYTES."""
    return max(1, SHUFFLE_BYTES // max(1, pair_bytes))


def buffer_bytes(ds: ShardDataset, shuffle_buffer: int) -> int:
    """Bytes of shards one shuffle buffer holds at most (its samples at the largest bytes per sample of a shard)."""
    per_sample = max((b / max(1, n) for b, n in zip(ds.shard_bytes, ds.shard_samples)), default=0)
    return int(min(len(ds), shuffle_buffer) * per_sample)


def _check_buffer(ds: ShardDataset, shuffle_buffer: int, cache_limit: int) -> None:
    """A cache_limit must hold the shards of one shuffle buffer and the next shard, or streaming cannot go on."""
    need = buffer_bytes(ds, shuffle_buffer) + 2 * max(ds.shard_bytes)
    if cache_limit < need:
        raise ConfigError(f"{ds.where}: cache_limit={human_bytes(cache_limit)} cannot hold one shuffle buffer of "
                          f"shards ({shuffle_buffer} samples) and the next ones ({human_bytes(need)}); raise "
                          "cache_limit or lower shuffle_buffer")


def shuffle_buffer_of(ds: ShardDataset, opts: LoaderOptions, shuffle_buffer: int | None,
                      cache_limit: int | None) -> int:
    """The samples shuffled together by the by-shard deal over `ds` (`shuffle_buffer`, or as many pairs as fit in
    SHUFFLE_BYTES), once the options are known to allow streaming."""
    if shuffle_buffer is not None and shuffle_buffer < 1:
        raise ConfigError(f"shuffle_buffer={shuffle_buffer}: expected at least 1 sample (1: shards in order, "
                          "samples in shard order)")
    if opts.plan.schedule and opts.plan.last_batch != "drop":
        raise ConfigError(f"a crop/batch schedule with last_batch={str(opts.plan.last_batch)!r}: wds plans "
                          "scheduled epochs with 'drop' only (every rank the same shapes at every step); use the "
                          "ram or dali-external loader for the others")
    bounds = ds.size_bounds  # the greatest height and width, where the manifest says: no size is read
    if bounds is not None:
        largest = bounds[1]
    else:
        hw = np.asarray(ds.sizes)
        largest = hw[int((hw[:, 0] * hw[:, 1]).argmax())] if len(ds) else (1, 1)
    buffer = shuffle_buffer or auto_shuffle_buffer(ds.members.pair_bytes(int(largest[0]), int(largest[1])))
    if ds.remote and cache_limit is not None:
        _check_buffer(ds, buffer, cache_limit)
    return buffer


@dataclass(frozen=True)
class PinnedBuffer:
    """What the GPU kernel pins of a streamed split (`pairload.cut.memory.pages.PageCache`): `ahead` bytes
    registered beyond what the current batch reads (the next shuffle buffer, locally; one shard of a remote split, whose
    node cache must also hold the shards downloaded ahead), `need` the most pinned at once (a shuffle buffer being read,
    what is read ahead, a shard at each end)."""

    need: int
    ahead: int


def pinned_buffer(ds: ShardDataset, shuffle_buffer: int, budget: int | None = None) -> PinnedBuffer | None:
    """What the kernel pins at most while it streams `ds`; None when it need not stream: a local split within the
    pinning budget (`budget`, None: the default) stays registered once read, as `ram`'s does. Registering costs
    far more than reading the registered page cache, so a split that fits is registered once, not once per epoch;
    a remote split streams through the node cache."""
    if not ds.remote:
        from ..cut.paths import default_budget

        if sum(ds.shard_bytes) <= (default_budget() if budget is None else budget):
            return None
    buffer = buffer_bytes(ds, shuffle_buffer)
    shard = max(ds.shard_bytes, default=0)
    ahead = shard if ds.remote else buffer + shard
    return PinnedBuffer(need=buffer + ahead + 2 * shard, ahead=ahead)
