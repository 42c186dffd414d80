"""A large mapped column read for the rows asked (`format.columns.paged`, and a large index's keys) is read without
read-ahead (`format.columns.read_at_random`: its pages are marked MADV_RANDOM, "rr" in /proc/self/smaps), so a
block's random rows of an index bigger than memory read a page each from disk, not the read-ahead window around
each; it reads the same rows, in order too."""

from __future__ import annotations

import mmap
import sys

import numpy as np
import pytest

from pairload.format import columns

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")


def mapping_of(array: np.ndarray) -> mmap.mmap:
    """The mmap a mapped column views (through its chain of bases)."""
    base = array
    while isinstance(base, (np.ndarray, memoryview)):
        base = base.base if isinstance(base, np.ndarray) else base.obj
    assert isinstance(base, mmap.mmap)
    return base


def random_read_flags(mm: mmap.mmap) -> list[bool]:
    """Whether each of the mapping's areas (in address order) is marked for random reads ("rr" in its VmFlags)."""
    base = np.frombuffer(mm, dtype=np.uint8, count=0).ctypes.data
    end = base + len(mm)
    flags, inside = [], False
    with open("/proc/self/smaps") as fh:
        for line in fh:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo < end and hi > base
            elif inside and line.startswith("VmFlags:"):
                flags.append("rr" in line.split()[1:])
    return flags


def test_a_large_mapped_column_is_read_without_read_ahead(tmp_path, monkeypatch):
    path = tmp_path / "column"
    values = np.arange(3 << 18, dtype=np.int64)  # 6 MB: three 2 MB columns side by side
    path.write_bytes(values.tobytes())
    with open(path, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    whole = np.frombuffer(mm, dtype=np.int64)
    middle = whole[1 << 18:2 << 18]
    assert columns.paged(middle) is middle and random_read_flags(mm) == [False]  # a small file: kept as it is
    monkeypatch.setattr(columns, "PAGED_ABOVE", 1 << 20)
    col = columns.paged(middle)
    assert random_read_flags(mm) == [False, True, False]  # the column's pages alone
    rows = np.random.default_rng(1).integers(0, len(middle), 4096)
    assert np.array_equal(col[rows], values[(1 << 18) + rows])
    assert np.array_equal(col[1000:200_000], values[(1 << 18) + 1000:(1 << 18) + 200_000])  # read ahead: the same
    assert np.array_equal(whole[rows], values[rows])  # the rest of the file as it was
    del whole, middle, col


def test_a_large_index_s_keys_are_read_without_read_ahead(tmp_path, monkeypatch):
    keys = [f"{i:08d}" for i in range(1 << 16)]
    blob, ends = columns.Keys.encode(keys)
    path = tmp_path / "keys"
    columns.write_columns(path, {"blob": blob, "ends": ends})
    monkeypatch.setattr(columns, "PAGED_ABOVE", 1 << 10)
    f = columns.ColumnFile(path)
    assert random_read_flags(mapping_of(f.columns["blob"])) == [False]
    k = columns.Keys(f.columns["blob"], f.columns["ends"])
    # the keys start on the header's page: all of it
    assert k.paged and random_read_flags(mapping_of(f.columns["blob"])) == [True]
    rows = np.random.default_rng(2).integers(0, len(keys), 300)
    assert k.take(rows) == [keys[i] for i in rows]
    del k, f


def test_a_large_index_is_read_without_read_ahead_once_opened(tmp_path, monkeypatch):
    from conftest import make_raw
    from pairload.format import binindex, schema
    from pairload.pack.writer import PackOptions, pack

    make_raw(tmp_path / "raw", n=6)
    pack(tmp_path / "raw", tmp_path / "p", PackOptions(workers=1))
    entry = schema.read_manifest(tmp_path / "p")["splits"]["train"]
    path = tmp_path / "p" / entry[binindex.FIELD]["file"]
    keys, cols = binindex.open_index(path, entry, "train", str(path))
    assert random_read_flags(mapping_of(keys.blob)) == [False]  # a small index: as it is
    monkeypatch.setattr(columns, "PAGED_ABOVE", 0)
    for known in (False, True):
        keys, cols = binindex.open_index(path, entry, "train", str(path), known=known)
        assert all(random_read_flags(mapping_of(keys.blob)))  # the keys and every column
        assert np.array_equal(cols["shard"], np.zeros(len(keys), np.int32)) and len(keys) == entry["samples"]
