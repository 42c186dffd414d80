"""The planner from positions (`plan.positions`, `plan.run`): a run planned a block at a time gives the batches of the
run planned whole, whatever block a batch is asked from; a mixed epoch's source at any position is the interleave's;
and planning the first batches of an epoch of 10^12 samples (plain, mixed, resumed on another world size) takes
neither the time nor the memory of the epoch."""

from __future__ import annotations

import time
import tracemalloc

import numpy as np
import pytest

from pairload.format.columns import LazyColumn
from pairload.plan import PlanConfig, Shards, plan_run
from pairload.plan.mix import interleave, labels_at
from pairload.plan.positions import rows_of
from pairload.plan import run as run_module
from pairload.plan.run import BLOCK, FIRST_BLOCK, block_first, block_number
from pairload.splitmix import splitmix


def hashes(n: int) -> np.ndarray:
    return splitmix(np.arange(n, dtype=np.uint64))


@pytest.mark.parametrize("deal", ["strided", "by_shard"])
def test_a_run_planned_by_blocks_is_the_run_planned_whole(deal):
    n, bs = 9 * BLOCK + 37, 1  # batches of one sample, two ranks: the run spans 9 blocks (5 growing), the last short
    shards = Shards((100,) * (n // 100) + (n % 100,), 300) if deal == "by_shard" else None
    cfg = PlanConfig(batch_size=bs, crop=8, seed=5, world_size=2, rank=1, last_batch="pad")
    hw = np.tile([[20, 30]], (n, 1)).astype(np.int64)
    run = plan_run(cfg, hashes(n), hw, 3, deal=deal, shards=shards)
    rows = rows_of(run.view)  # every row of the run at once
    planned = list(run)
    assert len(planned) == len(run) == rows.shape[1] == (n + 1) // 2 and run.blocks == 9 and run.ramp
    assert [len(run.block(b)) for b in range(run.blocks)] == [8, 16, 32, 64, 128, 256, 256, 256, len(run) - 1016]
    assert np.array_equal(np.concatenate([bp.index for bp in planned]), rows[0])
    assert [bp.at for bp in planned] == list(range(len(run)))
    again = plan_run(cfg, hashes(n), hw, 3, deal=deal, shards=shards)
    for k in (len(run) - 1, 0, BLOCK, BLOCK - 1, 2 * BLOCK + 5, FIRST_BLOCK, FIRST_BLOCK - 1, block_first(5)):
        # asked out of order, across block edges
        bp = again[k]
        assert np.array_equal(bp.index, planned[k].index) and np.array_equal(bp.y, planned[k].y)
        assert np.array_equal(bp.code, planned[k].code) and bp.at == k
    tables = again.per_block(lambda block: [int(block.column("index")[block.start(bp)]) for bp in block.plans])
    assert [tables(bp) for bp in planned[::97]] == [int(bp.index[0]) for bp in planned[::97]]


def test_a_runs_first_blocks_grow_and_plan_the_batches_blocks_of_one_size_plan(monkeypatch):
    # a long run's first batch waits for a block of FIRST_BLOCK batches, not BLOCK; the blocks double up to BLOCK
    # (a short run keeps blocks of BLOCK). Where the blocks begin changes no batch: a run laid out in blocks of BLOCK
    # from its start plans the very same ones
    assert [block_first(b) for b in range(7)] == [0, 8, 24, 56, 120, 248, 504]
    assert all(block_first(block_number(k)) <= k < block_first(block_number(k) + 1) for k in range(2000))
    n = 6000
    hw = np.tile([[20, 30]], (n, 1)).astype(np.int64)
    hw[::7] = [40, 50]
    short = plan_run(PlanConfig(batch_size=8, crop=8, seed=2), hashes(n), hw, 1)
    assert len(short) < run_module.RAMP_FROM and not short.ramp and len(short.block(0)) == BLOCK
    cfgs = [PlanConfig(batch_size=2, crop=8, seed=2, world_size=2, rank=0, last_batch="pad"),
            PlanConfig(schedule="0:8:2,100:16:3,130:8:4", seed=4, degrade="lowlight")]
    for cfg in cfgs:
        grown_run = plan_run(cfg, hashes(n), hw, 1)
        assert grown_run.ramp and len(grown_run.block(0)) == FIRST_BLOCK
        grown = list(grown_run)
        monkeypatch.setattr(run_module, "RAMP_FROM", 10**18)  # no run is long enough to start with short blocks
        uniform = plan_run(cfg, hashes(n), hw, 1)
        assert not uniform.ramp
        assert uniform.block(0).plans[-1].at == BLOCK - 1 and len(list(uniform)) == len(grown)
        for a, b in zip(grown, uniform):
            assert a.at == b.at and np.array_equal(a.index, b.index) and np.array_equal(a.y, b.y)
            assert np.array_equal(a.x, b.x) and np.array_equal(a.code, b.code) and a.crop == b.crop
            assert (a.params is None) == (b.params is None) and (a.params is None or np.array_equal(a.params, b.params))
        monkeypatch.undo()


def test_the_source_at_any_position_of_a_mixed_epoch_is_the_interleaves():
    rng = np.random.default_rng(3)
    for _ in range(60):
        counts = rng.integers(1, 400, rng.integers(1, 5))
        unit = int(rng.integers(1, 9))
        whole = interleave(counts, unit)
        q = rng.integers(0, counts.sum(), 40)
        src, occ = labels_at(counts, unit, q)
        assert np.array_equal(src, whole[q])
        assert occ.tolist() == [int((whole[:p] == s).sum()) for p, s in zip(q, src)]
    assert np.bincount(interleave(np.array([7, 5]), 3), minlength=2).tolist() == [7, 5]


class Endless(LazyColumn):
    """A per-sample column of 10^12 samples made from the index asked (no array of the split)."""

    def __init__(self, n: int, kind: str):
        self.kind, self.shape = kind, ((n,) if kind == "hash" else (n, 2))
        self.dtype = np.dtype(np.uint64 if kind == "hash" else np.int64)

    def __getitem__(self, index):
        index = np.asarray(index, dtype=np.int64)
        if self.kind == "hash":
            return splitmix(index.astype(np.uint64))
        return np.broadcast_to(np.array([64, 96]), (*index.shape, 2)).copy()


@pytest.mark.parametrize("how", ["plain", "mixed", "resumed 2 -> 3", "by_shard"])
def test_the_first_batches_of_an_epoch_of_a_trillion_samples_cost_neither_its_time_nor_its_memory(how):
    n = 10 ** 12
    kh, hw = Endless(n, "hash"), Endless(n, "hw")
    kw, cfg = {}, dict(batch_size=32, crop=16, seed=1)
    if how == "mixed":
        cfg.update(weights=(("a", 3.0), ("b", 1.0)), epoch_size=n)
        kw["groups"] = (("a", n // 4), ("b", n - n // 4))
    if how == "resumed 2 -> 3":
        cfg.update(world_size=3, rank=2)
        kw["consumed"] = ((2, 123_456_789),)
    if how == "by_shard":
        kw.update(deal="by_shard", shards=Shards((10 ** 6,) * 10 ** 6, 10 ** 7))
    tracemalloc.start()
    start = time.perf_counter()
    run = plan_run(PlanConfig(**cfg), kh, hw, 7, **kw)
    first = [run[k] for k in range(3)]
    took = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(run) > 10 ** 9 and all(len(bp) == 32 for bp in first)
    index = np.concatenate([bp.index for bp in first])
    assert len(np.unique(index)) == len(index) and index.max() < n and index.min() >= 0
    assert took < 5 and peak < 64 << 20, (took, peak)  # one block of 8,192 rows, not 10^12 of them
