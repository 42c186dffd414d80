"""What discovery returns: a `Pair` of files, the `Unused` files of a folder with the reason they are in no pair,
and the `Discovery` that holds both with where each split came from; and how its messages show lists and names."""

from __future__ import annotations

import os
import sys
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

MAX_LISTED = 10  # file names a message or an Unused entry shows before "… and N more"


class Pair:
    """Two files that make one sample: its split and key, the files' absolute paths (`low`, `high`) and their paths
    relative to the dataset folder ('/'-separated). Immutable. A million of them are held at once while a pack plans, so
    the paths are kept as the relative strings and one shared root, and made into `Path`s when asked for."""

    __slots__ = ("split", "key", "low_rel", "high_rel", "_root", "_full")

    def __init__(self, split: str, key: str, low: Path, high: Path, low_rel: str, high_rel: str):
        set_ = object.__setattr__
        set_(self, "split", split)
        set_(self, "key", key)
        set_(self, "low_rel", low_rel)
        set_(self, "high_rel", high_rel)
        lo, hi = os.fspath(low), os.fspath(high)
        root = lo[:len(lo) - len(low_rel) - 1]
        shared = (lo == f"{root}/{low_rel}" and hi == f"{root}/{high_rel}" and lo.endswith(low_rel)
                  and hi.endswith(high_rel))
        set_(self, "_root", sys.intern(root) if shared else None)
        set_(self, "_full", None if shared else (lo, hi))

    @property
    def low(self) -> Path:
        return Path(self._root, self.low_rel) if self._full is None else Path(self._full[0])

    @property
    def high(self) -> Path:
        return Path(self._root, self.high_rel) if self._full is None else Path(self._full[1])

    def files(self) -> tuple[str, str]:
        """The two absolute paths as strings (no `Path` made: what a pass over a million pairs wants)."""
        if self._full is not None:
            return self._full
        return f"{self._root}/{self.low_rel}", f"{self._root}/{self.high_rel}"

    def _fields(self) -> tuple:
        return self.split, self.key, self.low, self.high, self.low_rel, self.high_rel

    def __setattr__(self, name, value):
        raise AttributeError(f"Pair is immutable (tried to set {name})")

    def __eq__(self, other) -> bool:
        return isinstance(other, Pair) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (f"Pair(split={self.split!r}, key={self.key!r}, low={self.low!r}, high={self.high!r}, "
                f"low_rel={self.low_rel!r}, high_rel={self.high_rel!r})")

    def __reduce__(self):
        return Pair, self._fields()

    @classmethod
    def _of(cls, split: str, key: str, low_rel: str, high_rel: str, root: str | None, full: tuple | None) -> "Pair":
        """A pair from what a `PairTable` keeps (no path taken apart again)."""
        pair = cls.__new__(cls)
        for name, value in (("split", split), ("key", key), ("low_rel", low_rel), ("high_rel", high_rel),
                            ("_root", root), ("_full", full)):
            object.__setattr__(pair, name, value)
        return pair


_TEXT = ("key", "low_rel", "high_rel")  # a PairTable's text columns
_OWN = 0xFFFFFFFF  # a PairTable row whose paths are not its root joined to its relative paths (kept whole)
_CHUNK = 4096  # rows a PairTable gathers at once (its temporaries stay under a MB whatever its length)


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")  # (a name undecodable in the file system's encoding round-trips)


_NARROW = 0xFFFFFFFF  # a text column's ends are uint32 (4 bytes a pair) while its bytes are at most this many


def _stops(ends: array) -> np.ndarray:
    """A text column's ends (an array of "I" or, past _NARROW bytes, "q") as numbers, without a copy."""
    return np.frombuffer(ends, np.int64 if ends.typecode == "q" else np.uint32)


def _gather_text(blob: bytearray, ends: array, rows: np.ndarray) -> tuple[bytearray, array]:
    """The strings at `rows` of one text column (its bytes and ends), gathered a chunk of rows at a time."""
    src, stops = np.frombuffer(blob, np.uint8), _stops(ends)
    out_blob, out_ends, at = bytearray(), array("I"), 0
    for a in range(0, len(rows), _CHUNK):
        chunk = rows[a:a + _CHUNK]
        stop = stops[chunk].astype(np.int64)
        start = np.where(chunk > 0, stops[np.maximum(chunk - 1, 0)], 0).astype(np.int64)
        size = stop - start
        where = np.repeat(start - (np.cumsum(size) - size), size) + np.arange(int(size.sum()))
        out_blob += src[where].tobytes()
        if out_ends.typecode == "I" and at + int(size.sum()) > _NARROW:
            out_ends = array("q", out_ends)
        out_ends.frombytes((np.cumsum(size) + at).astype(np.uint32 if out_ends.typecode == "I" else np.int64).tobytes())
        at += int(size.sum())
    del src, stops  # (no view may outlive the call: the arrays could not grow)
    return out_blob, out_ends


def fixed_width(blob: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Strings kept as UTF-8 bytes joined end to end (`blob`, int64 `ends`) as a fixed-width bytes array (numpy's
    `S`), which sorts as the strings do (UTF-8's byte order is code point order); gathered a chunk of rows at a time,
    so that the temporaries stay small."""
    n = len(ends)
    width = max(1, int(np.diff(ends, prepend=0).max()) if n else 1)
    out = np.zeros((n, width), np.uint8)
    for a in range(0, n, _CHUNK):
        b = min(a + _CHUNK, n)
        first = int(ends[a - 1]) if a else 0
        size = np.diff(ends[a:b], prepend=first)
        rows = np.repeat(np.arange(a, b), size)
        cols = np.arange(int(size.sum())) - np.repeat(np.cumsum(size) - size, size)
        out[rows, cols] = blob[first:int(ends[b - 1])]
    return out.view(f"S{width}").reshape(n)


class PairTable:
    """A list of `Pair`s kept as columns: each pair's split and root as small codes, its key and relative paths as
    UTF-8 bytes joined end to end with uint32 ends (int64 once a column passes 4 GB). About 70 bytes a pair where
    `Pair` objects took 285: a pack of 10^8 pairs holds them in 7 GB. Indexing, iterating and slicing make the `Pair`s
    asked for; `take` and `sort_keys` reorder without making any."""

    __slots__ = ("_names", "_code", "_split", "_roots", "_root_code", "_root", "_blobs", "_ends", "_own")

    def __init__(self, pairs: Iterable[Pair] = ()):
        self._names: list[str] = []  # split names by code
        self._code: dict[str, int] = {}
        self._split = array("H")
        self._roots: list[str] = []
        self._root_code: dict[str, int] = {}
        self._root = array("I")
        self._blobs = tuple(bytearray() for _ in _TEXT)
        self._ends = tuple(array("I") for _ in _TEXT)  # ("q" once a column's bytes pass _NARROW)
        self._own: dict[int, tuple[str, str]] = {}  # row -> its two absolute paths, where not root + relative
        self.extend(pairs)

    def append(self, pair: Pair) -> None:
        code = self._code.get(pair.split)
        if code is None:
            code = self._code[pair.split] = len(self._names)
            self._names.append(pair.split)
        row = len(self._split)
        self._split.append(code)
        if pair._full is None:
            root = self._root_code.get(pair._root)
            if root is None:
                root = self._root_code[pair._root] = len(self._roots)
                self._roots.append(pair._root)
            self._root.append(root)
        else:
            self._root.append(_OWN)
            self._own[row] = pair._full
        for column, text in enumerate((pair.key, pair.low_rel, pair.high_rel)):
            blob, ends = self._blobs[column], self._ends[column]
            blob += _utf8(text)
            if len(blob) > _NARROW and ends.typecode != "q":
                wide = list(self._ends)
                ends = wide[column] = array("q", ends)
                self._ends = tuple(wide)
            ends.append(len(blob))

    def extend(self, pairs: Iterable[Pair]) -> None:
        for pair in pairs:
            self.append(pair)

    def __len__(self) -> int:
        return len(self._split)

    def _text(self, column: int, row: int) -> str:
        ends = self._ends[column]
        return self._blobs[column][ends[row - 1] if row else 0:ends[row]].decode("utf-8", "surrogatepass")

    def __getitem__(self, row):
        n = len(self._split)
        if isinstance(row, slice):
            return self.take(np.arange(*row.indices(n)))
        row = int(row)
        if row < 0:
            row += n
        if not 0 <= row < n:
            raise IndexError(f"pair {row} of {n}")
        root = self._root[row]
        return Pair._of(self._names[self._split[row]], self._text(0, row), self._text(1, row), self._text(2, row),
                        None if root == _OWN else self._roots[root], self._own.get(row))

    def __iter__(self) -> Iterator[Pair]:
        for row in range(len(self._split)):
            yield self[row]

    def __eq__(self, other) -> bool:
        try:
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        except TypeError:
            return NotImplemented

    __hash__ = None  # (mutable, as a list)

    def __repr__(self) -> str:
        return f"PairTable({list(self)!r})"

    def __reduce__(self):
        return PairTable, (list(self),)

    def split_names(self) -> list[str]:
        """The splits its pairs are in, sorted."""
        used = np.unique(self.split_codes()) if len(self) else []
        return sorted(self._names[c] for c in used)

    def by_split(self) -> dict[str, "PairTable"]:
        """{split: its pairs, in this table's order}, in split order."""
        codes = self.split_codes()
        out = {}
        for rank, split in enumerate(sorted(self._names)):
            rows = np.flatnonzero(codes == rank)
            if len(rows):
                out[split] = self.take(rows)
        return out

    def split_codes(self) -> np.ndarray:
        """Each pair's split as the rank of its name among the table's split names, sorted (uint16)."""
        rank = np.argsort(np.argsort(np.array(self._names, dtype=object))) if self._names else np.zeros(0, np.int64)
        return rank.astype(np.uint16)[np.frombuffer(self._split, np.uint16)] if len(self) else np.zeros(0, np.uint16)

    def key_bytes(self, first: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """(bytes, int64 ends) of the keys of rows `first` to `first + count`, as `format.columns.Keys.encode` makes
        them (a lone surrogate, from a name undecodable in the file system's encoding, as the byte it stands for)."""
        start = self._ends[0][first - 1] if first else 0
        ends = _stops(self._ends[0])[first:first + count].astype(np.int64) - start
        blob = np.frombuffer(self._blobs[0], np.uint8)[start:start + (int(ends[-1]) if count else 0)].copy()
        if (blob == 0xED).any():  # (the lead byte of a surrogate, and of some Hangul: then key by key)
            raw = [self._text(0, k).encode("utf-8", "surrogateescape") for k in range(first, first + count)]
            blob = np.frombuffer(b"".join(raw), np.uint8).copy()
            ends = np.cumsum([len(r) for r in raw], dtype=np.int64)
        return blob, ends

    def fixed(self, name: str) -> np.ndarray:
        """One text column as a fixed-width bytes array (numpy's `S`), which sorts as the strings do."""
        column = _TEXT.index(name)
        # (the views die with the call: the bytearrays could not grow while one lives)
        return fixed_width(np.frombuffer(self._blobs[column], np.uint8), _stops(self._ends[column]).astype(np.int64))

    def key_order(self) -> np.ndarray:
        """The rows in (split, key) order, ties in row order."""
        return np.lexsort((self.fixed("key"), self.split_codes())) if len(self) else np.zeros(0, np.int64)

    def sort_keys(self) -> None:
        """Put the pairs in (split, key) order, in place (`list.sort(key=lambda p: (p.split, p.key))`)."""
        self.reorder(self.key_order())

    def keep(self, mask) -> None:
        """Keep the pairs where `mask` (a bool per pair) is true, in place."""
        self.reorder(np.flatnonzero(np.asarray(mask, dtype=bool)))

    def reorder(self, rows) -> None:
        """Keep the pairs at `rows` (int indices), in that order, in place: one column at a time, so that a table of
        10^8 pairs is never held twice."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        self._split = self._gathered(self._split, "H", np.uint16, rows)
        self._root = self._gathered(self._root, "I", np.uint32, rows)
        if self._own:
            self._own = {new: self._own[old] for new, old in enumerate(rows.tolist()) if old in self._own}
        blobs, ends = list(self._blobs), list(self._ends)
        for column in range(len(_TEXT)):
            blobs[column], ends[column] = _gather_text(blobs[column], ends[column], rows)
        self._blobs, self._ends = tuple(blobs), tuple(ends)

    @staticmethod
    def _gathered(codes: array, typecode: str, dtype, rows: np.ndarray) -> array:
        out = array(typecode)
        if len(rows):
            out.frombytes(np.frombuffer(codes, dtype)[rows].tobytes())
        return out

    def take(self, rows) -> "PairTable":
        """The pairs at `rows` (int indices), in that order, as a new table."""
        out = PairTable()
        out._names, out._code, out._roots, out._root_code = (list(self._names), dict(self._code), list(self._roots),
                                                             dict(self._root_code))
        out._split, out._root, out._own = self._split, self._root, dict(self._own)
        out._blobs, out._ends = self._blobs, self._ends
        out.reorder(rows)  # (makes new columns: this table's are left as they are)
        return out


# Why an image-like file under RAW is in no pair (Unused.reason).
UNSUPPORTED = "unsupported extension"
UNMATCHED = "unmatched"
TOO_DEEP = "too deep"
UNKNOWN_SPLIT = "not under a recognised split folder"
NO_SIDE_FOLDER = "not in a pair of side folders"
NOT_LISTED = "not in the pairs file"
SAME_FILE = "same file as a packed image"
PAIRS_LIST = "a pairs list not given with --pairs-file"
NOT_THE_TARGET = "not the scene's target"  # DRV's copies beside SMID's one target of a scene (`rules.pair_unit`)


def listing(items: list[str], total: int | None = None) -> str:
    """The first MAX_LISTED items, comma-separated, and how many more there are."""
    total = len(items) if total is None else total
    shown = ", ".join(items[:MAX_LISTED])
    return shown + (f" … and {total - MAX_LISTED} more" if total > MAX_LISTED else "")


def escaped(name: str) -> str:
    """`name` with every character outside printable ASCII written as a \\uXXXX escape, so that a message shows
    the characters a name is spelled with (`cafe\\u0301`, `a\\u200b.png`)."""
    return "".join(c if " " <= c <= "~" else f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}"
                   for c in name)


@dataclass(frozen=True)
class Unused:
    """Image-like files of one folder that are in no pair, and why: every image-like file under RAW is either in
    a pair or in one of these."""

    folder: str  # relative to RAW, '/'-separated; '.' for RAW itself
    reason: str  # one of the constants above
    count: int
    names: tuple[str, ...]  # the first MAX_LISTED file names in the folder
    hint: str  # how to pack them, or why they stay out

    def describe(self) -> str:
        return (f"{self.count} file(s) in {self.folder} ({self.reason}): {listing(list(self.names), self.count)}; "
                f"{self.hint}")

    def as_dict(self) -> dict:
        return {"folder": self.folder, "reason": self.reason, "count": self.count, "names": list(self.names),
                "hint": self.hint}


@dataclass
class Discovery:
    pairs: PairTable
    skipped_low: list[str] = field(default_factory=list)  # unmatched files skipped with skip_unmatched
    skipped_high: list[str] = field(default_factory=list)
    sources: dict[str, list[str]] = field(default_factory=dict)  # split -> folders (relative to RAW) it came from
    rules: dict[str, list[str]] = field(default_factory=dict)  # split -> pairing rules used
    skipped_per_split: dict[str, int] = field(default_factory=dict)
    unused: list[Unused] = field(default_factory=list)  # per folder and reason: image-like files in no pair
    split_folders: dict[str, tuple[str, str]] = field(default_factory=dict)  # folder name -> (split, how it mapped)
    # files of a target folder set aside beside its one target (DRV's copies in SMID_Long_np/<scene>/): reported as
    # NOT_THE_TARGET, never packed
    aside: list[str] = field(default_factory=list)
    # inputs lying directly in their side folder (no folder of their own between it and the file), as the
    # `realpaths.path_hash` of their path relative to RAW (8 bytes each, not a string): `pack --sequences` refuses
    # them, a sequence being the folder holding its frames
    loose: array = field(default_factory=lambda: array("q"))

    def __post_init__(self):
        if not isinstance(self.pairs, PairTable):
            self.pairs = PairTable(self.pairs)

    def splits(self) -> dict[str, PairTable]:
        """{split: its pairs}, in split order."""
        return self.pairs.by_split()

    def layout(self) -> dict:
        """What was found, for the manifest: per split the folders it came from and the pairing rule(s)."""
        return {split: {"folders": self.sources.get(split, []), "rules": self.rules.get(split, [])}
                for split in self.pairs.split_names()}

    def add_source(self, split: str, source: str, rule: str) -> None:
        """Record that `split` has pairs from `source` (a folder or a pairs file) paired by `rule`, once each."""
        if source not in self.sources.setdefault(split, []):
            self.sources[split].append(source)
        if rule not in self.rules.setdefault(split, []):
            self.rules[split].append(rule)
