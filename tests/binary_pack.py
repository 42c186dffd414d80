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
