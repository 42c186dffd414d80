import errno
import hashlib
import json
import mmap
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from indexes import shard_index
from pairload import ImageError, OutputError, PairingError, open_shards
from pairload.pack.writer import PackOptions, pack, parse_size
from pairload.format.binindex import VERIFIED
from pairload.errors import ConfigError

from conftest import make_raw, pair_pixels, write_rgb


def digests(folder: Path) -> dict[str, str]:
    """Each file's sha256 (the records of index files found whole, which carry the files' stamps, aside)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())
            if not p.name.endswith(VERIFIED)}


def check_round_trip(shards: Path, split: str, raw_split: Path, ext: str) -> None:
    ds = open_shards(shards, split)
    assert len(ds) > 0
    for key, low, high in (ds[i] for i in range(len(ds))):
        for side, arr in (("low", low), ("high", high)):
            ref = cv2.imread(str(raw_split / side / f"{key}{ext}"), cv2.IMREAD_UNCHANGED)
            np.testing.assert_array_equal(arr, ref[..., ::-1], err_msg=f"{split}/{side}/{key}{ext}")


def test_split_layout_round_trip_and_manifest(raw, tmp_path):
    out = tmp_path / "shards"
    report = pack(raw, out, PackOptions(workers=1, shard_size=64 * 1024, index="json"))  # the index in the JSON
    assert report.splits["train"]["samples"] == 8 and report.splits["test"]["samples"] == 4
    doc = json.loads((out / "manifest.json").read_text())
    assert doc["format"] == "pairload-shards" and doc["version"] == 1
    train = doc["splits"]["train"]
    assert train["samples"] == 8 and len(train["shards"]) >= 2  # 64KB shards hold a few 40x56 pairs each
    for sh in train["shards"]:
        data = (out / sh["file"]).read_bytes()
        assert len(data) == sh["bytes"] and hashlib.sha256(data).hexdigest() == sh["sha256"]
    assert [s["file"] for s in train["shards"]][:2] == ["train-000000.tar", "train-000001.tar"]
    check_round_trip(out, "train", raw / "train", ".png")
    check_round_trip(out, "test", raw / "test", ".png")
    ds = open_shards(out, "train")
    assert list(ds.keys) == sorted(ds.keys) == [f"{i:05d}" for i in range(8)]
    low = ds[0][1]
    assert not low.flags.owndata and not low.flags.writeable  # a read-only view of the shard file, not a copy
    assert isinstance(low.base.base.obj, mmap.mmap)  # a view of the shard file's memory map


def test_shards_are_webdataset_readable(packed):
    import webdataset as wds

    urls = sorted(str(p) for p in packed.glob("train-*.tar"))
    samples = list(wds.WebDataset(urls, shardshuffle=False).decode())
    assert [s["__key__"] for s in samples] == [f"{i:05d}" for i in range(8)]
    for i, s in enumerate(samples):
        low, high = pair_pixels(i, 40, 56)
        np.testing.assert_array_equal(s["low.npy"], low)
        np.testing.assert_array_equal(s["high.npy"], high)
        assert s["json"]["low"] == f"train/low/{i:05d}.png" and s["json"]["size"] == [40, 56]


@pytest.mark.parametrize("ext", [".png", ".jpg", ".bmp", ".tif"])
def test_round_trip_matches_cv2_for_each_format(tmp_path, ext):
    raw = make_raw(tmp_path / "raw", 3, ext=ext)
    pack(raw, tmp_path / "out", PackOptions(workers=1))
    check_round_trip(tmp_path / "out", "train", raw, ext)


def test_synonyms_named_splits_and_nested_folders(tmp_path):
    raw = tmp_path / "LOL"
    make_raw(raw, 3, split="our485", low="Input", high="GT")
    make_raw(raw, 2, split="eval15", low="dark", high="target", start=10)
    write_rgb(raw / "our485" / "Input" / "sub" / "deep" / "x.png", pair_pixels(50, 40, 56)[0])
    write_rgb(raw / "our485" / "GT" / "sub" / "deep" / "x.png", pair_pixels(50, 40, 56)[1])
    (raw / "notes").mkdir()  # a first-level folder that is not a split is ignored
    pack(raw, tmp_path / "out", PackOptions(workers=1))
    ds = open_shards(tmp_path / "out", "train")  # our485 is LOL's training split, eval15 its test split
    assert list(ds.keys) == ["00000", "00001", "00002", "sub+deep+x"]
    key, low, high = ds[3]
    np.testing.assert_array_equal(low, pair_pixels(50, 40, 56)[0])
    assert len(open_shards(tmp_path / "out", "test")) == 2


def test_low_dir_high_dir_override(tmp_path):
    raw = make_raw(tmp_path / "raw", 2, low="before", high="after")
    with pytest.raises(PairingError, match="no pairs found"):
        pack(raw, tmp_path / "out", PackOptions(workers=1))
    pack(raw, tmp_path / "out", PackOptions(workers=1, low_dir="before", high_dir="after"))
    assert len(open_shards(tmp_path / "out")) == 2


def test_pairs_file_with_differing_names(tmp_path):
    raw = tmp_path / "raw"
    rows = []
    for i in range(3):
        lo, hi = pair_pixels(i, 40, 56)
        write_rgb(raw / "Train" / "Low" / f"low{i:05d}.png", lo)
        write_rgb(raw / "Train" / "Normal" / f"normal{i:05d}.png", hi)
        rows.append(f"Train/Low/low{i:05d}.png\tTrain/Normal/normal{i:05d}.png\t{'test' if i == 2 else 'train'}")
    pf = tmp_path / "pairs.tsv"
    pf.write_text("# low\thigh\tsplit\n" + "\n".join(rows) + "\n")
    pack(raw, tmp_path / "out", PackOptions(workers=1, pairs_file=str(pf)))
    train = open_shards(tmp_path / "out", "train")
    assert list(train.keys) == ["Train+Low+low00000", "Train+Low+low00001"]
    np.testing.assert_array_equal(train[1][2], pair_pixels(1, 40, 56)[1])
    assert len(open_shards(tmp_path / "out", "test")) == 1
    pf.write_text("Train/Low/low00000.png\tTrain/Normal/missing.png\n")
    with pytest.raises(PairingError, match=r"pairs.tsv:1: Train/Normal/missing.png does not exist"):
        pack(raw, tmp_path / "out2", PackOptions(workers=1, pairs_file=str(pf)))


def test_names_with_dots_and_spaces(tmp_path):
    raw = tmp_path / "raw"
    for i, name in enumerate(["a b.v2.png", "a b.v3.png", "c.d e.png"]):
        lo, hi = pair_pixels(i, 40, 56)
        write_rgb(raw / "low" / name, lo)
        write_rgb(raw / "high" / name, hi)
    pack(raw, tmp_path / "out", PackOptions(workers=1))
    ds = open_shards(tmp_path / "out")
    assert all("." not in k and " " not in k for k in ds.keys)
    assert len(set(ds.keys)) == 3
    import webdataset as wds

    keys = [s["__key__"] for s in wds.WebDataset(str(tmp_path / "out" / "train-000000.tar"), shardshuffle=False)]
    assert sorted(keys) == sorted(ds.keys)  # WebDataset groups each sample's three members under one key


def test_one_and_many_workers_give_identical_bytes(raw, tmp_path):
    pack(raw, tmp_path / "a", PackOptions(workers=1, shard_size=64 * 1024))
    pack(raw, tmp_path / "b", PackOptions(workers=2, shard_size=64 * 1024))
    assert digests(tmp_path / "a") == digests(tmp_path / "b")


def test_resize_and_max_side_are_identical_for_both_images(tmp_path):
    raw = make_raw(tmp_path / "raw", 2, size=(80, 120))
    pack(raw, tmp_path / "r", PackOptions(workers=1, resize=(60, 40)))
    key, low, high = open_shards(tmp_path / "r")[1]
    assert low.shape == (40, 60, 3)
    ref = cv2.resize(pair_pixels(1, 80, 120)[0], (60, 40), interpolation=cv2.INTER_AREA)
    np.testing.assert_array_equal(low, ref)
    np.testing.assert_array_equal(high, cv2.resize(pair_pixels(1, 80, 120)[1], (60, 40), interpolation=cv2.INTER_AREA))
    pack(raw, tmp_path / "m", PackOptions(workers=1, max_side=60))
    assert shard_index(tmp_path / "m")["hw"][0] == [40, 60]
    with pytest.raises(ConfigError, match="cannot be used together"):
        PackOptions(resize=(60, 40), max_side=60)


def test_gray_and_alpha_are_converted_and_reported(tmp_path):
    raw = tmp_path / "raw"
    lo, hi = pair_pixels(3, 40, 56)
    cv2.imwrite(str((raw / "low").mkdir(parents=True) or raw / "low" / "g.png"), lo[..., 1])
    (raw / "high").mkdir()
    cv2.imwrite(str(raw / "high" / "g.png"), np.dstack([hi[..., ::-1], np.full((40, 56), 7, np.uint8)]))
    report = pack(raw, tmp_path / "out", PackOptions(workers=1))
    assert report.gray == ["low/g.png"] and report.alpha == ["high/g.png"]
    _, low, high = open_shards(tmp_path / "out")[0]
    np.testing.assert_array_equal(low, np.repeat(lo[..., 1:2], 3, axis=2))
    np.testing.assert_array_equal(high, hi)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["report"]["gray_replicated"] == ["low/g.png"]


def test_sixteen_bit_kept_as_16_bits_unless_to_8bit(tmp_path):
    raw = tmp_path / "raw"
    (raw / "low").mkdir(parents=True)
    (raw / "high").mkdir()
    img16 = (np.arange(40 * 56 * 3, dtype=np.uint32).reshape(40, 56, 3) * 97 % 65536).astype(np.uint16)
    cv2.imwrite(str(raw / "low" / "a.png"), img16)
    cv2.imwrite(str(raw / "high" / "a.png"), 65535 - img16)  # not the low's bytes: that pair would be refused
    report = pack(raw, tmp_path / "out16", PackOptions(workers=1))  # no silent precision loss: stored as uint16
    assert report.converted_16bit == []
    _, low, high = open_shards(tmp_path / "out16")[0]
    assert low.dtype == np.uint16
    np.testing.assert_array_equal(low, img16[..., ::-1])
    np.testing.assert_array_equal(high, (65535 - img16)[..., ::-1])
    report = pack(raw, tmp_path / "out", PackOptions(workers=1, to_8bit=True))
    assert len(report.converted_16bit) == 2
    _, low, _ = open_shards(tmp_path / "out")[0]
    expect = ((img16.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8)[..., ::-1]
    np.testing.assert_array_equal(low, expect)


# ------------------------------------------------------------------ refused inputs: message pinned, no manifest

def refused(raw, tmp_path, match, exc=PairingError, **opts):
    out = tmp_path / "out"
    with pytest.raises(exc, match=match):
        pack(raw, out, PackOptions(workers=opts.pop("workers", 1), **opts))
    assert not (out / "manifest.json").exists()
    assert not list(out.glob("*.partial")) if out.exists() else True
    assert not list(out.glob("*.tar")) if out.exists() else True


def test_unmatched_files_are_listed_per_side(tmp_path):
    raw = make_raw(tmp_path / "raw", 3)
    for i in range(12):
        write_rgb(raw / "low" / f"extra{i:02d}.png", pair_pixels(0, 40, 56)[0])
    write_rgb(raw / "high" / "lonely.png", pair_pixels(0, 40, 56)[1])
    refused(raw, tmp_path, r"12 in low without a partner in high: low/extra00.png, .*low/extra09.png … and 2 more; "
                           r"1 in high without a partner in low: high/lonely.png")
    report = pack(raw, tmp_path / "ok", PackOptions(workers=1, skip_unmatched=True))
    assert report.pairs == 3 and len(report.skipped) == 13 and "high/lonely.png" in report.skipped


def test_duplicate_stem_refused(tmp_path):
    raw = make_raw(tmp_path / "raw", 2)
    write_rgb(raw / "low" / "00001.jpg", pair_pixels(1, 40, 56)[0])
    refused(raw, tmp_path, r"two files with the same stem '00001': 00001.jpg and 00001.png")


@pytest.mark.parametrize("damage,match", [
    ("empty", r"low/00001.png: file is empty \(0 bytes\)"),
    ("truncated", r"low/00001.png: does not decode \(truncated or not an image\)"),
    ("text", r"low/00001.png: not a readable image"),
])
def test_undecodable_file_refused(tmp_path, damage, match):
    raw = make_raw(tmp_path / "raw", 4, size=(64, 64))
    bad = raw / "low" / "00001.png"
    data = bad.read_bytes()
    bad.write_bytes({"empty": b"", "truncated": data[: len(data) // 2], "text": b"hello, not a png\n" * 10}[damage])
    refused(raw, tmp_path, match, exc=ImageError, workers=2)


def test_size_mismatch_names_both_sizes(tmp_path):
    raw = make_raw(tmp_path / "raw", 2)
    write_rgb(raw / "high" / "00001.png", pair_pixels(1, 30, 50)[1])
    refused(raw, tmp_path, r"low/00001.png is 56x40 but high/00001.png is 50x30", exc=ImageError)


def test_no_pairs_refused(tmp_path):
    (tmp_path / "raw" / "photos").mkdir(parents=True)
    refused(tmp_path / "raw", tmp_path, r"no pairs found; expected raw/\{low\|input\|dark\|lq\|img\|short\}/")


def test_parse_size():
    assert parse_size("256MB") == 256 * 1024**2 and parse_size("1GB") == 1024**3 and parse_size("512KB") == 512 * 1024
    with pytest.raises(ConfigError, match="shard size .lots.: expected a size such as 500GB"):
        parse_size("lots")


# ------------------------------------------------------------------ crash safety

def test_killed_pack_then_rerun_is_byte_identical(tmp_path):
    raw = make_raw(tmp_path / "raw", 48, size=(200, 300))
    reference = tmp_path / "ref"
    pack(raw, reference, PackOptions(workers=1, shard_size=1024 * 1024))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "pairload.cli", "pack", str(raw), str(out), "--shard-size", "1MB", "--workers", "1"]
    left_partial = []
    for delay in (0.0, 0.15):
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 30
        while time.time() < deadline and not list(out.glob("*.tar.partial")):  # a shard's, not the journal's
            time.sleep(0.002)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if proc.returncode == -signal.SIGKILL:
            assert not (out / "manifest.json").exists()  # a killed pack never looks complete
            left_partial.append(bool(list(out.glob("*.tar.partial"))))
            if left_partial[-1]:  # written before any partial shard: the next run knows they are its own
                assert set(json.loads((out / ".pairload-pack.json").read_text())["partials"]) >= \
                    {p.name for p in out.glob("*.tar.partial")}
    assert left_partial and left_partial[0]  # the first kill really left a half-written shard behind
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    assert digests(out) == digests(reference)
    assert not [p for p in out.iterdir() if p.name.endswith(".partial")]


def test_repack_over_an_older_pack_removes_its_stale_shards(raw, tmp_path):
    out = tmp_path / "out"
    pack(raw, out, PackOptions(workers=1, shard_size=64 * 1024))
    many = {p.name for p in out.glob("train-*.tar")}
    pack(raw, out, PackOptions(workers=1, shard_size=1024 * 1024))
    assert {p.name for p in out.glob("train-*.tar")} == {"train-000000.tar"} != many
    assert len(open_shards(out)) == 8


def test_repack_without_a_split_removes_its_shards_and_its_index_file(raw, tmp_path):
    import shutil

    out = tmp_path / "out"
    pack(raw, out, PackOptions(workers=1))
    assert (out / "test.index").exists() and list(out.glob("test-*.tar"))
    shutil.rmtree(raw / "test")
    pack(raw, out, PackOptions(workers=1))
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "manifest.json", "train-000000.tar", "train.index", f"train.index{VERIFIED}"]  # test's record went too


def test_packing_imports_neither_torch_nor_dali():
    code = ("import sys, pairload, pairload.pack.writer, pairload.makepairs, pairload.read.shards, "
            "pairload.folders.discover\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch' or 'dali' in m))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


def test_pack_and_the_cli_of_pack_verify_info_import_no_torch():
    code = ("import sys, pairload.cli\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch' or 'dali' in m))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


def test_pack_help_is_fast():
    start = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "pairload.cli", "pack", "--help"], capture_output=True, text=True)
    assert res.returncode == 0 and "--skip-unmatched" in res.stdout
    assert time.perf_counter() - start < 3.0  # 1 s on the 2-core machine, with a generous margin


# ------------------------------------------------------------------ what pack owns

def test_pack_never_deletes_files_it_did_not_write(raw, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    mine = {"imagenet-000000.tar": b"user data 1", "my_backup-000007.tar": b"user data 2", "train-000099.tar": b"3"}
    for name, data in mine.items():
        (out / name).write_bytes(data)
    pack(raw, out, PackOptions(workers=1, shard_size=64 * 1024))
    pack(raw, out, PackOptions(workers=1, shard_size=1024 * 1024))  # fewer shards: its own old ones go
    assert {p.name for p in out.glob("train-*.tar")} == {"train-000000.tar", "train-000099.tar"}
    for name, data in mine.items():
        assert (out / name).read_bytes() == data
    assert len(open_shards(out)) == 8


def test_a_second_pack_into_the_same_folder_is_refused_while_one_runs(raw, tmp_path):
    import fcntl

    out = tmp_path / "out"
    out.mkdir()
    with open(out / ".pairload-pack.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # what a running pack holds
        with pytest.raises(ConfigError, match=r"another `pairload pack` is writing into this folder"):
            pack(raw, out, PackOptions(workers=1))
    assert not (out / "manifest.json").exists()
    pack(raw, out, PackOptions(workers=1))  # released: it goes through


def test_output_folder_equal_to_the_raw_folder_is_refused(raw, tmp_path):
    with pytest.raises(ConfigError, match=r"the output folder is the dataset folder"):
        pack(raw, raw / "train" / "..", PackOptions(workers=1))
    assert not list(raw.glob("*.tar"))


def test_resize_packs_pairs_whose_sizes_differ(tmp_path):
    raw = make_raw(tmp_path / "raw", 2)
    lo = pair_pixels(1, 40, 56)[1]
    write_rgb(raw / "high" / "00001.png", cv2.resize(lo, (112, 80), interpolation=cv2.INTER_NEAREST))
    refused(raw, tmp_path, r"pack with --resize WxH to resize both", exc=ImageError)
    pack(raw, tmp_path / "out", PackOptions(workers=1, resize=(56, 40)))
    ds = open_shards(tmp_path / "out")
    assert ds[1][2].shape == (40, 56, 3)
    np.testing.assert_array_equal(ds[1][2], lo)  # exact: 2x area-downscale of a 2x nearest upscale


@pytest.mark.parametrize("line, match", [
    ("../outside/low.png\tTrain/Normal/normal00000.png", r"pairs.tsv:1: ../outside/low.png lies outside"),
    ("Train/Low/low00000.png\tTrain/Low/low00000.png", r"pairs.tsv:1: the low and the high image are the same file"),
    ("Train/Low/low00000.png\tTrain/Normal/normal00000.png\ttrain\n"
     "Train/Low/low00001.png\tTrain/Normal/normal00000.png\ttest",
     r"pairs.tsv:2: Train/Normal/normal00000.png is in split 'test' but already in split 'train' \(pairs.tsv:1\)"),
])
def test_pairs_file_refuses_escapes_self_pairs_and_leaks(tmp_path, line, match):
    raw = tmp_path / "raw"
    for i in range(2):
        lo, hi = pair_pixels(i, 40, 56)
        write_rgb(raw / "Train" / "Low" / f"low{i:05d}.png", lo)
        write_rgb(raw / "Train" / "Normal" / f"normal{i:05d}.png", hi)
    write_rgb(tmp_path / "outside" / "low.png", pair_pixels(0, 40, 56)[0])
    pf = tmp_path / "pairs.tsv"
    pf.write_text(line + "\n")
    with pytest.raises(PairingError, match=match):
        pack(raw, tmp_path / "out", PackOptions(workers=1, pairs_file=str(pf)))
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_file_names_that_are_not_utf8_pack_with_their_bytes_in_the_key(tmp_path):
    raw = tmp_path / "raw"
    lo, hi = pair_pixels(3, 40, 56)
    for side, img in (("low", lo), ("high", hi)):
        folder = raw / side
        folder.mkdir(parents=True)
        ok, buf = cv2.imencode(".png", img[..., ::-1])
        with open(os.path.join(os.fsencode(folder), b"caf\xe9.png"), "wb") as fh:
            fh.write(buf.tobytes())
    pack(raw, tmp_path / "out", PackOptions(workers=1))
    ds = open_shards(tmp_path / "out")
    assert ds.keys == ("caf~E9",)
    np.testing.assert_array_equal(ds[0][1], lo)


def test_a_photo_beyond_pillows_decompression_bomb_limit_is_probed(tmp_path):
    from PIL import Image

    from pairload.folders.decode import probe_size

    h, w = 9000, (Image.MAX_IMAGE_PIXELS * 2) // 9000 + 8  # just over the size at which Pillow refuses to open
    path = tmp_path / "big.png"
    assert cv2.imwrite(str(path), np.zeros((h, w), np.uint8))
    assert probe_size(path) == (h, w)


def test_os_errors_reach_the_cli_as_one_line(raw, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    res = subprocess.run([sys.executable, "-m", "pairload.cli", "pack", str(raw), str(blocker / "shards")],
                         capture_output=True, text=True)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and str(blocker) in res.stderr


def test_usage_errors_exit_2_with_typers_message_and_no_traceback():
    for args, text in ((["verify"], "Missing argument"), (["nope"], "No such command"),
                       (["pack", "a", "b", "--workers", "x"], "Invalid value for '--workers'")):
        res = subprocess.run([sys.executable, "-m", "pairload.cli", *args], capture_output=True, text=True)
        assert res.returncode == 2, (args, res.stderr)
        assert text in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("inside", ["shards", "train/shards", "link/shards"])
def test_an_output_folder_inside_the_raw_folder_is_refused_naming_both(raw, tmp_path, inside):
    (raw / "link").symlink_to(raw / "train")  # a way in that only resolving the paths reveals
    out = raw / inside
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(out))}: the output folder is inside the dataset folder "
                                          rf"{re.escape(str(raw))} \(a later pack .*write the shards outside it"):
        pack(raw, out, PackOptions(workers=1))
    assert not out.exists()


def png_header_claiming(width: int, height: int) -> bytes:
    """A small PNG whose header says width x height (RGB, 8 bits); its compressed data holds only a few rows."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 1024)) + chunk(b"IEND", b""))


def test_a_png_beyond_opencvs_pixel_limit_is_refused_by_name_before_decoding(tmp_path):
    raw = make_raw(tmp_path / "raw", 2)
    huge = raw / "high" / "00001.png"
    huge.write_bytes(png_header_claiming(40000, 40000))  # 1.6e9 pixels, over OpenCV's 2**30
    match = (rf"^{re.escape(str(huge))}: image is too large: its header says 40000x40000 \(1,600,000,000 pixels\) and "
             r"OpenCV decodes at most 1,073,741,824 pixels; shrink or remove the file, or raise the limit by setting "
             r"the environment variable OPENCV_IO_MAX_IMAGE_PIXELS")
    with pytest.raises(ImageError, match=match):
        pack(raw, tmp_path / "out", PackOptions(workers=1))
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_decode_names_an_image_over_the_pixel_limit(tmp_path, monkeypatch):
    from pairload.folders import decode

    raw = make_raw(tmp_path / "raw", 1)
    path = raw / "low" / "00000.png"
    monkeypatch.setattr(decode, "MAX_PIXELS", 40 * 56 - 1)  # one pixel less than the 56x40 image
    match = (rf"^{re.escape(str(path))}: image is too large: its header says 56x40 \(2,240 pixels\) and OpenCV "
             r"decodes at most 2,239")
    with pytest.raises(ImageError, match=match):
        decode.decode_rgb(path, to_8bit=False)
    with pytest.raises(ImageError, match=match):
        decode.probe_size(path)
    with pytest.raises(ImageError, match=match):
        pack(raw, tmp_path / "out", PackOptions(workers=1))


# ------------------------------------------------------------------ files pack did not write, absurd sizes, full disks

def test_a_foreign_partial_file_is_never_deleted_and_one_in_the_way_is_refused(raw, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    aside = out / "train-000099.tar.partial"  # a user's file named like pack's temporary shards
    aside.write_bytes(b"user data 1")
    pack(raw, out, PackOptions(workers=1))
    assert aside.read_bytes() == b"user data 1"  # not pack's: it stays
    in_the_way = out / "test-000000.tar.partial"  # the name this pack writes its test shard under
    in_the_way.write_bytes(b"user data 2")
    with pytest.raises(OutputError, match=rf"^{re.escape(str(in_the_way))}: this pack would write its temporary shard "
                                          r"under this name, and the file there was not written by `pairload pack` "
                                          r".*; move or delete it, or pack into another folder"):
        pack(raw, out, PackOptions(workers=1))
    assert in_the_way.read_bytes() == b"user data 2" and aside.read_bytes() == b"user data 1"
    assert not (out / ".pairload-pack.json").exists()
    assert len(open_shards(out, "test")) == 4  # the earlier pack is untouched
    in_the_way.unlink()
    pack(raw, out, PackOptions(workers=1))
    assert aside.read_bytes() == b"user data 1"


def test_partial_files_listed_in_a_killed_packs_journal_are_removed_and_no_others(raw, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    for name in ("train-000007.tar.partial", "train-000008.tar.partial"):
        (out / name).write_bytes(b"\0" * 1024)
    # what a pack killed while writing leaves: its journal, written before it created its partial shards
    (out / ".pairload-pack.json").write_text(json.dumps({"owned": [], "partials": ["train-000007.tar.partial"]}))
    pack(raw, out, PackOptions(workers=1))
    assert sorted(p.name for p in out.glob("*.partial")) == ["train-000008.tar.partial"]
    assert not (out / ".pairload-pack.json").exists()


def test_a_manifest_json_that_is_not_a_pairload_manifest_is_refused_unless_overwrite(raw, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    mine = out / "manifest.json"
    mine.write_text('{"experiment": "my notes"}')
    with pytest.raises(OutputError, match=rf"^{re.escape(str(mine))}: not a pairload manifest \(expected JSON with "
                                          r"\"format\": \"pairload-shards\"\), so `pairload pack` will not replace it; "
                                          r"move it away or pack into another folder, or pass --overwrite"):
        pack(raw, out, PackOptions(workers=1))
    assert mine.read_text() == '{"experiment": "my notes"}' and not list(out.glob("*.tar*"))
    pack(raw, out, PackOptions(workers=1, overwrite=True))
    assert len(open_shards(out)) == 8


def test_the_manifest_of_another_raw_folders_pack_is_refused_unless_overwrite(raw, tmp_path):
    other = make_raw(tmp_path / "other", 3)
    out = tmp_path / "out"
    pack(raw, out, PackOptions(workers=1))
    before = digests(out)
    res = run_cli("pack", other, out)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.strip() == (f"error: {out / 'manifest.json'}: the manifest of a pack of {raw}, not of {other}; "
                                  "pack into another folder, or pass --overwrite to replace those shards")
    assert digests(out) == before
    pack(raw.parent / "raw" / "train" / "..", out, PackOptions(workers=1))  # the same folder, however it is spelled
    res = run_cli("pack", other, out, "--overwrite")
    assert res.returncode == 0, res.stderr
    assert len(open_shards(out)) == 3 and not (out / "test-000000.tar").exists()  # the other pack's shards went


def test_a_resize_beyond_the_pixel_limit_is_refused_before_anything_is_written(raw, tmp_path):
    with pytest.raises(ConfigError, match=r"^--resize 10x10000000: 100,000,000 pixels per image \(572.2 MB per pair\) "
                                          r"is more than pack stores \(at most 67,108,864 pixels, e.g. 8192x8192\)"):
        PackOptions(resize=(10, 10_000_000))
    res = run_cli("pack", raw, tmp_path / "out", "--resize", "10x10000000")
    assert res.returncode == 1 and res.stderr.startswith("error: --resize 10x10000000: 100,000,000 pixels per image")
    assert not (tmp_path / "out").exists()
    PackOptions(resize=(8192, 8192))  # the limit itself is fine


def test_a_pack_larger_than_the_free_disk_space_is_refused_with_both_numbers(raw, tmp_path, monkeypatch):
    import shutil

    out = tmp_path / "out"
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=300 * 1024))
    with pytest.raises(OutputError, match=rf"^{re.escape(str(out))}: the shards would take about 8.3 MB \(12 pairs, "
                                          r"images up to 600x200\) but the disk holding this folder has 300.0 KB "
                                          r"free; free some space, pack into a folder on a larger disk, or store "
                                          r"smaller images \(--max-side N, --resize WxH\)"):
        pack(raw, out, PackOptions(workers=1, resize=(600, 200)))
    assert not [p for p in out.iterdir() if p.name != ".pairload-pack.lock"]
    pack(raw, out, PackOptions(workers=1))  # 12 pairs of 56x40 fit in 300 KB


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "pairload.cli", *map(str, args)], capture_output=True, text=True)


def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_at_the_manifest_names_the_manifest(raw, tmp_path, monkeypatch):
    from pairload.pack import local

    out = tmp_path / "out"
    real = local.write_json_atomic
    monkeypatch.setattr(local, "write_json_atomic",
                        lambda path, doc: _disk_full() if Path(path).name == "manifest.json" else real(path, doc))
    with pytest.raises(OutputError, match=rf"^{re.escape(str(out / 'manifest.json'))}: the disk is full \(No space "
                                          r"left on device\) while writing this file; free some space or pack into a "
                                          r"folder on a larger disk, then run the same `pairload pack` again"):
        pack(raw, out, PackOptions(workers=1))
    monkeypatch.undo()
    assert not (out / "manifest.json").exists()  # never a manifest that looks complete
    pack(raw, out, PackOptions(workers=1))  # with space again, the same command finishes the job
    assert len(open_shards(out)) == 8 and not (out / ".pairload-pack.json").exists()


def test_a_full_disk_while_writing_pixels_names_the_shard_not_the_pair(raw, tmp_path, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.setattr(os, "pwrite", _disk_full)
    with pytest.raises(OutputError, match=rf"^{re.escape(str(out))}/test-000000.tar.partial: the disk is full \(No "
                                          r"space left on device\) while writing this file"):
        pack(raw, out, PackOptions(workers=1))
    monkeypatch.undo()
    assert not [p for p in out.iterdir() if p.name != ".pairload-pack.lock"]  # partials and journal removed
