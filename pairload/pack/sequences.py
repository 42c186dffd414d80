"""The sequences of a `pack --sequences`: the frames of each video or burst. A frame's sequence is the folder holding
it, its key's parent path (`input/pair1/0001.npy` → key `pair1+0001`, sequence `pair1`). `check_names` refuses, before
any header is read, what would make a sequence wrong (a frame in no folder of its own, a folder holding frames and
sequence folders, frames numbered without zero padding); `plan_sequences` refuses frames of two sizes and gives each
split's `format.sequences.Sequences`, which `manifest.skeleton` writes into its split entry.

The frames of a sequence are consecutive samples in key order, which is their name order: a key's folders end in
`+`, which sorts before every other character a key holds, so `pair1+…` all come before `pair10+…`. Shards are cut
between any two samples (`shardplan`), a sequence sharing one target excepted (its target is stored once, so the
sequence stays in one shard), so a clip of T consecutive frames reads at most two shards whenever every shard holds
at least T - 1 frames; a shard smaller than a sequence is fine.
"""

from __future__ import annotations

import os
import re

from ..errors import ImageError, PairingError
from ..format.sequences import Sequences
from ..raw.discover import Discovery, Pair
from ..raw.model import listing

_NUMBERS = re.compile(r"(\d+)")


def sequence_of(key: str) -> str:
    """The sequence of a sample: its key's parent path ('' for a key of no folder)."""
    return key.rpartition("+")[0]


def _folder(pair: Pair) -> str:
    """The folder holding a pair's input, relative to RAW, as messages name a sequence."""
    return pair.low_rel.rpartition("/")[0] or "."


def _frame(pair: Pair) -> str:
    """A frame's name as its file is named, without the extension."""
    return os.path.splitext(pair.low_rel.rpartition("/")[2])[0]


def misnumbered(a: str, b: str) -> bool:
    """Whether frames named `a` then `b` (name order) are numbered the other way: at the first place their names
    differ, both hold numbers without zero padding (`10` before `2`). A number after a '.' is a decimal fraction,
    which name order sorts right (`0.04s` before `0.1s`)."""
    ra, rb = _NUMBERS.split(a), _NUMBERS.split(b)  # odd places: runs of digits
    for i, (x, y) in enumerate(zip(ra, rb)):
        if x != y:
            return i % 2 == 1 and not ra[i - 1].endswith(".") and int(x) > int(y)
    return False


def _runs(pairs: list[Pair]) -> list[tuple[str, str, int, int]]:
    """(split, sequence, first, count) of each run of consecutive pairs of one split and one sequence."""
    runs: list[tuple[str, str, int, int]] = []
    for k, pair in enumerate(pairs):
        name = sequence_of(pair.key)
        if runs and runs[-1][:2] == (pair.split, name):
            split, name, first, count = runs[-1]
            runs[-1] = (split, name, first, count + 1)
        else:
            runs.append((pair.split, name, k, 1))
    return runs


def check_names(discovery: Discovery) -> None:
    """Refuse, naming the files, what would make the sequences of `discovery` (its pairs in (split, key) order)
    wrong: a frame in no sequence folder, a folder holding frames beside sequence folders, frames numbered without
    zero padding."""
    pairs = discovery.pairs
    loose = set(discovery.loose)
    stray = [p.low_rel for p in pairs if p.low_rel in loose or not sequence_of(p.key)]
    if stray:
        more = f" (and {len(stray) - 1} more: {listing(stray[1:])})" if len(stray) > 1 else ""
        raise PairingError(f"{stray[0]}: not inside a sequence folder{more}; with --sequences each frame lies in the "
                           "folder of its video or burst, one folder per sequence (input/<video>/0001.png): move the "
                           "frames of each sequence into a folder of their own, or pack without --sequences")
    runs = _runs(pairs)
    by_name = {(split, name): first for split, name, first, _ in runs}
    for split, name, first, _ in runs:
        outer = name.rpartition("+")[0]
        while outer:  # a folder holding frames and, below it, another sequence's folder
            if (split, outer) in by_name:
                holder = pairs[by_name[(split, outer)]]
                raise PairingError(f"{_folder(holder)}: holds frames and also sequence folders ({_folder(pairs[first])}"
                                   "); with --sequences a folder is one sequence: move its frames into a folder of "
                                   "their own beside the others")
            outer = outer.rpartition("+")[0]
    if len(by_name) != len(runs):  # cannot happen while keys sort as the module says
        raise AssertionError("the frames of a sequence are not consecutive in key order")
    for _, _, first, count in runs:
        for a, b in zip(pairs[first:first + count - 1], pairs[first + 1:first + count]):
            if misnumbered(_frame(a), _frame(b)):
                raise PairingError(f"{_folder(a)}: frames {a.low_rel.rpartition('/')[2]} and "
                                   f"{b.low_rel.rpartition('/')[2]} are numbered without zero padding, so name order "
                                   f"(the order a sequence's frames are packed in) puts {_frame(a)} before "
                                   f"{_frame(b)}; rename the frames with zero-padded numbers (0002, 0010, …) and pack "
                                   "again")


def plan_sequences(pairs: list[Pair], out_sizes: list[tuple[int, int]]) -> dict[str, Sequences]:
    """{split: its Sequences} of `pairs` (in (split, key) order, as `check_names` passed them), each pair stored at
    `out_sizes[k]`; frames of one sequence stored at two sizes are refused naming both. A split's target is
    "sequence" where every sequence's frames share one target file (SMID's long exposure) and some sequence has
    several frames, else "frame"."""
    found: dict[str, tuple[list[str], list[int], list[int], list[bool]]] = {}
    base: dict[str, int] = {}  # split -> its first pair
    for split, name, first, count in _runs(pairs):
        names, starts, counts, shared = found.setdefault(split, ([], [], [], []))
        names.append(name)
        starts.append(first - base.setdefault(split, first))
        counts.append(count)
        shared.append(len({pairs[k].high_rel for k in range(first, first + count)}) == 1)
    out = {}
    for split, (names, starts, counts, shared) in found.items():
        target = "sequence" if all(shared) and max(counts) > 1 else "frame"
        seqs = Sequences(names, starts, counts, target).check(sum(counts), f"split {split!r}")
        at = base[split]
        odd = seqs.first_mismatch(out_sizes[at:at + seqs.frames])
        if odd is not None:
            first, k = at + odd[1], at + odd[0]
            (h, w), (h2, w2) = out_sizes[first], out_sizes[k]
            raise ImageError(f"{_folder(pairs[first])}: the frames of one sequence differ in size: "
                             f"{pairs[first].low_rel} is {w}x{h} but {pairs[k].low_rel} is {w2}x{h2}; every frame "
                             "of a sequence has one size: replace the odd frames, or pack with --resize WxH to store "
                             "every frame at one size")
        out[split] = seqs
    return out


def describe(seqs: Sequences) -> str:
    """A split's sequences in words: '3 sequences of 2 to 4 frames, one target per frame'."""
    low, high = int(seqs.counts.min()), int(seqs.counts.max())
    frames = f"{low}" if low == high else f"{low} to {high}"
    target = "one target per sequence" if seqs.target == "sequence" else "one target per frame"
    return f"{len(seqs)} sequence{'s' if len(seqs) != 1 else ''} of {frames} frame{'s' if high != 1 else ''}, {target}"
