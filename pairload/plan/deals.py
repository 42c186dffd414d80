"""The deals: how an epoch's rows are ordered and shared out between ranks, one registry of pure functions
(as MosaicML keeps its shuffles and partitions), so every loader kind and `len()` agree.

- "strided" (ram, dali-external, paired_source "external"): the epoch's permutation of the whole split; rank r
  takes every world_size-th row, so the ranks of a node read the split at random (it must fit in memory).
- "contiguous" (dali-file): the same permutation; rank r takes one block, as DALI's sharded readers read.
- "by_shard" (wds): the shards in the epoch's order, each rank taking one contiguous block of them; samples are
  shuffled only within shuffle buffers of consecutive shards holding `Shards.buffer` samples, so a rank reads its own
  fraction of the split, a shuffle buffer at a time (a split larger than memory streams through the page cache).

Every function here is a function of the epoch's rows alone, never of the world size the epoch is dealt to, so an
epoch started on one world size can be finished on another (`consumed`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import ConfigError
from .draws import epoch_order
from .positions import Cut, Pieces, Stride, View


@dataclass(frozen=True)
class Shards:
    """A split's shard structure for the by-shard deal: `counts`, the samples of each shard in index order (the
    samples of shard k follow those of shard k-1; a mix lists its sources' shards one source after the other),
    and `buffer`, how many samples (whole shards, in the epoch's shard order) are shuffled together."""

    counts: tuple[int, ...]
    buffer: int

    def __post_init__(self) -> None:
        if self.buffer < 1:
            raise ConfigError(f"shuffle buffer {self.buffer}: expected at least 1 sample")
        if any(c < 0 for c in self.counts):
            raise ConfigError(f"shard sample counts {self.counts[:8]}: expected counts >= 0")

    def part(self, lo: int, hi: int) -> "Shards":
        """The shards of samples [lo, hi) (one source of a mix: its range starts and ends at shard boundaries)."""
        ends = np.cumsum((0,) + self.counts)
        a, b = int(np.searchsorted(ends, lo)), int(np.searchsorted(ends, hi))
        if ends[a] != lo or ends[b] != hi:
            raise ConfigError(f"samples [{lo}, {hi}) do not start and end at shard boundaries")
        return Shards(self.counts[a:b], self.buffer)


def shard_order(n: int, *, seed: int, epoch: int, shuffle: bool = True, salt: tuple[int, ...] = (),
                shards: Shards | None = None, positions: np.ndarray | None = None) -> np.ndarray:
    """The by-shard order of `n` samples at `positions` (None: all n): the shards in the epoch's permutation, and
    each shuffle buffer of consecutive shards (those starting within the same `buffer` samples of the order) in an
    order of its own, the bijection of its positions keyed by the buffer's number. Memory: a few integers per shard."""
    if shards is None:
        raise ConfigError("the by-shard deal needs the split's shard sizes")
    counts = np.asarray(shards.counts, dtype=np.int64)
    if int(counts.sum()) != n:
        raise ConfigError(f"shard sizes add up to {int(counts.sum())} samples, the split has {n}")
    pos = np.arange(n, dtype=np.int64) if positions is None else np.asarray(positions, dtype=np.int64)
    if not shuffle or not len(pos):
        return pos.copy()
    starts = np.cumsum(counts) - counts
    perm = epoch_order(len(counts), seed=seed, epoch=epoch, salt=(0x5A4D, *salt))
    c = counts[perm]
    at = np.cumsum(c) - c  # where each shard starts in the epoch's order
    buffer = at // shards.buffer
    edges = np.flatnonzero(np.diff(buffer)) + 1
    bounds = np.concatenate([[0], at[edges], [n]]).astype(np.int64)  # shuffle buffer b: positions [b_k, b_k+1)
    b = np.searchsorted(bounds, pos, side="right") - 1
    moved = np.empty_like(pos)
    for k in np.unique(b).tolist():
        sel = b == k
        lo, hi = int(bounds[k]), int(bounds[k + 1])
        moved[sel] = lo + epoch_order(hi - lo, seed=seed, epoch=epoch, salt=(0xB10C, *salt, k), positions=pos[sel] - lo)
    slot = np.searchsorted(at, moved, side="right") - 1  # the shard of the order that position lies in
    return starts[perm][slot] - at[slot] + moved


def _permutation(n: int, *, seed: int, epoch: int, shuffle: bool = True, salt: tuple[int, ...] = (),
                 shards: Shards | None = None, positions: np.ndarray | None = None) -> np.ndarray:
    return epoch_order(n, seed=seed, epoch=epoch, shuffle=shuffle, salt=salt, positions=positions)


def _bounds(length: int, rank: int, world_size: int) -> tuple[int, int]:
    return rank * length // world_size, (rank + 1) * length // world_size


def _take_strided(rows: View, rank: int, world_size: int) -> View:
    return Stride(rows, rank, world_size)


def _take_block(rows: View, rank: int, world_size: int) -> View:
    lo, hi = _bounds(rows.length, rank, world_size)
    return Cut(rows, lo, hi - lo)


def _after_strided(rows: View, world_size: int, taken: int) -> View:
    start = min(taken * world_size, rows.length)  # rank r's j-th sample sits at j * world_size + r
    return Cut(rows, start, rows.length - start)


def _after_block(rows: View, world_size: int, taken: int) -> View:
    spans = tuple((lo + min(taken, hi - lo), hi) for lo, hi in
                  (_bounds(rows.length, r, world_size) for r in range(world_size)))
    return Pieces(rows, spans)


@dataclass(frozen=True)
class Deal:
    """One deal: `order(n, seed=, epoch=, shuffle=, salt=, shards=, positions=)` gives the epoch's sample order
    (at `positions`), `take(rows, rank, world_size)` a rank's share of an evenly cut stream, and
    `after(rows, world_size, taken)` what is left once every rank has taken `taken` rows of its share (both of
    `plan.positions` views, never materialised). `unit`: rows of one source kept together
    in a mixed epoch (the world size for strided deals, so that every rank gets every source). `streams`: a rank
    reads its share a shuffle buffer of shards at a time, so the split need not be cached whole (the by-shard deal); the
    others read the whole split at random, which must be cached."""

    name: str
    order: Callable[..., np.ndarray]
    take: Callable[[View, int, int], View]
    after: Callable[[View, int, int], View]
    strided: bool
    streams: bool = False

    def unit(self, world_size: int) -> int:
        return world_size if self.strided else 1

    def share_length(self, length: int, rank: int, world_size: int) -> int:
        """Rows rank `rank` takes of an evenly cut stream of `length` rows."""
        if self.strided:
            return len(range(rank, length, world_size))
        lo, hi = _bounds(length, rank, world_size)
        return hi - lo


DEALS: dict[str, Deal] = {
    "strided": Deal("strided", _permutation, _take_strided, _after_strided, strided=True),
    "contiguous": Deal("contiguous", _permutation, _take_block, _after_block, strided=False),
    "by_shard": Deal("by_shard", shard_order, _take_block, _after_block, strided=False, streams=True),
}


def get_deal(name: str) -> Deal:
    try:
        return DEALS[name]
    except KeyError:
        raise ConfigError(f"deal={name!r}: expected one of {', '.join(DEALS)}") from None
