import json

import numpy as np
import pytest

from indexes import shard_index
from pairload import ShardError, open_shards
from pairload.format import schema
from pairload.read.shards import info, verify

from conftest import make_raw, pair_pixels


def test_open_shards_random_access(packed):
    ds = open_shards(packed, "test")
    assert len(ds) == 4
    key, low, high = ds[-1]
    assert key == "00103"
    np.testing.assert_array_equal(low, pair_pixels(103, 40, 56)[0])
    np.testing.assert_array_equal(high, 255 - low)
    assert low.flags.c_contiguous and low.dtype == np.uint8 and not low.flags.writeable
    with pytest.raises(IndexError, match="sample 4 out of range for split 'test' of 4 samples"):
        ds[4]


def test_open_shards_errors(packed, tmp_path):
    with pytest.raises(ShardError, match=r"no manifest.json found .*run the same `pairload pack` command again"):
        open_shards(tmp_path)
    with pytest.raises(ShardError, match=r"no split 'val'; this folder has \['test', 'train'\]"):
        open_shards(packed, "val")
    shard = packed / "train-000001.tar"
    shard.write_bytes(shard.read_bytes()[:-2048])
    with pytest.raises(ShardError, match=r"train-000001.tar: \d+ bytes, the manifest says \d+; the shard is truncated"):
        open_shards(packed, "train")


def test_verify_passes_on_a_good_pack(packed):
    report = verify(packed)
    assert report.samples == 12 and report.shards >= 3


def flip_byte(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_verify_catches_one_flipped_pixel_byte_and_names_the_key(packed):
    manifest = json.loads((packed / "manifest.json").read_text())
    shard, idx = manifest["splits"]["train"]["shards"][1], shard_index(packed, "train", 1)
    key, off = idx["key"][1], idx["high"][1]
    flip_byte(packed / shard["file"], off + 100)
    with pytest.raises(ShardError,
                       match=rf"{shard['file']}: key {key}: {key}.high.npy pixels do not match their checksum"):
        verify(packed)


def test_verify_catches_a_flipped_header_byte(packed):
    manifest = json.loads((packed / "manifest.json").read_text())
    shard = manifest["splits"]["test"]["shards"][0]
    key = shard_index(packed, "test", 0)["key"][0]
    flip_byte(packed / shard["file"], 600)  # inside the first member's tar header/json
    with pytest.raises(ShardError, match=rf"{shard['file']}: (key {key}|not a readable tar|sha256)"):
        verify(packed)


def test_verify_catches_a_flipped_padding_byte(packed):
    manifest = json.loads((packed / "manifest.json").read_text())
    shard = manifest["splits"]["test"]["shards"][0]
    flip_byte(packed / shard["file"], shard["bytes"] - 10)  # in the zero padding at the end of the archive
    with pytest.raises(ShardError, match=rf"{shard['file']}: sha256 .* differs"):
        verify(packed)


def test_info(packed):
    splits = info(packed)
    assert splits["train"]["samples"] == 8 and splits["test"]["samples"] == 4
    assert splits["train"]["sizes"] == {"56x40": 8}
    assert splits["train"]["bytes"] == sum(p.stat().st_size for p in packed.glob("train-*.tar"))


@pytest.fixture
def json_packed(raw, tmp_path):
    """The conftest pack with its index in the manifest (`--index json`): what these edits damage."""
    from pairload.pack.writer import PackOptions, pack

    out = tmp_path / "json-shards"
    pack(raw, out, PackOptions(workers=1, shard_size=64 * 1024, index="json"))
    return out


def _edit_manifest(packed, edit):
    path = packed / "manifest.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


def _floats(field):
    def edit(doc):
        idx = doc["splits"]["train"]["shards"][1]["index"]
        idx[field] = [[float(v) for v in x] if isinstance(x, list) else float(x) for x in idx[field]]
    return edit


@pytest.mark.parametrize("field", ["low", "high", "hw", "crc32"])
def test_float_numbers_in_the_index_are_refused_naming_the_field(json_packed, field):
    packed = json_packed
    _edit_manifest(packed, _floats(field))
    match = (rf"manifest.json: split 'train': train-000001.tar: index \"{field}\" holds \[?[0-9]+\.0.* for sample 0 "
             r"\((a list of integers|an integer) expected\); the manifest is damaged or was edited")
    with pytest.raises(ShardError, match=match):
        verify(packed)
    with pytest.raises(ShardError, match=match):
        open_shards(packed, "train")


def test_a_float_in_shares_high_is_refused_naming_the_field(tmp_path):
    from pairload.pack import PackOptions, pack

    make_raw(tmp_path / "raw", 2)
    (tmp_path / "pairs.txt").write_text("low/00000.png high/00000.png\nlow/00001.png high/00000.png\n")
    pack(tmp_path / "raw", tmp_path / "s", PackOptions(workers=1, pairs_file=str(tmp_path / "pairs.txt"), index="json"))
    _edit_manifest(tmp_path / "s", lambda d: d["splits"]["train"]["shards"][0]["index"].update(shares_high=[-1, 0.0]))
    with pytest.raises(ShardError, match=r"manifest.json: train-000000.tar: index \"shares_high\" holds 0.0 for "
                                         r"sample 1 \(an integer expected\); the manifest is damaged or was edited"):
        verify(tmp_path / "s")


@pytest.mark.parametrize("edit, match", [
    (lambda d: d["splits"]["train"]["shards"][0].pop("sha256"),
     r"train-000000.tar: \"sha256\" is None, expected a str"),
    (lambda d: d["splits"]["train"]["shards"][0].update(file="../../etc/passwd"),
     r"split 'train': shard 0: \"file\" is '../../etc/passwd', expected a file in the shard folder named train-NNNNNN"),
    (lambda d: d["splits"]["train"]["shards"][0].update(file="test-000000.tar"), r"\"file\" is 'test-000000.tar'"),
    (lambda d: d["splits"]["train"]["shards"][0]["index"]["hw"].pop(), r"index \"hw\" should list \d+ entries"),
    (lambda d: d["splits"]["train"].update(samples=99), r"\"samples\" is 99 but its shards hold 8"),
    (lambda d: d["splits"]["test"].update(shards=[]), r"split 'test': expected an object with a non-empty \"shards\""),
    (lambda d: (index := d["splits"]["train"]["shards"][0]["index"]).update(hw=[[1]] * len(index["hw"])),
     r"split 'train' has a malformed index"),
])
def test_a_damaged_manifest_is_refused_naming_the_field(json_packed, edit, match):
    packed = json_packed
    _edit_manifest(packed, edit)
    with pytest.raises(ShardError, match=match):
        verify(packed)
        open_shards(packed, "train")


def test_verify_warns_about_leftovers_of_an_interrupted_pack(packed):
    import subprocess
    import sys

    (packed / "train-000009.tar.partial").write_bytes(b"\0" * 4096)
    assert verify(packed).leftovers == ("train-000009.tar.partial",)
    res = subprocess.run([sys.executable, "-m", "pairload.cli", "verify", str(packed)], capture_output=True, text=True)
    assert res.returncode == 0 and "ok:" in res.stdout
    assert "warning: 1 temporary file(s) of an interrupted pack (4.0 KB: train-000009.tar.partial)" in res.stderr


def test_a_mix_maps_every_shard_of_its_sources(packed):
    from pairload.read.shards import ShardDataset, open_shards

    mix = open_shards({"a": packed, "b": (packed, "test")})
    a, b = ShardDataset(packed, "train"), ShardDataset(packed, "test")
    assert mix.shard_samples == a.shard_samples + b.shard_samples
    assert sum(mix.shard_samples) == len(mix)
    last = len(a.files) + len(b.files) - 1
    assert mix.shard_map(len(a.files)).tobytes() == b.shard_map(0).tobytes()
    assert len(mix.shard_map(last)) == b.files[-1].stat().st_size
    with pytest.raises(IndexError, match="past the last shard"):
        mix.shard_map(last + 1)


def test_tar_headers_are_the_bytes_tarfile_writes_for_every_name():
    """`schema.tar_header` builds short ASCII names' blocks itself: byte for byte what tarfile writes, whatever the
    name's characters and length (99 is the longest that fits a ustar block; 100 and non-ASCII take a pax header) and
    the size; and tarfile reads back the name and size."""
    import io
    import random
    import string
    import tarfile

    rnd = random.Random(7)
    names = ["a", "x" * 98, "x" * 99, "x" * 100, "k+0001.low.npy", "é.json", "sp ace/.json"]
    names += ["".join(rnd.choice(string.printable[:95]) for _ in range(rnd.randint(1, 99))) for _ in range(300)]
    for name in names:
        for size in (0, 1, 511, 512, 720_128, 0o77777777776, 0o77777777777):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = size, schema.TAR_MTIME, schema.TAR_MODE
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            want = info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
            got = schema.tar_header(name, size)
            assert got == want, (name, size)
            assert schema.header_size(name, size) == len(got)
        archive = schema.tar_header(name, 5) + b"hello".ljust(512, b"\0") + bytes(1024)
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tf:
            member = tf.next()
            assert (member.name, member.size, tf.extractfile(member).read()) == (name, 5, b"hello")
