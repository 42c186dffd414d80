"""What discovery returns: a `Pair` of files, the `Unused` files of a folder with the reason they are in no pair,
and the `Discovery` that holds both with where each split came from; and how its messages show lists and names."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

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
    pairs: list[Pair]
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
    # inputs lying directly in their side folder (no folder of their own between it and the file), relative to RAW:
    # `pack --sequences` refuses them, a sequence being the folder holding its frames
    loose: list[str] = field(default_factory=list)

    def splits(self) -> dict[str, list[Pair]]:
        out: dict[str, list[Pair]] = {}
        for p in self.pairs:
            out.setdefault(p.split, []).append(p)
        return out

    def layout(self) -> dict:
        """What was found, for the manifest: per split the folders it came from and the pairing rule(s)."""
        return {split: {"folders": self.sources.get(split, []), "rules": self.rules.get(split, [])}
                for split in sorted(self.splits())}

    def add_source(self, split: str, source: str, rule: str) -> None:
        """Record that `split` has pairs from `source` (a folder or a pairs file) paired by `rule`, once each."""
        if source not in self.sources.setdefault(split, []):
            self.sources[split].append(source)
        if rule not in self.rules.setdefault(split, []):
            self.rules[split].append(rule)
