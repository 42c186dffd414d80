"""A split's sequence table as columns of its index file (`format.sequences.TABLE`), read for the sequences asked:
the clip units worked out from it (by bisection, or from a table of blocks) are those of the whole-array reference,
for every clip policy; a pack whose table moved into its index plans the very batches of the same pack listing it in
its manifest, alone and mixed; a damaged table is refused by name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from pairload import make_loader, open_shards
from pairload.errors import ShardError
from pairload.format import sequences as fmt
from pairload.format.binindex import FIELD as INDEX
from pairload.format.schema import MANIFEST
from pairload.format.sequences import Joined, Sequences
from pairload.pack.sequences import table_into_index
from pairload.plan import clips as clip_plan
from pairload.plan.clips import Clips, ClipUnits, units_per
from pairload.plan.deals import Shards
from pairload.read.shards import info, verify

from clipdata import make_video_raw, pack_video

POLICIES = ["3", "3,short=pad", "3,short=drop", "3,stride=2,short=pad", "2,stride=3,start=grid,short=drop", "1"]


class NotWhole(Joined):
    """A column that refuses to be read whole (the planner reads a table for the sequences it asks)."""

    def __array__(self, dtype=None, copy=None):
        raise AssertionError("the table was read whole")


def _reference(clips: Clips, counts: np.ndarray, units: np.ndarray):
    """(sequence, number) of each unit from every sequence's units summed whole, as the planner did before."""
    per = units_per(clips, counts)
    ends = np.cumsum(per)
    seq = np.searchsorted(ends, units, side="right")
    return seq, units - (ends - per)[seq]


@pytest.mark.parametrize("spec", POLICIES)
@pytest.mark.parametrize("lazy", [False, True])
def test_units_from_the_table_are_the_whole_arrays_units(spec, lazy, monkeypatch):
    monkeypatch.setattr(clip_plan, "BLOCK", 4)  # many blocks, passes of several chunks
    monkeypatch.setattr(clip_plan, "CHUNK_BLOCKS", 3)
    rng = np.random.default_rng(7)
    counts = rng.integers(1 if "short" in spec else 3, 12, size=203)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    names = [f"s{k}" for k in range(len(counts))]
    seqs = Sequences(names, starts, counts)
    if lazy:  # read for the sequences asked: bisection, never an array of the table
        seqs = Sequences.table(names, NotWhole([starts], [0]), int(counts.sum()), (counts.min(), counts.max()))
    clips = Clips.of(spec)
    frames = int(counts.sum())
    key_hash = rng.integers(0, 2 ** 63, size=frames, dtype=np.int64).astype(np.uint64)
    hw = np.tile([[40, 56]], (frames, 1))
    units = ClipUnits.build(clips, seqs, key_hash, hw, "s", bounds=((40, 56), (40, 56)))
    per = units_per(clips, counts)
    assert len(units) == per.sum()
    assert (units.blocks is None) == (clips.stride == 1 and counts.min() >= clips.frames)
    every = np.arange(len(units))
    seq, pos = units.locate(every)
    want_seq, want_pos = _reference(clips, counts, every)
    assert np.array_equal(seq, want_seq) and np.array_equal(pos, want_pos)
    before = units.units_before(np.arange(len(counts) + 1))
    assert np.array_equal(before, np.concatenate([[0], np.cumsum(per)]))
    rows = units.frame_rows(every, seed=1, epoch=2, draw=None)
    assert np.all(rows >= starts[seq][:, None]) and np.all(rows < (starts + counts)[seq][:, None])
    grid = ClipUnits.build(Clips(clips.frames, clips.stride, "grid", clips.short), seqs, key_hash, hw, "s",
                           bounds=((40, 56), (40, 56)))
    first = starts[want_seq] + np.minimum(want_pos * clips.stride, counts[want_seq] - 1)
    assert np.array_equal(grid.frame_rows(every, seed=1, epoch=2, draw=None)[:, 0], first)
    assert np.array_equal(units.key_hash[every], fmt_hash(key_hash[starts[want_seq]], want_pos))
    stretches = [50, 0, 700, frames - 750]  # a unit is its first frame's stretch's
    owner = np.searchsorted(np.cumsum(stretches), starts, side="right")
    want = np.bincount(owner, weights=per, minlength=4).astype(int)
    assert [n for _, n in units.groups([(str(k), n) for k, n in enumerate(stretches)])] == want.tolist()
    assert units.shards(Shards(tuple(stretches), 8)).counts == tuple(want.tolist())
    short = counts < clips.frames
    if clips.short == "drop":
        assert units.dropped_count == short.sum() and list(units.dropped) == [names[k] for k in
                                                                             np.flatnonzero(short)[:8]]


def test_joined_columns_read_as_one():
    a, b = np.array([0, 3, 7]), np.array([0, 2])
    joined = Joined([a, b], [0, 10])
    whole = np.array([0, 3, 7, 10, 12])
    assert np.array_equal(np.asarray(joined), whole) and len(joined) == 5
    for lo, hi in [(0, 5), (1, 4), (3, 5), (2, 3), (4, 4), (0, 9)]:
        assert np.array_equal(joined[lo:hi], whole[lo:hi]), (lo, hi)
    assert np.array_equal(joined[np.array([4, 0, 3])], whole[[4, 0, 3]])


def fmt_hash(first: np.ndarray, pos: np.ndarray) -> np.ndarray:
    from pairload.splitmix import splitmix

    return splitmix(first.astype(np.uint64) ^ splitmix(pos.astype(np.uint64)))


@pytest.fixture(scope="module")
def packs(tmp_path_factory) -> tuple[Path, Path]:
    """The same video pack, listing its table in the manifest (as packs made before 2026-11-29) and keeping it in its
    index file."""
    root = tmp_path_factory.mktemp("table")
    make_video_raw(root / "raw", [7, 5, 9, 3, 6])
    listed = pack_video(root / "raw", root / "listed", shard_size=64 * 1024)
    if fmt.in_index(json.loads((listed / MANIFEST).read_text())["splits"]["train"]):  # pack writes it so already
        listed = root / "relisted"
        _list_in_manifest(root / "listed", listed)
    indexed = root / "indexed"
    shutil.copytree(listed, indexed)
    assert table_into_index(indexed) == ["train"] and table_into_index(indexed) == []
    return listed, indexed


def _list_in_manifest(src: Path, out: Path) -> None:
    shutil.copytree(src, out)
    doc = json.loads((out / MANIFEST).read_text())
    entry = doc["splits"]["train"]
    seqs = open_shards(src).sequences
    entry.update(Sequences(list(seqs.names), seqs.starts, seqs.counts, seqs.target, seqs.gaps).to_entry())
    (out / MANIFEST).write_text(json.dumps(doc))


def test_a_table_in_the_index_reads_as_the_listed_one(packs):
    listed, indexed = packs
    entry = json.loads((indexed / MANIFEST).read_text())["splits"]["train"]
    assert entry[fmt.FIELD] == {"table": "index", "count": 5, "frames": [3, 9]}
    a, b = open_shards(listed).sequences, open_shards(indexed).sequences
    assert not a.in_index and b.in_index
    assert list(b.names) == list(a.names) and b.starts.tolist() == a.starts.tolist() == [0, 7, 12, 21, 24]
    assert b.counts.tolist() == a.counts.tolist() and (b.target, b.gaps, b.frames) == (a.target, a.gaps, 30)
    assert b.count_of([4, 0]).tolist() == [6, 7] and b.sequence_of([0, 6, 7, 29]).tolist() == [0, 0, 1, 4]
    assert info(indexed)["train"]["sequences"] == info(listed)["train"]["sequences"]
    assert verify(indexed).samples == 30


@pytest.mark.parametrize("spec", ["4,short=pad", "3,stride=2,start=grid,short=drop", "2"])
@pytest.mark.parametrize("sources", [("indexed",), ("listed", "indexed"), ("indexed", "indexed")])
def test_a_table_in_the_index_plans_the_same_batches(packs, spec, sources):
    """Alone, and mixed with a listed table or another table in an index (its sources' tables read as one)."""
    listed, indexed = packs
    opts = dict(batch_size=2, crop=16, clips=spec, seed=3, last_batch="partial")
    pack = {"listed": listed, "indexed": indexed}
    mix = len(sources) > 1
    a = make_loader("ram", {f"s{k}": listed for k in range(len(sources))} if mix else listed, **opts)
    b = make_loader("ram", {f"s{k}": pack[name] for k, name in enumerate(sources)} if mix else indexed, **opts)
    assert len(a.units) == len(b.units) and len(a.plan()) == len(b.plan()) > 0
    for p, q in zip(a.plan(), b.plan()):
        assert np.array_equal(p.index, q.index) and np.array_equal(p.y, q.y) and np.array_equal(p.code, q.code)


def test_a_worker_reads_a_table_in_the_index(packs):
    """The loader's workers map the index again (its table with it) and deliver the clips of the listed pack."""
    listed, indexed = packs
    opts = dict(batch_size=2, crop=16, clips="4,short=pad", seed=5, last_batch="partial")
    want = [b.keys for b in make_loader("wds", listed, **opts)]
    assert [b.keys for b in make_loader("wds", indexed, num_workers=1, **opts)] == want and len(want) == 8


def _edited(indexed: Path, out: Path, **table) -> Path:
    shutil.copytree(indexed, out)
    doc = json.loads((out / MANIFEST).read_text())
    doc["splits"]["train"][fmt.FIELD].update(table)
    (out / MANIFEST).write_text(json.dumps(doc))
    return out


def test_a_damaged_table_is_refused_by_name(packs, tmp_path):
    _, indexed = packs
    with pytest.raises(ShardError, match=r"the \"sequences\" entry says its sequences hold 3 to 8 frames, its table "
                                         r"3 to 9; the manifest is damaged"):
        open_shards(_edited(indexed, tmp_path / "bounds", frames=[3, 8]))
    with pytest.raises(ShardError, match=r"column 'seq_start' is int64\[5\], expected int64\[6\]"):
        open_shards(_edited(indexed, tmp_path / "count", count=6))
    with pytest.raises(ShardError, match=r"the \"sequences\" entry says its sequences hold \[0, 9\] frames, not "
                                         r"\[fewest, most\] \(at least 1\)"):
        open_shards(_edited(indexed, tmp_path / "zero", frames=[0, 9]))
    doc = json.loads((indexed / MANIFEST).read_text())
    entry = dict(doc["splits"]["train"])
    entry.pop(INDEX)
    with pytest.raises(ShardError, match=r"keeps its table in the split's index file, which this split has not"):
        Sequences.from_entry(entry, 30, "w")
