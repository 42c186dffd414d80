"""A run: one rank's batches of one epoch (or of the rest of a started one), as one object. It holds the rank's rows
as a view of positions (`plan.positions`) and how they are cut into batches (`Segment`s), and plans them a block of
`BLOCK` batches at a time (the first blocks of a long run shorter: `FIRST_BLOCK`), when a batch of the block is
first asked for: the block's rows, crop windows, codes and degradation draws in a few vectorised passes, its columns
concatenated once (`Block.column`), each `BatchPlan` a view of them that knows its number in the run
(`BatchPlan.at`). Executors build their tables per block
(`Run.per_block`), so nothing they hold grows with the epoch. Numpy only."""

from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .clips import ClipUnits, frame_noise
from .config import BatchPlan, PlanConfig
from .draws import noise_keys, sample_params, uniforms
from .positions import View, rows_of

RunKey = tuple  # (epoch, consumed): which run, as `PlannedLoader.plan_for(*key)` takes it
BLOCK = 256  # batches planned together (8,192 rows at batch 32): a few milliseconds of numpy, a few MB
FIRST_BLOCK = 8  # a long run's first block; the next ones double up to BLOCK (8, 16, ..., 128, then 256): its first
# batch waits for no more planning than a few batches' worth. With an index bigger than memory every row planned is a
# few pages read from disk: 10-14 s for the first two blocks of 256 at 10^9 samples (2-core VM, 2026-11-29)
RAMP_FROM = 4 * BLOCK  # runs of this many batches or more start with short blocks; a shorter run (a split that its
# node's memory holds, read at 100,000+ pairs/s on a GPU) keeps blocks of BLOCK, each block's tables made once
BLOCKS_KEPT = 2  # blocks kept planned (the one being delivered and the one the workers run ahead into)


def _ramp() -> tuple[int, ...]:
    starts, size = [0], FIRST_BLOCK
    while size < BLOCK:
        starts.append(starts[-1] + size)
        size *= 2
    return tuple(starts)


_RAMP = _ramp()  # the first batch of each block while they grow (0, 8, 24, 56, 120, 248)
_STEADY = _RAMP[-1]  # from this batch on, blocks are BLOCK batches long


def block_number(k: int, ramp: bool = True) -> int:
    """The block of a run that holds its batch k (`ramp`: the run starts with short blocks)."""
    if not ramp:
        return k // BLOCK
    if k >= _STEADY:
        return len(_RAMP) - 1 + (k - _STEADY) // BLOCK
    return bisect_right(_RAMP, k) - 1


def block_first(b: int, ramp: bool = True) -> int:
    """The first batch of block b of a run (`ramp`: the run starts with short blocks)."""
    if not ramp:
        return b * BLOCK
    if b < len(_RAMP):
        return _RAMP[b]
    return _STEADY + (b - len(_RAMP) + 1) * BLOCK


def next_run(key: RunKey) -> RunKey:
    """The run that follows a run delivered to its end: the next epoch, from its start."""
    return (key[0] + 1, ())


@dataclass(frozen=True)
class Segment:
    """`batches` consecutive batches of `rows` rows each (this rank's), all with one crop."""

    batches: int
    rows: int
    crop: object = None


class Block:
    """Batches [first, first + len(plans)) of a run, planned; `column(name)` is a BatchPlan field over all of them in
    order (concatenated once), `start(bp)` where a batch's rows begin in it."""

    def __init__(self, first: int, plans: list[BatchPlan], sizes: np.ndarray | None = None):
        self.first, self.plans = first, plans
        if sizes is None:
            sizes = np.fromiter((len(bp) for bp in plans), dtype=np.int64, count=len(plans))
        self.sizes = sizes
        self.starts = np.cumsum(sizes) - sizes
        self._columns: dict[str, np.ndarray] = {}

    def column(self, name: str) -> np.ndarray:
        got = self._columns.get(name)
        if got is None:
            got = self._columns[name] = np.concatenate([getattr(bp, name) for bp in self.plans])
        return got

    def start(self, bp: BatchPlan) -> int:
        return int(self.starts[bp.at - self.first])

    def __len__(self) -> int:
        return len(self.plans)


class Run(Sequence):
    """One rank's batches of one run: a sequence of `BatchPlan`s planned a block at a time (see the module). `len()`
    and `rows` need no planning."""

    def __init__(self, cfg: PlanConfig, key_hash: np.ndarray, hw: np.ndarray, epoch: int, view: View,
                 segments: tuple[Segment, ...], units: ClipUnits | None = None):
        self.cfg, self.key_hash, self.hw, self.epoch = cfg, key_hash, hw, epoch
        self.view, self.segments, self.units = view, tuple(s for s in segments if s.batches), units
        counts = np.array([s.batches for s in self.segments], dtype=np.int64)
        self._seg_batch = np.cumsum(counts) - counts  # first batch of each segment
        self._seg_row = np.cumsum(counts * [s.rows for s in self.segments]) - counts * [s.rows for s in self.segments]
        self._length = int(counts.sum())
        self.ramp = self._length >= RAMP_FROM  # starts with short blocks (`FIRST_BLOCK`)
        self.rows = int((counts * [s.rows for s in self.segments]).sum()) if self.segments else 0
        self._blocks: OrderedDict[int, Block] = OrderedDict()
        self._all: np.ndarray | None = None  # every row, once `all_index` has worked them out

    def __len__(self) -> int:
        return self._length

    @property
    def blocks(self) -> int:
        return self.block_number(self._length - 1) + 1 if self._length else 0

    def block_number(self, k: int) -> int:
        """The block that holds batch k."""
        return block_number(k, self.ramp)

    def block_first(self, b: int) -> int:
        """The first batch of block b."""
        return block_first(b, self.ramp)

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(self._length))]
        if k < 0:
            k += self._length
        if not 0 <= k < self._length:
            raise IndexError(f"batch {k} of a run of {self._length}")
        block = self.block(self.block_number(k))
        return block.plans[k - block.first]

    def __iter__(self):
        for b in range(self.blocks):
            yield from self.block(b).plans

    def block_of(self, bp: BatchPlan) -> Block:
        return self.block(self.block_number(bp.at))

    def block_at(self, k: int) -> Block:
        """The block holding batch k."""
        return self.block(self.block_number(k))

    def batch_sizes(self) -> np.ndarray:
        """Rows of each batch (clips: each clip's frames are rows)."""
        frames = self.units.clips.frames if self.units is not None else 1
        return np.repeat(np.array([s.rows * frames for s in self.segments], dtype=np.int64),
                         [s.batches for s in self.segments])

    def all_index(self) -> np.ndarray:
        """The sample index of every row of the run, in order, without planning its windows: for an executor that
        schedules a whole run ahead (registering the pages it reads), whose split is in memory anyway."""
        if self.units is not None:  # clips: their frames' samples
            return np.concatenate([bp.index for bp in self] or [np.zeros(0, dtype=np.int64)])
        if self._all is None:
            self._all = rows_of(self.view, 0, self.rows)  # kept: the blocks are cut from them, not worked out again
        return self._all[0]

    def block(self, b: int) -> Block:
        got = self._blocks.get(b)
        if got is None:
            got = self._blocks[b] = self._plan_block(b)
            while len(self._blocks) > BLOCKS_KEPT:
                self._blocks.popitem(last=False)
        return got

    def _layout(self, k0: int, k1: int) -> tuple[np.ndarray, list, int]:
        """Rows per batch and crop per batch of batches [k0, k1), and the row where batch k0 starts."""
        s0 = int(np.searchsorted(self._seg_batch, k0, side="right")) - 1
        first_row = int(self._seg_row[s0] + (k0 - self._seg_batch[s0]) * self.segments[s0].rows)
        sizes, crops, k, s = [], [], k0, s0
        while k < k1:
            seg = self.segments[s]
            take = min(k1, int(self._seg_batch[s]) + seg.batches) - k
            sizes += [seg.rows] * take
            crops += [seg.crop] * take
            k, s = k + take, s + 1
        return np.array(sizes, dtype=np.int64), crops, first_row

    def _plan_block(self, b: int) -> Block:
        k0, k1 = self.block_first(b), min(self.block_first(b + 1), self._length)
        sizes, crops, first_row = self._layout(k0, k1)
        last_row = first_row + int(sizes.sum())
        rows = self._all[:, first_row:last_row] if self._all is not None else rows_of(self.view, first_row, last_row)
        starts = np.cumsum(sizes) - sizes
        frames = self.units.clips.frames if self.units is not None else 1
        crop_set = dict.fromkeys(crops)
        if len(crop_set) == 1:  # one crop (no schedule, or one phase): the block in one vectorised call
            plans = sized_plans(self.cfg, self.key_hash, self.hw, self.epoch, rows, sizes.tolist(), crops[0],
                                self.units, list(range(k0, k1)))
            return Block(k0, plans, sizes * frames)
        plans: list[BatchPlan | None] = [None] * (k1 - k0)
        for crop in crop_set:  # the batches of each crop in one vectorised call
            which = [i for i, c in enumerate(crops) if c == crop]
            take = np.concatenate([np.arange(starts[i], starts[i] + sizes[i]) for i in which])
            made = sized_plans(self.cfg, self.key_hash, self.hw, self.epoch, rows[:, take],
                               [int(sizes[i]) for i in which], crop, self.units, [k0 + i for i in which])
            for i, plan in zip(which, made):
                plans[i] = plan
        return Block(k0, plans, sizes * frames)

    def per_block(self, make: Callable[[Block], Sequence]) -> Callable[[BatchPlan], object]:
        """`get(bp)`: the item of `make(block)` (one per batch of the block, in order) for bp's batch, `make` called
        once per block as its batches are asked for (the last BLOCKS_KEPT blocks' items kept)."""
        made: OrderedDict[int, Sequence] = OrderedDict()

        def get(bp: BatchPlan):
            b = self.block_number(bp.at)
            items = made.get(b)
            if items is None:
                items = made[b] = make(self.block(b))
                while len(made) > BLOCKS_KEPT:
                    made.popitem(last=False)
            return items[bp.at - self.block_first(b)]
        return get


def sized_plans(cfg: PlanConfig, key_hash: np.ndarray, hw: np.ndarray, epoch: int, rows: np.ndarray, sizes: list[int],
                crop, units: ClipUnits | None = None, at: list[int] | None = None) -> list[BatchPlan]:
    """The BatchPlans of consecutive batches of `sizes` rows of (3, n) `rows` (index, padded, draw), one crop, the
    k-th numbered `at[k]` (default k). With `units` (clips) the rows are clip units, each then expanded into its T
    frames (`_frames`)."""
    idx = rows[0]
    draw = rows[2] if rows[2].any() else None
    spec = cfg.degrade
    y, x, code = sample_params(key_hash[idx], hw[idx], seed=cfg.seed, epoch=epoch, crop=crop, augment=cfg.augment,
                               draw=draw, codes=spec.codes if spec is not None else None)
    columns = (idx, y, x, code, rows[1].astype(bool))
    if spec is not None:
        u = uniforms(key_hash[idx], seed=cfg.seed, epoch=epoch, count=spec.spec.uniforms, draw=draw)
        columns += (spec.draw(u), noise_keys(key_hash[idx], seed=cfg.seed, epoch=epoch, draw=draw))
    extra = {}
    if units is not None:
        columns, sizes = _frames(cfg, units, epoch, draw, columns), [s * units.clips.frames for s in sizes]
        extra = {"frames": units.clips.frames}
    at = list(range(len(sizes))) if at is None else at
    # batches of one size (all but perhaps the last) as the rows of one reshape: numpy makes their views, not Python
    size = sizes[0] if sizes else 0
    whole = next((k for k, s in enumerate(sizes) if s != size), len(sizes))
    pieces = ([list(c[:whole * size].reshape(whole, size, *c.shape[1:])) for c in columns] if size
              else [[] for _ in columns])
    plans = [BatchPlan(*parts[:5], crop, *parts[5:], at=k, **extra) for k, parts in zip(at, zip(*pieces))]
    start = whole * size
    for k, s in zip(at[whole:], sizes[whole:]):
        parts = [c[start:start + s] for c in columns]
        plans.append(BatchPlan(*parts[:5], crop, *parts[5:], at=k, **extra))
        start += s
    return plans


def _frames(cfg: PlanConfig, units: ClipUnits, epoch: int, draw: np.ndarray | None, columns: tuple) -> tuple:
    """Columns of clip units → columns of their frames: each clip's T samples in order (`ClipUnits.frame_rows`)
    with its window, code, padding flag and degradation parameters, and a noise key of each frame's own."""
    t = units.clips.frames
    frames = units.frame_rows(columns[0], seed=cfg.seed, epoch=epoch, draw=draw).reshape(-1)
    out = (frames,) + tuple(np.repeat(c, t, axis=0) for c in columns[1:6])
    if len(columns) > 6:
        out += (frame_noise(columns[6], t),)
    return out
