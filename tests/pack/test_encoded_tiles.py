"""Lossless `tiles` members of an encoded pack (`pack --store encoded`) for every member type pack writes besides
8-bit RGB: 16-bit TIFF targets beside 8-bit inputs (FiveK), uint16 ×4 `.npy` inputs (SMID) and camera raw (SID:
packed uint16 ×4 inputs, developed uint16 ×3 targets at twice their size, real DNG files). Each split reads back the
decoded pack's very arrays and batches, its sensor facts alike, and `verify` decodes every member; the format itself
decodes 8- and 16-bit images of 1, 3 and 4 channels exactly, across tile edges, and every CPU reader decodes it
through the image formats' table."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from pairload import make_loader, open_shards
from pairload.format import imageformats
from pairload.format.members import Member
from pairload.format.tiles import TILE, encode_tiles, read_tiled
from pairload.pack.writer import PackOptions, pack
from pairload.read.shards import info, verify
from test_pack_typed import fivek, low8, smid_low  # noqa: F401 - fivek: the 16-bit pack's fixture, used by name


@pytest.mark.parametrize("dtype, channels, hw", [
    (np.uint8, 3, (TILE + 5, 2 * TILE + 1)), (np.uint8, 1, (7, 300)), (np.uint16, 3, (40, 56)),
    (np.uint16, 4, (TILE, TILE + 1)), (np.uint8, 4, (1, 1))])
def test_tiles_decode_to_the_very_pixels_across_tile_edges(dtype, channels, hw):
    rng = np.random.default_rng(channels)
    yy, xx, cc = np.mgrid[0:hw[0], 0:hw[1], 0:channels]
    top = np.iinfo(dtype).max
    img = ((yy * 7 + xx * 3 + 1000 * cc) % top + rng.integers(0, 4, yy.shape)).astype(dtype)  # ramps and noise
    data = np.frombuffer(encode_tiles(img), np.uint8)
    member = Member(np.dtype(dtype).name, channels)
    got = imageformats.BY_CODE[imageformats.TILES.code].decode(data, member, *hw)
    assert got.dtype == dtype and np.array_equal(got, img)
    assert len(read_tiled(data, member, *hw).modes) == -(-hw[0] // TILE) * -(-hw[1] // TILE)


def both_stores(raw, tmp_path, **options) -> tuple:
    """`raw` packed decoded and encoded (as their datasets, train split)."""
    for store in ("decoded", "encoded"):
        pack(raw, tmp_path / store, PackOptions(workers=1, store=store, **options))
    return tuple(open_shards(tmp_path / store) for store in ("encoded", "decoded"))


def check_alike(enc, dec, folder, stored: int) -> None:
    """Every stored member of `enc` is tiles (`stored` of them) and reads as `dec`'s; `verify` agrees."""
    assert enc.keys == dec.keys and enc.members.describe() == dec.members.describe()
    for i in range(len(enc)):
        for k, (got, want) in enumerate(zip(enc.arrays(i), dec.arrays(i))):
            assert enc.stored_member(i, k).format == "tiles", (enc.keys[i], k)
            assert got.dtype == want.dtype and np.array_equal(got, want), (enc.keys[i], k)
    assert {f: v["members"] for f, v in info(folder)["train"]["formats"].items()} == {"tiles": stored}
    assert verify(folder).samples == len(enc)


def check_batches(enc, dec, **options) -> None:
    """The `ram` loader with workers over both packs: the same batches, bit for bit."""
    opts = dict(batch_size=2, crop=8, seed=5, num_workers=2, **options)
    with make_loader("ram", enc, **opts) as a, make_loader("ram", dec, **opts) as b:
        got, want = list(a), list(b)
        assert len(got) == len(want) > 0
        for x, y in zip(got, want):
            assert x.keys == y.keys and torch.equal(x.low, y.low) and torch.equal(x.high, y.high)


def test_16_bit_targets_and_8_bit_inputs_round_trip_through_tiles(fivek, tmp_path):  # noqa: F811 - the fixture
    raw = json.loads((fivek[0] / "manifest.json").read_text())["raw_dir"]
    enc, dec = both_stores(raw, tmp_path)
    assert enc.members.high == Member("uint16", 3) and enc.members.low == Member("uint8", 3)
    check_alike(enc, dec, tmp_path / "encoded", 10)
    for i, key in enumerate(enc.keys):  # the files' own pixels: 16-bit values above 255
        np.testing.assert_array_equal(enc.arrays(i)[1], fivek[1][key][1])
    check_batches(enc.files[0].parent, dec.files[0].parent)


def test_uint16_four_channel_npy_inputs_round_trip_through_tiles(tmp_path):
    for scene in (1, 2):
        for frame in (1, 2):
            path = tmp_path / "raw" / "low" / f"{scene}_{frame}.npy"
            path.parent.mkdir(parents=True, exist_ok=True)
            np.save(path, smid_low(scene, frame))
            (tmp_path / "raw" / "high").mkdir(exist_ok=True)
            np.save(tmp_path / "raw" / "high" / f"{scene}_{frame}.npy", low8(scene + 4 * frame))
    enc, dec = both_stores(tmp_path / "raw", tmp_path)
    assert enc.members.low == Member("uint16", 4)
    check_alike(enc, dec, tmp_path / "encoded", 8)
    report = json.loads((tmp_path / "encoded" / "manifest.json").read_text())["report"]
    assert report["stored_tiles"] == {".npy": [f"{side}/{s}_{f}.npy" for s in (1, 2) for f in (1, 2)
                                               for side in ("low", "high")]}
    check_batches(tmp_path / "encoded", tmp_path / "decoded")


def test_camera_raw_pairs_round_trip_through_tiles_with_their_sensor_facts(tmp_path):
    pytest.importorskip("rawpy")
    pytest.importorskip("tifffile")
    from test_pack_camera import sid_tree

    sid_tree(tmp_path / "SID", scenes=range(2))
    lists = (f"train={tmp_path / 'SID' / 'Sony_train_list.txt'}",)
    enc, dec = both_stores(tmp_path / "SID", tmp_path, pairs_file=lists)
    assert enc.members.scale == 2 and enc.members.high == Member("uint16", 3)
    check_alike(enc, dec, tmp_path / "encoded", 6)  # 4 inputs, 2 developed targets (each shared by two inputs)
    assert enc.sensor.levels.tolist() == dec.sensor.levels.tolist()
    assert enc.sensor.ratio.tolist() == dec.sensor.ratio.tolist()
    report = json.loads((tmp_path / "encoded" / "manifest.json").read_text())["report"]
    assert {k: len(v) for k, v in report["stored_tiles"].items()} == {"camera raw": 6}
    check_batches(tmp_path / "encoded", tmp_path / "decoded")
