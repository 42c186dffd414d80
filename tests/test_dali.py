"""DALI loaders, on DALI's CPU-only mode in CI and on the GPU where there is one (marker `gpu`)."""

import subprocess
import sys

import pytest
import torch

from pairload import ImageError, PairingError, make_loader
from pairload.pack import PackOptions, pack

from conftest import make_raw
from test_loaders import check_batch

pytestmark = pytest.mark.dali
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """24 training pairs of 40x56 as PNG (raw) and packed into shards of 4, plus 5 test pairs."""
    root = tmp_path_factory.mktemp("dali")
    make_raw(root / "raw", 24, split="train")
    make_raw(root / "raw", 5, split="test", start=200)
    pack(root / "raw", root / "shards", PackOptions(workers=1, shard_size=64 * 1024))
    return root


def source(data, kind):
    return data / ("shards" if kind == "dali-external" else "raw")


def collect(loader, epoch):
    loader.set_epoch(epoch)
    return [(b.keys, b.low.cpu(), b.high.cpu(), b.padded.cpu()) for b in loader]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["dali-external", "dali-file"])
@pytest.mark.parametrize("ws", [1, 2, 3, 4])
def test_every_sample_once_per_epoch_across_shards(data, kind, ws, device):
    per_rank = []
    for rank in range(ws):
        loader = make_loader(kind, source(data, kind), batch_size=2, crop=16, seed=3, rank=rank, world_size=ws,
                             device=device)
        loader.set_epoch(2)
        batches = list(loader)
        assert len(batches) == len(loader) == 24 // ws // 2
        for b in batches:
            assert b.low.device.type == device
            check_batch(b, 2, 3, 16, n=2)
        per_rank.append([k for b in batches for k in b.keys])
    assert sorted(k for keys in per_rank for k in keys) == [f"{i:05d}" for i in range(24)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["dali-external", "dali-file"])
def test_epochs_are_reproducible_and_differ(data, kind, device):
    make = lambda: make_loader(kind, source(data, kind), batch_size=4, crop=16, seed=8, device=device)  # noqa: E731
    first = collect(make(), 1)
    again = collect(make(), 1)  # a new loader told set_epoch(1) replays epoch 1
    assert [b[0] for b in first] == [b[0] for b in again]
    assert all(torch.equal(x[1], y[1]) and torch.equal(x[2], y[2]) for x, y in zip(first, again))
    other = collect(make(), 2)
    assert [b[0] for b in first] != [b[0] for b in other]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("last_batch,ws", [("drop", 1), ("drop", 2), ("pad", 2), ("partial", 1)])
def test_dali_external_batches_equal_ram_batches(data, device, last_batch, ws):
    for rank in range(ws):
        kw = dict(batch_size=4, crop=16, seed=11, rank=rank, world_size=ws, last_batch=last_batch, split="test"
                  if last_batch != "drop" else "train")
        ram = collect(make_loader("ram", data / "shards", **kw), 5)
        dali = collect(make_loader("dali-external", data / "shards", device=device, **kw), 5)
        assert len(ram) == len(dali) > 0
        for r, d in zip(ram, dali):
            assert r[0] == d[0]
            assert torch.equal(r[1], d[1]) and torch.equal(r[2], d[2]) and torch.equal(r[3], d[3])


@pytest.mark.parametrize("kind", ["dali-external", "dali-file"])
def test_whole_images_for_validation(data, kind):
    loader = make_loader(kind, source(data, kind), split="test", batch_size=2, crop=None, augment=False, shuffle=False,
                         last_batch="partial")
    batches = list(loader)
    assert [len(b) for b in batches] == [2, 2, 1]
    assert [k for b in batches for k in b.keys] == [f"{i:05d}" for i in range(200, 205)]
    for b in batches:
        check_batch(b, 0, 0, None, augment=False)


def test_out_of_step_reader_is_caught(data, monkeypatch):
    from pairload.dali import DaliFileLoader

    real = DaliFileLoader._file_lists

    def drifted(self, order):
        lists = real(self, order)
        files, labels = lists["high"]
        lists["high"] = (files[1:] + files[:1], labels[1:] + labels[:1])  # the high reader runs one pair ahead
        return lists

    loader = make_loader("dali-file", data / "raw", batch_size=4, crop=16)
    monkeypatch.setattr(DaliFileLoader, "_file_lists", drifted)
    with pytest.raises(PairingError, match=r"the low and high readers are out of step at epoch 0, batch 0"):
        list(loader)


@pytest.mark.parametrize("damage", ["corrupt", "missing"])
def test_missing_or_corrupt_image_is_named(data, tmp_path, damage):
    raw = make_raw(tmp_path / "raw", 8)
    loader = make_loader("dali-file", raw, batch_size=4, crop=16, shuffle=False)
    bad = raw / "high" / "00005.png"
    if damage == "corrupt":
        bad.write_bytes(bad.read_bytes()[:100])
    else:
        bad.unlink()
    with pytest.raises(ImageError, match=r"00005.png"):
        list(loader)


def test_pairload_imports_without_dali_and_dali_module_says_how_to_install():
    code = (
        "import sys; sys.modules['nvidia.dali'] = None; sys.modules['nvidia.dali.fn'] = None\n"
        "import pairload\n"
        "try:\n"
        "    import pairload.dali\n"
        "except pairload.MissingDependencyError as e:\n"
        "    print('MISSING', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "MISSING pairload.dali needs NVIDIA DALI: pip install 'pairload[dali]'" in out.stdout


@pytest.mark.parametrize("kind", ["dali-external", "dali-file"])
def test_one_pipeline_serves_consecutive_epochs_and_jumps_rebuild(data, kind):
    """A pipeline covers a window of epochs; breaking early or jumping must still give each epoch's own batches."""
    def fresh(epoch):
        return collect(make_loader(kind, source(data, kind), batch_size=4, crop=16, seed=2), epoch)

    loader = make_loader(kind, source(data, kind), batch_size=4, crop=16, seed=2)
    for epoch, stop in ((0, None), (1, None), (2, 2), (3, None), (7, None), (4, None)):
        loader.set_epoch(epoch)
        got = []
        for b in loader:
            got.append((b.keys, b.low.cpu()))
            if stop is not None and len(got) == stop:
                break
        expect = fresh(epoch)[: len(got)]
        assert [g[0] for g in got] == [e[0] for e in expect], epoch
        assert all(torch.equal(g[1], e[1]) for g, e in zip(got, expect))


def test_dali_file_ignores_exif_orientation_as_pack_does(tmp_path):
    """A low JPEG tagged 'rotate 90°' next to an untagged high: both readers keep the stored pixel order."""
    import numpy as np
    from PIL import Image

    from conftest import pair_pixels
    from pairload import open_shards

    raw = tmp_path / "raw"
    for i in range(2):
        lo, hi = pair_pixels(i * 40, 40, 56)
        for side, img in (("low", lo), ("high", hi)):
            (raw / side).mkdir(parents=True, exist_ok=True)
            exif = Image.Exif()
            if side == "low":
                exif[0x0112] = 6  # orientation: rotate 90° clockwise to display
            Image.fromarray(img).save(raw / side / f"{i:05d}.jpg", quality=100, exif=exif.tobytes())
    pack(raw, tmp_path / "shards", PackOptions(workers=1))
    ds = open_shards(tmp_path / "shards")
    loader = make_loader("dali-file", raw, batch_size=1, crop=None, augment=False, shuffle=False, last_batch="partial")
    for batch in loader:
        key, low, high = ds[ds.keys.index(batch.keys[0])]
        got_low = batch.low[0].permute(1, 2, 0).numpy()
        assert got_low.shape == low.shape == (40, 56, 3)
        assert np.abs(got_low.astype(int) - low.astype(int)).mean() < 3  # JPEG decoders may differ by rounding
        assert np.abs(batch.high[0].permute(1, 2, 0).numpy().astype(int) - high.astype(int)).mean() < 3
