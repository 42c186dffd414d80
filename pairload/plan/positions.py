"""An epoch's rows as positions, never materialised: a `View` is a virtual array of rows (sample index, padded
flag, draw) of a known length, whose rows at any positions are computed from the positions alone. The epoch's
rows (`EpochRows`: its order, repeats or mixed draws) are the base; wrapping around for padding, cutting, the
deals' rank shares and what is left once an epoch was started on another world size are views of views, each a
few integers. So a rank plans only the batches it runs, in memory independent of the split's size. Numpy only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


class View(Protocol):
    """Virtual rows: `length`, and `at(positions)` → (index, padded, draw), int64/bool/int64 arrays."""

    length: int

    def at(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...


def rows_of(view: View, start: int = 0, stop: int | None = None) -> np.ndarray:
    """(3, m) int64 rows (index, padded, draw) of positions [start, stop) of `view` (default: all of it)."""
    stop = view.length if stop is None else min(stop, view.length)
    if stop <= start:
        return np.zeros((3, 0), dtype=np.int64)
    index, padded, draw = view.at(np.arange(start, stop, dtype=np.int64))
    return np.stack([index, padded.astype(np.int64), draw])


def _empty(pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    z = np.zeros(len(pos), dtype=np.int64)
    return z, np.zeros(len(pos), dtype=bool), z.copy()


@dataclass(frozen=True)
class Wrap:
    """`length` rows going round `parent` again and again from its start; the rows past its end are flagged
    padded (the pad rule)."""

    parent: View
    length: int

    def at(self, pos):
        n = self.parent.length
        if not n:
            return _empty(pos)
        index, padded, draw = self.parent.at(pos % n)
        return index, padded | (pos >= n), draw


@dataclass(frozen=True)
class Cut:
    """Rows [start, start + length) of `parent`."""

    parent: View
    start: int
    length: int

    def at(self, pos):
        return self.parent.at(pos + self.start)


@dataclass(frozen=True)
class Stride:
    """Every `step`-th row of `parent` from row `first`: rank `first`'s share of a strided deal over `step` ranks."""

    parent: View
    first: int
    step: int

    @property
    def length(self) -> int:
        return len(range(self.first, self.parent.length, self.step))

    def at(self, pos):
        return self.parent.at(pos * self.step + self.first)


@dataclass(frozen=True)
class Pieces:
    """Rows [lo, hi) of `parent` for each (lo, hi) of `spans`, one after the other (the rest of a block deal once
    every rank has taken the first rows of its block)."""

    parent: View
    spans: tuple[tuple[int, int], ...]

    @property
    def length(self) -> int:
        return sum(hi - lo for lo, hi in self.spans)

    def at(self, pos):
        sizes = np.array([hi - lo for lo, hi in self.spans], dtype=np.int64)
        ends = np.cumsum(sizes)
        piece = np.searchsorted(ends, pos, side="right")
        lo = np.array([lo for lo, _ in self.spans], dtype=np.int64)
        return self.parent.at(pos - (ends - sizes)[piece] + lo[piece])
