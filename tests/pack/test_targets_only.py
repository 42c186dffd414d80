"""Targets-only packs (`pairload pack PHOTOS SHARDS --targets-only`): a folder of photos, at any depth, or a list of
them, each decoded once and stored alone (no input member, so the shards stay WebDataset-readable), its index giving
the target as the input; format version 6, which an older pairload refuses by its number; `verify` and `info` know
such a split; --max-side shrinks (or with --fit crop, cuts) only large photos; camera raw keeps its packed mosaic
and levels; bad input is refused or reported by name.

Photo i's pixel (y, x) is (40 i, y, x) mod 256, so a photo read back under another key, shrunk or cut wrongly, or a
row or column shifted, shows in one comparison."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import cv2
import numpy as np
import pytest

from conftest import write_rgb
from pairload import open_shards
from pairload.cli import main
from pairload.errors import ConfigError, ImageError, PairingError, ShardError
from pairload.format import schema
from pairload.format.members import Member, Members
from pairload.pack.writer import PackOptions, pack
from pairload.read.shards import info, verify

# relative path -> (photo index, height, width); keys come from the paths: "a/00.png" -> "a+00", "b c" -> "b~20c"
PHOTOS = {"a/00.png": (0, 60, 90), "01.jpg": (1, 24, 32), "b c/02.png": (2, 40, 30)}
KEYS = {"a+00": "a/00.png", "01": "01.jpg", "b~20c+02": "b c/02.png"}


def photo(index: int, height: int, width: int, dtype=np.uint8) -> np.ndarray:
    """RGB: channel 0 says which photo, 1 and 2 the row and column (16 bits: the same, times 257)."""
    yy, xx = np.mgrid[0:height, 0:width]
    rgb = (np.stack([np.full_like(yy, 40 * index), yy, xx], axis=-1) % 256).astype(np.uint8)
    return rgb if dtype == np.uint8 else rgb.astype(np.uint16) * 257


def write_photos(root: Path) -> Path:
    for rel, (i, h, w) in PHOTOS.items():
        if rel.endswith(".jpg"):
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            assert cv2.imwrite(str(root / rel), photo(i, h, w)[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, 100])
        else:
            write_rgb(root / rel, photo(i, h, w))
    (root / "notes.txt").write_text("where the photos came from\n")
    return root


def same(got: np.ndarray, rel: str, want: np.ndarray) -> None:
    """A PNG's pixels exactly, a JPEG's within its compression error."""
    assert got.shape == want.shape and got.dtype == want.dtype, rel
    if rel.endswith(".jpg"):
        assert np.abs(got.astype(int) - want.astype(int)).max() <= 12, rel
    else:
        np.testing.assert_array_equal(got, want, err_msg=rel)


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """The photo folder packed once through the CLI (two workers)."""
    root = tmp_path_factory.mktemp("targets")
    photos = write_photos(root / "photos")
    assert main(["pack", str(photos), str(root / "shards"), "--targets-only", "--workers", "2"]) == 0
    return photos, root / "shards"


def test_each_photo_is_stored_alone_in_a_webdataset_readable_tar(packed):
    photos, shards = packed
    (shard,) = sorted(shards.glob("*.tar"))
    with tarfile.open(shard) as tf:
        names = tf.getnames()
        assert names == [f"{key}.{suffix}" for key in sorted(KEYS) for suffix in ("json", "high.npy")]
        for key, rel in KEYS.items():
            meta = json.load(tf.extractfile(f"{key}.json"))
            i, h, w = PHOTOS[rel]
            assert meta == {"low": None, "high": rel, "original_size": [h, w], "size": [h, w]}
            same(np.load(io.BytesIO(tf.extractfile(f"{key}.high.npy").read())), rel, photo(i, h, w))
    wds = pytest.importorskip("webdataset")
    samples = list(wds.WebDataset(str(shard), shardshuffle=False).decode())
    assert [s["__key__"] for s in samples] == sorted(KEYS)
    assert all({name for name in s if not name.startswith("__")} == {"json", "high.npy"} for s in samples)
    np.testing.assert_array_equal(samples[1]["high.npy"], photo(0, 60, 90))


def test_the_index_gives_each_target_as_its_input_in_a_version_6_split(packed):
    photos, shards = packed
    doc = json.loads((shards / "manifest.json").read_text())
    assert doc["version"] == schema.VERSION_TARGETS == 6
    entry = doc["splits"]["train"]
    assert entry[schema.TARGETS_ONLY] is True and "members" not in entry  # uint8 RGB, one size: the default
    assert doc["layout"]["members"] == ["json", "high.npy"]
    ds = open_shards(shards)  # a targets-only pack is a legal pack: opened as it is, and says what it is
    assert ds.targets_only and ds.index.targets_only and ds.members == Members()
    np.testing.assert_array_equal(ds.index.low, ds.index.high)
    np.testing.assert_array_equal(ds.index.crc[:, 0], ds.index.crc[:, 1])
    assert list(ds.keys) == sorted(KEYS)
    for i, key in enumerate(ds.keys):
        got_key, low, high = ds[i]
        k, h, w = PHOTOS[KEYS[key]]
        assert got_key == key and np.shares_memory(low, high)  # one stored image, read once
        same(high, KEYS[key], photo(k, h, w))
    assert open_shards(shards, targets_only=True).targets_only  # a no-op for a targets-only pack
    verify(shards)


def test_verify_catches_a_flipped_byte_of_a_target(packed, tmp_path):
    _, shards = packed
    copy = shutil.copytree(shards, tmp_path / "copy")
    ds = open_shards(copy)
    k = list(ds.keys).index("b~20c+02")
    at = int(ds.index.high[k]) + 7
    del ds
    with open(copy / "train-000000.tar", "r+b") as fh:
        fh.seek(at)
        byte = fh.read(1)
        fh.seek(at)
        fh.write(bytes([byte[0] ^ 0x10]))
    with pytest.raises(ShardError, match=r"train-000000.tar: key b~20c\+02: b~20c\+02.high.npy pixels do not match "
                                         r"their checksum"):
        verify(copy)


def test_info_says_the_split_holds_targets_only(packed, capsys):
    _, shards = packed
    got = info(shards)["train"]
    assert got["targets_only"] is True and got["members"] == "targets only: uint8 ×3"
    assert got["pixel_bytes"] == sum(h * w * 3 for _, h, w in PHOTOS.values())  # one image a sample, not two
    assert main(["info", str(shards), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["train"]["members"] == "targets only: uint8 ×3"


def test_an_older_reader_refuses_version_6_by_its_number(packed, monkeypatch, tmp_path):
    _, shards = packed
    monkeypatch.setattr(schema, "VERSIONS", (1, 2, 3, 4, 5))  # what pairload read before targets-only packs
    with pytest.raises(ShardError, match=r"manifest.json: shard format version 6, this pairload reads versions 1, 2, "
                                         r"3, 4, 5; repack with this version of `pairload pack`"):
        open_shards(shards)
    monkeypatch.undo()
    copy = shutil.copytree(shards, tmp_path / "copy")  # a targets-only split passed off as version 5
    doc = json.loads((copy / "manifest.json").read_text())
    doc["version"] = 5
    (copy / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(ShardError, match=r"split 'train': \"targets_only\" is true in a version 5 manifest"):
        open_shards(copy)


def test_pack_reports_what_it_packed_and_every_file_it_left_out(tmp_path, capsys):
    photos = write_photos(tmp_path / "photos")
    assert main(["pack", str(photos), str(tmp_path / "shards"), "--targets-only", "--workers", "1",
                 "--split", "photos", "--compress", "zstd"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "photos: 3 targets in 1 shards" in out
    assert "not packed (not an image): 1 file(s) in .: notes.txt; left out: pack reads .bmp" in out
    ds = open_shards(tmp_path / "shards", "photos")  # compressed: each target one zstd frame, decoded once a read
    assert ds.targets_only and ds.index.encoding.stored == "zstd"
    np.testing.assert_array_equal(ds.index.low_bytes, ds.index.high_bytes)
    key, low, high = ds[list(ds.keys).index("a+00")]
    np.testing.assert_array_equal(low, photo(0, 60, 90))
    np.testing.assert_array_equal(high, photo(0, 60, 90))
    verify(tmp_path / "shards")


@pytest.mark.parametrize("fit", ["resize", "crop"])
def test_max_side_shrinks_only_the_larger_photos(tmp_path, fit):
    photos = write_photos(tmp_path / "photos")
    pack(photos, tmp_path / "shards", PackOptions(workers=1, targets_only=True, max_side=45, fit=fit))
    ds = open_shards(tmp_path / "shards")
    sizes = {key: tuple(hw) for key, hw in zip(ds.keys, ds.sizes.tolist())}
    # 90x60 becomes 45x30 (its aspect kept) or its centre 45x45; 32x24 and 30x40 are within 45 and kept as they are
    assert sizes == {"a+00": (30, 45) if fit == "resize" else (45, 45), "01": (24, 32), "b~20c+02": (40, 30)}
    big = photo(0, 60, 90)
    want = (cv2.resize(big, (45, 30), interpolation=cv2.INTER_AREA) if fit == "resize" else big[7:52, 22:67])
    np.testing.assert_array_equal(ds[list(ds.keys).index("a+00")][2], want)
    np.testing.assert_array_equal(ds[list(ds.keys).index("b~20c+02")][2], photo(2, 40, 30))


def test_16_bit_photos_keep_16_bits_and_a_folder_mixing_depths_is_refused_by_name(tmp_path):
    deep = tmp_path / "deep"
    deep.mkdir()
    for i in range(2):
        assert cv2.imwrite(str(deep / f"{i}.png"), photo(i, 20, 26, np.uint16)[..., ::-1])
    pack(deep, tmp_path / "s16", PackOptions(workers=1, targets_only=True))
    ds = open_shards(tmp_path / "s16")
    assert ds.members == Members(Member("uint16", 3), Member("uint16", 3))
    np.testing.assert_array_equal(ds[1][2], photo(1, 20, 26, np.uint16))
    write_rgb(deep / "2.png", photo(2, 20, 26))
    with pytest.raises(ImageError, match=r"deep: split 'train': the targets are not all of one pixel type: 2 files are "
                                         r"uint16 ×3 but these are not: 2.png \(uint8 ×3\)"):
        pack(deep, tmp_path / "mixed", PackOptions(workers=1, targets_only=True))
    pack(deep, tmp_path / "mixed", PackOptions(workers=1, targets_only=True, to_8bit=True))
    ds = open_shards(tmp_path / "mixed")
    np.testing.assert_array_equal(ds[1][2], photo(1, 20, 26))  # 257 v / 257, rounded: v again


def test_a_list_file_names_the_photos_and_their_keys(tmp_path):
    photos = write_photos(tmp_path / "photos")
    listing = photos / "some.txt"
    listing.write_text("# the photos to pack\nb c/02.png\n\na/00.png\n")
    pack(listing, tmp_path / "shards", PackOptions(workers=1, targets_only=True))
    ds = open_shards(tmp_path / "shards")
    assert list(ds.keys) == ["a+00", "b~20c+02"]
    np.testing.assert_array_equal(ds[1][1], photo(2, 40, 30))
    doc = json.loads((tmp_path / "shards" / "manifest.json").read_text())
    assert doc["splits"]["train"]["folders"] == ["some.txt"] and doc[schema.RAW_DIR] == str(listing.resolve())


def test_bad_photos_are_refused_by_name(tmp_path):
    def run(source, **kw):
        pack(source, tmp_path / "out", PackOptions(workers=1, targets_only=True, **kw))

    (tmp_path / "empty").mkdir()
    with pytest.raises(PairingError, match=r"empty: holds no files; pass the folder of photos to pack"):
        run(tmp_path / "empty")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "readme.md").write_text("no photos here")
    with pytest.raises(PairingError, match=r"docs: holds no images pack reads \(found readme.md\); expected .bmp"):
        run(tmp_path / "docs")
    photos = write_photos(tmp_path / "photos")
    (photos / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(40))
    with pytest.raises(ImageError, match=r"broken.png"):
        run(photos)
    listing = tmp_path / "list.txt"
    listing.write_text("photos/a/00.png\nphotos/gone.png\n")
    with pytest.raises(PairingError, match=r"list.txt:2: photos/gone.png: no such file"):
        run(listing)
    listing.write_text("photos/notes.txt\n")
    with pytest.raises(PairingError, match=r"list.txt:1: photos/notes.txt is not an image pack reads"):
        run(listing)
    listing.write_text("../elsewhere.png\n")
    with pytest.raises(PairingError, match=r"list.txt:1: ../elsewhere.png is outside"):
        run(listing)


def test_options_that_do_not_apply_are_refused():
    with pytest.raises(ConfigError, match=r"^--fit crop: only with --targets-only"):
        PackOptions(max_side=64, fit="crop")
    with pytest.raises(ConfigError, match=r"^--fit crop: give --max-side N"):
        PackOptions(targets_only=True, fit="crop")
    with pytest.raises(ConfigError, match=r"^--low-dir: finds pairs, and --targets-only packs every photo"):
        PackOptions(targets_only=True, low_dir="dark")
    with pytest.raises(ConfigError, match=r"^--index json: a targets-only pack is format version 6"):
        PackOptions(targets_only=True, index="json")
    with pytest.raises(ConfigError, match=r"^--split val: only with --targets-only"):
        PackOptions(split="val")


# ------------------------------------------------------------------ camera raw

def test_camera_raw_photos_keep_their_mosaic_and_levels_or_are_developed(tmp_path):
    pytest.importorskip("rawpy")
    pytest.importorskip("tifffile")
    from dng import write_dng
    from test_camera import BLACKS, WHITE, coded_mosaic, sid_pack

    from pairload.camera.files import develop

    raw = tmp_path / "raw"
    raw.mkdir()
    files = {"long_a": ("RGGB", 10.0), "long_b": ("GBRG", 4.0)}  # exposures from the files' metadata
    for n, (name, (pattern, seconds)) in enumerate(files.items()):
        write_dng(raw / f"{name}.dng", coded_mosaic(n, 24, 40), pattern, black=BLACKS, white=WHITE,
                  exposure=seconds, make="Sony", model="ILCE-7S")
    pack(raw, tmp_path / "packed", PackOptions(workers=1, targets_only=True, raw_target="packed"))
    ds = open_shards(tmp_path / "packed")
    assert ds.targets_only and ds.members == Members(Member("uint16", 4), Member("uint16", 4))
    entry = json.loads((tmp_path / "packed" / "manifest.json").read_text())["splits"]["train"]
    assert entry["sensor"]["low"]["kind"] == entry["sensor"]["high"]["kind"] == "bayer-rgbg"
    for i, key in enumerate(ds.keys):
        n, (pattern, seconds) = list(files).index(key), files[key]
        want, sites = sid_pack(coded_mosaic(n, 24, 40), pattern)
        _, low, high = ds[i]
        np.testing.assert_array_equal(high, want)
        np.testing.assert_array_equal(low, want)
        levels = [BLACKS[s] for s in sites] + [WHITE]
        assert ds.sensor.levels[i].tolist() == ds.sensor.levels_high[i].tolist() == levels
        assert ds.sensor.ratio[i] == 1 and ds.sensor.exposure[i].tolist() == [seconds, seconds]
    verify(tmp_path / "packed")
    pack(raw, tmp_path / "developed", PackOptions(workers=1, targets_only=True))
    ds = open_shards(tmp_path / "developed")  # 16-bit RGB at the mosaic's size: no sensor counts left to describe
    assert ds.members == Members(Member("uint16", 3), Member("uint16", 3)) and ds.sensor is None
    assert ds.sizes.tolist() == [[24, 40], [24, 40]]
    np.testing.assert_array_equal(ds[0][2], develop(raw / "long_a.dng")[:24, :40])
    with pytest.raises(ConfigError, match=r"--resize/--max-side: .*raw holds camera raw files, whose sensor counts "
                                          r"pack keeps as they are; leave --resize/--max-side out, or cut each"):
        pack(raw, tmp_path / "shrunk", PackOptions(workers=1, targets_only=True, max_side=8))
    pack(raw, tmp_path / "cut", PackOptions(workers=1, targets_only=True, raw_target="packed", max_side=8, fit="crop"))
    want, _ = sid_pack(coded_mosaic(0, 24, 40), "RGGB")  # 12x20 cells: the centre 8x8 of them
    np.testing.assert_array_equal(open_shards(tmp_path / "cut")[0][2], want[2:10, 6:14])
