"""`ShardRows`: one written shard as the manifest and the index need it (its name, size and sha256, and per sample
the index columns as arrays), filled sample by sample (`RowsBuilder`) while the shard is written, so that nothing
per pair but a few numbers outlives the moment it is laid out; and `NOTES`, the decode notes the pack reports."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..format import sensor as fmt
from ..format.columns import Keys
from ..format.facts import FactsColumns
from .jobs import JobResult
from .spill import Spill

NOTES = {"gray": "gray", "alpha": "alpha", "16bit": "converted_16bit"}  # a JobResult note -> PackReport list


@dataclass
class ShardRows:
    """A finished shard: `columns` holds `hw`, `low`, `high`, `crc32`, `shares_high` (-1: its own target), what was
    measured of each pair (`format.facts`), and where they apply `low_bytes`/`high_bytes` (an encoding that is
    `sized`), `low_kind`/`high_kind` (an encoding of per-member formats) and the sensor columns; `notes`: (file, what)
    in sample order."""

    split: str
    name: str
    samples: int
    bytes: int
    sha256: str
    keys: Keys
    columns: dict[str, np.ndarray]  # or a `spill.SpilledColumns`, read when asked
    notes: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self):
        if not isinstance(self.keys, Keys):
            self.keys = Keys(*Keys.encode(self.keys))


def joined_keys(rows: list[ShardRows]) -> Keys:
    """The keys of `rows`, one after the other, as one `Keys`."""
    if not rows:
        return Keys(*Keys.encode([]))
    blob = np.concatenate([r.keys.blob for r in rows])
    starts = np.cumsum([0] + [len(r.keys.blob) for r in rows[:-1]])
    return Keys(blob, np.concatenate([r.keys.ends + start for r, start in zip(rows, starts)]).astype(np.int64))


class RowsBuilder:
    """The rows of one shard of `n` samples, filled as each sample is laid out (`laid`) and as its job's result
    comes back (`result`, in any order); `finish` makes the `ShardRows`. `exposures`: the camera plan's, for a
    sensor split (None otherwise); `packed_target`: its targets are packed raw, with levels of their own; `kinds`: its
    encoding stores each member in a format of its own (whose code the layout gives)."""

    def __init__(self, split: str, name: str, pairs, first: int, n: int, *, sized: bool, kinds: bool = False,
                 exposures: list | None = None, packed_target: bool = False, spill: Spill | None = None):
        self.split, self.name, self.pairs, self.first, self.n = split, name, pairs, first, n
        self.spill = spill  # where `finish` puts the columns (None: they stay in memory)
        self.cols = {"hw": np.zeros((n, 2), np.int64), "low": np.zeros(n, np.int64), "high": np.zeros(n, np.int64),
                     "shares_high": np.full(n, -1, np.int32), "crc32": np.zeros((n, 2), np.uint32)}
        if sized:
            self.cols["low_bytes"], self.cols["high_bytes"] = np.zeros(n, np.int64), np.zeros(n, np.int64)
        if kinds:
            self.cols["low_kind"], self.cols["high_kind"] = np.zeros(n, np.uint8), np.zeros(n, np.uint8)
        self.facts = FactsColumns.empty(n)
        self.cols.update(self.facts.columns())
        self.exposures = exposures
        if exposures is not None:
            self.cols[fmt.RATIO] = np.array([e.ratio for e in exposures], dtype=np.float64)
            self.cols[fmt.EXPOSURE] = np.array([[e.low_s, e.high_s] for e in exposures], np.float64).reshape(n, 2)
            self.cols[fmt.LEVELS] = np.zeros((n, 5), np.int64)
            if packed_target:
                self.cols[fmt.LEVELS_HIGH] = np.zeros((n, 5), np.int64)
        self.notes: dict[int, tuple[str, ...]] = {}

    def laid(self, i: int, lay, lead: int) -> None:
        c = self.cols
        c["hw"][i] = (lay.height, lay.width)
        c["low"][i], c["high"][i], c["shares_high"][i] = lay.low_data, lay.high_data, lead
        if "low_bytes" in c:
            c["low_bytes"][i], c["high_bytes"][i] = lay.low_bytes, lay.high_bytes
        if "low_kind" in c:
            c["low_kind"][i], c["high_kind"][i] = lay.low_kind, lay.high_kind

    def result(self, i: int, res: JobResult) -> None:
        c = self.cols
        c["crc32"][i] = (res.crc_low, res.crc_high or 0)
        if res.facts is not None:  # (pack's jobs always measure; a job made by hand may not)
            self.facts.fill(i, res.facts)
        if self.exposures is not None:
            c[fmt.LEVELS][i] = res.levels
            if fmt.LEVELS_HIGH in c and res.levels_high is not None:
                c[fmt.LEVELS_HIGH][i] = res.levels_high
        if res.notes:
            self.notes[i] = res.notes

    def finish(self, size: int, digest: str) -> ShardRows:
        c = self.cols
        follow = np.flatnonzero(c["shares_high"] >= 0)  # a shared target's CRC and levels are its lead's
        lead = c["shares_high"][follow].astype(np.int64)
        c["crc32"][follow, 1] = c["crc32"][lead, 1]
        if fmt.LEVELS_HIGH in c:
            c[fmt.LEVELS_HIGH][follow] = c[fmt.LEVELS_HIGH][lead]
        notes = []
        for i in sorted(self.notes):
            pair = self.pairs[self.first + i]
            for note in self.notes[i]:
                side, what = note.split(":", 1)
                notes.append((pair.low_rel if side == "low" else pair.high_rel, what))
        if hasattr(self.pairs, "key_bytes"):  # a PairTable: its keys' bytes, no string made
            keys = Keys(*self.pairs.key_bytes(self.first, self.n))
        else:
            keys = Keys(*Keys.encode([p.key for p in self.pairs[self.first:self.first + self.n]]))
        return ShardRows(self.split, self.name, self.n, size, digest, keys, self.spill.put(c) if self.spill else c,
                         notes)
