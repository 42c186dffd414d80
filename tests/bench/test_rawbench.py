"""The raw benchmark on a small SID-style tree written in tmp_path: the generator's DNGs read back through LibRaw
as the mosaics it made, the converted arrays, both baselines' crops against an independent numpy packing of the
same mosaic at the same window, the wrapped DataLoader on a worker, and the measurement's report."""

import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("rawpy")
pytest.importorskip("tifffile")

from benchlib.rawbaselines import LibRawPairs, NpyPairs, RawPairs, RawTorchBaseline, normalise  # noqa: E402
from benchlib.rawbench import run_raw_bench  # noqa: E402
from benchlib.rawdata import (SONY_BLACK, SONY_WHITE, sid_mosaics, sid_pairs, write_arrays, write_dng,  # noqa: E402
                              write_sid_tree)
from pairload.errors import ConfigError, MissingDependencyError, PairingError  # noqa: E402
from pairload.camera.files import develop, read_mosaic  # noqa: E402

W, H, CROP, SEED = 96, 64, 16, 7


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("sid")
    pairs = write_sid_tree(root, 3, width=W, height=H, seed=SEED)
    write_arrays(root)
    return root, pairs


def rggb_pack(mosaic: np.ndarray) -> np.ndarray:
    """SID's packing of an RGGB mosaic, written out: R, the G on R's rows, B, the G on B's rows."""
    return np.stack([mosaic[0::2, 0::2], mosaic[0::2, 1::2], mosaic[1::2, 1::2], mosaic[1::2, 0::2]], axis=-1)


def test_the_tree_is_named_as_sid_and_libraw_reads_back_the_mosaics_made(tree):
    root, pairs = tree
    assert [p.short.relative_to(root).as_posix() for p in pairs] == \
        ["short/00001_00_0.1s.dng", "short/00002_00_0.04s.dng", "short/00003_00_0.033s.dng"]
    assert {p.long.relative_to(root).as_posix() for p in pairs} == {f"long/0000{k}_00_10s.dng" for k in (1, 2, 3)}
    assert sid_pairs(root) == pairs
    assert [p.ratio for p in pairs] == [100.0, 250.0, 300.0]  # 10 / 0.033 is capped at SID's 300
    for i, pair in enumerate(pairs):
        short, long = sid_mosaics(i, H, W, seed=SEED, input_s=pair.input_s)
        for path, mosaic, seconds in ((pair.short, short, pair.input_s), (pair.long, long, 10.0)):
            got = read_mosaic(path)
            np.testing.assert_array_equal(got.packed, rggb_pack(mosaic))
            assert got.black == (SONY_BLACK,) * 4 and got.white == SONY_WHITE and got.exposure == seconds
            assert got.camera == "Sony ILCE-7SM2"
        # the long is bright, the short dark, and the short amplified by the true ratio is the long's level
        signal_long, signal_short = long.mean() - SONY_BLACK, short.mean() - SONY_BLACK
        assert 0.12 < (long[0::2, 1::2].mean() - SONY_BLACK) / (SONY_WHITE - SONY_BLACK) < 0.35
        assert signal_short * 10.0 / pair.input_s == pytest.approx(signal_long, rel=0.1)
        assert long.std() > 100 and develop(pair.long).shape == (H, W, 3)


def test_the_mosaics_are_fixed_by_the_seed():
    same, again, other = (sid_mosaics(0, 24, 32, seed=s) for s in (1, 1, 2))
    np.testing.assert_array_equal(same[0], again[0])
    np.testing.assert_array_equal(same[1], again[1])
    assert (same[1] != other[1]).mean() > 0.9


def test_the_converted_arrays_are_the_packed_short_and_the_developed_long(tree):
    root, pairs = tree
    index = json.loads((root / "npy" / "index.json").read_text())
    assert list(index) == [p.stem for p in pairs]
    for pair in pairs:
        low, high = (np.load(root / "npy" / side / f"{pair.stem}.npy") for side in ("low", "high"))
        assert low.dtype == high.dtype == np.uint16 and low.shape == (H // 2, W // 2, 4) and high.shape == (H, W, 3)
        np.testing.assert_array_equal(low, read_mosaic(pair.short).packed)
        np.testing.assert_array_equal(high, develop(pair.long))
        assert index[pair.stem] == {"long": pair.long.name, "ratio": pair.ratio, "black": [SONY_BLACK] * 4,
                                    "white": SONY_WHITE}


@pytest.mark.parametrize("kind", ["libraw", "npy"])
def test_each_baseline_cuts_one_window_of_the_input_and_its_2x_window_of_the_target(tree, kind):
    root, pairs = tree
    ds = LibRawPairs(pairs, CROP) if kind == "libraw" else NpyPairs(root / "npy", CROP)
    windows = set()
    for i, pair in enumerate(pairs):
        packed = rggb_pack(sid_mosaics(i, H, W, seed=SEED, input_s=pair.input_s)[0])
        rgb = develop(pair.long)
        for draw in range(3):
            random.seed(100 * i + draw)
            low, high, ratio, black, white = ds[i]
            assert low.shape == (4, CROP, CROP) and high.shape == (3, 2 * CROP, 2 * CROP)
            assert str(low.dtype) == str(high.dtype) == "torch.uint16"
            assert float(ratio) == pair.ratio and black.tolist() == [SONY_BLACK] * 4 and int(white) == SONY_WHITE
            views = np.lib.stride_tricks.sliding_window_view(packed, (CROP, CROP), axis=(0, 1))
            at = np.argwhere((views == low.numpy().astype(np.uint16)).all(axis=(2, 3, 4)))
            assert len(at) == 1, "the noisy mosaic holds each crop once"
            y, x = at[0]
            np.testing.assert_array_equal(high.numpy().transpose(1, 2, 0),
                                          rgb[2 * y:2 * (y + CROP), 2 * x:2 * (x + CROP)])
            windows.add((i, int(y), int(x)))
    assert len(windows) > len(pairs), "the window moves from draw to draw"


def test_the_wrapped_baseline_batches_on_a_worker_and_normalises_as_sid_does(tree):
    import torch

    root, pairs = tree
    loader = RawTorchBaseline(NpyPairs(root / "npy", CROP), batch_size=2, device=torch.device("cpu"), workers=1,
                              pin=True)
    try:
        batch = next(iter(loader))
        assert len(loader.worker_pids()) == 1
    finally:
        loader.close()
    assert isinstance(batch, RawPairs) and batch.low.shape == (2, 4, CROP, CROP)
    assert batch.high.shape == (2, 3, 2 * CROP, 2 * CROP) and batch.low.dtype == batch.high.dtype == torch.uint16
    assert batch.ratio.shape == (2,) and batch.black.shape == (2, 4) and batch.white.shape == (2,)
    x, y = normalise(batch)
    low = batch.low.numpy().astype(np.float64)
    expected = np.clip((low - SONY_BLACK) / (SONY_WHITE - SONY_BLACK) * batch.ratio.numpy()[:, None, None, None],
                       0, 1)
    np.testing.assert_allclose(x.numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y.numpy(), batch.high.numpy() / 65535.0, rtol=1e-6)
    assert 0.05 < x.mean() < 0.9, "the amplified short is in the long's range"


def test_the_measurement_reports_pairloads_loaders_and_both_baselines_and_skips_missing_inputs(tree, tmp_path):
    from pairload.pack.writer import PackOptions, pack

    root, _ = tree
    names = ["ram", "wds", "libraw", "npy"]
    report = run_raw_bench(root, names, crop=CROP, batch=2, seconds=0.3, repeats=1, device="cpu", workers=1,
                           shards=tmp_path / "none")
    assert [r["status"] for r in report["results"]] == ["skipped", "skipped", "ok", "ok"]
    assert "pairload pack" in report["results"][0]["reason"]
    pack(root, tmp_path / "shards", PackOptions(workers=1, pairs_file=None, low_dir="short", high_dir="long"))
    report = run_raw_bench(root, names, crop=CROP, batch=2, seconds=0.3, repeats=1, device="cpu", workers=1,
                           shards=tmp_path / "shards")
    rows = {r["loader"]: r for r in report["results"]}
    assert list(rows) == names and report["config"]["crop"] == CROP
    for row in rows.values():
        assert row["status"] == "ok" and row["pairs_per_s"] > 0 and row["cpu_cores_used"] > 0
        assert row["mb_per_s"] == pytest.approx(row["pairs_per_s"] * 2 * (4 + 12) * CROP * CROP / 1e6)
    report = run_raw_bench(root, ["npy"], crop=CROP, batch=2, seconds=0.3, repeats=1, device="cpu", workers=1,
                           arrays=tmp_path)
    assert report["results"][0]["status"] == "skipped" and "write_arrays" in report["results"][0]["reason"]
    with pytest.raises(ConfigError, match=r"loaders nope: unknown; choose from ram, ram-workers, .*, libraw, npy"):
        run_raw_bench(root, ["nope"])


def test_refusals_name_what_to_change(tree, tmp_path, monkeypatch):
    root, pairs = tree
    with pytest.raises(ConfigError, match=r"crop=40: expected at most 32, the packed input 48×32 of 00001_00_0\.1s"):
        LibRawPairs(pairs, 40)[0]
    with pytest.raises(PairingError, match=r"short: no such folder; a SID-style tree holds short/ and long/"):
        sid_pairs(tmp_path)
    with pytest.raises(ConfigError, match=r"width=95: expected an even number"):
        write_sid_tree(tmp_path, 1, width=95, height=64)
    monkeypatch.setitem(sys.modules, "tifffile", None)
    with pytest.raises(MissingDependencyError, match=r"a\.dng: writing DNG files needs tifffile.*pip install tifffile"):
        write_dng(tmp_path / "a.dng", np.zeros((24, 24), np.uint16))


def test_the_data_side_never_imports_torch():
    import benchlib

    where = os.path.dirname(os.path.dirname(benchlib.__file__))
    code = f"import sys; sys.path.insert(0, {where!r}); import benchlib.rawdata; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
