"""`shard_index`: one shard's per-sample index as a version 1-4 manifest lists it, read from a pack of any version
(a version-5 pack keeps it in `<split>.index`), so that tests read offsets and columns the same way from both."""

from __future__ import annotations

import json
from pathlib import Path

from pairload.format import schema
from pairload.format import sensor as fmt
from pairload.read.verify import shard_entries


def shard_index(folder: Path, split: str = "train", number: int = 0) -> dict:
    doc = json.loads((Path(folder) / schema.MANIFEST).read_text())
    shard = doc["splits"][split]["shards"][number]
    if "index" in shard:
        return shard["index"]
    index = schema.split_index(doc, split, str(Path(folder) / schema.MANIFEST), Path(folder))
    out = shard_entries(index, number)
    if index.sensor is not None:
        start = int(index.shard_samples[:number].sum())
        rows = slice(start, start + int(index.shard_samples[number]))
        s = index.sensor
        out[fmt.RATIO], out[fmt.EXPOSURE] = s.ratio[rows].tolist(), s.exposure[rows].tolist()
        out[fmt.LEVELS] = [[int(v) for v in lv] for lv in s.levels[rows].tolist()]
        if s.levels_high is not None:
            out[fmt.LEVELS_HIGH] = [[int(v) for v in lv] for lv in s.levels_high[rows].tolist()]
    return out
