"""`pack --compress zstd` (shard format version 3): every loader yields batches bit-identical to the same pack
uncompressed, WebDataset still groups the members by key, verify and the readers name a damaged member, older
readers refuse the pack by its version, and a missing zstandard is named with the extra that installs it.
Pixels encode the pair index (conftest)."""

import hashlib
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from pairload import ConfigError, ShardError, make_loader, open_shards
from pairload.format import schema
from pairload.format.binindex import VERIFIED
from pairload.pack.writer import PackOptions, pack
from pairload.read.shards import info, verify

from conftest import make_raw, pair_pixels

H, W = 40, 56


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """(raw pack, zstd pack) of the same 24 training and 5 test pairs of 40x56, in 64 KB shards."""
    pytest.importorskip("zstandard")  # an optional extra: the GPU machine, for one, has none
    root = tmp_path_factory.mktemp("zstd")
    make_raw(root / "raw", 24, split="train")
    make_raw(root / "raw", 5, split="test", start=200)
    pack(root / "raw", root / "plain", PackOptions(workers=1, shard_size=64 * 1024, index="json"))
    pack(root / "raw", root / "zstd", PackOptions(workers=2, shard_size=64 * 1024, compress="zstd", index="json"))
    return root / "plain", root / "zstd"


@pytest.fixture
def zcopy(both, tmp_path):
    """A copy of the zstd pack that a test may damage."""
    import shutil

    return Path(shutil.copytree(both[1], tmp_path / "zstd"))


def collect(loader, epoch):
    loader.set_epoch(epoch)
    out = [(b.keys, b.low.cpu().clone(), b.high.cpu().clone(), b.padded.cpu().clone()) for b in loader]
    loader.close()
    return out


LOADERS = [("ram", {}), ("ram", {"num_workers": 2}), ("ram", {"resident": True}), ("wds", {}),
           ("wds", {"num_workers": 2}),
           pytest.param("dali-external", {"device": "cpu"}, marks=pytest.mark.dali)]


@pytest.mark.parametrize("kind, backend", LOADERS)
def test_every_loader_yields_the_batches_of_the_uncompressed_pack(both, kind, backend):
    plain, zstd = both
    for epoch in (0, 1):
        a = collect(make_loader(kind, plain, batch_size=4, crop=24, seed=7, **backend), epoch)
        b = collect(make_loader(kind, zstd, batch_size=4, crop=24, seed=7, **backend), epoch)
        assert len(a) == len(b) > 0
        for x, y in zip(a, b):
            assert x[0] == y[0]
            assert all(torch.equal(u, v) for u, v in zip(x[1:], y[1:]))
        low = b[0][1].permute(0, 2, 3, 1).numpy()
        assert [f"{i:05d}" for i in low[:, 0, 0, 0]] == b[0][0]  # the pixels are the keys' (not all zeros)


def test_whole_images_decode_to_the_raw_packs_pixels(both):
    plain, zstd = both
    for split in ("train", "test"):
        a, b = open_shards(plain, split), open_shards(zstd, split)
        assert a.keys == b.keys and np.array_equal(a.sizes, b.sizes)
        for i in range(len(a)):
            for x, y in zip(a[i][1:], b[i][1:]):
                np.testing.assert_array_equal(x, y)
                assert y.dtype == np.uint8 and y.flags.c_contiguous and not y.flags.writeable


def test_the_manifest_and_info_say_zstd_and_the_pack_is_smaller(both):
    plain, zstd = both
    doc = json.loads((zstd / "manifest.json").read_text())
    assert doc["version"] == schema.VERSION_COMPRESSED == 3
    assert doc["options"]["compress"] == "zstd" and doc["options"]["compress_level"] == 3
    assert doc["layout"]["members"] == ["json", "low.npy.zst", "high.npy.zst"]
    for entry in doc["splits"].values():
        assert entry["compression"] == "zstd"
        idx = entry["shards"][0]["index"]
        assert len(idx["low_bytes"]) == len(idx["high_bytes"]) == len(idx["key"])
    assert json.loads((plain / "manifest.json").read_text())["version"] == 1  # raw packs are unchanged
    assert "compression" not in json.loads((plain / "manifest.json").read_text())["splits"]["train"]
    z, p = info(zstd), info(plain)
    assert z["train"]["compression"] == "zstd" and p["train"]["compression"] == "none"
    assert z["train"]["bytes"] < p["train"]["bytes"] and z["train"]["pixel_bytes"] == p["train"]["pixel_bytes"]
    res = subprocess.run([sys.executable, "-m", "pairload.cli", "info", str(zstd)], capture_output=True, text=True)
    assert res.returncode == 0 and re.search(r"zstd, \d+\.\d\dx", res.stdout)  # stored bytes vs decoded pixels


def test_webdataset_groups_the_compressed_members_by_key(both):
    import webdataset as wds
    import zstandard

    urls = sorted(str(p) for p in both[1].glob("train-*.tar"))
    samples = list(wds.WebDataset(urls, shardshuffle=False).decode())
    assert [s["__key__"] for s in samples] == [f"{i:05d}" for i in range(24)]
    for i, s in enumerate(samples):
        assert set(s) >= {"json", "low.npy.zst", "high.npy.zst"} and s["json"]["size"] == [H, W]
        for name, ref in zip(("low.npy.zst", "high.npy.zst"), pair_pixels(i, H, W)):
            np.testing.assert_array_equal(np.load(io.BytesIO(zstandard.decompress(s[name]))), ref)


def test_verify_passes_and_names_a_flipped_byte_inside_a_zst_member(zcopy):
    assert verify(zcopy).samples == 29
    shard = json.loads((zcopy / "manifest.json").read_text())["splits"]["train"]["shards"][1]
    key, off, size = shard["index"]["key"][2], shard["index"]["high"][2], shard["index"]["high_bytes"][2]
    path = zcopy / shard["file"]
    data = bytearray(path.read_bytes())
    data[off + size // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(ShardError, match=rf"^{shard['file']}: key {key}: {key}.high.npy.zst does not decode: .* "
                                         r"\(the shard is corrupt: restore it from a copy or repack\)$"):
        verify(zcopy)
    ds = open_shards(zcopy)
    with pytest.raises(ShardError, match=rf"{shard['file']}: key {key}: {key}.high.npy.zst does not decode: .*; the "
                                         r"shard is corrupt: run `pairload verify` and repack$"):
        ds[ds.keys.index(key)]
    res = subprocess.run([sys.executable, "-m", "pairload.cli", "verify", str(zcopy)], capture_output=True, text=True)
    assert res.returncode == 1 and "Traceback" not in res.stderr and f"{key}.high.npy.zst does not decode" in res.stderr


def test_a_checksum_that_disagrees_is_caught_on_the_first_decode_and_by_verify(zcopy):
    path = zcopy / "manifest.json"
    doc = json.loads(path.read_text())
    doc["splits"]["test"]["shards"][0]["index"]["crc32"][1][0] ^= 1
    path.write_text(json.dumps(doc))
    with pytest.raises(ShardError, match=r"test-000000.tar: key 00201: 00201.low.npy.zst pixels do not match their "
                                         r"checksum"):
        verify(zcopy)
    ds = open_shards(zcopy, "test")
    ds[0]
    with pytest.raises(ShardError, match=r"key 00201: 00201.low.npy.zst: pixels do not match their checksum"):
        ds[1]


def test_an_older_reader_refuses_the_pack_by_its_version(zcopy, monkeypatch):
    monkeypatch.setattr(schema, "VERSIONS", (1, 2))  # what pairload read before compression
    with pytest.raises(ShardError, match=r"manifest.json: shard format version 3, this pairload reads versions 1, 2; "
                                         r"repack with this version"):
        open_shards(zcopy)


def test_an_unknown_compression_is_refused_by_name(zcopy):
    path = zcopy / "manifest.json"
    doc = json.loads(path.read_text())
    doc["splits"]["train"]["compression"] = "lz4"
    path.write_text(json.dumps(doc))
    with pytest.raises(ShardError,
                       match=r"split 'train': \"compression\" is 'lz4', this pairload reads 'zstd' or none"):
        open_shards(zcopy)


def test_a_missing_zstandard_is_named_with_the_extra_that_installs_it(both, monkeypatch):
    monkeypatch.setitem(sys.modules, "zstandard", None)  # `import zstandard` now raises ImportError
    with pytest.raises(ConfigError, match=r"^--compress zstd needs the zstandard package, which is not installed: "
                                          r"pip install 'pairload\[zstd\]'$"):
        PackOptions(compress="zstd")
    with pytest.raises(ConfigError, match=r"zstd: split 'train' is compressed with zstd; reading it needs the "
                                          r"zstandard package, which is not installed: pip install 'pairload\[zstd\]'"):
        open_shards(both[1])
    with pytest.raises(ConfigError, match=r"verifying it needs the zstandard package"):
        verify(both[1])
    assert info(both[1])["train"]["compression"] == "zstd"  # the manifest alone needs no codec
    assert len(open_shards(both[0])[0][1]) == H  # nor does a raw pack


def test_the_encoding_is_one_entry_of_the_table_and_the_manifest_keeps_its_strings(both):
    import pickle

    from pairload.format.encoding import ENCODED, ENCODINGS, RAW, STORED, ZSTD
    from pairload.format.members import npy_file

    assert ENCODINGS == {"raw": RAW, "zstd": ZSTD, "encoded": ENCODED} and set(STORED) == {None, "zstd"}
    plain, zstd = open_shards(both[0]), open_shards(both[1])
    assert plain.index.encoding is RAW and plain.index.encoding.plain and not plain.index.encoding.sized
    assert zstd.index.encoding is ZSTD and not zstd.index.encoding.plain and zstd.members.encoding is ZSTD
    assert (plain.index.compression, zstd.index.compression) == (None, "zstd")  # the manifest's values, unchanged
    assert pickle.loads(pickle.dumps(zstd.index)).encoding is ZSTD  # a worker gets the table's own entry
    assert PackOptions(compress="zstd").encoding is ZSTD and PackOptions().encoding is RAW
    image = pair_pixels(3, H, W)[0]
    npy = npy_file(image)  # what an encoding encodes: the .npy file, as a raw shard holds it
    assert np.array_equal(np.load(io.BytesIO(npy)), image)
    assert ZSTD.decode(ZSTD.encode(npy, 3), len(npy)) == npy == RAW.decode(RAW.encode(npy, 0), len(npy))


@pytest.mark.parametrize("opts, match", [
    (dict(compress="lz4"), r"--compress lz4: expected zstd \(leave it out for raw members\)"),
    (dict(compress="zstd", compress_level=0), r"--compress-level 0: expected 1 to 22"),
])
def test_bad_compression_options_are_refused(opts, match):
    with pytest.raises(ConfigError, match=match):
        PackOptions(**opts)


def test_the_bytes_do_not_depend_on_the_number_of_workers(both, tmp_path):
    raw = both[0].parent / "raw"
    pack(raw, tmp_path / "one", PackOptions(workers=1, shard_size=64 * 1024, compress="zstd"))

    def digests(folder):
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.tar"))}

    assert digests(tmp_path / "one") == digests(both[1]) and len(digests(both[1])) >= 3


def test_the_shards_hold_the_samples_the_raw_packs_hold(both):
    plain, zstd = both  # --shard-size counts raw bytes: wds's shard-by-shard order is the same for both packs
    for split in ("train", "test"):
        a, b = open_shards(plain, split), open_shards(zstd, split)
        assert [f.name for f in a.files] == [f.name for f in b.files] and a.shard_samples == b.shard_samples
        assert len(a.files) >= 2 and sum(b.shard_bytes) < sum(a.shard_bytes)


def test_shared_targets_are_stored_once_compressed(tmp_path):
    make_raw(tmp_path / "raw", 3)
    (tmp_path / "pairs.txt").write_text("low/00000.png high/00000.png\nlow/00001.png high/00000.png\n"
                                        "low/00002.png high/00002.png\n")
    pack(tmp_path / "raw", tmp_path / "s", PackOptions(workers=1, pairs_file=str(tmp_path / "pairs.txt"),
                                                       compress="zstd", index="json"))
    doc = json.loads((tmp_path / "s" / "manifest.json").read_text())
    idx = doc["splits"]["train"]["shards"][0]["index"]
    assert doc["version"] == 3 and idx["shares_high"] == [-1, 0, -1]
    assert idx["high"][1] == idx["high"][0] and idx["high_bytes"][1] == idx["high_bytes"][0]
    assert verify(tmp_path / "s").samples == 3
    ds = open_shards(tmp_path / "s")
    np.testing.assert_array_equal(ds[1][1], pair_pixels(1, H, W)[0])
    np.testing.assert_array_equal(ds[1][2], pair_pixels(0, H, W)[1])


def test_the_cli_packs_compressed_and_says_how_much_smaller(tmp_path):
    make_raw(tmp_path / "raw", 3)
    res = subprocess.run([sys.executable, "-m", "pairload.cli", "pack", str(tmp_path / "raw"), str(tmp_path / "s"),
                          "--compress", "zstd", "--compress-level", "1", "--workers", "1"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "train: 3 pairs in 1 shards" in res.stdout and "(zstd level 1: " in res.stdout
    assert json.loads((tmp_path / "s" / "manifest.json").read_text())["options"]["compress_level"] == 1
    res = subprocess.run([sys.executable, "-m", "pairload.cli", "pack", str(tmp_path / "raw"), str(tmp_path / "t"),
                          "--compress", "gzip"], capture_output=True, text=True)
    assert res.returncode == 1
    assert res.stderr.strip() == "error: --compress gzip: expected zstd (leave it out for raw members)"


def test_a_full_disk_while_writing_a_compressed_shard_names_it_and_leaves_nothing(both, tmp_path, monkeypatch):
    import errno

    from pairload.errors import OutputError
    from pairload.pack import shardwrite

    def full(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    out = tmp_path / "out"
    monkeypatch.setattr(shardwrite.CompressedShards, "put", full)
    with pytest.raises(OutputError, match=rf"^{out}/test-000000.tar.partial: the disk is full"):
        pack(both[0].parent / "raw", out, PackOptions(workers=1, compress="zstd"))
    monkeypatch.undo()
    assert not [p for p in out.iterdir() if p.name != ".pairload-pack.lock"]  # partials and journal removed
    pack(both[0].parent / "raw", out, PackOptions(workers=1, compress="zstd"))
    assert verify(out).samples == 29


@pytest.mark.slow
def test_a_killed_compressed_pack_then_rerun_is_byte_identical(tmp_path):
    import signal
    import time

    raw = make_raw(tmp_path / "raw", 48, size=(200, 300))
    pack(raw, tmp_path / "ref", PackOptions(workers=1, shard_size=1024 * 1024, compress="zstd"))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "pairload.cli", "pack", str(raw), str(out), "--shard-size", "1MB", "--workers", "1",
           "--compress", "zstd"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while time.time() < deadline and len(list(out.glob("*.tar.partial"))) < 2:  # past the first shard
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "manifest.json").exists() and list(out.glob("*.tar.partial"))
    listed = set(json.loads((out / ".pairload-pack.json").read_text())["partials"])
    assert listed >= {p.name for p in out.glob("*.tar.partial")}  # the journal names each before it exists
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)

    def digests(folder):  # the records of its index files found whole carry the files' stamps: not compared
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())
                if not p.name.endswith(VERIFIED)}

    assert digests(out) == digests(tmp_path / "ref")
