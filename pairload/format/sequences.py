"""Sequences in a manifest: a split's `"sequences"` entry, the frames of each video or burst (`Sequences`). The frames
of one sequence are consecutive samples of the split in key order, in frame order; every sample belongs to exactly
one sequence. The packer writes the entry, every reader takes it from here. Also the frame numbering a sequence's
file names carry (`numbering_breaks`): where it is not evenly spaced, a clip would join frames that are not
consecutive. Numpy only."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import ShardError

FIELD = "sequences"  # split field: {"names": [...], "starts": [...], "counts": [...]}
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


@dataclass(frozen=True)
class Sequences:
    """The sequences of a split, in index order: sequence s holds the samples `starts[s] .. starts[s] + counts[s] - 1`,
    its frames in order. `target`: "frame" when each frame has its own target, "sequence" when the frames share
    one (SMID's long exposure)."""

    names: tuple[str, ...]
    starts: np.ndarray  # int64 (S,)
    counts: np.ndarray  # int64 (S,)
    target: str = "frame"
    gaps: str | None = None  # `GAPS`: what the pack did with numbering breaks; None: a pack that did not look

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", tuple(self.names))
        object.__setattr__(self, "starts", np.asarray(self.starts, dtype=np.int64))
        object.__setattr__(self, "counts", np.asarray(self.counts, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.names)

    @property
    def frames(self) -> int:
        """Samples (frames) the sequences cover."""
        return int(self.counts.sum())

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
        def bad(what: str) -> ShardError:
            return ShardError(f"{where}: the \"{FIELD}\" entry {what}; the manifest is damaged or from another tool: "
                              "pack the folder again with --sequences")

        if not (len(self.names) == len(self.starts) == len(self.counts)):
            raise bad(f"has {len(self.names)} names, {len(self.starts)} starts and {len(self.counts)} counts")
        if self.target not in TARGETS:
            raise bad(f"says the target is {self.target!r}, not one of {', '.join(TARGETS)}")
        if len(set(self.names)) != len(self.names):
            raise bad("names a sequence twice")
        if len(self) and (self.counts.min() < 1):
            raise bad("holds an empty sequence")
        ends = np.cumsum(self.counts)
        if len(self) and (self.starts[0] != 0 or np.any(self.starts[1:] != ends[:-1])):
            raise bad("has sequences that do not follow one another")
        if self.frames != samples:
            raise bad(f"covers {self.frames} frames but the split has {samples} samples")
        return self

    def to_doc(self) -> dict:
        return {"names": list(self.names), "starts": self.starts.tolist(), "counts": self.counts.tolist()}

    def to_entry(self) -> dict:
        """The split entry's fields: `FIELD`, `TARGET`, and `GAPS` where the pack was told what to do with gaps."""
        return {FIELD: self.to_doc(), TARGET: self.target, **({GAPS: self.gaps} if self.gaps else {})}

    @staticmethod
    def from_entry(entry: dict, samples: int, where: str) -> "Sequences | None":
        """A split entry's sequences (checked against its `samples`), or None when it has none."""
        doc = entry.get(FIELD)
        if doc is None:
            return None
        gaps = entry.get(GAPS)
        if gaps is not None and gaps not in GAP_POLICIES:
            raise ShardError(f"{where}: \"{GAPS}\" is {gaps!r}, not one of {', '.join(GAP_POLICIES)}; the manifest "
                             "is damaged or from another tool: pack the folder again with --sequences")
        problem = _entry_problem(doc)
        if problem:
            raise ShardError(f"{where}: the \"{FIELD}\" entry is not names/starts/counts lists ({problem}); pack the "
                             "folder again with --sequences")
        seqs = Sequences(doc["names"], doc["starts"], doc["counts"], entry.get(TARGET, "frame"), gaps)
        return seqs.check(samples, where)

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
