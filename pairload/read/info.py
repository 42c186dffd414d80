"""What a shard folder or URL holds, from its manifest alone: `read_manifest_at` (the checked manifest) and `info`
(per split: samples, shards, bytes, compression and image sizes)."""

from __future__ import annotations

import os

import numpy as np

from ..format import schema
from ..remote import urls


def read_manifest_at(source: str | os.PathLike, storage_options: dict | None = None) -> dict:
    """The checked manifest of a shard folder or URL."""
    if urls.is_url(source):
        from ..remote.cache import read_object

        manifest_url = urls.join(str(source).rstrip("/"), schema.MANIFEST)
        return schema.parse_manifest(read_object(manifest_url, storage_options), urls.redact(manifest_url))
    return schema.read_manifest(urls.local_path(source))


def info(shards_dir: str | os.PathLike, *, storage_options: dict | None = None) -> dict[str, dict]:
    """Per split: samples, shards, bytes, compression ("zstd" or "none") and the bytes of its pixels decoded, and
    the distinct image sizes (a URL: read from its manifest alone)."""
    doc = read_manifest_at(shards_dir, storage_options)
    out = {}
    for split in doc["splits"]:
        idx = schema.split_index(doc, split)
        sizes, counts = np.unique(idx.hw, axis=0, return_counts=True)
        out[split] = {
            "samples": len(idx),
            "shards": len(idx.files),
            "bytes": int(sum(sh["bytes"] for sh in doc["splits"][split]["shards"])),
            "compression": idx.compression or "none",
            "pixel_bytes": int((idx.hw[:, 0] * idx.hw[:, 1]).sum()) * idx.members.bytes_per_input_pixel,
            **({"members": idx.members.describe()} if not idx.members.default else {}),
            **({"sensor": _sensor(doc["splits"][split], idx.sensor)} if idx.sensor is not None else {}),
            "sizes": {f"{w}x{h}": int(c) for (h, w), c in zip(sizes.tolist(), counts.tolist())},
        }
    return out


def _sensor(entry: dict, rows) -> str:
    """A camera raw split in a line: cameras, CFA patterns, the target's kind and the range of ratios."""
    doc = entry["sensor"]
    low, high = float(rows.ratio.min()), float(rows.ratio.max())
    ratios = f"ratio {low:g}" + (f" to {high:g}" if high > low else "")
    return (f"camera raw from {', '.join(doc['low'].get('cameras', []))} ({'/'.join(doc['low'].get('patterns', []))}), "
            f"target {doc['high']['kind']}, {ratios}")
