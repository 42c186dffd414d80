"""Column files: named numpy arrays in one file that readers memory-map, so that every process on a node shares one
copy of them in the page cache. A split's binary index (`<split>.index`, format version 5) and a pack part's record
are column files. Layout: a 16-byte magic, the header's length (uint64, little-endian), the header (JSON: `meta`, and
each column's dtype, shape and offset from the data start), zero padding to 64 bytes, then each column's bytes,
each starting at a multiple of 64."""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .. import willneed
from ..errors import ShardError
from .atomic import atomic_open

MAGIC = b"pairload-columns"  # 16 bytes
ALIGN = 64
_LEN = struct.Struct("<Q")


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


# A mapped column of a large file is read for the rows asked and its pages let go again (`paged`): random rows touch
# a page each (and the kernel maps the pages around it), so a column read at random would otherwise stay mapped whole
# in every process that reads it, counted as that process's own memory. Under this size the mapping is kept.
PAGED_ABOVE = 64 << 20


class LazyColumn:
    """A per-sample column read for the rows asked (`column[rows]`, `len`, `shape`, `dtype`), not held whole;
    `np.asarray(column)` makes the whole array (for small splits and rare paths)."""

    shape: tuple
    dtype: np.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]


def _mapping(array: np.ndarray) -> tuple[mmap.mmap, int] | None:
    """The mmap an array views and where in it the array starts (None: not a view of one)."""
    base = array
    while isinstance(base, np.ndarray) or isinstance(base, memoryview):
        base = base.base if isinstance(base, np.ndarray) else base.obj
    if not isinstance(base, mmap.mmap) or base.closed:
        return None
    start = array.ctypes.data - np.frombuffer(base, dtype=np.uint8, count=0).ctypes.data
    return base, start


def _pages(array: np.ndarray) -> tuple[mmap.mmap, int, int] | None:
    """(the mmap, first byte, bytes) of the whole pages a mapped array spans (None: not a view of a mapping, or
    empty)."""
    found = _mapping(array) if isinstance(array, np.ndarray) else None
    if found is None:
        return None
    mm, start = found
    lo = start // mmap.PAGESIZE * mmap.PAGESIZE
    hi = min(len(mm), -(-(start + array.nbytes) // mmap.PAGESIZE) * mmap.PAGESIZE)
    return (mm, lo, hi - lo) if hi > lo else None


def _advise(array: np.ndarray, advice: int | None) -> None:
    """madvise the pages a mapped array spans (nothing for an array that is not a view of a mapping)."""
    found = _pages(array) if advice is not None else None
    if found is not None:
        mm, lo, n = found
        mm.madvise(advice, lo, n)


def release_pages(array: np.ndarray) -> None:
    """Let go of this process's pages of a mapped array (they stay in the page cache: the next read maps them again);
    nothing for an array that is not a view of a mapping."""
    _advise(array, mmap.MADV_DONTNEED)


def read_at_random(array: np.ndarray) -> None:
    """Tell the kernel this process reads a mapped array's pages at random (MADV_RANDOM on the pages it spans): a
    page fault then reads that page, not the read-ahead window around it, which holds rows nobody asked for and can
    be megabytes (8 MB on a virtual disk here: a block's 8,192 random rows of a 70 GB index read most of each column
    from disk, minutes). Nothing for an array that is not a view of a mapping, or where madvise cannot."""
    try:
        _advise(array, getattr(mmap, "MADV_RANDOM", None))
    except OSError:  # advice only: the rows read the same without it
        pass


def will_read(array: np.ndarray) -> None:
    """Ask the kernel to read a contiguous part of a mapped array now, in large requests (MADV_WILLNEED), where
    `read_at_random` turned its read-ahead off: a slice read in order, a page at a time, would wait on each."""
    found = _pages(array) if array.flags.c_contiguous and array.nbytes > 16 * mmap.PAGESIZE else None
    if found is not None:
        try:
            willneed.map_range(*found)  # in pieces: one large request is read only in part
        except (OSError, ValueError):  # advice only
            pass


def is_large_mapping(array) -> bool:
    found = _mapping(array) if isinstance(array, np.ndarray) else None
    return found is not None and len(found[0]) > PAGED_ABOVE


class PagedColumn(LazyColumn):
    """A column of a large mapped file read for the rows asked, its pages let go after each read (see PAGED_ABOVE),
    and read without read-ahead (`read_at_random`)."""

    def __init__(self, array: np.ndarray):
        self.array, self.shape, self.dtype = array, array.shape, array.dtype
        read_at_random(array)

    def __getitem__(self, key):
        try:
            part = self.array[key]
            if isinstance(key, slice) and isinstance(part, np.ndarray):  # rows in order: read ahead after all
                will_read(part)
            return np.array(part)  # a copy: nothing keeps the pages
        finally:
            release_pages(self.array)

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.array, dtype=dtype)


def paged(array):
    """`array` read through `PagedColumn` when it views a mapping larger than PAGED_ABOVE, else itself."""
    return PagedColumn(array) if is_large_mapping(array) else array


class Pieces:
    """A column to write made of pieces (arrays of its dtype, one after the other along the first axis), each made
    when it is written (`pieces()` is called then): a file of many shards' columns is written without joining them
    in memory first."""

    def __init__(self, dtype, shape: tuple, pieces):
        self.dtype, self.shape, self.pieces = np.dtype(dtype), tuple(int(s) for s in shape), pieces
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


def column_bytes(columns: dict[str, np.ndarray], meta: dict) -> tuple[bytes, list[np.ndarray]]:
    """The header (magic to the data start) and the arrays to write after it (or `Pieces`), each padded to 64
    bytes."""
    arrays, doc, pos = [], {}, 0
    for name, arr in columns.items():
        if not isinstance(arr, Pieces):
            arr = np.ascontiguousarray(arr)
        if arr.dtype.byteorder == ">" or arr.dtype.kind not in "biuf":
            raise ValueError(f"column {name!r}: {arr.dtype} cannot be stored (little-endian numbers only)")
        doc[name] = {"dtype": arr.dtype.newbyteorder("<").str, "shape": list(arr.shape), "offset": pos}
        arrays.append(arr)
        pos = _aligned(pos + arr.nbytes)
    header = json.dumps({"meta": meta, "columns": doc}, separators=(",", ":")).encode()  # meta keeps its order
    head = MAGIC + _LEN.pack(len(header)) + header
    return head + bytes(_aligned(len(head)) - len(head)), arrays


def _chunks_of(arr):
    """A column's bytes to write, piece by piece (a `Pieces` checked against the size it declared)."""
    if not isinstance(arr, Pieces):
        yield memoryview(arr).cast("B") if arr.size else b""
        return
    written = 0
    for piece in arr.pieces():
        piece = np.ascontiguousarray(piece, dtype=arr.dtype)
        if piece.shape[1:] != arr.shape[1:]:
            raise ValueError(f"a piece of shape {piece.shape} in a column of shape {arr.shape}")
        written += piece.nbytes
        yield memoryview(piece).cast("B") if piece.size else b""
    if written != arr.nbytes:
        raise ValueError(f"a column of {arr.nbytes} bytes got {written} from its pieces")


def write_columns(path: str | os.PathLike, columns: dict[str, np.ndarray], meta: dict | None = None
                  ) -> tuple[str, int]:
    """Write a column file atomically (a temporary name beside it, fsync, rename); returns its sha256 and size.
    A column may be `Pieces`, made piece by piece as it is written."""
    path = Path(path)
    head, arrays = column_bytes(columns, meta or {})
    digest = hashlib.sha256(head)
    size = len(head)
    with atomic_open(path, "wb") as fh:
        fh.write(head)
        for arr in arrays:
            for data in _chunks_of(arr):
                fh.write(data)
                digest.update(data)
            pad = bytes(_aligned(arr.nbytes) - arr.nbytes)
            fh.write(pad)
            digest.update(pad)
            size += _aligned(arr.nbytes)
    return digest.hexdigest(), size


class ColumnFile:
    """A column file mapped read-only: `meta` (the writer's dict) and `columns` (arrays viewing the map; nothing is
    read until a column's pages are touched). `where` names the file in messages (a URL's cached copy, say)."""

    def __init__(self, path: str | os.PathLike, where: str | None = None):
        self.path = Path(path)
        self.where = where or str(self.path)
        try:
            with open(self.path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        except FileNotFoundError:
            raise ShardError(f"{self.where}: no such file; it is part of the pack: copy it back, or re-run the same "
                             "`pairload pack` command") from None
        except OSError as exc:
            raise ShardError(f"{self.where}: cannot be read ({exc.strerror})") from None
        self.size = size
        self.meta, self.columns = self._parse()

    def _bad(self, what: str) -> ShardError:
        return ShardError(f"{self.where}: {what}; the file is damaged or not a pairload column file: re-run the same "
                          "`pairload pack` command to rewrite it")

    def _parse(self) -> tuple[dict, dict[str, np.ndarray]]:
        buf = self._map
        if buf is None or self.size < len(MAGIC) + _LEN.size or buf[:len(MAGIC)] != MAGIC:
            raise self._bad(f"does not start with {MAGIC.decode()!r}")
        (n,) = _LEN.unpack_from(buf, len(MAGIC))
        start = len(MAGIC) + _LEN.size
        if start + n > self.size:
            raise self._bad(f"its header claims {n} bytes, the file holds {self.size}")
        try:
            doc = json.loads(bytes(buf[start:start + n]))
            meta, specs = doc["meta"], doc["columns"]
        except (ValueError, KeyError, TypeError) as exc:
            raise self._bad(f"its header is not valid ({exc})") from None
        data = _aligned(start + n)
        columns = {}
        for name, spec in specs.items():
            try:
                dtype, offset = np.dtype(spec["dtype"]), int(spec["offset"])
                shape = tuple(int(d) for d in spec["shape"])
                count = int(np.prod(shape, dtype=np.int64))
                if offset < 0 or min(shape, default=0) < 0 or data + offset + count * dtype.itemsize > self.size:
                    raise ValueError(f"{data + offset + count * dtype.itemsize} bytes needed")
            except (KeyError, TypeError, ValueError) as exc:
                raise self._bad(f"column {name!r} does not fit in the file ({exc})") from None
            columns[name] = np.frombuffer(buf, dtype=dtype, count=count, offset=data + offset).reshape(shape)
        return meta, columns

    def column(self, name: str, dtype, shape: tuple[int, ...]) -> np.ndarray:
        """Column `name`, checked to have this dtype and shape (-1: any length)."""
        arr = self.columns.get(name)
        if arr is None:
            raise self._bad(f"no column {name!r}")
        if arr.dtype != np.dtype(dtype) or arr.ndim != len(shape) or any(
                s not in (-1, a) for s, a in zip(shape, arr.shape)):
            raise self._bad(f"column {name!r} is {arr.dtype}{list(arr.shape)}, expected {np.dtype(dtype)}{list(shape)}")
        return arr


class Keys(Sequence):
    """Sample keys stored as one byte string and the end offset of each (`encode`), decoded one at a time: a
    million keys cost two arrays (shared, when mapped), not a million Python strings."""

    __slots__ = ("blob", "ends", "_decoded", "paged")
    GATHER_FROM = 256  # `take` of this many keys or more gathers their bytes with numpy (fewer: a slice each)
    DECODE_UP_TO = 1 << 16  # `take` from a split of at most this many keys decodes them all once (a few MB of
    #                         strings) and picks from the list, instead of gathering and decoding their bytes each time

    def __init__(self, blob: np.ndarray, ends: np.ndarray):
        self.blob, self.ends = blob, ends
        self._decoded: list[str] | None = None
        self.paged = is_large_mapping(ends)  # `take` lets the pages it read go (a large file: `PagedColumn`)
        if self.paged:  # and reads them without read-ahead, as `PagedColumn` does
            read_at_random(blob)
            read_at_random(ends)

    @staticmethod
    def encode(keys) -> tuple[np.ndarray, np.ndarray]:
        """(blob uint8, ends int64) of a sequence of strings."""
        raw = [k.encode("utf-8", "surrogateescape") for k in keys]
        ends = np.cumsum(np.fromiter((len(r) for r in raw), dtype=np.int64, count=len(raw)), dtype=np.int64)
        return np.frombuffer(b"".join(raw), dtype=np.uint8), ends

    def __len__(self) -> int:
        return len(self.ends)

    def _one(self, i: int) -> str:
        start = int(self.ends[i - 1]) if i > 0 else 0
        return self.blob[start:int(self.ends[i])].tobytes().decode("utf-8", "surrogateescape")

    def take(self, indices) -> list[str]:
        """The keys at these indices (a batch's keys): two gathers of the offsets, then one slice of the blob per key
        (indexing one key at a time costs a few numpy scalars each: more than the GPU cutting the batch)."""
        idx = np.asarray(indices, dtype=np.int64)
        if len(idx) == 0:
            return []
        n = len(self.ends)
        if idx.min() < -n or idx.max() >= n:
            raise IndexError(f"keys {idx.tolist()} of {n}")
        idx = idx % n
        if n <= self.DECODE_UP_TO:
            if self._decoded is None:
                self._decoded = list(self)
            return [self._decoded[i] for i in idx.tolist()]
        ends = self.ends[idx]
        starts = np.where(idx > 0, self.ends[idx - 1], 0)
        # the keys' bytes joined with NULs (no key holds one: they are file names), decoded once and split: one
        # decode for all of them, not one per key
        if len(idx) < self.GATHER_FROM:
            view = memoryview(self.blob)
            joined = b"\0".join([view[s:e] for s, e in zip(starts.tolist(), ends.tolist())])
        else:  # many keys: their bytes gathered by numpy at once
            lengths = ends - starts
            sizes = lengths + 1
            pos = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)  # place within its key
            out = np.zeros(len(pos), dtype=np.uint8)
            body = pos < np.repeat(lengths, sizes)  # the rest: each key's NUL
            out[body] = self.blob[(np.repeat(starts, sizes) + pos)[body]]
            joined = out[:-1].tobytes()
        keys = joined.decode("utf-8", "surrogateescape").split("\0")
        if len(keys) != len(idx):  # a key with a NUL in it after all: one at a time
            keys = [self._one(int(i)) for i in idx]
        if self.paged:
            release_pages(self.blob)
            release_pages(self.ends)
        return keys

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._one(k) for k in range(*i.indices(len(self)))]
        n = len(self)
        k = int(i)
        if not -n <= k < n:
            raise IndexError(f"key {i} of {n}")
        return self._one(k % n)

    def __iter__(self):
        data = self.blob.tobytes()
        start = 0
        for end in self.ends.tolist():
            yield data[start:end].decode("utf-8", "surrogateescape")
            start = end

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None
