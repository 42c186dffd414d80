"""Shard format version 5: each split's per-sample index in a column file beside the shards, memory-mapped. A pack
and its version-5 conversion (`binary_pack.to_binary`) give the same batches to every loader over shards, resume
the same, verify the same; a URL's index is fetched once per node; a pickled index is "map this file again";
damaged index files are refused by name; an index of 200k pairs costs a process less than 64 B a pair of private
memory. (Packs of versions 1-4 keep loading: test_shards, test_compression, test_pack_typed, test_members.)"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from binary_pack import add_sensor, synthetic_key, synthetic_split, to_binary
from conftest import make_raw
from pairload import make_loader, open_shards
from pairload.bench.httpserver import StaticServer
from pairload.errors import LoaderError, ShardError
from pairload.format import binindex, schema
from pairload.format.columns import Keys
from pairload.format.members import Member, Members
from pairload.pack.writer import PackOptions, pack
from pairload.plan import key_hashes
from pairload.read.shards import info, verify
from typed_split import write_typed_split


@pytest.fixture(scope="module")
def packs(tmp_path_factory):
    """{name: (version 1-4 pack, version-5 pack)}: "plain" (14 + 3 pairs of 40x56 in 64 KB shards) and "zstd"
    (compressed, pairs 1 and 4 using pair 0's and 3's target), each packed with `--index json` and with the default
    binary index; "sensor" (a camera-raw-like split written by hand: uint16 ×4 input, uint16 ×3 target at twice its
    size, ratios and levels) and its version-5 conversion."""
    root = tmp_path_factory.mktemp("binindex")
    make_raw(root / "raw", 14, split="train")
    make_raw(root / "raw", 3, split="test", start=100)
    pack(root / "raw", root / "plain", PackOptions(workers=1, shard_size=64 * 1024, index="json"))
    pack(root / "raw", root / "plain-v5", PackOptions(workers=1, shard_size=64 * 1024))
    out = {"plain": root / "plain"}
    if _has_zstd():
        make_raw(root / "shared", 9)
        lines = [f"low/{i:05d}.png high/{i - 1 if i in (1, 4) else i:05d}.png" for i in range(9)]
        (root / "pairs.txt").write_text("\n".join(lines) + "\n")
        for name, index in (("zstd", "json"), ("zstd-v5", "binary")):
            pack(root / "shared", root / name, PackOptions(workers=1, shard_size=64 * 1024, compress="zstd",
                                                          pairs_file=str(root / "pairs.txt"), index=index))
        out["zstd"] = root / "zstd"
    write_typed_split(root / "sensor", Members(Member("uint16", 4), Member("uint16", 3), scale=2),
                      [(16, 20)] * 7, per_shard=3)
    add_sensor(root / "sensor")
    out["sensor"] = root / "sensor"
    return {name: (folder, root / f"{name}-v5" if name != "sensor" else to_binary(folder, root / f"{name}-v5"))
            for name, folder in out.items()}


def _has_zstd() -> bool:
    import importlib.util

    return importlib.util.find_spec("zstandard") is not None


def epoch(loader, e: int) -> list:
    loader.set_epoch(e)
    out = [(list(b.keys), b.low.clone(), b.high.clone(), b.padded.clone(),
            None if b.sensor is None else b.sensor.values.clone()) for b in loader]
    loader.close()
    return out


def same(a: list, b: list) -> bool:
    return len(a) == len(b) > 0 and all(
        x[0] == y[0] and all((u is None and v is None) or torch.equal(u, v) for u, v in zip(x[1:], y[1:]))
        for x, y in zip(a, b))


KINDS = [("ram", {}), ("ram", {"num_workers": 2}), ("wds", {"num_workers": 1}),
         pytest.param("dali-external", {}, marks=pytest.mark.dali),
         pytest.param("ram", {"device": "cuda"}, marks=pytest.mark.gpu)]  # the kernel cuts from the mapped index


@pytest.mark.parametrize("name", ["plain", "zstd", "sensor"])
@pytest.mark.parametrize("kind,backend", KINDS)
def test_a_binary_pack_gives_every_loader_the_batches_of_its_json_pack(packs, name, kind, backend):
    if name not in packs:
        pytest.skip("zstandard is not installed")
    if name != "plain" and (kind == "dali-external" or backend.get("device") == "cuda"):
        pytest.skip("one pack is enough for DALI and the GPU (their sources are the ram loader's cutters)")
    json_pack, binary = packs[name]
    opts = dict(batch_size=3, crop=8 if name == "sensor" else 24, seed=4, **backend)
    for e in (0, 1):
        a = epoch(make_loader(kind, json_pack, **opts), e)
        b = epoch(make_loader(kind, binary, **opts), e)
        assert same(a, b)
    if name == "sensor":
        assert b[0][4] is not None and float(b[0][4][:, 0].min()) >= 100  # the ratios travelled


def test_the_index_is_mapped_not_parsed_and_says_what_the_json_said(packs):
    for json_pack, binary in packs.values():
        for split in schema.read_manifest(json_pack)["splits"]:
            a, b = open_shards(json_pack, split), open_shards(binary, split)
            assert isinstance(b.keys, Keys) and list(b.keys) == list(a.keys)
            assert b.index.mapped is not None and not b.index.hw.flags.writeable  # a view of the map
            np.testing.assert_array_equal(b.key_hash, key_hashes(list(a.keys)))  # the planner's hash, stored
            for field in ("shard", "hw", "low", "high", "crc", "low_bytes", "high_bytes", "shard_samples"):
                np.testing.assert_array_equal(getattr(a.index, field), getattr(b.index, field), err_msg=field)
            assert a.members == b.members and a.index.files == b.index.files
            for i in (0, len(a) - 1):
                assert all(np.array_equal(x, y) for x, y in zip(a[i][1:], b[i][1:]))
    assert open_shards(packs["sensor"][1]).index.shares_high is None
    if "zstd" in packs:
        shards = schema.read_manifest(packs["zstd"][0])["splits"]["train"]["shards"]
        shares = [lead for sh in shards for lead in sh["index"].get(schema.SHARES_HIGH, [-1] * sh["samples"])]
        assert open_shards(packs["zstd"][1]).index.shares_high.tolist() == shares and shares.count(-1) == 7


def test_a_binary_split_mixes_with_a_json_one(packs):
    json_pack, binary = packs["plain"]
    opts = dict(batch_size=4, crop=16, seed=2, weights={"a": 1, "b": 2}, epoch_size=18)
    a = epoch(make_loader("ram", {"a": json_pack, "b": (json_pack, "test")}, **opts), 1)
    b = epoch(make_loader("ram", {"a": binary, "b": (json_pack, "test")}, **opts), 1)
    assert same(a, b) and {k.split("/")[0] for x in b for k in x[0]} == {"a", "b"}


def test_resume_mid_epoch_is_the_same(packs):
    json_pack, binary = packs["plain"]
    opts = dict(batch_size=2, crop=16, seed=9)
    states = []
    for folder in (json_pack, binary):
        cut = make_loader("ram", folder, **opts)
        cut.set_epoch(1)
        it = iter(cut)
        for _ in range(3):
            next(it)
        states.append(json.loads(json.dumps(cut.state_dict())))
        cut.close()
    assert states[0] == states[1]
    tails = []
    for folder in (json_pack, binary):  # the rest of the epoch, re-dealt over two ranks
        resumed = make_loader("ram", folder, world_size=2, rank=1, **opts)
        resumed.load_state_dict(states[1])
        tails.append([(list(b.keys), b.low.clone()) for b in resumed])
        resumed.close()
    assert tails[0][0][0] == tails[1][0][0] and len(tails[0]) == len(tails[1]) > 0
    assert all(x[0] == y[0] and torch.equal(x[1], y[1]) for x, y in zip(*tails))


def test_verify_and_info_read_the_index_file(packs, tmp_path):
    json_pack, binary = packs["plain"]
    assert verify(binary).samples == verify(json_pack).samples == 17
    facts = info(binary)["train"]
    size = (binary / "train.index").stat().st_size
    assert facts["index"] == {"file": "train.index", "bytes": size, "bytes_per_pair": round(size / 14, 1)}
    assert {k: v for k, v in facts.items() if k != "index"} == info(json_pack)["train"]
    damaged = Path(shutil.copytree(binary, tmp_path / "d"))
    doc = json.loads((damaged / schema.MANIFEST).read_text())
    sh = doc["splits"]["train"]["shards"][1]
    idx = open_shards(damaged).index
    row = int(idx.shard_samples[0])  # shard 1's first sample
    with open(damaged / sh["file"], "r+b") as fh:
        fh.seek(int(idx.low[row]) + 5)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(ShardError, match=rf"{sh['file']}: key {idx.keys[row]}: {idx.keys[row]}\.low\.npy pixels do "
                                         r"not match their checksum"):
        verify(damaged)


def _truncate(folder: Path) -> None:
    path = folder / "train.index"
    path.write_bytes(path.read_bytes()[:-64])


def _flip(folder: Path) -> None:  # one byte of a key: the file still parses, only its sha256 tells
    path = folder / "train.index"
    data = bytearray(path.read_bytes())
    keys = binindex.open_index(path, json.loads((folder / schema.MANIFEST).read_text())["splits"]["train"],
                               "train", str(path))[0]
    data[data.find(keys.blob.tobytes())] ^= 0x01
    path.write_bytes(bytes(data))


def _another_packs(folder: Path) -> None:  # the same split packed from other images: as long, other bytes
    other = folder.parent / "other-raw"
    make_raw(other, 14, split="train", start=500)
    pack(other, folder.parent / "other", PackOptions(workers=1, shard_size=64 * 1024))
    shutil.copy(folder.parent / "other" / "train.index", folder / "train.index")


DAMAGES = [
    (lambda f: (f / "train.index").unlink(), r"train\.index: missing; it is split 'train'\'s index, listed in the "
     r"manifest: copy the pack's own file back beside the shards, or re-run the same `pairload pack` command"),
    (_truncate, r"train\.index: \d+ bytes, the manifest says \d+; the index is truncated or belongs to another "
     r"pack: copy the pack's own file back"),
    (_flip, r"train\.index: sha256 [0-9a-f]{16}… differs from the manifest's [0-9a-f]{16}…; the index was changed "
     r"or belongs to another pack: copy the pack's own file back beside the shards, or re-run the same"),
    (_another_packs, r"train\.index: sha256 [0-9a-f]{16}… differs from the manifest's [0-9a-f]{16}…; the index was "
     r"changed or belongs to another pack"),
    (lambda f: _edit(f, lambda d: d["splits"]["train"]["index"].update(file="test.index")),
     r"manifest\.json: split 'train': \"index\" names 'test\.index', expected an object naming its index file "
     r"'train\.index'; the manifest is damaged or was edited: re-run the same `pairload pack` command"),
]


def _edit(folder: Path, change) -> None:
    doc = json.loads((folder / schema.MANIFEST).read_text())
    change(doc)
    (folder / schema.MANIFEST).write_text(json.dumps(doc))


@pytest.mark.parametrize("damage,message", DAMAGES)
def test_a_damaged_index_file_is_one_line_naming_it_and_the_fix(packs, tmp_path, damage, message):
    folder = Path(shutil.copytree(packs["plain"][1], tmp_path / "v5"))
    damage(folder)
    for action in (lambda: make_loader("ram", folder, batch_size=2, crop=16), lambda: verify(folder),
                   lambda: info(folder)):
        with pytest.raises(ShardError, match=message) as caught:
            action()
        assert "\n" not in str(caught.value)


def test_an_index_found_whole_is_not_read_again_until_it_changes(packs, tmp_path, monkeypatch):
    folder = Path(shutil.copytree(packs["plain"][1], tmp_path / "v5"))
    make_loader("ram", folder, batch_size=2, crop=16)  # hashed and checked whole: recorded
    assert (folder / f"train.index{binindex.VERIFIED}").is_file()

    def unread(*args, **kwargs):
        raise AssertionError("the index file was read whole again")

    with monkeypatch.context() as m:
        m.setattr(binindex, "sha256_of", unread)
        assert len(make_loader("ram", folder, batch_size=2, crop=16)) > 0  # the record stands for the reading
        with pytest.raises(AssertionError, match="read whole again"):
            verify(folder)  # `pairload verify` always reads it
    _flip(folder)  # changed: its stamp is not the recorded one
    with pytest.raises(ShardError, match=r"train\.index: sha256 [0-9a-f]{16}… differs from the manifest's"):
        make_loader("ram", folder, batch_size=2, crop=16)


def test_the_first_loader_after_pack_does_not_read_the_index_pack_just_wrote(tmp_path, monkeypatch):
    make_raw(tmp_path / "raw", n=6)
    pack(tmp_path / "raw", tmp_path / "p", PackOptions(workers=1))

    def unread(*args, **kwargs):
        raise AssertionError("the index file was read whole")

    with monkeypatch.context() as m:
        m.setattr(binindex, "sha256_of", unread)
        assert len(make_loader("ram", tmp_path / "p", batch_size=2, crop=16)) > 0
    with open(tmp_path / "p" / "train.index", "r+b") as fh:  # a byte changed since: no longer the file recorded
        fh.seek(-1, os.SEEK_END)
        last = fh.read(1)
        fh.seek(-1, os.SEEK_END)
        fh.write(bytes([last[0] ^ 1]))
    with pytest.raises(ShardError, match=r"train\.index: sha256 [0-9a-f]{16}… differs from the manifest's"):
        make_loader("ram", tmp_path / "p", batch_size=2, crop=16)


def test_a_pickled_index_is_its_file_not_its_rows(tmp_path):
    sizes = {}
    for n in (100, 20_000):
        folder = tmp_path / f"n{n:06d}"
        synthetic_split(folder, n, shards=4)
        idx = schema.split_index(schema.read_manifest(folder), "train", "manifest.json", folder)
        data = pickle.dumps(idx, protocol=pickle.HIGHEST_PROTOCOL)
        sizes[n] = len(data)
        back = pickle.loads(data)
        assert list(back.keys[:3]) == list(idx.keys[:3]) and np.array_equal(back.key_hash, idx.key_hash)
        assert np.array_equal(back.hw, idx.hw) and back.mapped == idx.mapped
    assert sizes[20_000] - sizes[100] < 16 and sizes[100] < 4096, sizes  # only the counts' digits differ
    # a file replaced after the loader opened it (a re-pack into the same folder) is not mapped by its workers
    shutil.copy(folder / "train.index", tmp_path / "copy")
    os.replace(tmp_path / "copy", folder / "train.index")
    with pytest.raises(LoaderError, match=r"train\.index: replaced or rewritten since the loader opened it .*make "
                                          "the loader again"):
        pickle.loads(data)


def test_a_remote_binary_pack_fetches_its_index_once_per_node(packs, tmp_path):
    json_pack, binary = packs["plain"]
    opts = dict(batch_size=3, crop=16, seed=1)
    with StaticServer(binary) as srv:
        for kind, workers in (("wds", 2), ("ram", 0)):  # workers map the cached copy; a second loader finds it there
            local = epoch(make_loader(kind, json_pack, num_workers=workers, **opts), 0)
            remote = make_loader(kind, srv.url, cache_dir=tmp_path / "cache", num_workers=workers, **opts)
            assert same(epoch(remote, 0), local)
        assert srv.gets(".index") == ["/train.index"]
        sha = schema.read_manifest(binary)["splits"]["train"]["index"]["sha256"]
        assert [p.name for p in (tmp_path / "cache" / "shards").glob("*.index")] == [f"{sha}.index"]  # by its sha256
        assert verify(srv.url, cache_dir=tmp_path / "cache").samples == 17
        assert info(srv.url)["train"]["index"]["bytes"] == (binary / "train.index").stat().st_size


@pytest.mark.slow
def test_an_index_of_200k_pairs_costs_a_process_under_64_bytes_a_pair(tmp_path):
    n = 200_000
    folder = tmp_path / "big"
    synthetic_split(folder, n, shards=50, shard_files=True)
    script = textwrap.dedent(f"""
        import json, time
        from pairload.format import schema
        from pairload.loaders.base import LoaderOptions, PlannedLoader
        from pairload.read.shards import ShardDataset

        def anon():
            for line in open("/proc/self/status"):
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024

        opts = LoaderOptions.build(batch_size=64, crop=32)
        t = time.perf_counter()
        index = schema.split_index(schema.read_manifest({str(folder)!r}), "train", "manifest.json", {str(folder)!r})
        took = time.perf_counter() - t
        del index
        before = anon()
        ds = ShardDataset({str(folder)!r})
        loader = PlannedLoader(ds.keys, ds.sizes, "train", opts, key_hash=ds.key_hash)
        assert len(loader) == {n} // 64 and loader.keys[0] == {synthetic_key(0)!r}
        assert ds.keys[-1] == {synthetic_key(n - 1)!r}
        print(json.dumps({{"bytes": anon() - before, "took": took}}))  # the private memory the index costs
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH",
                                                                                                       "")]))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["bytes"] / n < 64 and got["took"] < 1.0, got



@pytest.mark.parametrize("decode_up_to", [Keys.DECODE_UP_TO, 0])
def test_a_batch_of_keys_is_gathered_at_once_and_equals_one_by_one(monkeypatch, decode_up_to):
    """`Keys.take` (a batch's keys from the keys decoded once, or, for a split of more keys than DECODE_UP_TO, in
    one numpy gather or a slice each) gives exactly the keys indexing gives, any order, repeats, negative indices,
    multi-byte and empty keys; an index out of range is an IndexError, as indexing's."""
    monkeypatch.setattr(Keys, "DECODE_UP_TO", decode_up_to)
    keys = ["a", "bé", "", "ccc", "日本/0001", "x" * 300, "\udcff-raw"]
    k = Keys(*Keys.encode(keys))
    rng = np.random.default_rng(0)
    many = rng.integers(-len(keys), len(keys), Keys.GATHER_FROM + 50).tolist()  # numpy's gather of the bytes
    for idx in ([0], [6, 0, 3], [2], [1, 1, 4], [-1, 0, -7], [], rng.integers(0, len(keys), 50).tolist(), many,
                [2] * Keys.GATHER_FROM):
        assert k.take(idx) == [k[i] for i in idx] == [keys[i] for i in idx]
    with pytest.raises(IndexError, match="of 7"):
        k.take([7])
