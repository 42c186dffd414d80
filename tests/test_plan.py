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


def test_plans_are_reproducible_and_change_with_the_epoch():
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
    _, _, code = sample_params(key_hashes(keys), np.tile([[40, 56]], (200, 1)), seed=0, epoch=0, crop=None, augment=True)
    assert (code & 4 == 0).all() and (code > 0).any()


def test_check_split_messages():
    hw = np.array([[40, 56], [30, 50], [40, 56]])
    keys = ["a", "b", "c"]
    with pytest.raises(ConfigError, match=r"crop 36 is larger than sample 'b' of split 'train', which is 50x30"):
        check_split(PlanConfig(batch_size=1, crop=36), keys, hw, "train")
    with pytest.raises(ConfigError, match=r"batch_size 2 is larger than a rank's share of split 'train' \(3 samples / 2 ranks = 1\)"):
        check_split(PlanConfig(batch_size=2, crop=16, world_size=2), keys, hw, "train")
    with pytest.raises(ConfigError, match="2 different sizes, so whole images"):
        check_split(PlanConfig(batch_size=2, crop=None), keys, hw, "train")
    with pytest.raises(ConfigError, match="last_batch='wrap': expected one of drop, pad, partial"):
        PlanConfig(batch_size=2, crop=None, last_batch="wrap")
