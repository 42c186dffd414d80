import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from indexes import shard_index
from pairload import open_shards, ConfigError, Normalize, PairBatch, ShardError, make_loader
from pairload.pack.writer import PackOptions, pack
from pairload.plan import key_hashes, sample_params

from conftest import make_raw, pair_pixels, raw_and_shards

H, W = 40, 56


@pytest.fixture(scope="module")
def shards24(tmp_path_factory):
    """24 training pairs of 40x56 in 6 shards of 4, and 5 test pairs."""
    return raw_and_shards(tmp_path_factory.mktemp("data"), 24, test=5) / "shards"


def expected(key: str, epoch: int, seed: int, crop: int | None, augment: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """What a loader must deliver for `key`, from the fixture's formula and an independent numpy transform."""
    low, high = pair_pixels(int(key), H, W)
    y, x, code = sample_params(key_hashes([key]), np.array([[H, W]]), seed=seed, epoch=epoch, crop=crop,
                               augment=augment)
    ch, cw = (crop, crop) if crop else (H, W)
    out = []
    for img in (low, high):
        img = img[int(y[0]):int(y[0]) + ch, int(x[0]):int(x[0]) + cw]
        if code[0] & 4:
            img = img.transpose(1, 0, 2)
        if code[0] & 2:
            img = img[::-1]
        if code[0] & 1:
            img = img[:, ::-1]
        out.append(np.ascontiguousarray(img))
    return out[0], out[1]


def hwc(t: torch.Tensor) -> np.ndarray:
    return t.permute(1, 2, 0).cpu().numpy()


def check_batch(batch: PairBatch, epoch: int, seed: int, crop: int | None, n: int | None = None,
                augment: bool = True) -> None:
    assert isinstance(batch, PairBatch)
    assert batch.low.dtype == batch.high.dtype == torch.uint8
    if n is not None:
        assert batch.low.shape == (n, 3, crop or H, crop or W)
    for j, key in enumerate(batch.keys):
        # the target is an exact function of the input: a crop or flip applied differently would break this
        np.testing.assert_array_equal(hwc(batch.high[j]), 255 - hwc(batch.low[j]))
        lo, hi = expected(key, epoch, seed, crop, augment)
        np.testing.assert_array_equal(hwc(batch.low[j]), lo, err_msg=f"key {key}")
        np.testing.assert_array_equal(hwc(batch.high[j]), hi, err_msg=f"key {key}")


def epoch_keys(loader, epoch: int) -> list[str]:
    loader.set_epoch(epoch)
    return [k for b in loader for k in b.keys]


@pytest.mark.parametrize("backend", [{}, {"num_workers": 2}, {"resident": True}])
def test_ram_batches_execute_the_plan(shards24, backend):
    loader = make_loader("ram", shards24, batch_size=4, crop=24, seed=7, **backend)
    assert len(loader) == 6
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        batches = list(loader)
        assert len(batches) == 6
        for b in batches:
            check_batch(b, epoch, 7, 24, n=4)
            assert not b.padded.any()


def test_ram_whole_images_for_validation(shards24):
    loader = make_loader("ram", shards24, split="test", batch_size=2, crop=None, last_batch="partial", augment=False,
                         shuffle=False)
    batches = list(loader)
    assert [len(b) for b in batches] == [2, 2, 1]
    assert [k for b in batches for k in b.keys] == [f"{i:05d}" for i in range(200, 205)]
    for b in batches:
        for j, key in enumerate(b.keys):
            low, high = pair_pixels(int(key), H, W)
            np.testing.assert_array_equal(hwc(b.low[j]), low)
            np.testing.assert_array_equal(hwc(b.high[j]), high)


@pytest.mark.parametrize("ws", [1, 2, 3, 4])
def test_ram_every_sample_once_per_epoch_across_ranks(shards24, ws):
    per_rank = []
    for rank in range(ws):
        loader = make_loader("ram", shards24, batch_size=2, crop=16, seed=1, rank=rank, world_size=ws)
        per_rank.append(epoch_keys(loader, 3))
        assert len(loader) == 24 // ws // 2
    assert len({len(k) for k in per_rank}) == 1
    assert sorted(k for keys in per_rank for k in keys) == [f"{i:05d}" for i in range(24)]


def test_ram_pad_flags_repeats_and_partial_keeps_every_sample(shards24):
    pad = [make_loader("ram", shards24, batch_size=4, crop=16, rank=r, world_size=2, last_batch="pad", split="test")
           for r in range(2)]
    batches = [list(p) for p in pad]
    assert [len(b) for b in batches] == [1, 1]
    real = [k for bs in batches for b in bs for k, p in zip(b.keys, b.padded.tolist()) if not p]
    assert sorted(real) == [f"{i:05d}" for i in range(200, 205)]
    assert sum(int(b.padded.sum()) for bs in batches for b in bs) == 3
    part = [make_loader("ram", shards24, batch_size=4, crop=16, rank=r, world_size=2, last_batch="partial",
                        split="test") for r in range(2)]
    assert sorted(k for p in part for b in p for k in b.keys) == [f"{i:05d}" for i in range(200, 205)]


def test_ram_same_seed_same_batches_new_epoch_new_order(shards24):
    def run(seed, epoch, **kw):
        loader = make_loader("ram", shards24, batch_size=4, crop=16, seed=seed, **kw)
        loader.set_epoch(epoch)
        return [(b.keys, b.low.clone()) for b in loader]

    a, b = run(5, 2), run(5, 2, num_workers=3)
    assert [x[0] for x in a] == [x[0] for x in b]
    assert all(torch.equal(x[1], y[1]) for x, y in zip(a, b))
    c = run(5, 3)
    assert [x[0] for x in a] != [x[0] for x in c]
    d = run(6, 2)
    assert [x[0] for x in a] != [x[0] for x in d]


def test_wds_no_duplicates_and_equal_batches_per_rank(shards24):
    for workers in (0, 2):
        per_rank = []
        for rank in range(2):
            loader = make_loader("wds", shards24, batch_size=2, crop=16, seed=2, rank=rank, world_size=2,
                                 num_workers=workers)
            loader.set_epoch(1)
            batches = list(loader)
            assert len(batches) == len(loader) > 0
            for b in batches:
                check_batch(b, 1, 2, 16, n=2)
            per_rank.append([k for b in batches for k in b.keys])
        assert len(per_rank[0]) == len(per_rank[1])
        everything = per_rank[0] + per_rank[1]
        assert len(everything) == len(set(everything))


def test_wds_one_rank_no_workers_delivers_every_sample_once(shards24):
    loader = make_loader("wds", shards24, batch_size=5, crop=20, seed=4, last_batch="partial")
    keys = epoch_keys(loader, 0)
    assert sorted(keys) == [f"{i:05d}" for i in range(24)]
    assert keys != sorted(keys)  # shard order and the shuffle buffer both mix
    assert epoch_keys(loader, 0) == keys and epoch_keys(loader, 1) != keys


def test_wds_and_ram_cut_the_same_window_for_a_key(shards24):
    ram = {k: (b.low[j], b.high[j]) for b in make_loader("ram", shards24, batch_size=4, crop=16, seed=9)
           for j, k in enumerate(b.keys)}
    wds = {k: (b.low[j], b.high[j]) for b in make_loader("wds", shards24, batch_size=4, crop=16, seed=9, num_workers=2)
           for j, k in enumerate(b.keys)}
    assert len(set(ram) & set(wds)) >= 20
    for k in set(ram) & set(wds):
        assert torch.equal(ram[k][0], wds[k][0]) and torch.equal(ram[k][1], wds[k][1])


def test_wds_with_more_ranks_than_shards_deals_blocks_within_shards(shards24):
    # 2 shards, 3 ranks: the by-shard deal cuts the epoch's shard order into blocks, not whole shards per rank
    parts = []
    for r in range(3):
        loader = make_loader("wds", shards24, split="test", batch_size=1, crop=16, rank=r, world_size=3,
                             last_batch="partial")
        parts.append([k for b in loader for k in b.keys])
    n = len(open_shards(shards24, "test"))
    assert sorted(k for p in parts for k in p) == sorted(open_shards(shards24, "test").keys)
    assert {len(p) for p in parts} <= {n // 3, n // 3 + 1}


def test_missing_manifest_and_bad_options(shards24, tmp_path):
    for kind in ("ram", "wds"):
        with pytest.raises(ShardError, match="no manifest.json found"):
            make_loader(kind, tmp_path, batch_size=2, crop=16)
        with pytest.raises(ConfigError,
                           match=r"crop 48 is larger than sample '00000' of split 'train', which is 56x40"):
            make_loader(kind, shards24, batch_size=2, crop=48)
        with pytest.raises(ConfigError,
                           match=r"batch_size 16 is larger than a rank's share of split 'train' \(24 samples / 2"):
            make_loader(kind, shards24, batch_size=16, crop=16, world_size=2)
    with pytest.raises(ConfigError, match="loader kind 'magic'"):
        make_loader("magic", shards24, batch_size=2, crop=16)


def corrupt_copy(shards24, tmp_path, member: str):
    """A copy of the shards with the .npy header of sample 5's `member` damaged; returns (folder, shard, key)."""
    import shutil

    out = tmp_path / "bad"
    shutil.copytree(shards24, out)
    doc = json.loads((out / "manifest.json").read_text())
    sh = doc["splits"]["train"]["shards"][1]
    idx = shard_index(out, "train", 1)
    key, off = idx["key"][1], idx[member][1]
    data = bytearray((out / sh["file"]).read_bytes())
    data[off - 60:off - 50] = b"XXXXXXXXXX"
    (out / sh["file"]).write_bytes(bytes(data))
    return out, sh["file"], key


@pytest.mark.parametrize("kind", ["ram", "wds"])
def test_corrupt_shard_met_while_loading_names_shard_and_key(shards24, tmp_path, kind):
    out, shard, key = corrupt_copy(shards24, tmp_path, "high")
    loader = make_loader(kind, out, batch_size=2, crop=16)
    with pytest.raises(ShardError, match=rf"{shard}: key {key}: .*{key}.high.npy"):
        list(loader)


@pytest.mark.slow
def test_one_copy_of_the_split_is_shared_between_processes(tmp_path):
    """Two processes that each read a whole epoch map the shards: their private memory barely grows."""
    make_raw(tmp_path / "raw", 100, size=(400, 600))
    pack(tmp_path / "raw", tmp_path / "s", PackOptions(workers=2))
    script = textwrap.dedent(f"""
        import json, psutil
        from pairload import make_loader
        proc = psutil.Process()
        def anon():
            return sum(m.private_dirty + m.private_clean for m in proc.memory_maps() if not m.path.endswith('.tar'))
        loader = make_loader("ram", {str(tmp_path / 's')!r}, batch_size=1, crop=None)
        it = iter(loader)
        n = len(next(it))  # the first batch pays torch's one-time allocations: measure from there
        before = anon()
        n += sum(len(b) for b in it)
        shared = sum(m.rss for m in proc.memory_maps() if m.path.endswith('.tar'))
        print(json.dumps({{"n": n, "anon_growth": anon() - before, "tar_rss": shared}}))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    results = [json.loads(p.communicate()[0]) for p in procs]
    split_bytes = 100 * 400 * 600 * 3 * 2
    for r in results:
        assert r["n"] == 100
        assert r["tar_rss"] >= 0.9 * split_bytes  # the whole split was read through the shared file mapping
        # ...and not copied into private memory: a copy would be the whole split; the allocator and lazily loaded
        # libraries account for 20-37 MB here, whatever the split size
        assert r["anon_growth"] < 0.5 * split_bytes


def test_normalize():
    x = torch.tensor([0, 51, 255], dtype=torch.uint8).view(1, 3, 1, 1).expand(2, 3, 4, 4)
    norm = Normalize(mean=(0.5, 0.5, 0.5), std=(0.25, 0.5, 1.0), channels_last=True)
    y = norm(x)
    assert y.dtype == torch.float32 and y.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(y[0, :, 0, 0], torch.tensor([-2.0, (0.2 - 0.5) / 0.5, 0.5]))
    torch.testing.assert_close(norm.denormalize(y), x.float() / 255)
    with pytest.raises(ConfigError, match=r"Normalize takes the stored integer images \(uint8 or uint16\), got "
                                          r"torch.float32"):
        norm(x.float())
    wide = (x.to(torch.int32) * 257).to(torch.uint16)  # the same levels in 16 bits: 255 -> 65535
    torch.testing.assert_close(norm(wide), y)
    with pytest.raises(ConfigError, match=r"the images have 4 channels but mean and std give 3"):
        norm(torch.zeros((1, 4, 2, 2), dtype=torch.uint8))


def test_one_option_name_for_cpu_parallelism_and_unknown_options_are_named(shards24):
    with pytest.raises(ConfigError, match=r"make_loader\('wds'\): unknown option\(s\) resident; this kind accepts "
                                          r"cache_dir, cache_limit, pin_budget, prefetch, shuffle_buffer"):
        make_loader("wds", shards24, batch_size=2, crop=16, resident=True)
    with pytest.raises(ConfigError, match=r"unknown option\(s\) num_threads; .*num_workers for every kind"):
        make_loader("ram", shards24, batch_size=2, crop=16, num_threads=4)
    with pytest.raises(ConfigError, match=r"loader kind 'disk': expected one of ram, wds, dali-external, dali-file"):
        make_loader("disk", shards24, batch_size=2, crop=16)
