import numpy as np
import pytest

from pairload.errors import ConfigError
from pairload.plan import (PlanConfig, check_split, key_hashes, num_batches, plan_epoch, rank_share,
                           sample_params)


def shares(n, ws, bs, last_batch, epoch=0):
    return [rank_share(n, seed=1, epoch=epoch, rank=r, world_size=ws, batch_size=bs, last_batch=last_batch)
            for r in range(ws)]


@pytest.mark.parametrize("ws", [1, 2, 3, 4])
@pytest.mark.parametrize("last_batch", ["drop", "pad", "partial"])
def test_every_sample_exactly_once_when_the_split_divides(ws, last_batch):
    n, bs = 48, 4  # 48 = 4 batches x 4 x 3 ranks = 3 x 4 x 4 ranks ...
    parts = shares(n, ws, bs, last_batch)
    lengths = {len(idx) for idx, _ in parts}
    assert lengths == {n // ws}
    assert sorted(np.concatenate([idx for idx, _ in parts]).tolist()) == list(range(n))
    assert not any(pad.any() for _, pad in parts)


def test_drop_pad_partial_when_the_split_does_not_divide():
    n, ws, bs = 23, 2, 4
    drop = shares(n, ws, bs, "drop")
    assert [len(i) for i, _ in drop] == [8, 8]  # 11 per rank, 2 whole batches each
    seen = np.concatenate([i for i, _ in drop])
    assert len(set(seen.tolist())) == 16
    pad = shares(n, ws, bs, "pad")
    assert [len(i) for i, _ in pad] == [12, 12]  # 3 whole batches per rank
    flagged = np.concatenate([i[p] for i, p in pad])
    real = np.concatenate([i[~p] for i, p in pad])
    assert sorted(real.tolist()) == list(range(n)) and len(flagged) == 1  # one repeat, flagged
    partial = shares(n, ws, bs, "partial")
    assert sorted(np.concatenate([i for i, _ in partial]).tolist()) == list(range(n))
    assert [len(i) for i, _ in partial] == [12, 11]
    cfg = PlanConfig(batch_size=bs, crop=None, world_size=ws, rank=1, last_batch="partial")
    assert num_batches(cfg, n) == 3 and [len(b) for b in plan_epoch(cfg, key_hashes(map(str, range(n))),
                                                                    np.full((n, 2), 8), 0)] == [4, 4, 3]


def testsized_plans_are_reproducible_and_change_with_the_epoch():
    keys = [f"k{i}" for i in range(40)]
    hw = np.array([[50 + i, 60 + 2 * i] for i in range(40)])
    cfg = PlanConfig(batch_size=8, crop=32, seed=3)
    a, b = plan_epoch(cfg, key_hashes(keys), hw, 0), plan_epoch(cfg, key_hashes(keys), hw, 0)
    for x, y in zip(a, b):
        for f in ("index", "y", "x", "code"):
            np.testing.assert_array_equal(getattr(x, f), getattr(y, f))
    c = plan_epoch(cfg, key_hashes(keys), hw, 1)
    assert not np.array_equal(np.concatenate([p.index for p in a]), np.concatenate([p.index for p in c]))
    y0, x0, c0 = sample_params(key_hashes(keys), hw, seed=3, epoch=0, crop=32, augment=True)
    y1, x1, c1 = sample_params(key_hashes(keys), hw, seed=3, epoch=1, crop=32, augment=True)
    assert (y0 != y1).mean() > 0.5 and (c0 != c1).mean() > 0.5
    assert (y0 >= 0).all() and (y0 <= hw[:, 0] - 32).all() and (x0 <= hw[:, 1] - 32).all()
    assert set(c0.tolist()) <= set(range(8)) and len(set(c0.tolist())) > 4


def test_crop_windows_cover_the_whole_range():
    keys = [f"k{i}" for i in range(4000)]
    y, x, _ = sample_params(key_hashes(keys), np.full((4000, 2), 40), seed=0, epoch=0, crop=37, augment=False)
    assert set(y.tolist()) == {0, 1, 2, 3} and set(x.tolist()) == {0, 1, 2, 3}


def test_no_transpose_for_whole_non_square_images():
    keys = [f"k{i}" for i in range(200)]
    _, _, code = sample_params(key_hashes(keys), np.tile([[40, 56]], (200, 1)), seed=0, epoch=0, crop=None,
                               augment=True)
    assert (code & 4 == 0).all() and (code > 0).any()


def test_check_split_messages():
    hw = np.array([[40, 56], [30, 50], [40, 56]])
    keys = ["a", "b", "c"]
    with pytest.raises(ConfigError, match=r"crop 36 is larger than sample 'b' of split 'train', which is 50x30"):
        check_split(PlanConfig(batch_size=1, crop=36), keys, hw, "train")
    with pytest.raises(ConfigError,
                       match=r"batch_size 2 is larger than a rank's share of split 'train' "
                             r"\(3 samples / 2 ranks = 1\)"):
        check_split(PlanConfig(batch_size=2, crop=16, world_size=2), keys, hw, "train")
    with pytest.raises(ConfigError, match="2 different sizes, so whole images"):
        check_split(PlanConfig(batch_size=2, crop=None), keys, hw, "train")
    with pytest.raises(ConfigError, match="last_batch='wrap': expected one of drop, pad, partial"):
        PlanConfig(batch_size=2, crop=None, last_batch="wrap")


# ------------------------------------------------------------------ mixing, repeats, schedules

from pairload.plan import Phase, epoch_start_step, mix_counts, parse_schedule, phase_at  # noqa: E402

MIX_GROUPS = (("real", 485), ("synth", 5000))


def mixed_cfg(rank=0, ws=1, bs=8, **kw):
    return PlanConfig(batch_size=bs, crop=16, seed=5, rank=rank, world_size=ws,
                      weights={"real": 1, "synth": 3}, epoch_size=2000, **kw)


def mixedsized_plans(epoch, ws, bs=8, **kw):
    n = sum(s for _, s in MIX_GROUPS)
    keys = key_hashes([f"k{i}" for i in range(n)])
    hw = np.full((n, 2), 40)
    return [plan_epoch(mixed_cfg(r, ws, bs, **kw), keys, hw, epoch, groups=MIX_GROUPS) for r in range(ws)]


@pytest.mark.parametrize("ws", [1, 2])
def test_mixing_follows_the_weights_in_every_batch_and_uses_up_a_source_before_repeating(ws):
    real = []
    for epoch in range(3):
        ranks = mixedsized_plans(epoch, ws)
        assert len({len(p) for p in ranks}) == 1  # every rank the same batch count
        idx = np.concatenate([bp.index for plans in ranks for bp in plans])
        share = (idx < 485).mean()
        assert abs(share - 0.25) <= 0.02, share  # within 2% of the weights over an epoch of 2,000
        assert len(idx) >= 2000 - ws * 8  # drop loses less than one global batch
        for plans in ranks:
            for bp in plans:  # both sources in every batch, in proportion (8 rows: 2 real, 6 synth)
                assert (bp.index < 485).sum() == 2 and (bp.index >= 485).sum() == 6
        order = [np.concatenate([bp.index for bp in plans]) for plans in ranks]
        # the epoch's stream, in order (strided: rank r's j-th row is row j * ws + r)
        stream = np.stack(order, axis=1).reshape(-1) if ws > 1 else order[0]
        real.extend(int(i) for i in stream if i < 485)
    assert sorted(real[:485]) == list(range(485))  # every real sample once before any is drawn again
    assert len(set(real[485:485 * 2])) == min(485, len(real) - 485)
    assert mix_counts([485, 5000], [1, 3], 2000).tolist() == [500, 1500]


def test_a_sample_drawn_again_gets_a_fresh_crop():
    n, groups = 10, (("a", 10),)
    cfg = PlanConfig(batch_size=5, crop=8, seed=1, epoch_size=40)
    plans = plan_epoch(cfg, key_hashes(map(str, range(n))), np.full((n, 2), 64), 0, groups=groups)
    idx = np.concatenate([p.index for p in plans])
    yx = np.concatenate([np.stack([p.y, p.x, p.code], 1) for p in plans])
    assert np.bincount(idx, minlength=n).tolist() == [4] * n  # 4 cycles of the source in one epoch
    for i in range(n):
        assert len({tuple(v) for v in yx[idx == i].tolist()}) == 4


@pytest.mark.parametrize("ws", [1, 2])
def test_repeats_give_each_sample_k_times_with_different_crops(ws):
    n, k = 24, 3
    keys, hw = key_hashes([f"s{i}" for i in range(n)]), np.full((n, 2), 64)
    rows = []
    for r in range(ws):
        cfg = PlanConfig(batch_size=4, crop=16, seed=2, rank=r, world_size=ws, repeats=k)
        plans = plan_epoch(cfg, keys, hw, 0)
        assert len(plans) == num_batches(cfg, n) == n * k // ws // 4
        rows += [(i, y, x, c) for p in plans for i, y, x, c in zip(p.index, p.y, p.x, p.code)]
    idx = np.array([r[0] for r in rows])
    assert np.bincount(idx, minlength=n).tolist() == [k] * n
    distinct = [len({r[1:] for r in rows if r[0] == i}) for i in range(n)]
    assert sum(d == k for d in distinct) >= 0.9 * n  # (a repeat may draw the same window by chance)
    one = plan_epoch(PlanConfig(batch_size=4, crop=16, seed=2), keys, hw, 0)
    np.testing.assert_array_equal(one[0].y, plan_epoch(PlanConfig(batch_size=4, crop=16, seed=2, repeats=k), keys,
                                                       hw, 0)[0].y)  # the first pass is the plain epoch


SCHEDULE = "0:16:4,5:12:2,9:8:3"


@pytest.mark.parametrize("ws", [1, 2])
@pytest.mark.parametrize("last_batch", ["drop", "pad"])
def test_schedule_phases_switch_at_their_step_on_every_rank(ws, last_batch):
    n = 30
    keys, hw = key_hashes([f"s{i}" for i in range(n)]), np.full((n, 2), 40)
    cfgs = [PlanConfig(schedule=SCHEDULE, seed=4, rank=r, world_size=ws, last_batch=last_batch) for r in range(ws)]
    assert cfgs[0].batch_size == 4 and cfgs[0].crop == 16
    step = 0
    for epoch in range(4):
        per_rank = [plan_epoch(c, keys, hw, epoch) for c in cfgs]
        assert len({len(p) for p in per_rank}) == 1  # each rank the same number of batches per step
        assert epoch_start_step(cfgs[0], n, epoch) == step and num_batches(cfgs[0], n, epoch) == len(per_rank[0])
        seen = []
        for b in range(len(per_rank[0])):
            st = phase_at(cfgs[0], step + b)
            want = {0: (16, 4), 5: (12, 2), 9: (8, 3)}[st.step]
            for plans in per_rank:
                bp = plans[b]
                assert (bp.crop, len(bp)) == want and bp.out_hw(hw) == (want[0], want[0])
                assert (bp.y <= 40 - want[0]).all()
                seen += bp.index[~bp.padded].tolist()
        assert len(seen) == len(set(seen))  # each sample at most once per epoch
        if last_batch == "pad":
            assert sorted(seen) == list(range(n))
        step += len(per_rank[0])
    assert step > 9  # the run reached the last phase


def test_a_scheduled_or_mixed_epoch_resumes_with_its_exact_rest():
    n = 30
    keys, hw = key_hashes([f"s{i}" for i in range(n)]), np.full((n, 2), 40)
    for cfg, groups in ((PlanConfig(schedule=SCHEDULE, seed=4), ()),
                        (PlanConfig(batch_size=4, crop=8, weights={"a": 1, "b": 2}, epoch_size=24),
                         (("a", 10), ("b", 20)))):
        full = plan_epoch(cfg, keys, hw, 2, groups=groups)
        rest = plan_epoch(cfg, keys, hw, 2, consumed=((1, 3),), groups=groups)
        assert len(rest) == len(full) - 3
        for a, b in zip(full[3:], rest):
            for f in ("index", "y", "x", "code", "padded"):
                np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
            assert a.crop == b.crop


def test_schedule_and_mix_usage_errors():
    with pytest.raises(ConfigError, match="starting at step 0"):
        parse_schedule("5:128:8")
    with pytest.raises(ConfigError, match="increasing step"):
        parse_schedule("0:128:8,10:160:5,10:192:4")
    with pytest.raises(ConfigError, match=r"'0:128': expected step:crop:batch"):
        parse_schedule("0:128")
    with pytest.raises(ConfigError, match="crop=96 but the schedule's first phase has 128"):
        PlanConfig(schedule="0:128:8", crop=96)
    assert parse_schedule([(0, 128, 8), (10, 160, 5)])[1] == Phase(10, 160, 5)
    with pytest.raises(ConfigError, match="crop is required"):
        PlanConfig(batch_size=4)
    with pytest.raises(ConfigError, match="weights real=-1.0"):
        PlanConfig(batch_size=4, crop=8, weights={"real": -1})
    with pytest.raises(ConfigError, match="raise epoch_size instead"):
        PlanConfig(batch_size=4, crop=8, epoch_size=100, repeats=2)
    with pytest.raises(ConfigError, match="crop 20 is larger than sample"):
        check_split(PlanConfig(schedule="0:8:2,4:20:1"), ["a", "b"], np.full((2, 2), 16), "train")


# ------------------------------------------------------------------------------- every deal, one contract

from pairload.plan import DEALS, Shards  # noqa: E402


def _split(rng, n_shards):
    counts = tuple(int(c) for c in rng.integers(1, 9, size=n_shards))
    n = sum(counts)
    return counts, key_hashes([f"s{i}" for i in range(n)]), np.full((n, 2), 20)


@pytest.mark.parametrize("deal", sorted(DEALS))
@pytest.mark.parametrize("case", range(24))
def test_every_deal_gives_disjoint_equal_shares_and_len_is_the_plan(deal, case):
    rng = np.random.default_rng(case)
    counts, kh, hw = _split(rng, int(rng.integers(1, 7)))
    n = len(kh)
    ws = int(rng.integers(1, 5))
    bs = int(rng.integers(1, 4))
    last_batch = ["drop", "pad", "partial"][case % 3]
    repeats = 1 + (case % 4 == 3)
    if last_batch == "drop" and n * repeats // ws < bs:
        bs = 1
    if n * repeats < ws and last_batch == "drop":
        pytest.skip("fewer samples than ranks")
    shards = Shards(counts, int(rng.integers(1, 12)))
    plans, lengths = [], []
    for r in range(ws):
        cfg = PlanConfig(batch_size=bs, crop=8, seed=case, rank=r, world_size=ws, last_batch=last_batch,
                         repeats=repeats)
        p = plan_epoch(cfg, kh, hw, 2, deal=deal, shards=shards)
        assert len(p) == num_batches(cfg, n, 2, deal), (deal, r)
        plans.append(p)
        lengths.append(len(p))
    rows = [(int(i), int(d)) for p in plans for bp in p for i, d in zip(bp.index, ~bp.padded)]
    real = [i for i, keep in rows if keep]
    if last_batch != "partial":
        assert len(set(lengths)) == 1, lengths  # every rank as many batches
        assert all(len(bp) == bs for p in plans for bp in p)
    if last_batch == "partial" or last_batch == "pad":
        assert sorted(real) == sorted(list(range(n)) * repeats)  # every sample once per pass
    else:
        assert len(real) <= n * repeats and n * repeats - len(real) < ws * bs + ws
        assert max(np.bincount(real, minlength=n)) <= repeats


@pytest.mark.parametrize("deal", ["strided", "by_shard"])
@pytest.mark.parametrize("old, new", [(3, 2), (2, 4), (1, 3)])
def test_every_deal_resumes_on_another_world_size(deal, old, new):
    counts = (5, 7, 3, 6, 4)
    n, kh, hw = sum(counts), key_hashes([f"s{i}" for i in range(25)]), np.full((25, 2), 20)
    shards = Shards(counts, 6)
    cfg = lambda r, ws: PlanConfig(batch_size=2, crop=8, seed=1, rank=r, world_size=ws, last_batch="partial")  # noqa
    first = [plan_epoch(cfg(r, old), kh, hw, 1, deal=deal, shards=shards)[:2] for r in range(old)]
    rest = [plan_epoch(cfg(r, new), kh, hw, 1, deal=deal, shards=shards, consumed=((old, 2),)) for r in range(new)]
    seen = [int(i) for part in first + rest for bp in part for i in bp.index]
    assert sorted(seen) == list(range(n))


def test_the_by_shard_order_keeps_windows_of_whole_shards_together():
    counts = (4, 4, 4, 4, 4, 4)
    order = DEALS["by_shard"].order(24, seed=3, epoch=0, shards=Shards(counts, 8))
    windows = [set(order[i:i + 8] // 4) for i in range(0, 24, 8)]
    assert all(len(w) == 2 for w in windows) and set().union(*windows) == set(range(6))  # two shards per window
    assert sorted(order.tolist()) == list(range(24))
    assert order.tolist() != DEALS["by_shard"].order(24, seed=3, epoch=1, shards=Shards(counts, 8)).tolist()
    in_order = DEALS["by_shard"].order(24, seed=3, epoch=0, shuffle=False, shards=Shards(counts, 8))
    assert in_order.tolist() == list(range(24))


@pytest.mark.parametrize("sizes", [[4, 4, 4, 2], [6], [], [5, 5, 1, 1], [3, 1, 3], [2, 2, 2, 2]])
def test_batches_cut_from_one_reshape_equal_slices_of_the_whole(sizes):
    """`sized_plans` makes the leading batches of one size as the rows of one reshape: each equals the same rows
    sliced out of a single batch of all of them, in order, whatever the sizes after the first change."""
    from pairload.plan.run import sized_plans

    n = sum(sizes)
    rng = np.random.default_rng(len(sizes))
    rows = np.stack([rng.permutation(n), rng.integers(0, 2, n), rng.integers(0, 1 << 30, n)]).astype(np.int64)
    key_hash = rng.integers(0, 1 << 62, n).astype(np.uint64)
    hw = np.stack([rng.integers(40, 60, n), rng.integers(40, 60, n)], axis=1)
    cfg = PlanConfig(batch_size=max(sizes, default=1), crop=16, seed=3)
    got = sized_plans(cfg, key_hash, hw, 2, rows, sizes, 16)
    (one,) = sized_plans(cfg, key_hash, hw, 2, rows, [n], 16) if n else (None,)
    assert [len(bp) for bp in got] == sizes
    start = 0
    for bp in got:
        for field in ("index", "y", "x", "code", "padded"):
            assert np.array_equal(getattr(bp, field), getattr(one, field)[start:start + len(bp)]), field
        assert bp.crop == 16
        start += len(bp)
