"""A mix's per-sample columns read through its sources (`read.concat`) give what concatenating them would, for any
rows asked; a large mapped column read for the rows asked lets its pages go (`format.columns.paged`); and the
manifest's size bounds, which spare loaders a scan of every size, must be the index's."""

from __future__ import annotations

import json
import mmap
from pathlib import Path

import numpy as np
import pytest

from conftest import make_raw
from pairload import make_loader
from pairload.errors import ShardError
from pairload.format import columns, schema
from pairload.pack.writer import PackOptions, pack
from pairload.read.concat import Column, PerSource, PrefixedKeys


def test_a_column_of_sources_gathers_what_their_concatenation_holds():
    rng = np.random.default_rng(0)
    parts = [rng.integers(0, 1000, (n, 2)) for n in (5, 0, 17, 3)]
    whole = np.concatenate(parts)
    col = Column(parts, convert=lambda s, rows: rows * (s + 1))
    expected = np.concatenate([p * (s + 1) for s, p in enumerate(parts)])
    idx = rng.integers(-len(whole), len(whole), 50)
    assert col.shape == whole.shape and len(col) == 25
    assert np.array_equal(col[idx], expected[idx]) and np.array_equal(col[7], expected[7])
    assert np.array_equal(np.asarray(col), expected) and np.array_equal(col[3:9], expected[3:9])
    keys = PrefixedKeys(["a", "b"], [["x", "y"], ("p", "q", "r")])
    assert len(keys) == 5 and keys[3] == "b/q" and keys[-1] == "b/r"
    assert keys.take([4, 0, 2, 1]) == ["b/r", "a/x", "b/p", "a/y"] and keys[1:3] == ["a/y", "b/p"]
    with pytest.raises(IndexError):
        keys[5]
    flags = PerSource([True, False, True], [2, 3, 1])
    assert flags[np.array([0, 1, 2, 4, 5])].tolist() == [True, True, False, False, True]
    assert np.asarray(flags).tolist() == [True, True, False, False, False, True]


def private_kb(path: Path) -> int:
    """This process's private pages of its mappings of `path`."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if "-" in line.split(" ", 1)[0] and len(line.split()) >= 5:
            inside = line.endswith(str(path))
        elif inside and line.startswith(("Private_Clean", "Private_Dirty")):
            total += int(line.split()[1])
    return total


def test_a_large_mapped_column_lets_its_pages_go_after_each_read(tmp_path, monkeypatch):
    path = tmp_path / "column"
    values = np.arange(1 << 20, dtype=np.int64)  # 8 MB
    path.write_bytes(values.tobytes())
    with open(path, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    array = np.frombuffer(mm, dtype=np.int64)
    assert columns.paged(array) is array  # under PAGED_ABOVE: kept mapped as it is
    monkeypatch.setattr(columns, "PAGED_ABOVE", 1 << 20)
    col = columns.paged(array)
    rows = np.random.default_rng(1).integers(0, len(values), 4096)
    assert isinstance(col, columns.PagedColumn) and np.array_equal(col[rows], values[rows])
    assert private_kb(path) < 256  # the pages it read are no longer this process's
    assert np.array_equal(array[rows], values[rows]) and private_kb(path) > 1024  # read as it is, they stay
    del array, col


def test_a_manifest_whose_size_bounds_are_not_its_index_is_refused(tmp_path):
    make_raw(tmp_path / "raw", n=4, sizes=[(40, 56), (48, 64), (40, 56), (44, 60)])
    pack(tmp_path / "raw", tmp_path / "p", PackOptions(workers=1))
    doc = json.loads((tmp_path / "p" / schema.MANIFEST).read_text())
    assert doc["splits"]["train"]["min_size"] == [40, 56] and doc["splits"]["train"]["max_size"] == [48, 64]
    doc["splits"]["train"]["min_size"] = [64, 64]  # a crop of 60 would pass unchecked against the bounds
    (tmp_path / "p" / schema.MANIFEST).write_text(json.dumps(doc))
    with pytest.raises(ShardError, match=r"manifest's min_size \[64, 64\] is not its index's \[40, 56\]"):
        make_loader("ram", tmp_path / "p", batch_size=2, crop=60)
