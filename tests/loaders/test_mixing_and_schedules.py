"""Mixing, repeats and crop/batch schedules through every loader kind over shards, on 1 and 2 ranks.

Pixels encode the pair (channel 0 = pair number; "real" pairs are 0-19, "synth" 100-159) and the target is 255 -
input, so a row from the wrong source, a key that does not match its pixels, or windows cut differently for the
two images are caught."""

import json
from collections import Counter

import numpy as np
import pytest
import torch

from pairload import ConfigError, make_loader
from pairload.pack import PackOptions, pack

from conftest import make_raw

KINDS = {
    "ram": ("ram", {}),
    "ram-workers": ("ram", {"num_workers": 2}),
    "ram-resident": ("ram", {"resident": True}),
    "dali-external": ("dali-external", {}),
    "dali-external-workers": ("dali-external", {"num_workers": 2}),
    "wds": ("wds", {"num_workers": 2}),
    "wds-inline": ("wds", {}),
}
PARAMS = [pytest.param(k, marks=pytest.mark.dali) if k.startswith("dali") else k for k in KINDS]
REAL, SYNTH = 20, 60


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix")
    make_raw(root / "real-raw", REAL, split="train", size=(24, 32))
    make_raw(root / "synth-raw", SYNTH, split="train", size=(24, 32), start=100)
    for name in ("real", "synth"):
        pack(root / f"{name}-raw", root / name, PackOptions(workers=1, shard_size=64 * 1024))
    return {"real": str(root / "real"), "synth": str(root / "synth")}


def rows(batch, crop):
    """(source, key, pair number) of each row, after checking pixels, target, key and source agree."""
    low, high = batch.low.cpu().numpy(), batch.high.cpu().numpy()
    assert batch.low.dtype == torch.uint8 and low.shape == (len(batch), 3, crop, crop)
    assert np.array_equal(high, 255 - low)
    out = []
    for j, key in enumerate(batch.keys):
        pair = int(low[j, 0, 0, 0])
        assert (low[j, 0] == pair).all()  # one pair's pixels in the whole window
        src, name = key.split("/")
        assert int(name) == pair and batch.source[j] == src
        assert src == ("real" if pair < 100 else "synth")
        out.append((src, key, pair))
    return out


def loader(kind_name, source, **kw):
    kind, extra = KINDS[kind_name]
    return make_loader(kind, source, seed=3, **{**extra, **kw})


@pytest.mark.parametrize("ws", [1, 2])
@pytest.mark.parametrize("name", PARAMS)
def test_a_weighted_mix_through_every_loader_over_shards(sources, name, ws):
    epochs = []
    for epoch in range(2):
        seen = []
        for rank in range(ws):
            with loader(name, sources, batch_size=8, crop=8, rank=rank, world_size=ws,
                        weights={"real": 1, "synth": 3}, epoch_size=48) as ld:
                ld.set_epoch(epoch)
                for batch in ld:
                    got = rows(batch, 8)
                    mix = Counter(s for s, _, _ in got)
                    if name.startswith("wds"):  # each worker interleaves its own share: both in every batch
                        assert mix["real"] >= 1 and mix["synth"] >= 5, mix
                    else:  # every batch mixes 1:3 exactly
                        assert mix == {"real": 2, "synth": 6}, mix
                    seen += got
        assert len(seen) == 48 and Counter(s for s, _, _ in seen) == {"real": 12, "synth": 36}
        epochs.append([k for s, k, _ in seen if s == "real"])
    assert len(epochs[0]) == len(set(epochs[0])) == 12
    real = epochs[0] + epochs[1]  # 24 draws of 20 samples: all 20 before any is drawn again
    assert len(real) == 24 and len(set(real)) == 20


@pytest.mark.parametrize("ws", [1, 2])
@pytest.mark.parametrize("name", PARAMS)
def test_a_schedule_changes_crop_and_batch_at_its_step_on_every_rank(sources, name, ws):
    shapes = {r: [] for r in range(ws)}
    for rank in range(ws):
        with loader(name, sources["synth"], schedule="0:16:4,5:12:2,9:8:3", rank=rank, world_size=ws) as ld:
            for epoch in range(3):
                ld.set_epoch(epoch)
                n = len(ld)
                got = [(b.low.shape[-1], len(b)) for b in ld]
                assert len(got) == n
                for b in got:
                    shapes[rank].append(b)
    assert all(shapes[r] == shapes[0] for r in shapes)  # the same batch shapes at every step on every rank
    stage = lambda step: (16, 4) if step < 5 else (12, 2) if step < 9 else (8, 3)  # noqa: E731
    assert shapes[0] == [stage(s) for s in range(len(shapes[0]))] and len(shapes[0]) > 9


@pytest.mark.parametrize("ws", [1, 2])
@pytest.mark.parametrize("name", PARAMS)
def test_repeats_give_each_sample_k_times_with_fresh_crops(sources, name, ws):
    windows: dict[str, list[bytes]] = {}
    for rank in range(ws):
        with loader(name, sources["real"], batch_size=4, crop=8, rank=rank, world_size=ws, repeats=3,
                    last_batch="partial") as ld:
            for batch in ld:
                low = batch.low.cpu().numpy()
                assert np.array_equal(batch.high.cpu().numpy(), 255 - low)
                for j, key in enumerate(batch.keys):
                    assert int(low[j, 0, 0, 0]) == int(key)
                    windows.setdefault(key, []).append(low[j].tobytes())
    assert sorted(windows) == [f"{i:05d}" for i in range(REAL)]
    assert all(len(w) == 3 for w in windows.values())  # k times each per epoch, over all ranks
    assert sum(len(set(w)) == 3 for w in windows.values()) >= 0.9 * REAL  # fresh crops and flips


@pytest.mark.parametrize("name", PARAMS)
def test_mixed_and_scheduled_loaders_resume_mid_epoch(sources, name):
    opts = dict(weights={"real": 1, "synth": 3}, epoch_size=48, schedule="0:12:4,3:8:8")
    with loader(name, sources, **opts) as a:
        a.set_epoch(1)
        it = iter(a)
        [next(it) for _ in range(2)]
        state = json.loads(json.dumps(a.state_dict()))
        rest_a = [(b.keys, b.low.shape) for b in it]
    with loader(name, sources, **opts) as b:
        b.load_state_dict(state)
        assert len(b) == len(rest_a)
        rest_b = [(x.keys, x.low.shape) for x in b]
    assert rest_a == rest_b
    with loader(name, sources, **{**opts, "weights": {"real": 1, "synth": 1}}) as c:
        with pytest.raises(ConfigError, match="mix was"):
            c.load_state_dict(state)


def test_usage_errors_name_the_fix(sources):
    with pytest.raises(ConfigError, match="no weight for synth"):
        make_loader("ram", sources, batch_size=4, crop=8, weights={"real": 1})
    with pytest.raises(ConfigError, match="no source other"):
        make_loader("ram", sources, batch_size=4, crop=8, weights={"real": 1, "synth": 1, "other": 2})
    with pytest.raises(ConfigError, match="wds plans scheduled epochs with 'drop' only"):
        make_loader("wds", sources["real"], schedule="0:8:4", last_batch="pad")
    with pytest.raises(ConfigError, match="source name 'a/b'"):
        make_loader("ram", {"a/b": sources["real"]}, batch_size=4, crop=8)


def test_sources_without_weights_are_concatenated_each_sample_once(sources):
    with make_loader("ram", sources, batch_size=5, crop=8, last_batch="partial") as ld:
        keys = [k for b in ld for k in b.keys]
    assert len(keys) == REAL + SYNTH and len(set(keys)) == REAL + SYNTH


@pytest.mark.gpu
@pytest.mark.parametrize("name", PARAMS)
def test_mix_and_schedule_on_the_gpu(sources, name):
    """The device paths (side-stream copies, the resident gather, DALI's warp) with batches that change size."""
    shapes = []
    with loader(name, sources, weights={"real": 1, "synth": 3}, epoch_size=48, schedule="0:16:4,5:12:8,9:8:4",
                device="cuda") as ld:
        for epoch in range(2):
            ld.set_epoch(epoch)
            for batch in ld:
                assert batch.low.is_cuda
                got = rows(batch, batch.low.shape[-1])
                mix = Counter(s for s, _, _ in got)
                assert mix == {"real": len(batch) // 4, "synth": 3 * len(batch) // 4} or name.startswith("wds"), mix
                shapes.append((batch.low.shape[-1], len(batch)))
    stage = lambda step: (16, 4) if step < 5 else (12, 8) if step < 9 else (8, 4)  # noqa: E731
    assert shapes == [stage(s) for s in range(len(shapes))]


def test_weights_without_named_sources_and_raw_folders_are_refused(sources, tmp_path):
    with pytest.raises(ConfigError, match="weights need named sources"):
        make_loader("ram", sources["real"], batch_size=4, crop=8, weights={"real": 1})
    make_raw(tmp_path / "raw", 8, split="train", size=(24, 32))
    pytest.importorskip("nvidia.dali")
    with pytest.raises(ConfigError, match="pack the folder with `pairload pack`"):
        make_loader("dali-file", tmp_path / "raw", batch_size=4, crop=8, repeats=2)


def test_an_epoch_size_on_one_folder_walks_it_without_replacement(sources):
    """epoch_size alone: fixed-length epochs over one large folder, each continuing where the last one stopped."""
    seen = []
    with make_loader("ram", sources["synth"], batch_size=4, crop=8, epoch_size=24) as ld:
        for epoch in range(3):
            ld.set_epoch(epoch)
            assert len(ld) == 6
            seen += [k for b in ld for k in b.keys]
    assert len(seen) == 72 and len(set(seen[:60])) == 60 and set(seen) == {f"{i:05d}" for i in range(100, 160)}


def test_a_state_saved_before_these_fields_existed_still_loads(sources):
    with make_loader("ram", sources["real"], batch_size=4, crop=8) as a:
        it = iter(a)
        next(it)
        state = a.state_dict()
    for name in ("repeats", "mix", "schedule"):
        del state[name]
    with make_loader("ram", sources["real"], batch_size=4, crop=8) as b:
        b.load_state_dict(state)
        assert len(b) == len(a) - 1
    with make_loader("ram", sources["real"], batch_size=4, crop=8, repeats=2) as c:
        with pytest.raises(ConfigError, match="repeats was 1"):
            c.load_state_dict(state)
