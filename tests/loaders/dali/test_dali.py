"""DALI loaders, on DALI's CPU-only mode in CI and on the GPU where there is one (marker `gpu`)."""

import subprocess
import sys

import pytest
import torch

import numpy as np

from pairload import ConfigError, ImageError, PairingError, make_loader
from pairload.pack.writer import PackOptions, pack

from conftest import make_raw, raw_and_shards
from test_loaders import check_batch, expected

pytestmark = pytest.mark.dali
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """24 training pairs of 40x56 as PNG (raw) and packed into shards of 4, plus 5 test pairs."""
    return raw_and_shards(tmp_path_factory.mktemp("dali"), 24, test=5)


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
def test_dali_external_runs_on_into_the_next_epoch_and_still_jumps_exactly(data, device, monkeypatch):
    """Consecutive epochs go on in one pipeline (no drain and reset at each epoch's end); any other order (an epoch
    again, a resume mid-epoch) starts over and still delivers exactly the planned batches."""
    from nvidia.dali.pipeline import Pipeline

    resets = []
    real_reset = Pipeline.reset
    monkeypatch.setattr(Pipeline, "reset", lambda self: (resets.append(1), real_reset(self))[1])
    kw = dict(batch_size=4, crop=16, seed=13, last_batch="pad", split="test")
    ram = make_loader("ram", data / "shards", **kw)
    want = {e: collect(ram, e) for e in (0, 1, 2)}
    loader = make_loader("dali-external", data / "shards", device=device, **kw)

    def same(got, epoch):
        assert [b[0] for b in got] == [b[0] for b in want[epoch]]
        assert all(torch.equal(x[i], y[i]) for x, y in zip(got, want[epoch]) for i in (1, 2, 3))

    for epoch in (0, 1, 2):
        same(collect(loader, epoch), epoch)
    assert resets == []
    same(collect(loader, 1), 1)  # not the next epoch: the pipeline starts over
    assert len(resets) == 1
    loader.set_epoch(2)
    it = iter(loader)
    first = next(it)
    state = loader.state_dict()
    del it
    resumed = make_loader("dali-external", data / "shards", device=device, **kw)
    resumed.load_state_dict(state)
    rest = [(b.keys, b.low.cpu(), b.high.cpu(), b.padded.cpu()) for b in resumed]
    same([(first.keys, first.low.cpu(), first.high.cpu(), first.padded.cpu())] + rest, 2)
    loader.close()
    resumed.close()


@pytest.mark.gpu
@pytest.mark.parametrize("schedule", [None, "0:16:4,3:12:2,5:8:3"])
def test_dali_external_feeds_several_batches_an_iteration_and_splits_them_exactly(data, schedule):
    """On a GPU the kernel's launches are fed whole (up to ITERATION_BATCHES batches of one shape per DALI iteration)
    and split again: every batch equals ram's, across shape changes, a short last group and the next epochs."""
    from pairload.loaders.dali.api import DaliExternalLoader

    kw = dict(batch_size=4, crop=16, seed=21, last_batch="partial", schedule=schedule) if schedule else dict(
        batch_size=4, crop=16, seed=21, last_batch="partial")
    ram = make_loader("ram", data / "shards", **kw)
    loader = make_loader("dali-external", data / "shards", device="cuda", **kw)
    assert isinstance(loader, DaliExternalLoader) and loader.zero_copy
    for epoch in (0, 1, 2):
        want, got = collect(ram, epoch), collect(loader, epoch)
        assert loader.per_iteration == DaliExternalLoader.ITERATION_BATCHES > 1
        assert [b[0] for b in got] == [b[0] for b in want] and len(got) == len(ram)
        assert all(torch.equal(x[i], y[i]) for x, y in zip(got, want) for i in (1, 2, 3))
    loader.close()


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

    real = DaliFileLoader.file_lists

    def drifted(self, order):
        lists = real(self, order)
        files, labels = lists["high"]
        lists["high"] = (files[1:] + files[:1], labels[1:] + labels[:1])  # the high reader runs one pair ahead
        return lists

    loader = make_loader("dali-file", data / "raw", batch_size=4, crop=16)
    monkeypatch.setattr(DaliFileLoader, "file_lists", drifted)
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


def test_an_image_changed_after_the_loader_was_made_is_named(tmp_path):
    from conftest import pair_pixels, write_rgb

    raw = make_raw(tmp_path / "raw", 8)
    loader = make_loader("dali-file", raw, batch_size=4, crop=16, shuffle=False)
    assert len(list(loader)) == 2
    low, _ = pair_pixels(99, 48, 64)  # another image, another size: the planned windows no longer hold
    write_rgb(raw / "low" / "00006.png", low)
    loader.set_epoch(1)
    with pytest.raises(ImageError, match=r"low/00006.png: changed since the loader was made \(modified or replaced\); "
                                         r"make the loader again"):
        list(loader)


def test_a_file_name_that_is_not_utf8_is_named_with_what_works(tmp_path):
    import os

    raw = make_raw(tmp_path / "raw", 4)
    for side in ("low", "high"):
        os.rename(raw / side / "00001.png", os.path.join(os.fsencode(raw / side), b"\xff01.png"))
    with pytest.raises(ImageError, match=r"xff01.png'?: the file name is not valid UTF-8, which DALI's file reader "
                                         r"cannot open; rename it, or pack the folder"):
        make_loader("dali-file", raw, batch_size=2, crop=16)


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


# ---------------------------------------------------------------- the building block: paired_inputs in a user pipeline

def user_pipeline(src, device_id=None):
    """A user's own pipeline: a paired brightness change (one random value for both images) and noise on the
    input only, as float; it returns the noise and the brightness too, so the test can undo both."""
    import nvidia.dali.fn as fn
    import nvidia.dali.types as types
    from nvidia.dali import pipeline_def

    from pairload.dali import paired_inputs

    @pipeline_def(batch_size=src.cfg.batch_size, num_threads=2, device_id=device_id, seed=11)
    def pipe():
        low, high = paired_inputs(src)
        gain = fn.random.uniform(range=[0.5, 1.0])  # one value per sample, used on both images
        low = fn.cast(low, dtype=types.FLOAT) * gain
        high = fn.cast(high, dtype=types.FLOAT) * gain
        noise = fn.random.normal(low, stddev=4.0)  # same shape as the input; the input only
        return low + noise, high, noise, gain

    return pipe


NAMES = ("input", "target", "noise", "gain")


def check_user_batch(out, epoch, seed, crop):
    assert set(out) == {*NAMES, "keys", "padded"}
    out = {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in out.items()}
    gain = out["gain"].reshape(-1, 1, 1, 1)
    clean = (out["input"] - out["noise"]) / gain
    assert out["noise"].abs().sum() > 0
    for j, key in enumerate(out["keys"]):
        lo, hi = expected(key, epoch, seed, crop)
        # the target is 255 - input: same window, same flip, same brightness on both, noise on the input only
        np.testing.assert_allclose(clean[j].numpy(), lo, atol=1e-3, err_msg=key)
        np.testing.assert_allclose((out["target"][j] / gain[j]).numpy(), hi, atol=1e-3, err_msg=key)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["external", "file"])
@pytest.mark.parametrize("ws", [1, 2])
def test_user_pipeline_on_paired_inputs_stays_aligned_and_sees_each_sample_once(data, kind, ws, device):
    from pairload.dali import PairedIterator, paired_source

    dev_id = 0 if device == "cuda" else None
    seen = {0: [], 1: []}
    for rank in range(ws):
        src = paired_source(data / ("shards" if kind == "external" else "raw"), kind=kind, batch_size=4, crop=16,
                            seed=5, rank=rank, world_size=ws, num_workers=2)
        it = PairedIterator(user_pipeline(src, dev_id)(), NAMES) if kind == "external" else \
            PairedIterator(lambda src=src: user_pipeline(src, dev_id)(), NAMES, source=src)
        assert len(it) == 24 // ws // 4
        for epoch in (0, 1):
            it.set_epoch(epoch)
            batches = list(it)
            assert len(batches) == len(it)
            for out in batches:
                assert out["input"].shape == (4, 16, 16, 3) and out["input"].dtype == torch.float32
                assert out["input"].device.type == device
                check_user_batch(out, epoch, 5, 16)
                seen[epoch] += out["keys"]
        it.close()
    for epoch in (0, 1):
        assert sorted(seen[epoch]) == [f"{i:05d}" for i in range(24)]  # each sample exactly once, over the ranks
    assert seen[0] != seen[1]


def test_paired_inputs_with_a_path_and_the_pipeline_alone(data):
    """The short form: paired_inputs(path, **options) inside the function, PairedIterator(pipe) finds the source."""
    import nvidia.dali.fn as fn
    from nvidia.dali import pipeline_def

    from pairload.dali import PairedIterator, paired_inputs

    @pipeline_def(batch_size=4, num_threads=1, device_id=None)
    def pipe():
        low, high = paired_inputs(data / "shards", batch_size=4, crop=16, seed=1)
        return fn.flip(low, horizontal=1), fn.flip(high, horizontal=1)  # a paired operator of the user's

    it = PairedIterator(pipe())
    for epoch in (0, 1, 2):  # consecutive epochs go on in the same pipeline
        it.set_epoch(epoch)
        n = 0
        for out in it:
            n += 1
            for j, key in enumerate(out["keys"]):
                lo, hi = expected(key, epoch, 1, 16)
                np.testing.assert_array_equal(out["low"][j].numpy(), lo[:, ::-1])
                np.testing.assert_array_equal(out["high"][j].numpy(), hi[:, ::-1])
        assert n == 6


def test_dalis_own_iterator_gets_epochs_of_the_planned_length(data):
    from nvidia.dali.plugin.base_iterator import LastBatchPolicy
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    from pairload.dali import paired_source

    src = paired_source(data / "shards", batch_size=4, crop=16, seed=3, last_batch="partial", world_size=3, rank=2)
    it = DALIGenericIterator(user_pipeline(src)(), list(NAMES), size=-1, last_batch_policy=LastBatchPolicy.PARTIAL,
                             auto_reset=True)
    for epoch in (0, 1):  # the source moves on to the next epoch by itself
        rows = [out[0]["input"].shape[0] for out in it]
        assert rows == [len(bp) for bp in src.plan_for(epoch)] == [4, 4]


def test_paired_inputs_usage_errors(data):
    from nvidia.dali import pipeline_def

    from pairload.dali import PairedIterator, paired_inputs, paired_source

    src = paired_source(data / "shards", batch_size=4, crop=16)
    with pytest.raises(ConfigError, match=r"call it inside a @pipeline_def function"):
        paired_inputs(src)

    @pipeline_def(batch_size=8, num_threads=1, device_id=None)
    def wrong_batch():
        return tuple(paired_inputs(src))

    with pytest.raises(ConfigError, match=r"batch_size is 8 but the paired source plans batches of up to 4"):
        wrong_batch()
    with pytest.raises(ConfigError, match=r"kind='bogus': expected 'external'"):
        paired_source(data / "shards", kind="bogus", batch_size=4, crop=16)

    @pipeline_def(batch_size=4, num_threads=1, device_id=None)
    def three():
        low, high = paired_inputs(src)
        return low, high, low

    with pytest.raises(ConfigError, match=r"the pipeline has 3 outputs but output_map names 2"):
        next(iter(PairedIterator(three())))


def test_a_deep_prefetch_queue_in_the_users_pipeline_never_sees_a_reused_buffer(data):
    """external_source takes the workers' ring slots without a copy: the source must hold them as long as the
    user's pipeline may still read them, whatever its prefetch_queue_depth (pixels encode the pair index)."""
    from nvidia.dali import pipeline_def

    from pairload.dali import PairedIterator, paired_inputs, paired_source

    src = paired_source(data / "shards", batch_size=2, crop=16, seed=4, num_workers=2, prefetch=1)

    @pipeline_def(batch_size=2, num_threads=1, device_id=None, prefetch_queue_depth=10)
    def pipe():
        return tuple(paired_inputs(src))

    with PairedIterator(pipe()) as it:
        for epoch in range(3):
            it.set_epoch(epoch)
            for out in it:
                for j, key in enumerate(out["keys"]):
                    lo, hi = expected(key, epoch, 4, 16)
                    np.testing.assert_array_equal(out["low"][j].numpy(), lo, err_msg=key)
                    np.testing.assert_array_equal(out["high"][j].numpy(), hi, err_msg=key)


def test_a_packed_shard_folder_given_to_dali_file_is_refused_naming_the_loaders_that_read_it(data, tmp_path):
    from pairload.dali import paired_source

    shards = data / "shards"
    want = (rf"{shards}: a folder of packed shards \(it has manifest.json\), but dali-file \(paired_source kind "
            r"'file'\) reads image folders; use dali-external \(kind 'external'\), ram or wds for packed shards")
    with pytest.raises(ConfigError, match=want):
        make_loader("dali-file", shards, batch_size=2, crop=16)
    with pytest.raises(ConfigError, match=want):
        paired_source(shards, kind="file", batch_size=2, crop=16)
    raw = make_raw(tmp_path / "raw", 4)  # a raw folder that also holds a manifest.json is still read as raw
    (raw / "manifest.json").write_text("{}")
    assert len(make_loader("dali-file", raw, batch_size=2, crop=16)) == 2


@pytest.mark.parametrize("kind", ["dali-external", "dali-file"])
def test_timing_hooks_see_every_stage_of_every_batch(data, kind):
    from pairload.hooks import StageTotals

    loader = make_loader(kind, source(data, kind), batch_size=4, crop=16, seed=2)
    totals = StageTotals()
    remove = loader.hooks.add(totals)
    n = len(collect(loader, 0)) + len(collect(loader, 1))
    assert n == 2 * len(loader) == 12
    assert totals.calls["build"] == 1  # both epochs from one pipeline (dali-file: its lists cover both)
    assert totals.calls["schedule_run"] == totals.calls["outputs"] == totals.calls["convert"] == n
    assert totals.calls["feed"] >= n  # DALI may have taken batches ahead
    assert all(s >= 0 for s in totals.seconds.values()) and totals.seconds["outputs"] > 0
    remove()
    collect(loader, 2)
    assert totals.calls["convert"] == n
    loader.close()


@pytest.mark.parametrize("device", DEVICES)
def test_dali_file_decodes_rgb_coded_jpegs_right_on_the_cpu_and_refuses_them_on_the_gpu(tmp_path, device):
    # an RGB-coded JPEG (Pillow's keep_rgb: an Adobe marker with transform 0) is R, G, B to libjpeg and YCbCr to
    # nvImageCodec's GPU decoder, which would give other colours than pack and the CPU
    import io

    import cv2
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(4):
        img = cv2.resize(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8), (64, 48), interpolation=cv2.INTER_CUBIC)
        for side, pixels, rgb in (("low", img // 3, i == 2), ("high", img, False)):
            (tmp_path / "raw" / side).mkdir(parents=True, exist_ok=True)
            out = io.BytesIO()
            Image.fromarray(pixels).save(out, "JPEG", quality=95, keep_rgb=rgb)
            (tmp_path / "raw" / side / f"{i}.jpg").write_bytes(out.getvalue())
    make = lambda: make_loader("dali-file", tmp_path / "raw", batch_size=4, crop=None, seed=1,  # noqa: E731
                               device=device, augment=False, shuffle=False)
    if device == "cuda":
        with pytest.raises(ImageError, match=r"2\.jpg: an RGB-coded JPEG .* DALI's GPU decoder decodes as YCbCr"):
            list(make())
        return
    (batch,) = list(make())
    for key, low in zip(batch.keys, batch.low):
        want = cv2.imdecode(np.fromfile(tmp_path / "raw" / "low" / f"{key}.jpg", np.uint8), cv2.IMREAD_COLOR)[..., ::-1]
        assert np.abs(low.permute(1, 2, 0).numpy().astype(int) - want).max() <= 3, key
