"""Write a split whose members are not the default (e.g. a packed-raw-like uint16 ×4 input beside a uint16 ×3
target at twice its size) straight through `pairload.format.schema`, for tests of the readers, cutters and
loaders before a packer writes such splits. Pixel values are random; tests compare with numpy crops of the same
arrays, kept here in `arrays`."""

from __future__ import annotations

import hashlib
import json
import zlib
from pathlib import Path

import numpy as np

from pairload.format import schema
from pairload.format.members import Members


def write_typed_split(folder: Path, members: Members, sizes: list[tuple[int, int]], *, per_shard: int = 5,
                      split: str = "train", seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Pack len(sizes) samples (input sizes h×w) into `folder`; returns {key: (low, high)} as written."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    arrays, shards = {}, []
    s = members.scale
    for start in range(0, len(sizes), per_shard):
        number = len(shards)
        pieces, pos, index = [], 0, {"key": [], "hw": [], "low": [], "high": [], "crc32": []}
        for i in range(start, min(len(sizes), start + per_shard)):
            h, w = sizes[i]
            key = f"{i:05d}"
            low = rng.integers(0, np.iinfo(members.low.np_dtype).max + 1, (h, w, members.low.channels),
                               dtype=np.int64).astype(members.low.np_dtype)
            high = rng.integers(0, np.iinfo(members.high.np_dtype).max + 1, (h * s, w * s, members.high.channels),
                                dtype=np.int64).astype(members.high.np_dtype)
            arrays[key] = (low, high)
            meta = schema.sample_meta(f"low/{key}", f"high/{key}", (h, w), (h, w))
            layout, head = schema.layout_sample(key, h, w, meta, pos, members=members)
            pieces += head + [(layout.low_data, low.tobytes()), (layout.high_data, high.tobytes())]
            pos = layout.end
            index["key"].append(key)
            index["hw"].append([h, w])
            index["low"].append(layout.low_data)
            index["high"].append(layout.high_data)
            index["crc32"].append([zlib.crc32(low.tobytes()), zlib.crc32(high.tobytes())])
        data = bytearray(schema.archive_end(pos))
        for off, b in pieces:
            data[off:off + len(b)] = b
        name = schema.shard_name(split, number)
        (folder / name).write_bytes(bytes(data))
        shards.append({"file": name, "samples": len(index["key"]), "bytes": len(data),
                       "sha256": hashlib.sha256(data).hexdigest(), "index": index})
    entry = {"shards": shards, "samples": len(sizes)}
    if members.to_doc() is not None:
        entry["members"] = members.to_doc()
    doc = {"format": schema.FORMAT, "version": schema.VERSION_TYPED if members.to_doc() else 1,
           "splits": {split: entry}}
    (folder / schema.MANIFEST).write_text(json.dumps(doc))
    return arrays
