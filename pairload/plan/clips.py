"""Clips of frames for video and burst splits (packed with `--sequences`): the clip policy (`Clips`), the units the
planner deals instead of samples (`ClipUnits`: each a place where a clip of a sequence can start), and the
expansion of a planned batch of clips into its frames (`frame_columns`).

A clip is planned like a sample: one unit of the epoch's order, one crop window and one orientation code, one
degradation parameter set. Its T frames then become T consecutive rows of the batch with that window and code (so
every backend cuts them as it cuts pairs: the same window and flip on every frame of both sides), each with its own
noise key. Numpy only."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..format.columns import LazyColumn
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


@dataclass(frozen=True)
class ClipUnits:
    """The units of a split's sequences under a clip policy, in index order (sequence by sequence), kept per
    sequence: `starts` (each sequence's first sample), `counts` (its frames), `per` (its units), `seq_hash` (its
    first key's planner hash), `seq_hw` (its frames' size). A unit's sequence, its number there (`pos`), its planner
    hash (its sequence's first key with `pos` mixed in: `key_hash`) and its size (`hw`) are worked out for the units
    asked, so nothing here is of the frames' number. `dropped`: the names of sequences left out (short="drop");
    `gaps`: a line on the breaks in the frame numbering inside the sequences, which clips cross
    (`Sequences.gap_report`), where the pack did not allow them (a pack made before pairload looked at the
    numbering)."""

    clips: Clips
    starts: np.ndarray
    counts: np.ndarray
    per: np.ndarray
    seq_hash: np.ndarray
    seq_hw: np.ndarray
    names: tuple[str, ...]
    dropped: tuple[str, ...] = ()
    gaps: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "ends", np.cumsum(self.per).astype(np.int64))

    def __len__(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def seq_of(self, units) -> np.ndarray:
        """The sequence of each of these units."""
        return np.searchsorted(self.ends, np.asarray(units, dtype=np.int64), side="right")

    def pos_of(self, units, seq: np.ndarray) -> np.ndarray:
        """Each unit's number within its sequence (`seq`: theirs, `seq_of`)."""
        return np.asarray(units, dtype=np.int64) - (self.ends - self.per)[seq]

    @property
    def key_hash(self) -> "_UnitColumn":
        return _UnitColumn(self, "key_hash")

    @property
    def hw(self) -> "_UnitColumn":
        return _UnitColumn(self, "hw")

    def unit_hash(self, units) -> np.ndarray:
        seq = self.seq_of(units)
        return _splitmix(self.seq_hash[seq] ^ _splitmix(self.pos_of(units, seq).astype(np.uint64)))

    def label(self, u: int) -> str:
        """A unit in messages: "sequence name (clip k)"."""
        seq = self.seq_of([u])
        return f"{self.names[int(seq[0])]} (clip {int(self.pos_of([u], seq)[0])})"

    @classmethod
    def build(cls, clips: Clips, sequences, key_hash, hw, where: str, keys=None, bounds=None) -> "ClipUnits":
        """The units of `sequences` (`format.sequences.Sequences` over samples with `key_hash` and `hw`, and `keys`
        where given: their frame numbering is looked at, `gaps`); a sequence whose frames differ in size, or one
        shorter than a clip under short="refuse", is refused by name. `bounds`: the least and greatest sizes where
        known; when they agree no frame's size is read but the sequences' first frames'."""
        names, starts, counts = sequences.names, sequences.starts, sequences.counts
        t = clips.frames
        odd = sequences.first_mismatch(hw) if bounds is None or bounds[0] != bounds[1] else None
        if odd is not None:
            k, f = odd
            s = int(np.searchsorted(starts, k, side="right")) - 1
            a, b = hw[f], hw[k]
            raise ConfigError(f"{where}: sequence {names[s]!r} has frames of {a[1]}x{a[0]} and {b[1]}x{b[0]}; a clip "
                              "takes one window from frames of one size: pack its frames at one size")
        short = np.flatnonzero(counts < t)
        if len(short) and clips.short == "refuse":
            s = int(short[0])
            raise ConfigError(f"{where}: sequence {names[s]!r} has {counts[s]} frames, fewer than a clip's {t}"
                              + (f" ({len(short)} sequences are that short)" if len(short) > 1 else ""),
                              option="clips", fix="use shorter clips, or short='drop' (leave them out) or "
                              "short='pad' (repeat their last frame)", flag_fix=f"use shorter clips, or {{flag}} "
                              f"{t},short=drop (leave them out) or {{flag}} {t},short=pad (repeat their last frame)")
        per = np.where(counts >= t, (counts - t) // clips.stride + 1, 1 if clips.short == "pad" else 0).astype(np.int64)
        starts = np.asarray(starts, dtype=np.int64)
        dropped = tuple(names[int(s)] for s in short) if clips.short == "drop" else ()
        # a pack that looked at the numbering refused, split or allowed its breaks: only an older one's are read here
        gaps = sequences.gap_report(keys, where) if keys is not None and sequences.gaps is None else None
        first_hw = np.asarray(hw[starts], dtype=np.int64).reshape(-1, 2)
        return cls(clips, starts, np.asarray(counts, dtype=np.int64), per,
                   np.asarray(key_hash[starts], dtype=np.uint64), first_hw, tuple(names), dropped, gaps)

    def labels(self) -> "_Labels":
        """The units as check_split names them in messages (`label`)."""
        return _Labels(self)

    def _per(self, counts) -> np.ndarray:
        """Units in each of consecutive stretches of samples of these sizes (a unit is its first frame's)."""
        ends = np.cumsum(counts)
        return np.bincount(np.searchsorted(ends, self.starts, side="right"), weights=self.per,
                           minlength=len(counts)).astype(np.int64)[:len(counts)]

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
        seq = self.seq_of(units)
        count = self.counts[seq]
        if self.clips.start == "grid":
            start = self.pos_of(units, seq) * self.clips.stride
        else:
            span = np.maximum(count - t, 0) + 1
            start = (_stream(self.unit_hash(units), seed, epoch, START_STREAM, draw) % span.astype(np.uint64)
                     ).astype(np.int64)
        frame = np.minimum(start[:, None] + np.arange(t, dtype=np.int64), count[:, None] - 1)
        return self.starts[seq][:, None] + frame


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
            return self.units.seq_hw[self.units.seq_of(index)]
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
