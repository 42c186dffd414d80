"""`Spill`: the index rows of a pack's finished shards, kept in an unnamed temporary file beside the shards until
the index is written (`SpilledColumns` reads a column back when asked). A pack of N pairs then holds no index row in
memory while it writes: ~100 bytes a pair (offsets, sizes, CRCs, what was measured) that a pack of 10^8 pairs would
have kept in RAM. The file has no name: it is gone when the pack ends, however it ends."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from . import guard


class Spill:
    """Arrays appended to a temporary file in `folder` (made at the first `put`)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self._fh = None
        self._end = 0

    def put(self, columns: dict[str, np.ndarray]) -> "SpilledColumns":
        """Write `columns` to the file; returns them as a mapping that reads each back when asked."""
        with guard.writing(self.folder):
            if self._fh is None:
                self._fh = tempfile.TemporaryFile(dir=self.folder, prefix=".pairload-rows-")
            where = {}
            for name, arr in columns.items():
                arr = np.ascontiguousarray(arr)
                view, at = memoryview(arr).cast("B") if arr.size else memoryview(b""), self._end
                while view:
                    done = os.pwrite(self._fh.fileno(), view, at)
                    view, at = view[done:], at + done
                where[name] = (self._end, arr.dtype, arr.shape)
                self._end += arr.nbytes
        return SpilledColumns(self, where)

    def read(self, at: int, dtype: np.dtype, shape: tuple) -> np.ndarray:
        out = np.empty(shape, dtype)
        view = memoryview(out).cast("B") if out.size else memoryview(b"")
        while view:
            got = os.preadv(self._fh.fileno(), [view], at)
            if got <= 0:
                raise OSError(f"the pack's temporary rows file ended at {at}")
            view, at = view[got:], at + got
        return out

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


class SpilledColumns(Mapping):
    """A finished shard's columns by name, each read from the `Spill` when asked (`spec`: its dtype and shape,
    without reading it)."""

    def __init__(self, spill: Spill, where: dict[str, tuple[int, np.dtype, tuple]]):
        self._spill, self._where = spill, where

    def __getitem__(self, name: str) -> np.ndarray:
        return self._spill.read(*self._where[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)

    def spec(self, name: str) -> tuple[np.dtype, tuple]:
        _, dtype, shape = self._where[name]
        return dtype, shape


def column_spec(columns: Mapping, name: str) -> tuple[np.dtype, tuple]:
    """(dtype, shape) of one of a shard's columns, spilled or in memory, without reading a spilled one."""
    if isinstance(columns, SpilledColumns):
        return columns.spec(name)
    arr = np.asarray(columns[name])
    return arr.dtype, arr.shape
