"""Sequences in a manifest: a split's `"sequences"` entry, the frames of each video or burst (`Sequences`). The frames
of one sequence are consecutive samples of the split in key order, in frame order; every sample belongs to exactly
one sequence. The packer writes the entry, every reader takes it from here: a table listed in the entry (JSON), or
kept as columns of the split's index file (`TABLE`) and read for the sequences asked, so that a split of millions of
sequences costs a loader no list of them. Also the frame numbering a sequence's file names carry
(`numbering_breaks`): where it is not evenly spaced, a clip would join frames that are not consecutive. Numpy
only."""

from __future__ import annotations

import re
from collections import Counter, abc
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import ShardError
from .columns import Keys, LazyColumn, paged

FIELD = "sequences"  # split field: {"names": [...], "starts": [...], "counts": [...]}, or a table in the index (TABLE)
TARGET = "sequence_target"  # split field: "frame" (each frame its own target) or "sequence" (one target per sequence)
TARGETS = ("frame", "sequence")
# split field: what `pack --sequence-gaps` did with breaks in a sequence's frame numbering, "refuse" (none is left),
# "split" or "allow"; absent: a pack made before pairload looked at the numbering, or wrote "refuse" (2026-11-29)
GAPS = "sequence_gaps"
GAP_POLICIES = ("refuse", "split", "allow")
RUN = "@"  # a sequence split at its gaps gives runs named "<sequence>@<first frame>"; a key escapes '@', so no other
#            name holds one

_ESCAPED = re.compile(r"(?:~[0-9A-F]{2})+")  # `schema.key_from_relpath`'s escapes: '~XX' per UTF-8 byte
_KEY_NUMBER = re.compile(r"[0-9]+$")  # a key's digits are ASCII: it escapes every other character
_NUMBER = re.compile(r"\d+$")  # a name's: any decimal digits ('٣' too), as `pack.sequences.misnumbered` reads them
_DIGITS = re.compile(r"(\d+)")


def frame_name(key: str) -> str:
    """A frame's file name without its extension, from its key (`schema.key_from_relpath` undone on the last part):
    `vidA+0001` → `0001`, `v+clip~281~29` → `clip(1)`."""
    last = key.rpartition("+")[2]
    return _ESCAPED.sub(lambda m: bytes.fromhex(m.group().replace("~", "")).decode("utf-8", "surrogateescape"), last)


def run_name(sequence: str, first_key: str) -> str:
    """The name of the run of `sequence` that starts at the frame keyed `first_key`, once split at its gaps."""
    return f"{sequence}{RUN}{first_key.rpartition('+')[2]}"


def frame_number(name: str) -> int | None:
    """The number a frame's name ends with (`0007` → 7, `frame_12` → 12), None when it ends otherwise."""
    m = _NUMBER.search(name)
    return int(m.group()) if m else None


def frame_numbers(names: Sequence[str]) -> list[int | None]:
    """The frame numbers of a sequence's frames (`names`, in frame order). Where every name is the same text around
    the same count of numbers (`f0001_x2`, `f0002_x2`), the last of those numbers that changes from frame to frame
    (a number in the middle of the names too); else the number each name ends with (`frame_number`)."""
    parts = [_DIGITS.split(n) for n in names]
    if len(parts) > 1 and len(parts[0]) > 1 and all(p[0::2] == parts[0][0::2] for p in parts):
        fields = [[int(x) for x in p[1::2]] for p in parts]
        changing = [j for j in range(len(fields[0])) if len({f[j] for f in fields}) > 1]
        j = changing[-1] if changing else -1
        return [f[j] for f in fields]
    return [frame_number(n) for n in names]


def _key_number(key: str) -> int | None:
    """`frame_number` of a key's frame: its trailing digits, unless its last part holds an escape ('~29' is ')')."""
    m = _KEY_NUMBER.search(key)
    if m is None:
        return None
    return frame_number(frame_name(key)) if "~" in key[key.rfind("+") + 1:] else int(m.group())


def _evenly(numbers: list[int | None]) -> bool:
    """Whether frames whose names end with these numbers are evenly numbered at a glance, so that `numbering_breaks`
    finds no break (the numbers at the ends of the names change, so they are the frame numbers). False where it
    cannot tell: a name ends otherwise (a number in its middle may be the frame number)."""
    if len(numbers) < 2:
        return True
    if any(n is None for n in numbers):
        return False
    step = numbers[1] - numbers[0]
    return step > 0 and all(b - a == step for a, b in zip(numbers, numbers[1:]))


@dataclass(frozen=True)
class Break:
    """A place where a sequence's frame numbering is not evenly spaced: between its frames `at - 1` (named `before`)
    and `at` (`after`); `step`: the spacing of the other frames' numbers (None when no two frames step forward)."""

    at: int
    before: str
    after: str
    step: int | None
    numbers: tuple[int | None, int | None] = (None, None)  # of `before` and `after` (`frame_numbers`)

    def words(self) -> str:
        """'frames 0003 → 0007, step 1 elsewhere', and why it is a break."""
        a, b = self.numbers
        if a is None or b is None:
            why = f"{self.after if b is None else self.before} has no number at the end of its name"
        elif b == a:
            why = "one number twice"
        elif b < a:
            why = "numbered backwards"
        else:
            why = f"step {self.step} elsewhere"
        return f"frames {self.before} → {self.after}, {why}"


def numbering_breaks(names: Sequence[str]) -> list[Break]:
    """Where the frame numbers of a sequence's frames (`names`, file names without extension, in frame order) are
    not one arithmetic progression (`frame_numbers`). Its step is the most frequent step forward (the smaller of
    equally frequent ones), so every 10th frame of a video is evenly numbered; a break is another step (frames
    missing, a second numbering in the folder) or a frame without a number among numbered ones. Frames none of which
    is numbered have no numbering to break."""
    numbers = frame_numbers(names)
    if all(n is None for n in numbers):
        return []
    steps = Counter(b - a for a, b in zip(numbers, numbers[1:]) if a is not None and b is not None and b > a)
    step = min(steps, key=lambda d: (-steps[d], d)) if steps else None
    return [Break(k, names[k - 1], names[k], step, (numbers[k - 1], numbers[k])) for k in range(1, len(names))
            if (numbers[k - 1] is None) != (numbers[k] is None)
            or (numbers[k] is not None and numbers[k] - numbers[k - 1] != step)]


def others(found: list[tuple[object, Break]]) -> str:
    """' (and 2 more break(s) in 1 other sequence(s))' after the first of breaks found as (their sequence, break);
    '' for one."""
    if len(found) < 2:
        return ""
    more = len({s for s, _ in found}) - 1
    return f" (and {len(found) - 1} more break(s)" + (f" in {more} other sequence(s)" if more else "") + ")"


_INT64 = 2 ** 63
# a split's sequence table kept as columns of its index file (`<split>.index`): the entry then says
# {"table": "index", "count": S, "frames": [fewest, most]} and the index holds each sequence's first sample and its
# name's UTF-8 bytes with their ends (2026-11-29; older packs list them in the entry as JSON, and an older pairload
# refuses this entry by name, as not names/starts/counts lists, instead of reading it)
TABLE = "index"
START, NAME_BYTES, NAME_END = "seq_start", "seq_name_bytes", "seq_name_end"
CHUNK = 1 << 16  # sequences a pass over a table reads at a time (its pages let go after each)


def _entry_problem(doc) -> str | None:
    """What is wrong with a split's `FIELD` entry as JSON: not {"names": [str], "starts": [int], "counts": [int]}
    (numpy would take "6", 6.0 and True as counts); None when nothing is."""
    if not isinstance(doc, dict):
        return f"it is a {type(doc).__name__}"
    for field, kind, what in (("names", str, "names"), ("starts", int, "whole numbers"), ("counts", int,
                                                                                         "whole numbers")):
        if field not in doc:
            return f"it has no {field}"
        v = doc[field]
        if not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, kind)
                                          or kind is int and not -_INT64 <= x < _INT64 for x in v):
            return f"{field} is {repr(v)[:60]}, not a list of {what}"
    return None


def _whole(x) -> bool:
    return type(x) is int and 0 <= x < _INT64


def in_index(entry: dict) -> bool:
    """Whether a split entry keeps its sequence table in its index file (`TABLE`)."""
    doc = entry.get(FIELD)
    return isinstance(doc, dict) and "table" in doc


def _table_problem(doc: dict) -> str | None:
    """What is wrong with a `TABLE` entry: not {"table": "index", "count": S, "frames": [fewest, most]}."""
    if doc.get("table") != TABLE:
        return f"says its table is in {doc.get('table')!r}, not {TABLE!r}"
    if not _whole(doc.get("count")) or doc["count"] < 1:
        return f"counts {doc.get('count')!r} sequences, not a whole number of at least 1"
    frames = doc.get("frames")
    if not (isinstance(frames, list) and len(frames) == 2 and all(_whole(x) for x in frames)
            and 1 <= frames[0] <= frames[1]):
        return f"says its sequences hold {frames!r} frames, not [fewest, most] (at least 1)"
    return None


def bisect(values, n: int, get, side: str = "left") -> np.ndarray:
    """For each of `values`, how many of `get(0 .. n - 1)` (a non-decreasing function of int64 arrays, read for the
    places asked) are below it ("left") or at most it ("right"): `np.searchsorted` over a column never read whole."""
    values = np.asarray(values, dtype=np.int64)
    lo, hi = np.zeros(len(values), np.int64), np.full(len(values), n, np.int64)
    while True:
        open_ = np.flatnonzero(lo < hi)
        if not len(open_):
            return lo
        mid = (lo[open_] + hi[open_]) // 2
        got = np.asarray(get(mid), dtype=np.int64)
        right = got < values[open_] if side == "left" else got <= values[open_]
        lo[open_[right]] = mid[right] + 1
        hi[open_[~right]] = mid[~right]


class Joined(LazyColumn):
    """Columns of sequences one after the other (a mix's sources), each value plus its part's offset (the part's first
    sample in the mix), read for the places asked."""

    def __init__(self, parts, offsets):
        self.parts, self.offsets = list(parts), np.asarray(offsets, dtype=np.int64)
        self.first = np.concatenate([[0], np.cumsum([len(p) for p in self.parts])]).astype(np.int64)
        self.shape, self.dtype = (int(self.first[-1]),), np.dtype(np.int64)

    def __getitem__(self, index):
        if isinstance(index, slice) and index.step in (None, 1):  # each part's slice, one after the other
            lo, hi, _ = index.indices(len(self))
            bounds = zip(self.parts, self.offsets, self.first[:-1].tolist(), self.first[1:].tolist())
            out = [np.asarray(p[max(lo - a, 0):min(hi, b) - a], dtype=np.int64) + o for p, o, a, b in bounds
                   if a < hi and lo < b]
            return np.concatenate(out) if out else np.zeros(0, np.int64)
        if isinstance(index, (slice, tuple)):
            return np.asarray(self)[index]
        idx = np.asarray(index, dtype=np.int64)
        part = np.searchsorted(self.first[1:], idx, side="right")
        out = np.empty(idx.shape, dtype=np.int64)
        for k in np.unique(part).tolist():
            sel = part == k
            out[sel] = np.asarray(self.parts[k][idx[sel] - self.first[k]], dtype=np.int64) + self.offsets[k]
        return out

    def __array__(self, dtype=None, copy=None):
        return np.concatenate([np.asarray(p, dtype=np.int64) + o for p, o in zip(self.parts, self.offsets)]
                              ).astype(dtype or np.int64, copy=False)


class JoinedNames(abc.Sequence):
    """The names of a mix's sequences, "source/sequence", made for the places asked."""

    def __init__(self, prefixes, parts):
        self.prefixes, self.parts = list(prefixes), list(parts)
        self.first = np.concatenate([[0], np.cumsum([len(p) for p in self.parts])]).astype(np.int64)

    def __len__(self) -> int:
        return int(self.first[-1])

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        k = int(i) + (len(self) if int(i) < 0 else 0)
        if not 0 <= k < len(self):
            raise IndexError(f"sequence {i} of {len(self)}")
        part = int(np.searchsorted(self.first[1:], k, side="right"))
        return f"{self.prefixes[part]}/{self.parts[part][k - int(self.first[part])]}"


class Sequences:
    """The sequences of a split, in index order: sequence s holds the samples `starts[s] .. starts[s] + counts[s] - 1`,
    its frames in order. `target`: "frame" when each frame has its own target, "sequence" when the frames share
    one (SMID's long exposure). Made from lists (the JSON entry, `pack`), or (`table`) over columns read for the
    sequences asked (`start_of`, `count_of`, `names[s]`): a split's table in its index file, a mix's sources' tables.
    `starts` and `counts` give whole arrays (tools; a loader asks for the sequences it plans)."""

    def __init__(self, names, starts, counts, target: str = "frame", gaps: str | None = None):
        counts = np.asarray(counts, dtype=np.int64)
        self._set(tuple(names), np.asarray(starts, dtype=np.int64), counts, int(counts.sum()),
                  (int(counts.min()), int(counts.max())) if len(counts) else (0, 0), target, gaps, False)

    def _set(self, names, starts, counts, frames, bounds, target, gaps, in_index) -> None:
        self.names, self._starts, self._counts, self.frames = names, starts, counts, frames
        self.bounds, self.target, self.gaps = bounds, target, gaps
        self.in_index = in_index  # read from an index file, whose sequences `pack` found of one size (so does verify)

    @classmethod
    def table(cls, names, starts, frames: int, bounds: tuple[int, int], target: str = "frame",
              gaps: str | None = None, in_index: bool = True) -> "Sequences":
        """Sequences over columns: `names` (a sequence of str), `starts` (a column read for the places asked, int64),
        `frames` in all, `bounds` the fewest and most frames of one."""
        seqs = cls.__new__(cls)
        seqs._set(names, starts, None, int(frames), (int(bounds[0]), int(bounds[1])), target, gaps, in_index)
        return seqs

    def __len__(self) -> int:
        return len(self._starts)

    def __repr__(self) -> str:
        return f"Sequences({len(self)} of {self.bounds[0]}-{self.bounds[1]} frames, {self.frames} in all)"

    @property
    def starts(self) -> np.ndarray:
        """int64 (S,): each sequence's first sample (a mapped column as it is)."""
        return self._starts if isinstance(self._starts, np.ndarray) else np.asarray(self._starts, dtype=np.int64)

    @property
    def counts(self) -> np.ndarray:
        """int64 (S,): each sequence's frames (made once, for a table)."""
        if self._counts is None:
            self._counts = np.diff(self.starts, append=self.frames) if len(self) else np.zeros(0, np.int64)
        return self._counts

    def start_of(self, seq) -> np.ndarray:
        """The first sample of each of these sequences."""
        return np.asarray(self._starts[np.asarray(seq, dtype=np.int64)], dtype=np.int64)

    def count_of(self, seq) -> np.ndarray:
        """The frames of each of these sequences."""
        seq = np.asarray(seq, dtype=np.int64)
        if self._counts is not None:
            return self._counts[seq]
        both = self.start_of(np.concatenate([seq, np.minimum(seq + 1, len(self) - 1)]))
        end = np.where(seq + 1 < len(self), both[len(seq):], self.frames)
        return end - both[:len(seq)]

    def first_from(self, rows) -> np.ndarray:
        """The number of sequences that start before each of these samples: the first one starting at it or after."""
        col = self._starts
        if isinstance(col, np.ndarray):
            return np.searchsorted(col, np.asarray(rows, dtype=np.int64), side="left")
        return bisect(rows, len(self), self.start_of, "left")

    def sequence_of(self, rows) -> np.ndarray:
        """The sequence of each of these samples."""
        col = self._starts
        rows = np.asarray(rows, dtype=np.int64)
        found = np.searchsorted(col, rows, side="right") if isinstance(col, np.ndarray) else \
            bisect(rows, len(self), self.start_of, "right")
        return found - 1

    def chunks(self, size: int = CHUNK):
        """(first sequence, the frames of each) of the sequences, `size` at a time (a pass over a table that never
        holds it whole)."""
        for s0 in range(0, len(self), size):
            s1 = min(len(self), s0 + size)
            starts = np.asarray(self._starts[s0:s1 + 1], dtype=np.int64)  # a slice: read in order, let go
            yield s0, np.diff(starts, append=self.frames) if s1 == len(self) else np.diff(starts)

    def of_samples(self) -> np.ndarray:
        """int64 (frames,): the sequence of every sample."""
        return np.repeat(np.arange(len(self), dtype=np.int64), self.counts)

    def first_mismatch(self, values) -> tuple[int, int] | None:
        """(sample, its sequence's first frame) of the first sample whose row of `values` (one per sample: a size, a
        CRC) differs from its sequence's first frame's; None when every sequence's rows agree."""
        values = np.asarray(values)
        first = self.starts[self.of_samples()]
        differ = (values != values[first]).reshape(len(values), -1).any(axis=1)
        odd = np.flatnonzero(differ)
        return (int(odd[0]), int(first[odd[0]])) if len(odd) else None

    def check(self, samples: int, where: str) -> "Sequences":
        """These sequences, once they cover `samples` samples exactly, one after the other, each non-empty; a
        ShardError naming `where` otherwise."""
        if not (len(self.names) == len(self.starts) == len(self.counts)):
            raise _bad(where, f"has {len(self.names)} names, {len(self.starts)} starts and {len(self.counts)} counts")
        if self.target not in TARGETS:
            raise _bad(where, f"says the target is {self.target!r}, not one of {', '.join(TARGETS)}")
        if len(set(self.names)) != len(self.names):
            raise _bad(where, "names a sequence twice")
        if len(self) and (self.counts.min() < 1):
            raise _bad(where, "holds an empty sequence")
        ends = np.cumsum(self.counts)
        if len(self) and (self.starts[0] != 0 or np.any(self.starts[1:] != ends[:-1])):
            raise _bad(where, "has sequences that do not follow one another")
        if self.frames != samples:
            raise _bad(where, f"covers {self.frames} frames but the split has {samples} samples")
        return self

    def to_doc(self) -> dict:
        return {"names": list(self.names), "starts": self.starts.tolist(), "counts": self.counts.tolist()}

    def to_entry(self, in_index: bool = False) -> dict:
        """The split entry's fields: `FIELD`, `TARGET`, and `GAPS` where the pack was told what to do with gaps.
        `in_index`: `FIELD` says the table is in the split's index file (`index_columns`), not listed."""
        doc = {"table": TABLE, "count": len(self), "frames": list(self.bounds)} if in_index else self.to_doc()
        return {FIELD: doc, TARGET: self.target, **({GAPS: self.gaps} if self.gaps else {})}

    def index_columns(self) -> dict[str, np.ndarray]:
        """The table as columns of the split's index file (`TABLE`): each sequence's first sample, its name's bytes
        joined and their ends."""
        blob, ends = Keys.encode(self.names)
        return {START: self.starts, NAME_BYTES: blob, NAME_END: ends}

    @staticmethod
    def from_entry(entry: dict, samples: int, where: str, columns: dict | None = None, known: bool = False
                   ) -> "Sequences | None":
        """A split entry's sequences (checked against its `samples`), or None when it has none. A table in the index
        file (`TABLE`) is read from its `columns` (`binindex.open_index`'s), checked whole unless `known` (an earlier
        open found this very file whole and consistent)."""
        doc = entry.get(FIELD)
        if doc is None:
            return None
        gaps = entry.get(GAPS)
        if gaps is not None and gaps not in GAP_POLICIES:
            raise ShardError(f"{where}: \"{GAPS}\" is {gaps!r}, not one of {', '.join(GAP_POLICIES)}; the manifest "
                             "is damaged or from another tool: pack the folder again with --sequences")
        target = entry.get(TARGET, "frame")
        if isinstance(doc, dict) and "table" in doc:
            problem = _table_problem(doc)
            if problem:
                raise _bad(where, problem)
            if columns is None or START not in columns:
                raise ShardError(f"{where}: the \"{FIELD}\" entry keeps its table in the split's index file, which "
                                 "this split has not (a manifest of another pack?): pack the folder again with "
                                 "--sequences")
            if target not in TARGETS:
                raise _bad(where, f"says the target is {target!r}, not one of {', '.join(TARGETS)}")
            names = Keys(columns[NAME_BYTES], columns[NAME_END])
            seqs = Sequences.table(names, paged(columns[START]), samples, doc["frames"], target, gaps)
            return seqs if known else _checked_table(seqs, samples, where)
        problem = _entry_problem(doc)
        if problem:
            raise ShardError(f"{where}: the \"{FIELD}\" entry is not names/starts/counts lists ({problem}); pack the "
                             "folder again with --sequences")
        seqs = Sequences(doc["names"], doc["starts"], doc["counts"], target, gaps)
        return seqs.check(samples, where)

    @staticmethod
    def joined(parts: Sequence["Sequences"], prefixes: Sequence[str], offsets) -> "Sequences":
        """The sequences of `parts` (a mix's sources) one after the other, named "prefix/sequence", their samples
        offset by `offsets` (each part's first sample), read through the parts for the sequences asked."""
        gaps = parts[0].gaps if all(p.gaps == parts[0].gaps for p in parts) else None
        if all(p._counts is not None and not p.in_index for p in parts):  # lists (JSON entries): joined whole
            return Sequences(tuple(f"{name}/{q}" for name, p in zip(prefixes, parts) for q in p.names),
                             np.concatenate([p.starts + off for p, off in zip(parts, offsets)]),
                             np.concatenate([p.counts for p in parts]), parts[0].target, gaps)
        bounds = (min(p.bounds[0] for p in parts), max(p.bounds[1] for p in parts))
        return Sequences.table(JoinedNames(prefixes, [p.names for p in parts]),
                               Joined([p._starts for p in parts], offsets), sum(p.frames for p in parts), bounds,
                               parts[0].target, gaps, all(p.in_index for p in parts))

    def breaks(self, keys: Sequence[str]) -> list[tuple[int, Break]]:
        """(sequence, break) of every break in the frame numbering inside a sequence, from the split's `keys`. The
        frames' names are decoded only for a sequence not evenly numbered at a glance (a loader of a million frames
        pays one pass over the keys)."""
        numbers = [_key_number(k) for k in keys]
        found = []
        for s, (start, count) in enumerate(zip(self.starts.tolist(), self.counts.tolist())):
            if not _evenly(numbers[start:start + count]):
                found += [(s, b) for b in numbering_breaks([frame_name(keys[k]) for k in range(start, start + count)])]
        return found

    def gap_report(self, keys: Sequence[str], where: str) -> str | None:
        """One line on the breaks in the frame numbering inside these sequences (`breaks`), None when there is none:
        the first, how many, and what a clip does there."""
        found = self.breaks(keys)
        if not found:
            return None
        s, first = found[0]
        said = (f"{where}: sequence {self.names[s]!r}: {first.words()}{others(found)}: a clip that crosses it joins "
                f"{first.before} and {first.after} as consecutive frames")
        if self.gaps == "allow":
            return f"{said}, as packed with --sequence-gaps allow"
        return (f"{said}; copy any missing frames back and pack again, or pack again with --sequence-gaps split (no "
                f"clip crosses a break) or --sequence-gaps allow (clips cross it)")


def into_index(entry: dict, where: str) -> dict[str, np.ndarray]:
    """A split entry (with its "samples") that lists its sequence table (`pack`'s skeleton, a pack made before
    2026-11-29): the table's columns for the split's index file, and the entry's `FIELD` made the `TABLE` entry in
    place (`{}` and the entry as it was for a split without sequences, or whose table is in its index already)."""
    if entry.get(FIELD) is None or in_index(entry):
        return {}
    seqs = Sequences.from_entry(entry, entry["samples"], where)
    entry.update(seqs.to_entry(in_index=True))
    return seqs.index_columns()


def _bad(where: str, what: str) -> ShardError:
    return ShardError(f"{where}: the \"{FIELD}\" entry {what}; the manifest is damaged or from another tool: pack the "
                      "folder again with --sequences")


def _checked_table(seqs: Sequences, samples: int, where: str) -> Sequences:
    """A table read from an index file, once its sequences follow one another from sample 0, each non-empty, cover
    `samples` and agree with the entry's fewest and most frames, and its names fit their bytes (a pass over the
    table, a chunk at a time: the file is being hashed anyway)."""
    names = seqs.names
    n = len(seqs)
    ends = names.ends
    if len(ends) != n or (n and (int(ends[-1]) != len(names.blob) or int(ends[0]) < 0)):
        raise _bad(where, f"has {len(ends)} names in the index for {n} sequences, or names that do not fit their bytes")
    if int(seqs.start_of([0])[0]) != 0:
        raise _bad(where, "has a first sequence that does not start at the split's first sample")
    least, most = None, None
    for s0, counts in seqs.chunks():
        if (counts < 1).any():
            raise _bad(where, f"holds an empty sequence, or sequences out of order (sequence "
                              f"{s0 + int(np.argmax(counts < 1))})")
        lo, hi = int(counts.min()), int(counts.max())
        least, most = lo if least is None else min(least, lo), hi if most is None else max(most, hi)
        if (np.diff(np.asarray(ends[s0:s0 + len(counts)])) < 0).any():
            raise _bad(where, "has names that do not fit their bytes")
    if (least, most) != seqs.bounds:
        raise _bad(where, f"says its sequences hold {seqs.bounds[0]} to {seqs.bounds[1]} frames, its table {least} to "
                   f"{most}")
    if int(seqs.start_of([n - 1])[0]) >= samples:
        raise _bad(where, f"covers more frames than the split's {samples} samples")
    return seqs
