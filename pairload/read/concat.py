"""Per-sample columns of several sources read as one without copying them (`Column`, `PerSource`; the rows laid out
by `Offsets`), and a mix's keys (`PrefixedKeys`): a mix of a billion samples is planned and read through its
sources' mapped indexes, rows gathered as the planner asks for them. Numpy only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Callable

import numpy as np

from ..format.columns import LazyColumn


class Offsets:
    """Rows of several sources one source after another: where each source's rows start and end, and the source of
    any row (`of`)."""

    def __init__(self, sizes):
        sizes = np.asarray(sizes, dtype=np.int64)
        self.ends = np.cumsum(sizes)
        self.starts = self.ends - sizes

    @property
    def total(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def of(self, rows) -> np.ndarray:
        """The source of each of these rows."""
        return np.searchsorted(self.ends, np.asarray(rows, dtype=np.int64), side="right")


class Column(LazyColumn):
    """The rows of `parts` (arrays or columns of one trailing shape) one source after another. Indexing by an
    integer, or by an array of them, gathers from the sources those rows come from, each through `convert(source,
    rows)` when given; `np.asarray(column)` makes the whole column (what small splits and rare paths may do)."""

    def __init__(self, parts: Sequence, convert: Callable[[int, np.ndarray], np.ndarray] | None = None,
                 dtype=None):
        self.parts = list(parts)
        self.rows = Offsets([len(p) for p in self.parts])
        self.convert = convert or _same
        first = self.parts[0] if self.parts else np.zeros(0)
        self.dtype = np.dtype(dtype or first.dtype)
        self.shape = (self.rows.total, *np.shape(first)[1:])

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)):
            return self[np.array([key])][0]  # one row gathered, never a slice of a source's column
        if isinstance(key, slice):
            return self[np.arange(*key.indices(len(self)))]
        index = np.asarray(key)
        if isinstance(key, tuple) or index.dtype == object or index.dtype == bool:
            return np.asarray(self)[key]
        flat = index.reshape(-1).astype(np.int64)
        flat = np.where(flat < 0, flat + len(self), flat)
        out = np.empty((len(flat), *self.shape[1:]), dtype=self.dtype)
        source = self.rows.of(flat)
        for s in np.unique(source).tolist():
            sel = source == s
            out[sel] = self.convert(s, np.asarray(self.parts[s][flat[sel] - self.rows.starts[s]]))
        return out.reshape(*index.shape, *self.shape[1:])

    def __array__(self, dtype=None, copy=None):
        whole = np.concatenate([self.convert(s, np.asarray(p)) for s, p in enumerate(self.parts)]) if self.parts \
            else np.zeros(self.shape, dtype=self.dtype)
        return whole.astype(dtype or self.dtype, copy=False)


class PerSource(LazyColumn):
    """One value per source, read as a per-sample column of sources of `sizes` samples one after another (whether a
    mixed source is degraded, or read as targets only): two short arrays, not a value per sample."""

    def __init__(self, values, sizes):
        self.values, self.rows = np.asarray(values), Offsets(sizes)
        self.shape, self.dtype = (self.rows.total,), self.values.dtype

    def __getitem__(self, index):
        return self.values[self.rows.of(index)]

    def __array__(self, dtype=None, copy=None):
        return np.repeat(self.values, self.rows.ends - self.rows.starts).astype(dtype or self.dtype, copy=False)


class PrefixedKeys(Sequence):
    """A mix's keys, "name/key", made from its sources' keys as they are asked for (`take` gathers many)."""

    def __init__(self, names: Sequence[str], parts: Sequence[Sequence[str]]):
        self.names, self.parts = list(names), list(parts)
        self.rows = Offsets([len(p) for p in self.parts])

    def __len__(self) -> int:
        return self.rows.total

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.take(np.arange(*i.indices(len(self))))
        i = int(i) + (len(self) if i < 0 else 0)
        if not 0 <= i < len(self):
            raise IndexError(f"key {i} of a mix of {len(self)}")
        s = int(self.rows.of(i))
        return f"{self.names[s]}/{self.parts[s][i - int(self.rows.starts[s])]}"

    def take(self, indices) -> list[str]:
        idx = np.asarray(indices, dtype=np.int64)
        out: list[str | None] = [None] * len(idx)
        source = self.rows.of(idx)
        for s in np.unique(source).tolist():
            at = np.flatnonzero(source == s)
            rows = idx[at] - self.rows.starts[s]
            part = self.parts[s]
            take = getattr(part, "take", None)
            keys = take(rows) if take is not None else [part[i] for i in rows.tolist()]
            for k, key in zip(at.tolist(), keys):
                out[k] = f"{self.names[s]}/{key}"
        return out


def _same(source: int, rows: np.ndarray) -> np.ndarray:
    return rows
