"""The sequences of a `pack --sequences`: the frames of each video or burst. A frame's sequence is the folder holding
it, its key's parent path (`input/pair1/0001.npy` → key `pair1+0001`, sequence `pair1`). `check_names` refuses, before
any header is read, what would make a sequence wrong (a frame in no folder of its own, a folder holding frames and
sequence folders, frames numbered without zero padding, and, unless `--sequence-gaps` says otherwise, frame numbers
that break their sequence's even spacing, as frames missing after an interrupted copy do); `plan_sequences` refuses
frames of two sizes and gives each split's `format.sequences.Sequences` (with `--sequence-gaps split`, a sequence
cut into runs where its numbering breaks), which `manifest.skeleton` writes into its split entry.

The frames of a sequence are consecutive samples in key order, which is their name order: a key's folders end in
`+`, which sorts before every other character a key holds, so `pair1+…` all come before `pair10+…`. Shards are cut
between any two samples (`shardplan`), a sequence sharing one target excepted (its target is stored once, so the
sequence stays in one shard), so a clip of T consecutive frames reads at most two shards whenever every shard holds
at least T - 1 frames; a shard smaller than a sequence is fine.
"""

from __future__ import annotations

import os
import re

import numpy as np

from pathlib import Path

from ..errors import ImageError, PairingError, ShardError
from ..format import binindex, schema
from ..format.atomic import write_json_atomic
from ..format.columns import ColumnFile, Pieces, release_pages, write_columns
from ..format.sequences import FIELD, RUN, Break, Sequences, in_index, into_index, numbering_breaks, others, run_name
from ..folders.discover import Discovery, Pair
from ..folders.model import listing
from ..folders.realpaths import path_hash

_NUMBERS = re.compile(r"(\d+)")


def sequence_of(key: str) -> str:
    """The sequence of a sample: its key's parent path ('' for a key of no folder)."""
    return key.rpartition("+")[0]


def _folder(pair: Pair) -> str:
    """The folder holding a pair's input, relative to RAW, as messages name a sequence."""
    return pair.low_rel.rpartition("/")[0] or "."


def _frame(pair: Pair) -> str:
    """A frame's name as its file is named, without the extension."""
    return _stem(pair.low_rel)


def _stem(rel: str) -> str:
    return os.path.splitext(rel.rpartition("/")[2])[0]


def _breaks(pairs: list[Pair], first: int, count: int) -> list[tuple[str, Break]]:
    """(folder, break) of each break in the frame numbering of the sequence `pairs[first:first + count]`, by place:
    its inputs' names, else (a target per frame) its targets', which a pairs file may number otherwise."""
    run = pairs[first:first + count]
    found = {b.at: (_folder(run[0]), b) for b in numbering_breaks([_frame(p) for p in run])}
    if len({p.high_rel for p in run}) == count:  # frames sharing a target say nothing about its numbering
        targets = numbering_breaks([_stem(p.high_rel) for p in run])
        found = {b.at: (run[0].high_rel.rpartition("/")[0] or ".", b) for b in targets} | found
    return [found[at] for at in sorted(found)]


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


def check_names(discovery: Discovery, gaps: str = "refuse") -> None:
    """Refuse, naming the files, what would make the sequences of `discovery` (its pairs in (split, key) order)
    wrong: a frame in no sequence folder, a folder holding frames beside sequence folders, frames numbered without
    zero padding, and (`gaps`: "refuse") a break in a sequence's frame numbering (`format.sequences.Break`)."""
    pairs = discovery.pairs
    loose = set(discovery.loose)
    stray = [p.low_rel for p in pairs if path_hash(p.low_rel) in loose or not sequence_of(p.key)]
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
    if gaps == "refuse":
        _refuse_breaks([(first, fb) for _, _, first, count in runs for fb in _breaks(pairs, first, count)])


def _refuse_breaks(found: list[tuple[int, tuple[str, Break]]]) -> None:
    """Refuse the first of the numbering breaks found, (the sequence's first pair, (folder, break)), counting the
    others."""
    if not found:
        return
    folder, b = found[0][1]
    more = others([(first, fb[1]) for first, fb in found])
    raise PairingError(f"{folder}: the frame numbers break, {b.words()}{more}, so a clip would join {b.before} and "
                       f"{b.after} as consecutive frames; copy any missing frames back and pack again, or pass "
                       f"--sequence-gaps split (each evenly numbered run its own sequence: no clip crosses a break) or "
                       f"--sequence-gaps allow (keep the sequence whole: clips cross the break)")


def _pieces(pairs: list[Pair], name: str, first: int, count: int, gaps: str):
    """(name, first, count) of the sequence `name` as packed: whole, or (`gaps`: "split") cut where its numbering
    breaks into runs named by their first frame (`format.sequences.run_name`)."""
    cuts = sorted({b.at for _, b in _breaks(pairs, first, count)}) if gaps == "split" else []
    if not cuts:
        yield name, first, count
        return
    bounds = [0, *cuts, count]
    for a, b in zip(bounds, bounds[1:]):
        yield run_name(name, pairs[first + a].key), first + a, b - a


def plan_sequences(pairs: list[Pair], out_sizes: list[tuple[int, int]], gaps: str = "refuse"
                   ) -> dict[str, Sequences]:
    """{split: its Sequences} of `pairs` (in (split, key) order, as `check_names` passed them), each pair stored at
    `out_sizes[k]`; frames of one sequence stored at two sizes are refused naming both. A split's target is
    "sequence" where every sequence's frames share one target file (SMID's long exposure) and some sequence has
    several frames, else "frame". `gaps` ("refuse", "split", "allow": `pack --sequence-gaps`): with "split", a
    sequence whose frame numbering breaks is cut there into runs (`_pieces`); the others are recorded."""
    found: dict[str, tuple[list[str], list[int], list[int], list[bool]]] = {}
    base: dict[str, int] = {}  # split -> its first pair
    for split, folder, whole, size in _runs(pairs):
        for name, first, count in _pieces(pairs, folder, whole, size, gaps):
            names, starts, counts, shared = found.setdefault(split, ([], [], [], []))
            names.append(name)
            starts.append(first - base.setdefault(split, first))
            counts.append(count)
            shared.append(len({pairs[k].high_rel for k in range(first, first + count)}) == 1)
    out = {}
    for split, (names, starts, counts, shared) in found.items():
        target = "sequence" if all(shared) and max(counts) > 1 else "frame"
        seqs = Sequences(names, starts, counts, target, gaps).check(
            sum(counts), f"split {split!r}")
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


def describe(seqs: Sequences, keys=()) -> str:
    """A split's sequences in words: '3 sequences of 2 to 4 frames, one target per frame', and what `--sequence-gaps`
    did: the runs it split, or (`keys`: the split's) the first break it kept."""
    low, high = int(seqs.counts.min()), int(seqs.counts.max())
    frames = f"{low}" if low == high else f"{low} to {high}"
    target = "one target per sequence" if seqs.target == "sequence" else "one target per frame"
    said = f"{len(seqs)} sequence{'s' if len(seqs) != 1 else ''} of {frames} frame{'s' if high != 1 else ''}, {target}"
    runs = [n for n in seqs.names if RUN in n]
    if runs:
        whole = len({n.rpartition(RUN)[0] for n in runs})
        said += (f"; {whole} sequence{'s' if whole != 1 else ''} cut into {len(runs)} runs where the frame numbers "
                 f"break (--sequence-gaps split): {listing(runs)}")
    kept = seqs.breaks(keys) if seqs.gaps == "allow" else []
    if kept:
        s, first = kept[0]
        said += (f"; {len(kept)} break(s) in the frame numbers kept (--sequence-gaps allow), the first in "
                 f"{seqs.names[s]}: {first.words()}")
    return said


def describe_splits(sequences: dict[str, Sequences], pairs: list[Pair]) -> dict[str, str]:
    """{split: its sequences in words (`describe`)} of `plan_sequences`' output for the same `pairs`."""
    keys: dict[str, list[str]] = {}
    for pair in pairs:
        keys.setdefault(pair.split, []).append(pair.key)
    return {split: describe(seqs, keys[split]) for split, seqs in sequences.items()}


def table_into_index(folder: str | os.PathLike) -> list[str]:
    """Move the sequence tables a pack made before 2026-11-29 lists in its manifest into its splits' index files
    (`format.sequences.TABLE`: a loader then reads them for the sequences it plans, not whole); returns the splits
    moved. Each index file is written again whole (atomically), then the manifest; a loader opening the pack
    meanwhile is refused (its index and its manifest disagree), one opening it after reads it."""
    folder = Path(folder)
    doc = schema.read_manifest(folder)
    where = str(folder / schema.MANIFEST)
    if doc["version"] < schema.VERSION_BINARY:
        raise ShardError(f"{where}: version {doc['version']} keeps its index in the manifest, so its sequence tables "
                         "stay there too: pack the folder again (a binary index is the default) to read them from an "
                         "index file")
    moved = []
    for split, entry in doc["splits"].items():
        if entry.get(FIELD) is None or in_index(entry):
            continue
        ref = entry[binindex.FIELD]
        schema.split_index(doc, split, where, folder)  # the index file is the manifest's
        old = ColumnFile(folder / ref["file"])
        columns = {name: _streamed(column) for name, column in old.columns.items()}
        columns.update(into_index(entry, f"{where}: split {split!r}"))
        sha, size = write_columns(folder / ref["file"], columns, old.meta)
        entry[binindex.FIELD] = dict(ref, bytes=size, sha256=sha)
        moved.append(split)
    if moved:
        write_json_atomic(folder / schema.MANIFEST, doc)
        schema.record_packed(folder, doc)
    return moved


def _streamed(column: np.ndarray, chunk: int = 64 << 20) -> Pieces:
    """A mapped column written again a chunk of bytes at a time, each chunk's pages let go once written (a column of
    a billion rows is not mapped whole by the process copying it)."""
    rows = max(1, chunk // max(1, column.nbytes // max(1, len(column)))) if column.ndim else 1

    def pieces():
        for lo in range(0, len(column), rows):
            yield column[lo:lo + rows]
            release_pages(column)
    return Pieces(column.dtype, column.shape, pieces)
