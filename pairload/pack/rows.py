"""`ShardRows`: one written shard as the manifest and the index need it (its name, size and sha256, and per sample
the index columns as arrays), made as soon as the shard is done so that nothing per pair outlives its shard; and
`NOTES`, the decode notes the pack reports by file."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..format import sensor as fmt
from .jobs import JobResult

NOTES = {"gray": "gray", "alpha": "alpha", "16bit": "converted_16bit"}  # a JobResult note -> PackReport list


@dataclass
class ShardRows:
    """A finished shard: `columns` holds `hw`, `low`, `high`, `crc32`, `shares_high` (-1: its own target), and where
    they apply `low_bytes`/`high_bytes` (compressed) and the sensor columns; `notes`: (file, what) in sample order."""

    split: str
    name: str
    samples: int
    bytes: int
    sha256: str
    keys: list[str]
    columns: dict[str, np.ndarray]
    notes: list[tuple[str, str]] = field(default_factory=list)


def shard_rows(split: str, name: str, size: int, digest: str, samples: list, results: list[JobResult],
               exposures: list, compressed: bool, sensor: bool, packed_target: bool) -> ShardRows:
    """The rows of one shard from its laid-out `samples` ((pair, layout, lead) in order), their job `results` and
    camera `exposures` (None for an ordinary split)."""
    n = len(samples)
    cols: dict[str, np.ndarray] = {
        "hw": np.array([[lay.height, lay.width] for _, lay, _ in samples], dtype=np.int64).reshape(n, 2),
        "low": np.array([lay.low_data for _, lay, _ in samples], dtype=np.int64),
        "high": np.array([lay.high_data for _, lay, _ in samples], dtype=np.int64),
        "shares_high": np.array([lead for _, _, lead in samples], dtype=np.int32),
    }
    crc = np.zeros((n, 2), dtype=np.uint32)
    for i, ((_, _, lead), res) in enumerate(zip(samples, results)):
        crc[i] = (res.crc_low, res.crc_high if lead < 0 else crc[lead, 1])
    cols["crc32"] = crc
    if compressed:
        cols["low_bytes"] = np.array([lay.low_bytes for _, lay, _ in samples], dtype=np.int64)
        cols["high_bytes"] = np.array([lay.high_bytes for _, lay, _ in samples], dtype=np.int64)
    if sensor:
        cols[fmt.RATIO] = np.array([e.ratio for e in exposures], dtype=np.float64)
        cols[fmt.EXPOSURE] = np.array([[e.low_s, e.high_s] for e in exposures], dtype=np.float64).reshape(n, 2)
        cols[fmt.LEVELS] = np.array([list(r.levels) for r in results], dtype=np.int64).reshape(n, 5)
        if packed_target:
            high = np.zeros((n, 5), dtype=np.int64)
            for i, ((_, _, lead), res) in enumerate(zip(samples, results)):
                high[i] = res.levels_high if lead < 0 else high[lead]
            cols[fmt.LEVELS_HIGH] = high
    notes = []
    for (pair, _, _), res in zip(samples, results):
        for note in res.notes:
            side, what = note.split(":")
            notes.append((pair.low_rel if side == "low" else pair.high_rel, what))
    return ShardRows(split, name, n, size, digest, [pair.key for pair, _, _ in samples], cols, notes)
