"""The packer writes typed members: 16-bit images kept as uint16 RGB (a FiveK-style 8-bit input beside a 16-bit
expert target), `.npy` arrays stored as they are (SMID- and SDSD-style `_np` trees), each split's members and format
version 4 in the manifest, zstd frames of any member type; every loader reads them bit-exactly. Pixels encode the
pair, row, column and channel (16-bit values above 255), and every target is an exact function of its input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import cv2
import numpy as np
import pytest

from pairload import make_loader, open_shards
from pairload.dihedral import orient
from pairload.errors import ImageError
from pairload.format import schema
from pairload.format.members import Member, Members
from pairload.pack.writer import PackOptions, pack
from pairload.plan import key_hashes, sample_params
from pairload.read.shards import verify

H, W = 20, 26


def low8(i: int, h: int = H, w: int = W) -> np.ndarray:
    """RGB uint8 input of pair i: each channel its own mix of pair, row and column."""
    yy, xx = np.mgrid[0:h, 0:w]
    return np.stack([(40 * i + yy + 3 * xx + 85 * c) % 256 for c in range(3)], axis=-1).astype(np.uint8)


def high16(low: np.ndarray) -> np.ndarray:
    """The 16-bit target of an input: 256 × the input plus the pixel's position and channel (values over 255)."""
    h, w, c = low.shape
    yy, xx, cc = np.mgrid[0:h, 0:w, 0:c]
    return (low.astype(np.uint32) * 256 + (yy * w + xx + 7 * cc) % 256).astype(np.uint16)


def write_tif(path: Path, rgb: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), np.ascontiguousarray(rgb[..., ::-1]) if rgb.ndim == 3 else rgb)


@pytest.fixture(scope="module")
def fivek(tmp_path_factory):
    """fivek/input/aNNNN.tif (8-bit RGB) and fivek/expertC/aNNNN.tif (16-bit RGB; one 16-bit gray), packed."""
    root = tmp_path_factory.mktemp("fivek")
    arrays = {}
    for i in range(5):
        lo = low8(i)
        hi = high16(lo)
        if i == 3:  # a gray 16-bit export: replicated to RGB, as gray 8-bit is
            hi = np.repeat(hi[..., :1], 3, axis=2)
            write_tif(root / "fivek" / "expertC" / f"a{i:04d}.tif", hi[..., 0])
        else:
            write_tif(root / "fivek" / "expertC" / f"a{i:04d}.tif", hi)
        write_tif(root / "fivek" / "input" / f"a{i:04d}.tif", lo)
        arrays[f"a{i:04d}"] = (lo, hi)
    out = root / "shards"
    pack(root / "fivek", out, PackOptions(workers=2, shard_size=64 * 1024))
    return out, arrays


FIVEK = Members(low=Member("uint8", 3), high=Member("uint16", 3))


def test_fivek_16_bit_targets_are_stored_as_16_bits_and_the_manifest_says_so(fivek):
    out, arrays = fivek
    doc = json.loads((out / "manifest.json").read_text())
    assert doc["version"] == schema.VERSION_BINARY == 5
    assert doc["splits"]["train"]["members"] == {"low": {"dtype": "uint8", "channels": 3},
                                                 "high": {"dtype": "uint16", "channels": 3}, "scale": 1}
    assert doc["report"]["converted_16bit"] == [] and doc["report"]["gray_replicated"] == ["expertC/a0003.tif"]
    verify(out)
    ds = open_shards(out)
    assert ds.members == FIVEK and ds.keys == tuple(sorted(arrays))
    for i, key in enumerate(ds.keys):
        low, high = ds.arrays(i)
        assert high.dtype == np.uint16
        np.testing.assert_array_equal(low, arrays[key][0])
        np.testing.assert_array_equal(high, arrays[key][1])


def test_info_names_the_members(fivek, capsys):
    from pairload.cli import main

    main(["info", "--json", str(fivek[0])])
    assert json.loads(capsys.readouterr().out)["train"]["members"] == "input uint8 ×3, target uint16 ×3"


def expected(arrays, key, epoch, seed, crop):
    low, high = arrays[key]
    y, x, code = (int(v[0]) for v in sample_params(key_hashes([key]), np.array([low.shape[:2]]), seed=seed,
                                                   epoch=epoch, crop=crop, augment=True))
    return orient(low[y:y + crop, x:x + crop], code), orient(high[y:y + crop, x:x + crop], code)


@pytest.mark.parametrize("kind,options", [
    ("ram", {"num_workers": 0}), ("ram", {"num_workers": 2}), ("ram", {"resident": True}), ("wds", {})])
def test_every_loader_yields_the_fivek_pixels_exactly(fivek, kind, options):
    import torch

    out, arrays = fivek
    with make_loader(kind, out, batch_size=2, crop=8, seed=3, **options) as loader:
        for epoch in (0, 1):
            loader.set_epoch(epoch)
            seen = 0
            for batch in loader:
                assert batch.low.dtype == torch.uint8 and batch.high.dtype == torch.uint16
                for j, key in enumerate(batch.keys):
                    lo, hi = expected(arrays, key, epoch, 3, 8)
                    np.testing.assert_array_equal(batch.low[j].cpu().permute(1, 2, 0).numpy(), lo)
                    np.testing.assert_array_equal(batch.high[j].cpu().permute(1, 2, 0).numpy(), hi)
                    seen += 1
            assert seen == len(loader) * 2 > 0


def test_zstd_frames_hold_16_bit_members(fivek, tmp_path):
    pytest.importorskip("zstandard")
    out, arrays = fivek
    doc = json.loads((out / "manifest.json").read_text())
    zst = tmp_path / "zstd"
    pack(doc["raw_dir"], zst, PackOptions(workers=1, compress="zstd", index="json"))  # typed in a JSON index: 4
    verify(zst)
    assert json.loads((zst / "manifest.json").read_text())["version"] == 4
    ds = open_shards(zst)
    assert ds.members.high == Member("uint16", 3)
    for i, key in enumerate(ds.keys):
        for got, want in zip(ds.arrays(i), arrays[key]):
            np.testing.assert_array_equal(got, want)


def test_to_8bit_converts_the_16_bit_side_and_writes_a_default_pack(fivek, tmp_path):
    out, arrays = fivek
    raw = json.loads((out / "manifest.json").read_text())["raw_dir"]
    report = pack(raw, tmp_path / "8bit", PackOptions(workers=1, to_8bit=True, index="json"))
    assert len(report.converted_16bit) == 5
    doc = json.loads((tmp_path / "8bit" / "manifest.json").read_text())
    assert doc["version"] == 1 and "members" not in doc["splits"]["train"]
    _, low, high = open_shards(tmp_path / "8bit")[0]
    np.testing.assert_array_equal(low, arrays["a0000"][0])
    np.testing.assert_array_equal(high, ((arrays["a0000"][1].astype(np.uint32) * 255 + 32767) // 65535))


# ------------------------------------------------------------------ .npy trees, stored as they are

def smid_low(scene: int, frame: int) -> np.ndarray:
    """uint16 ×4 input (a packed-Bayer-like array): channel c of pixel (y, x) is 4096c + 256·scene + 16·frame + ..."""
    yy, xx, cc = np.mgrid[0:H, 0:W, 0:4]
    return (4096 * cc + 256 * scene + 16 * frame + (yy * W + xx) % 16 + 1000).astype(np.uint16)


def test_smid_npy_tree_packs_as_it_is_with_one_target_per_scene(tmp_path):
    root = tmp_path / "SMID"
    frames = {1: 3, 2: 2}
    targets = {}
    for scene, n in frames.items():
        for f in range(1, n + 1):
            path = root / "SMID_LQ_np" / f"{scene:04d}" / f"{f:04d}.npy"
            path.parent.mkdir(parents=True, exist_ok=True)
            np.save(path, smid_low(scene, f))
        target = low8(scene)[..., ::-1].copy()  # BGR order as saved: pack must not swap it
        targets[scene] = target
        (root / "SMID_Long_np" / f"{scene:04d}").mkdir(parents=True)
        np.save(root / "SMID_Long_np" / f"{scene:04d}" / "0001.npy", target)
    out = tmp_path / "shards"
    pack(root, out, PackOptions(workers=1, low_dir="SMID_LQ_np", high_dir="SMID_Long_np", index="json"))
    verify(out)
    doc = json.loads((out / "manifest.json").read_text())
    assert doc["version"] == 4 and doc["splits"]["train"]["members"]["low"] == {"dtype": "uint16", "channels": 4}
    ds = open_shards(out)
    assert ds.members == Members(low=Member("uint16", 4), high=Member("uint8", 3)) and len(ds) == 5
    for i, key in enumerate(ds.keys):
        scene, frame = (int(part) for part in re.findall(r"\d+", key)[-2:])
        low, high = ds.arrays(i)
        np.testing.assert_array_equal(low, smid_low(scene, frame))
        np.testing.assert_array_equal(high, targets[scene])
    with make_loader("ram", out, batch_size=5, crop=None, seed=1, augment=False) as loader:
        batch = next(iter(loader))
        for j, key in enumerate(batch.keys):
            scene, frame = (int(part) for part in re.findall(r"\d+", key)[-2:])
            np.testing.assert_array_equal(batch.low[j].permute(1, 2, 0).numpy(), smid_low(scene, frame))
            np.testing.assert_array_equal(batch.high[j].permute(1, 2, 0).numpy(), targets[scene])


def sdsd_tree(root: Path, channels=lambda pair, f: 3) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """indoor_static_np/{input,GT}/pairP/NNNN.npy, uint8 H×W×C; the GT is 255 - input."""
    arrays = {}
    for p in (1, 2):
        for f in (1, 2, 3):
            lo = low8(10 * p + f)[..., :1].repeat(channels(p, f), axis=2)
            lo[..., -1] = (lo[..., -1].astype(int) + 17 * p) % 256  # the last channel differs: no swap goes unseen
            for side, arr in (("input", lo), ("GT", 255 - lo)):
                path = root / "indoor_static_np" / side / f"pair{p}" / f"{f:04d}.npy"
                path.parent.mkdir(parents=True, exist_ok=True)
                np.save(path, arr)
            arrays[f"pair{p}+{f:04d}"] = (lo, 255 - lo)
    return arrays


def test_sdsd_npy_tree_packs_as_it_is(tmp_path):
    arrays = sdsd_tree(tmp_path / "SDSD")
    out = tmp_path / "shards"
    pack(tmp_path / "SDSD" / "indoor_static_np", out, PackOptions(workers=2, index="json"))
    verify(out)
    doc = json.loads((out / "manifest.json").read_text())
    assert doc["version"] == 1 and "members" not in doc["splits"]["train"]  # uint8 ×3: the default pack
    ds = open_shards(out)
    assert sorted(ds.keys) == sorted(arrays)
    for i, key in enumerate(ds.keys):
        for got, want in zip(ds.arrays(i), arrays[key]):
            np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------ refusals: one line naming the file

def test_a_side_mixing_8_and_16_bit_images_is_refused_naming_the_odd_file(tmp_path):
    root = tmp_path / "fivek"
    for i in range(3):
        lo = low8(i)
        write_tif(root / "input" / f"a{i:04d}.tif", 65535 - high16(lo) if i == 1 else lo)
        write_tif(root / "expertC" / f"a{i:04d}.tif", high16(lo))
    match = (rf"^{re.escape(str(root))}: split 'train': the inputs are not all of one pixel type: 2 files are "
             r"uint8 ×3 but these are not: input/a0001\.tif \(uint16 ×3\) \(an accidental export\?\); a side of a "
             r"split is stored as one type: re-export the odd files like the others, or pass --to-8bit")
    with pytest.raises(ImageError, match=match):
        pack(root, tmp_path / "out", PackOptions(workers=1))
    assert not (tmp_path / "out" / "manifest.json").exists()
    pack(root, tmp_path / "out", PackOptions(workers=1, to_8bit=True))  # what the message offers works


def test_a_float_npy_is_refused_naming_the_file_and_the_fix(tmp_path):
    sdsd_tree(tmp_path / "SDSD")
    bad = tmp_path / "SDSD" / "indoor_static_np" / "GT" / "pair2" / "0002.npy"
    np.save(bad, np.zeros((H, W, 3), np.float32))
    match = (rf"^{re.escape(str(bad))}: a \.npy of float32 \({H}, {W}, 3\); pack stores \.npy images as they are and "
             r"reads uint8 or uint16 only: convert it \(e\.g\. `\(a \* 255\)\.round\(\)\.astype\(np\.uint8\)`")
    with pytest.raises(ImageError, match=match):
        pack(tmp_path / "SDSD" / "indoor_static_np", tmp_path / "out", PackOptions(workers=1))


def test_npy_inputs_of_two_channel_counts_are_refused_naming_the_odd_file(tmp_path):
    sdsd_tree(tmp_path / "SDSD", channels=lambda p, f: 4 if (p, f) == (2, 3) else 3)
    match = (r"indoor_static_np: split 'train': the inputs are not all of one pixel type: 5 files are uint8 ×3 but "
             r"these are not: input/pair2/0003\.npy \(uint8 ×4\) .*re-export the odd files like the others$")
    with pytest.raises(ImageError, match=match):
        pack(tmp_path / "SDSD" / "indoor_static_np", tmp_path / "out", PackOptions(workers=1))


@pytest.mark.dali
def test_dali_file_refuses_a_16_bit_folder_naming_pack(fivek):
    pytest.importorskip("nvidia.dali")
    from pairload import ConfigError

    raw = fivek[0].parent / "fivek"
    with pytest.raises(ConfigError, match=r"uint16 ×3 image: dali-file decodes 8-bit images only .*`pairload pack`"):
        make_loader("dali-file", raw, batch_size=2, crop=8)
