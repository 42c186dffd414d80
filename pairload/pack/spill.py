"""`Spill`: the index rows of a pack's shards, kept in an unnamed temporary file beside the shards until the index is
written (`SpilledColumns` reads a column back when asked). A shard's columns get their room in the file when the
shard is opened (`reserve`) and are written a block of rows at a time as the rows are filled (`write_rows`), so a
pack of N pairs holds no index row in memory while it writes, whatever its shard size: ~100 bytes a pair (offsets,
sizes, CRCs, what was measured) that a pack of 10^8 pairs would have kept in RAM. A column read back is a copy-on-write
mapping of the file: the pages of the columns nobody looks at (the pack's checks read two of the six measures) are
never read. The file has no name: it is gone when the pack ends, however it ends."""

from __future__ import annotations

import mmap
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import numpy as np

from . import guard

Where = tuple[int, np.dtype, tuple]  # a column's offset in the file, dtype and shape


class Spill:
    """Arrays written to a temporary file in `folder` (made when first needed)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self._fh = None
        self._end = 0

    def _file(self):
        if self._fh is None:
            with guard.writing(self.folder):
                self._fh = tempfile.TemporaryFile(dir=self.folder, prefix=".pairload-rows-")
        return self._fh

    def put(self, columns: dict[str, np.ndarray]) -> "SpilledColumns":
        """Write `columns` to the file; returns them as a mapping that reads each back when asked."""
        where = self.reserve({name: (arr.dtype, arr.shape) for name, arr in columns.items()})
        for name, arr in columns.items():
            self.write_rows(where[name], 0, arr)
        return SpilledColumns(self, where)

    def reserve(self, specs: dict[str, tuple[np.dtype, tuple]]) -> dict[str, Where]:
        """Room for columns of these dtypes and shapes, one after the other: where each is (`write_rows` fills them;
        every row must be written before a column is read)."""
        where = {}
        for name, (dtype, shape) in specs.items():
            dtype, shape = np.dtype(dtype), tuple(int(s) for s in shape)
            where[name] = (self._end, dtype, shape)
            self._end += int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        return where

    def write_rows(self, where: Where, first: int, rows: np.ndarray) -> None:
        """Write `rows` into the reserved column `where`, from its row `first` on."""
        at, dtype, shape = where
        rows = np.ascontiguousarray(rows, dtype=dtype)
        if rows.shape[1:] != shape[1:] or not 0 <= first <= first + len(rows) <= shape[0]:
            raise ValueError(f"rows {first} to {first + len(rows)} of shape {rows.shape} in a column of {shape}")
        row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
        view, at = memoryview(rows).cast("B") if rows.size else memoryview(b""), at + first * row_bytes
        fd = self._file().fileno()
        with guard.writing(self.folder):
            while view:
                done = os.pwrite(fd, view, at)
                view, at = view[done:], at + done

    def joined(self, pieces: Iterable[np.ndarray], dtype, shape: tuple) -> np.ndarray:
        """`pieces` one after the other along the first axis (`shape`: the whole's), written to the file and mapped
        back: a split's column joined from its shards' without a copy in memory (each piece is let go once written;
        only the pages read later are ever in memory)."""
        where = self.reserve({"": (dtype, shape)})[""]
        at = 0
        for piece in pieces:
            self.write_rows(where, at, piece)
            at += len(piece)
        if at != where[2][0]:
            raise ValueError(f"pieces of {at} rows joined into a column of {where[2]}")
        return self.read(*where)

    def read(self, at: int, dtype: np.dtype, shape: tuple) -> np.ndarray:
        """A column: a copy-on-write mapping of its bytes (its pages read when touched), else a copy."""
        count = int(np.prod(shape, dtype=np.int64))
        if not count:
            return np.empty(shape, dtype)
        nbytes = count * dtype.itemsize
        start = at // mmap.ALLOCATIONGRANULARITY * mmap.ALLOCATIONGRANULARITY
        try:
            mapped = mmap.mmap(self._file().fileno(), at - start + nbytes, access=mmap.ACCESS_COPY, offset=start)
        except (OSError, ValueError):  # (out of mappings, or a platform without them: read it)
            return self._copy(at, dtype, shape)
        return np.frombuffer(mapped, dtype, count=count, offset=at - start).reshape(shape)

    def _copy(self, at: int, dtype: np.dtype, shape: tuple) -> np.ndarray:
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
    """A shard's columns by name, each read from the `Spill` when asked (`spec`: its dtype and shape, without reading
    it)."""

    def __init__(self, spill: Spill, where: dict[str, Where]):
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

    @property
    def spill(self) -> Spill:
        return self._spill


def joined_column(parts: list[Mapping], name: str) -> np.ndarray:
    """One column of several shards, one after the other: spilled ones joined in their spill (`Spill.joined`), others
    concatenated."""
    if len(parts) == 1:
        return parts[0][name]
    specs = [column_spec(columns, name) for columns in parts]
    shape = (sum(s[0] for _, s in specs), *specs[0][1][1:])
    if all(isinstance(columns, SpilledColumns) for columns in parts):
        return parts[0].spill.joined((columns[name] for columns in parts), specs[0][0], shape)
    return np.concatenate([np.asarray(columns[name]) for columns in parts])


def column_spec(columns: Mapping, name: str) -> tuple[np.dtype, tuple]:
    """(dtype, shape) of one of a shard's columns, spilled or in memory, without reading a spilled one."""
    if isinstance(columns, SpilledColumns):
        return columns.spec(name)
    arr = np.asarray(columns[name])
    return arr.dtype, arr.shape
