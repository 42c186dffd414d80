"""Make a version-5 pack (each split's index in a column file beside the shards) from a packed version-1..4 folder,
through the format's own writing side (`binindex.index_columns`, `columns.write_columns`), so that readers of the
binary index are tested against packs whose JSON index tells what the binary one must say."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from pairload.format import binindex, schema
from pairload.format import sensor as sensor_doc
from pairload.format.atomic import write_json_atomic
from pairload.format.columns import write_columns


def to_binary(folder: Path, out: Path | None = None) -> Path:
    """`folder` converted to version 5 (in place, or into a copy at `out`: the shards themselves are unchanged)."""
    if out is not None:
        shutil.copytree(folder, out)
        folder = out
    path = folder / schema.MANIFEST
    doc = json.loads(path.read_text())
    assert doc["version"] < schema.VERSION_BINARY, doc["version"]
    for split, entry in doc["splits"].items():
        idx = schema.split_index(doc, split, str(path))
        jsons = [sh.pop("index") for sh in entry["shards"]]
        compressed = entry.get(schema.COMPRESSION) is not None
        shares = any(schema.SHARES_HIGH in j for j in jsons)
        columns = {binindex.SHARD: idx.shard, "hw": idx.hw, "low": idx.low, "high": idx.high, "crc32": idx.crc}
        if compressed:
            columns[schema.LOW_BYTES], columns[schema.HIGH_BYTES] = idx.low_bytes, idx.high_bytes
        if shares:
            columns[schema.SHARES_HIGH] = np.concatenate(
                [j.get(schema.SHARES_HIGH, [-1] * len(j["key"])) for j in jsons]).astype(np.int32)
        for name in sensor_doc.index_fields(entry):
            columns[name] = np.array([row for j in jsons for row in j[name]], dtype=np.float64)
        arrays = binindex.index_columns(idx.keys, columns, entry, compressed, shares)
        name = binindex.index_name(split)
        sha, size = write_columns(folder / name, arrays)
        entry[binindex.FIELD] = {"file": name, "bytes": size, "sha256": sha}
    doc["version"] = schema.VERSION_BINARY
    write_json_atomic(path, doc)
    return folder


def add_sensor(folder: Path, split: str = "train") -> None:
    """Make `split` of a version-4 pack camera-raw-like: a "sensor" entry (a packed mosaic beside a developed
    target) and each sample's ratio (100 + its number), exposures and levels in its shards' index."""
    path = folder / schema.MANIFEST
    doc = json.loads(path.read_text())
    entry = doc["splits"][split]
    entry[sensor_doc.FIELD] = {"low": {"kind": sensor_doc.PACKED, "cameras": ["Test"], "patterns": ["RGGB"]},
                               "high": {"kind": sensor_doc.DEVELOPED}, "ratio_cap": 300}
    i = 0
    for sh in entry["shards"]:
        idx = sh["index"]
        idx[sensor_doc.RATIO], idx[sensor_doc.EXPOSURE], idx[sensor_doc.LEVELS] = [], [], []
        for _ in idx["key"]:
            idx[sensor_doc.RATIO].append(100.0 + i)
            idx[sensor_doc.EXPOSURE].append([0.1, 10.0 + i])
            idx[sensor_doc.LEVELS].append([512.0 + i, 513.0, 514.0, 515.0, 16383.0])
            i += 1
    write_json_atomic(path, doc)


def synthetic_key(i: int) -> str:
    return f"scene+{i:08d}"


def synthetic_split(folder: Path, n: int, *, shards: int, shard_files: bool = False) -> None:
    """A version-5 manifest and index of `n` samples of 64x64 (keys `synthetic_key`) in `shards` shards, written
    directly; `shard_files`: sparse shard files of the listed sizes (nothing else in them), so that a dataset opens
    them."""
    folder.mkdir(parents=True)
    counts = [n // shards + (k < n % shards) for k in range(shards)]
    shard = np.repeat(np.arange(shards, dtype=np.int32), counts)
    within = np.arange(n, dtype=np.int64) - np.repeat(np.cumsum([0] + counts[:-1]), counts)
    stride = 2 * (64 * 64 * 3 + 1024)
    entry = {"samples": n, "shards": [{"file": schema.shard_name("train", k), "samples": c, "bytes": c * stride + 1024,
                                       "sha256": "0" * 64} for k, c in enumerate(counts)]}
    columns = {binindex.SHARD: shard, "hw": np.full((n, 2), 64), "low": 1024 + within * stride,
               "high": 1024 + within * stride + stride // 2, "crc32": np.zeros((n, 2), np.uint32)}
    name = binindex.index_name("train")
    keys = [synthetic_key(i) for i in range(n)]
    sha, size = write_columns(folder / name, binindex.index_columns(keys, columns, entry, False, False))
    entry[binindex.FIELD] = {"file": name, "bytes": size, "sha256": sha}
    doc = {"format": schema.FORMAT, "version": schema.VERSION_BINARY, "splits": {"train": entry}}
    write_json_atomic(folder / schema.MANIFEST, doc)
    if shard_files:
        for sh in entry["shards"]:
            with open(folder / sh["file"], "wb") as fh:
                fh.truncate(sh["bytes"])
