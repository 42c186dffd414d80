"""Clips of frames for video and burst splits (packed with `--sequences`): the clip policy (`Clips`), the units the
planner deals instead of samples (`ClipUnits`: each a place where a clip of a sequence can start), and the
expansion of a planned batch of clips into its frames (`frame_columns`).

A clip is planned like a sample: one unit of the epoch's order, one crop window and one orientation code, one
degradation parameter set. Its T frames then become T consecutive rows of the batch with that window and code (so
every backend cuts them as it cuts pairs: the same window and flip on every frame of both sides), each with its own
noise key. Numpy only."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError
from ..format.columns import LazyColumn
from ..format.sequences import Sequences, bisect
from .draws import _splitmix, _stream

STARTS = ("random", "grid")  # where a clip starts: drawn uniformly over its sequence, or on the units' grid
SHORT = ("refuse", "drop", "pad")  # a sequence with fewer frames than a clip
FIELDS = ("frames", "stride", "start", "short")
GRAMMAR = f"T[,stride=S][,start={'|'.join(STARTS)}][,short={'|'.join(SHORT)}]"  # a clip policy as a string
_WHOLE = re.compile(r"[0-9]+")
MOST = 2 ** 16  # the most frames of a clip, and the longest stride: a clip's frames are stacked in one batch
START_STREAM = 5  # the planner stream of a clip's random start (1-3: crop corner and code; 31+: the degradation)
_FRAME = np.uint64(0x9E3779B97F4A7C15)  # mixes a frame's number into its clip's noise key


@dataclass(frozen=True)
class Clips:
    """Clips of `frames` consecutive frames (T). A sequence of F frames gives (F - T) // stride + 1 clips per pass
    (its units): with `start="random"` each one starts at a frame drawn uniformly from 0..F - T for every draw
    (training), with `start="grid"` unit k starts at frame k·stride (validation, every clip the same each epoch).
    `short`: a sequence with fewer than T frames is refused ("refuse", the default), left out ("drop", and reported)
    or padded by repeating its last frame ("pad": one clip)."""

    frames: int
    stride: int = 1
    start: str = "random"
    short: str = "refuse"

    def __post_init__(self) -> None:
        for name in ("frames", "stride"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= MOST:
                raise ConfigError.for_value(f"clips {name}", value,
                                            f"expected a whole number, at least 1 and at most {MOST}")
            object.__setattr__(self, name, int(value))
        if self.start not in STARTS:
            raise ConfigError.for_value("clips start", self.start, f"expected one of {', '.join(STARTS)}")
        if self.short not in SHORT:
            raise ConfigError.for_value("clips short", self.short, f"expected one of {', '.join(SHORT)}")

    @classmethod
    def of(cls, spec) -> "Clips | None":
        """A clip policy from `Clips`, a frame count (5), a dict ({"frames": 5, "stride": 2}) or a string
        ("5", "5,stride=2,start=grid,short=pad": `GRAMMAR`); None (or 0) for none. Each option once, the frame
        count required; anything else is a ConfigError naming `clips`, the value and the grammar."""
        if spec is None or isinstance(spec, Clips):
            return spec
        if isinstance(spec, str):
            return cls(**_parse(spec))
        if isinstance(spec, dict):
            unknown = sorted(map(str, set(spec) - set(FIELDS)))
            if unknown or "frames" not in spec:
                raise ConfigError(f"clips {spec!r}: " + (f"unknown field(s) {', '.join(unknown)}" if unknown else
                                                         "no frame count"), option="clips",
                                  fix=f"expected the fields {', '.join(FIELDS)} (frames required), e.g. "
                                      "{'frames': 5, 'stride': 2}")
            return cls(**spec)
        if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool) and spec == 0:
            return None
        return cls(spec)

    def describe(self) -> str:
        return f"{self.frames},stride={self.stride},start={self.start},short={self.short}"


def _parse(spec: str) -> dict:
    """The fields of a clip policy string (`GRAMMAR`): the frame count first, then each option once as name=value;
    spaces around items, names and values are ignored. Values are checked by `Clips`."""
    def bad(problem: str) -> ConfigError:
        return ConfigError(f"clips {spec!r}: {problem}", option="clips",
                           fix=f"expected {GRAMMAR}, e.g. clips='5' or clips='5,stride=2,start=grid'",
                           flag_fix=f"expected {GRAMMAR}, e.g. {{flag}} 5 or {{flag}} 5,stride=2,start=grid")

    if not spec.strip():
        raise bad("empty (leave clips out, or None, for pairs)")
    fields: dict = {}
    for k, item in enumerate(spec.split(",")):
        name, eq, value = (part.strip() for part in item.partition("="))
        if not item.strip():
            raise bad("an empty item between commas")
        if not eq:
            if k:
                raise bad(f"{item.strip()!r} is not name=value")
            name, value = "frames", name
        if name not in FIELDS:
            raise bad(f"unknown option {name!r}" + (" (the frame count comes first, without a name)" if not k else ""))
        if name in fields:
            raise bad(f"{name} is given twice")
        fields[name] = int(value) if name in FIELDS[:2] and _WHOLE.fullmatch(value) else value
    if "frames" not in fields:
        raise bad("no frame count (T, the first item)")
    return fields


BLOCK = 64  # sequences per entry of `ClipUnits.blocks`, at least
MOST_BLOCKS = 1 << 20  # entries of `ClipUnits.blocks`, at most (8 MB): a larger table has larger blocks
NAMED = 8  # sequences left out (short="drop") named in the warning


@dataclass(frozen=True)
class ClipUnits:
    """The units of a split's sequences under a clip policy, in index order (sequence by sequence). A unit's sequence
    and its number there (`locate`), its planner hash (its sequence's first key with that number mixed in:
    `key_hash`) and its size (`hw`) are worked out for the units asked from the sequence table (`format.sequences.
    Sequences`, read for the sequences asked) and the samples' `sample_hash` and `sample_hw`, so nothing here is of
    the frames' number, nor of the sequences' where the policy allows: with stride 1 and no sequence shorter than a
    clip (`blocks` None), the units before sequence s are its first sample less s·(T - 1), a unit's sequence is found
    by bisection; else `blocks` holds the units up to the end of each block of `block` sequences (one pass over the
    table, 8 bytes per `block` sequences). `dropped`: the names of the first `NAMED` sequences left out
    (short="drop"), `dropped_count` all of them; `gaps`: a line on the breaks in the frame numbering inside the
    sequences, which clips cross (`Sequences.gap_report`), where the pack did not allow them (a pack made before
    pairload looked at the numbering)."""

    clips: Clips
    sequences: Sequences
    sample_hash: object  # uint64 (frames,) column: each sample's planner hash
    sample_hw: object  # int64 (frames, 2) column
    total: int
    blocks: np.ndarray | None = None
    block: int = BLOCK
    dropped: tuple[str, ...] = ()
    dropped_count: int = 0
    gaps: str | None = None
    # the last units located, with their sequence, number and sequence's first sample: the planner asks for the hash,
    # the size and the frames of the same units in turn
    _last: list = field(default_factory=list, compare=False, repr=False)

    def __len__(self) -> int:
        return self.total

    def _before_blocks(self, blocks: np.ndarray) -> np.ndarray:
        """The units before each of these blocks."""
        return np.where(blocks > 0, self.blocks[np.maximum(blocks - 1, 0)], 0)

    def _block_table(self, blocks: np.ndarray) -> np.ndarray:
        """(len(blocks), block) int64: the units up to the end of each sequence of these blocks (the table's own
        units before it included), its sequences past the last counting none."""
        seq = (blocks[:, None] * self.block + np.arange(self.block, dtype=np.int64)).reshape(-1)
        inside = seq < len(self.sequences)
        per = np.zeros(len(seq), dtype=np.int64)
        per[inside] = units_per(self.clips, self.sequences.count_of(seq[inside]))
        return self._before_blocks(blocks)[:, None] + np.cumsum(per.reshape(len(blocks), self.block), axis=1)

    def units_before(self, seq) -> np.ndarray:
        """The units of the sequences before each of these (any number from 0 to their count)."""
        seq = np.asarray(seq, dtype=np.int64)
        out = np.full(seq.shape, self.total, dtype=np.int64)
        inside = seq < len(self.sequences)
        s = seq[inside]
        if self.blocks is None:
            out[inside] = self.sequences.start_of(s) - s * (self.clips.frames - 1)
            return out
        b, within = s // self.block, s % self.block
        blocks, row = np.unique(b, return_inverse=True)
        table = self._block_table(blocks)
        out[inside] = np.where(within > 0, table[row, np.maximum(within - 1, 0)], self._before_blocks(blocks)[row])
        return out

    def locate(self, units) -> tuple[np.ndarray, np.ndarray]:
        """(sequence, number within it) of each of these units."""
        return self._located(units)[:2]

    def _located(self, units) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(sequence, number within it, its sequence's first sample) of each of these units."""
        units = np.asarray(units, dtype=np.int64).reshape(-1)
        last = self._last[0] if self._last else None  # (units, found): one tuple, whatever thread replaces it
        if last is not None and np.array_equal(last[0], units):
            return last[1]
        found = self._locate(units)
        for a in found:
            a.flags.writeable = False
        self._last[:] = [(units.copy(), found)]
        return found

    def _locate(self, units: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self.blocks is None:
            t1 = self.clips.frames - 1
            seq = bisect(units, len(self.sequences), lambda s: self.sequences.start_of(s) - s * t1, "right") - 1
            first = self.sequences.start_of(seq)
            return seq, units - (first - seq * t1), first
        b = np.searchsorted(self.blocks, units, side="right")
        blocks, row = np.unique(b, return_inverse=True)
        table = self._block_table(blocks)  # rows in block order: its values never decrease, flattened
        flat = table.reshape(-1)
        at = np.searchsorted(flat, units, side="right")  # within the unit's own block's row
        before = np.where(at % self.block > 0, flat[np.maximum(at - 1, 0)], self._before_blocks(blocks)[row])
        seq = blocks[row] * self.block + at - row * self.block
        return seq, units - before, self.sequences.start_of(seq)

    @property
    def key_hash(self) -> "_UnitColumn":
        return _UnitColumn(self, "key_hash")

    @property
    def hw(self) -> "_UnitColumn":
        return _UnitColumn(self, "hw")

    def unit_hash(self, units) -> np.ndarray:
        _, pos, first = self._located(units)
        return _splitmix(np.asarray(self.sample_hash[first], dtype=np.uint64) ^ _splitmix(pos.astype(np.uint64)))

    def unit_hw(self, units) -> np.ndarray:
        return np.asarray(self.sample_hw[self._located(units)[2]], dtype=np.int64).reshape(-1, 2)

    def label(self, u: int) -> str:
        """A unit in messages: "sequence name (clip k)"."""
        seq, pos = self.locate([u])
        return f"{self.sequences.names[int(seq[0])]} (clip {int(pos[0])})"

    @classmethod
    def build(cls, clips: Clips, sequences: Sequences, key_hash, hw, where: str, keys=None, bounds=None
              ) -> "ClipUnits":
        """The units of `sequences` (`format.sequences.Sequences` over samples with `key_hash` and `hw`, and `keys`
        where given: their frame numbering is looked at, `gaps`); a sequence whose frames differ in size, or one
        shorter than a clip under short="refuse", is refused by name. `bounds`: the least and greatest sizes where
        known; when they agree no frame's size is read. A table read from an index file is not read for sizes
        (`pack` refused sequences of two sizes; `pairload verify` checks them)."""
        t = clips.frames
        odd = sequences.first_mismatch(hw) if not sequences.in_index and (bounds is None or bounds[0] != bounds[1]) \
            else None
        if odd is not None:
            k, f = odd
            s = int(sequences.sequence_of([k])[0])
            a, b = hw[f], hw[k]
            raise ConfigError(f"{where}: sequence {sequences.names[s]!r} has frames of {a[1]}x{a[0]} and "
                              f"{b[1]}x{b[0]}; a clip takes one window from frames of one size: pack its frames at "
                              "one size")
        n = len(sequences)
        block = max(BLOCK, -(-n // MOST_BLOCKS))
        shorts, short_count, blocks = [], 0, None
        if sequences.bounds[0] < t or clips.stride != 1:  # a pass over the table: its short sequences, its blocks
            done = 0
            parts = []
            for s0, counts in sequences.chunks(block * CHUNK_BLOCKS):
                short = np.flatnonzero(counts < t)
                short_count += len(short)
                shorts += (s0 + short[:NAMED - len(shorts)]).tolist() if len(shorts) < NAMED else []
                per = units_per(clips, counts)
                pad = -len(per) % block
                sums = np.concatenate([per, np.zeros(pad, np.int64)]).reshape(-1, block).sum(axis=1)
                parts.append(done + np.cumsum(sums))
                done = int(parts[-1][-1]) if len(parts[-1]) else done
            blocks = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        if short_count and clips.short == "refuse":
            s = shorts[0]
            count = int(sequences.count_of([s])[0])
            raise ConfigError(f"{where}: sequence {sequences.names[s]!r} has {count} frames, fewer than a clip's {t}"
                              + (f" ({short_count} sequences are that short)" if short_count > 1 else ""),
                              option="clips", fix="use shorter clips, or short='drop' (leave them out) or "
                              "short='pad' (repeat their last frame)", flag_fix=f"use shorter clips, or {{flag}} "
                              f"{t},short=drop (leave them out) or {{flag}} {t},short=pad (repeat their last frame)")
        total = int(blocks[-1]) if blocks is not None and len(blocks) else \
            0 if blocks is not None else sequences.frames - n * (t - 1)
        dropped = tuple(sequences.names[s] for s in shorts) if clips.short == "drop" else ()
        # a pack that looked at the numbering refused, split or allowed its breaks: only an older one's are read here
        gaps = sequences.gap_report(keys, where) if keys is not None and sequences.gaps is None else None
        return cls(clips, sequences, key_hash, hw, total, blocks, block, dropped,
                   short_count if clips.short == "drop" else 0, gaps)

    def labels(self) -> "_Labels":
        """The units as check_split names them in messages (`label`)."""
        return _Labels(self)

    def _per(self, counts) -> np.ndarray:
        """Units in each of consecutive stretches of samples of these sizes (a unit is its first frame's)."""
        ends = np.cumsum(np.asarray(counts, dtype=np.int64))
        before = self.units_before(self.sequences.first_from(np.concatenate([[0], ends])))
        return np.diff(before)

    def groups(self, groups) -> tuple[tuple[str, int], ...]:
        """Mixed sources' (name, samples) → (name, units): a unit is its first frame's source's."""
        if not groups:
            return ()
        per = self._per([n for _, n in groups])
        return tuple((name, int(k)) for (name, _), k in zip(groups, per))

    def shards(self, shards):
        """A split's shard structure (`deals.Shards`, in samples) → in units: a unit is in its first frame's shard;
        the shuffle buffer holds as many units as its samples hold on average."""
        if shards is None:
            return None
        from .deals import Shards

        per = self._per(shards.counts)
        frames = max(1, int(np.sum(shards.counts)))
        return Shards(tuple(int(k) for k in per), max(1, shards.buffer * len(self) // frames))

    def frame_rows(self, units: np.ndarray, *, seed: int, epoch: int, draw: np.ndarray | None) -> np.ndarray:
        """(n, T) int64: the samples (frames) of the clips of `units`, in order: a clip's start is drawn from
        (seed, epoch, unit, draw) (start="random") or is its unit's place on the grid; past a short sequence's end
        its last frame repeats."""
        t = self.clips.frames
        units = np.asarray(units, dtype=np.int64)
        seq, pos, first = self._located(units)
        count = self.sequences.count_of(seq)
        if self.clips.start == "grid":
            start = pos * self.clips.stride
        else:
            span = np.maximum(count - t, 0) + 1
            start = (_stream(self.unit_hash(units), seed, epoch, START_STREAM, draw) % span.astype(np.uint64)
                     ).astype(np.int64)
        frame = np.minimum(start[:, None] + np.arange(t, dtype=np.int64), count[:, None] - 1)
        return first[:, None] + frame


CHUNK_BLOCKS = 1 << 10  # blocks a pass over the table reads at a time


def units_per(clips: Clips, counts) -> np.ndarray:
    """The units of sequences of these frame counts: (F - T) // stride + 1, a short one's 1 (short="pad") or 0."""
    counts = np.asarray(counts, dtype=np.int64)
    t = clips.frames
    return np.where(counts >= t, (counts - t) // clips.stride + 1, 1 if clips.short == "pad" else 0).astype(np.int64)


class _UnitColumn(LazyColumn):
    """A per-unit column of `ClipUnits` (its planner hash, or its size), worked out for the units asked."""

    def __init__(self, units: ClipUnits, name: str):
        self.units, self.name = units, name
        self.shape = (len(units), 2) if name == "hw" else (len(units),)
        self.dtype = np.dtype(np.int64 if name == "hw" else np.uint64)

    def __getitem__(self, index):
        if isinstance(index, (tuple, slice)):
            return np.asarray(self)[index]
        if self.name == "hw":
            return self.units.unit_hw(index)
        return self.units.unit_hash(index)

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self[np.arange(len(self.units), dtype=np.int64)], dtype=dtype)


def frame_noise(noise: np.ndarray, frames: int) -> np.ndarray:
    """(n·T,) uint64: the noise key of each frame of clips whose keys are `noise` (one stream per frame)."""
    t = np.arange(1, frames + 1, dtype=np.uint64)
    return _splitmix(np.asarray(noise, dtype=np.uint64)[:, None] ^ (t * _FRAME)).reshape(-1)


class _Labels:
    def __init__(self, units: ClipUnits):
        self.units = units

    def __len__(self) -> int:
        return len(self.units)

    def __getitem__(self, u: int) -> str:
        return self.units.label(u)
