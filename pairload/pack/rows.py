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
from .spill import Spill, SpilledColumns

NOTES = {"gray": "gray", "alpha": "alpha", "16bit": "converted_16bit"}  # a JobResult note -> PackReport list


@dataclass(frozen=True)
class TableKeys:
    """The keys of a shard's pairs, rows `first` to `first + count` of a `PairTable`: held by no one until asked for
    (a pack of N pairs kept ~15 bytes a pair of keys from the moment each shard was written)."""

    pairs: object
    first: int
    count: int


@dataclass
class ShardRows:
    """A finished shard: `columns` holds `hw`, `low`, `high`, `crc32`, `shares_high` (-1: its own target), what was
    measured of each pair (`format.facts`), and where they apply `low_bytes`/`high_bytes` (an encoding that is
    `sized`), `low_kind`/`high_kind` (an encoding of per-member formats), `low_tiles`/`high_tiles` (a split whose
    index keeps its tiles members' tile starts) and the sensor columns; `notes`: (file, what)
    in sample order. `key_source`: its keys (`Keys`, or a list of them), or where in the pack's pair table they are
    (`TableKeys`: made each time `keys` is asked for)."""

    split: str
    name: str
    samples: int
    bytes: int
    sha256: str
    key_source: "Keys | TableKeys"
    columns: dict[str, np.ndarray]  # or a `spill.SpilledColumns`, read when asked
    notes: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self):
        if not isinstance(self.key_source, (Keys, TableKeys)):
            self.key_source = Keys(*Keys.encode(self.key_source))

    @property
    def keys(self) -> Keys:
        k = self.key_source
        return Keys(*k.pairs.key_bytes(k.first, k.count)) if isinstance(k, TableKeys) else k


def joined_keys(rows: list[ShardRows]) -> Keys:
    """The keys of `rows`, one after the other, as one `Keys` (rows spilled: joined in their spill and mapped)."""
    if not rows:
        return Keys(*Keys.encode([]))
    if len(rows) == 1:  # its arrays, not a copy (a Keys of its own: what a reader decodes is not kept with the shard)
        keys = rows[0].keys
        return Keys(keys.blob, keys.ends)
    if not all(isinstance(r.columns, SpilledColumns) for r in rows):
        keys = [r.keys for r in rows]
        starts = np.cumsum([0] + [len(k.blob) for k in keys[:-1]])
        return Keys(np.concatenate([k.blob for k in keys]),
                    np.concatenate([k.ends.astype(np.int64) + start for k, start in zip(keys, starts)]))
    spill = rows[0].columns.spill
    sizes = [len(keys.blob) for keys in (r.keys for r in rows)]  # (a shard's keys made when asked, let go after)
    starts = np.cumsum([0] + sizes[:-1])
    blob = spill.joined((r.keys.blob for r in rows), np.uint8, (sum(sizes),))
    ends = spill.joined((r.keys.ends.astype(np.int64) + start for r, start in zip(rows, starts)), np.int64,
                        (sum(r.samples for r in rows),))
    return Keys(blob, ends)


BLOCK = 8192  # a spilled shard's rows are filled this many samples at a time, and each block written out once done


class RowsBuilder:
    """The rows of one shard of `n` samples, filled as each sample is laid out (`laid`) and as its job's result
    comes back (`result`, in any order); `finish` makes the `ShardRows`. `exposures`: the camera plan's, for a
    sensor split (None otherwise); `packed_target`: its targets are packed raw, with levels of their own; `kinds`: its
    encoding stores each member in a format of its own (whose code the layout gives). With a `spill`, the rows are
    kept a block of `block` samples at a time: a block goes to the spill as soon as each of its samples is laid out
    and has its result, and the blocks before it have gone (results come back a chunk or two behind the layout, so a
    shard of any size holds a few blocks); what is kept of every sample is its target's CRC-32 (and levels), which
    the samples sharing that target take. `tiles`: the split's index keeps each tiles member's tile starts, in rows
    of this many (`format.binindex.TILE_STARTS`; 0: none)."""

    def __init__(self, split: str, name: str, pairs, first: int, n: int, *, sized: bool, kinds: bool = False,
                 exposures: list | None = None, packed_target: bool = False, spill: Spill | None = None,
                 block: int = BLOCK, tiles: int = 0):
        self.split, self.name, self.pairs, self.first, self.n = split, name, pairs, first, n
        self.spill = spill  # where the blocks go (None: they stay in memory, one block of all n samples)
        self.sized, self.kinds, self.packed_target = sized, kinds, packed_target
        self.block = max(1, min(block, n)) if spill is not None else max(1, n)
        self.exposures = exposures
        self.notes: dict[int, tuple[str, ...]] = {}
        self._crc_high = np.zeros(n, np.uint32)  # each sample's target CRC-32 (0: none stored)
        self.tiles = tiles
        self._tiles_high = np.zeros((n, tiles), np.uint32) if tiles else None  # and its tile starts
        self._levels_high = np.zeros((n, 5), np.int64) if exposures is not None and packed_target else None
        self._open: dict[int, tuple[dict[str, np.ndarray], FactsColumns]] = {}  # block -> its columns and facts
        self._missing: dict[int, int] = {}  # block -> `laid` and `result` calls still to come for it
        self._flushed = 0  # the blocks before this one are finished (spilled, or kept in `_kept`)
        self._kept: list[dict[str, np.ndarray]] = []
        self._where = None  # with a spill: where each column's n rows go in it, a block at a time
        if spill is not None:
            cols = self._columns(0)[0]
            self._where = spill.reserve({name: (c.dtype, (n, *c.shape[1:])) for name, c in cols.items()})
        if not n:  # no sample to wait for: its one (empty) block is finished now
            self._open[0] = self._new_block(0)
            self._finish_block(0)
            self._flushed = 1

    def _new_block(self, b: int) -> tuple[dict[str, np.ndarray], FactsColumns]:
        lo = b * self.block
        m = min(self.block, self.n - lo)
        self._missing[b] = 2 * m
        return self._columns(m, lo)

    def _columns(self, m: int, lo: int = 0) -> tuple[dict[str, np.ndarray], FactsColumns]:
        """Empty columns for samples `lo` to `lo + m`, and their facts."""
        cols = {"hw": np.zeros((m, 2), np.int64), "low": np.zeros(m, np.int64), "high": np.zeros(m, np.int64),
                "shares_high": np.full(m, -1, np.int32), "crc32": np.zeros((m, 2), np.uint32)}
        if self.sized:
            cols["low_bytes"], cols["high_bytes"] = np.zeros(m, np.int64), np.zeros(m, np.int64)
        if self.kinds:
            cols["low_kind"], cols["high_kind"] = np.zeros(m, np.uint8), np.zeros(m, np.uint8)
        if self.tiles:
            cols["low_tiles"], cols["high_tiles"] = (np.zeros((m, self.tiles), np.uint32) for _ in range(2))
        facts = FactsColumns.empty(m)
        cols.update(facts.columns())
        if self.exposures is not None:
            exposures = self.exposures[lo:lo + m]
            cols[fmt.RATIO] = np.array([e.ratio for e in exposures], dtype=np.float64)
            cols[fmt.EXPOSURE] = np.array([[e.low_s, e.high_s] for e in exposures], np.float64).reshape(m, 2)
            cols[fmt.LEVELS] = np.zeros((m, 5), np.int64)
            if self.packed_target:
                cols[fmt.LEVELS_HIGH] = np.zeros((m, 5), np.int64)
        return cols, facts

    def _block(self, i: int) -> tuple[int, int, dict[str, np.ndarray], FactsColumns]:
        if not 0 <= i < self.n:
            raise IndexError(f"{self.name}: sample {i} of {self.n}")
        b, j = divmod(i, self.block)
        found = self._open.get(b)
        if found is None:
            if b < self._flushed:
                raise AssertionError(f"{self.name}: sample {i} given after its rows were finished")
            found = self._open[b] = self._new_block(b)
        return b, j, *found

    def laid(self, i: int, lay, lead: int) -> None:
        b, j, c, _ = self._block(i)
        c["hw"][j] = (lay.height, lay.width)
        c["low"][j], c["high"][j], c["shares_high"][j] = lay.low_data, lay.high_data, lead
        if "low_bytes" in c:
            c["low_bytes"][j], c["high_bytes"][j] = lay.low_bytes, lay.high_bytes
        if "low_kind" in c:
            c["low_kind"][j], c["high_kind"][j] = lay.low_kind, lay.high_kind
        if self.tiles:  # a member of more tiles than a row holds: none kept (a reader reads its header)
            for side, starts in (("low", lay.low_tiles), ("high", lay.high_tiles)):
                if 0 < len(starts) <= self.tiles:
                    c[f"{side}_tiles"][j, :len(starts)] = starts
            self._tiles_high[i] = c["high_tiles"][j]
        self._done(b)

    def result(self, i: int, res: JobResult) -> None:
        b, j, c, facts = self._block(i)
        c["crc32"][j] = (res.crc_low, res.crc_high or 0)
        self._crc_high[i] = res.crc_high or 0
        if res.facts is not None:  # (pack's jobs always measure; a job made by hand may not)
            facts.fill(j, res.facts)
        if self.exposures is not None:
            c[fmt.LEVELS][j] = res.levels
            if fmt.LEVELS_HIGH in c and res.levels_high is not None:
                c[fmt.LEVELS_HIGH][j] = self._levels_high[i] = res.levels_high
        if res.notes:
            self.notes[i] = res.notes
        self._done(b)

    def _done(self, b: int) -> None:
        self._missing[b] -= 1
        while self._missing.get(self._flushed) == 0:  # the finished blocks, in order
            self._finish_block(self._flushed)
            self._flushed += 1

    def _finish_block(self, b: int) -> None:
        """A block whose every sample is in: a shared target's CRC and levels are its lead's (an earlier sample,
        whose block is finished or this one), then the block is spilled or kept."""
        c, _ = self._open.pop(b)
        del self._missing[b]
        follow = np.flatnonzero(c["shares_high"] >= 0)
        lead = c["shares_high"][follow].astype(np.int64)
        c["crc32"][follow, 1] = self._crc_high[lead]
        if self.tiles:
            c["high_tiles"][follow] = self._tiles_high[lead]
        if fmt.LEVELS_HIGH in c:
            c[fmt.LEVELS_HIGH][follow] = self._levels_high[lead]
        if self.spill is None:
            self._kept.append(c)
            return
        for name, rows in c.items():
            self.spill.write_rows(self._where[name], b * self.block, rows)

    def finish(self, size: int, digest: str) -> ShardRows:
        if self._flushed * self.block < self.n:
            raise AssertionError(f"{self.name}: rows finished with samples {self._flushed * self.block} to {self.n} "
                                 "not laid out or without their results")
        columns = SpilledColumns(self.spill, self._where) if self.spill is not None else self._kept[0]  # (one block)
        self._kept = []
        notes = []
        for i in sorted(self.notes):
            pair = self.pairs[self.first + i]
            for note in self.notes[i]:
                side, what = note.split(":", 1)
                notes.append((pair.low_rel if side == "low" else pair.high_rel, what))
        if hasattr(self.pairs, "key_bytes"):  # a PairTable: its keys' bytes when asked, no string made
            keys = TableKeys(self.pairs, self.first, self.n)
        else:
            keys = Keys(*Keys.encode([p.key for p in self.pairs[self.first:self.first + self.n]]))
        return ShardRows(self.split, self.name, self.n, size, digest, keys, columns, notes)
