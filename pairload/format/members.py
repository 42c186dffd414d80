"""What a split's image members are: each side's element type and channels (H×W×C, C order), the size relation
between input and target, and how the members are encoded. The one description every writer, reader, worker,
kernel and batch takes element sizes and shapes from (as MosaicML's encodings table and FFCV's fields are).
Numpy only; imports neither torch nor DALI.

uint8 RGB on both sides at the same size, stored raw, is the default: a manifest that says nothing of members (every
pack of format versions 1-3) means exactly that. A split whose members differ records them in its manifest entry
(`"members"`), and such a pack is written as format version 4 so that an older pairload refuses it by name.
"""

from __future__ import annotations

import functools
import io
from dataclasses import dataclass

import numpy as np

from ..errors import ShardError
from .encoding import RAW, Encoding, of_entry

# What a member may hold (little-endian): name -> (numpy dtype, torch dtype name, the torch dtype name it is moved
# and flipped as: torch has few kernels for uint16, so its pixels travel as int16, the same bits). A new element
# type is one entry here.
DTYPE_TABLE = {"uint8": (np.dtype(np.uint8), "uint8", "uint8"), "uint16": (np.dtype(np.uint16), "uint16", "int16")}
DTYPES = {name: row[0] for name, row in DTYPE_TABLE.items()}
FIELD = "members"  # manifest field of a split whose members are not the default


class MemberError(ValueError):
    """A stored member that does not hold the image the index says (the caller names the shard, key and side)."""


@dataclass(frozen=True)
class Member:
    """One side's images: `dtype` (a name from DTYPES) and `channels`, stored H×W×C in C order."""

    dtype: str = "uint8"
    channels: int = 3

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ShardError(f"member dtype {self.dtype!r}: expected one of {', '.join(DTYPES)}")
        if not isinstance(self.channels, int) or isinstance(self.channels, bool) or not 1 <= self.channels <= 64:
            raise ShardError(f"member channels {self.channels!r}: expected a whole number from 1 to 64")

    @property
    def np_dtype(self) -> np.dtype:
        return DTYPES[self.dtype]

    @property
    def pixel_bytes(self) -> int:
        """Bytes of one pixel (all its channels)."""
        return self.np_dtype.itemsize * self.channels

    def nbytes(self, h: int, w: int) -> int:
        return int(h) * int(w) * self.pixel_bytes

    def npy_header(self, h: int, w: int) -> bytes:
        return _npy_header(self.dtype, self.channels, int(h), int(w))

    def describe(self) -> str:
        return f"{self.dtype} ×{self.channels}"


def npy_file(image: np.ndarray) -> bytes:
    """The .npy file of an H×W×C image of any member type (header + pixels, as numpy.save writes it, C order): what
    an `Encoding` encodes."""
    h, w, c = image.shape
    header = Member(image.dtype.name, c).npy_header(h, w)
    return b"".join((header, memoryview(np.ascontiguousarray(image)).cast("B")))


@functools.lru_cache(maxsize=512)
def _npy_header(dtype: str, channels: int, h: int, w: int) -> bytes:
    """The .npy (format 1.0) header numpy.save writes for a C-order H×W×C array (cached: readers compare it with the
    bytes in front of every image they read)."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": np.lib.format.dtype_to_descr(DTYPES[dtype]), "fortran_order": False, "shape": (h, w, channels)})
    return buf.getvalue()


@dataclass(frozen=True)
class Members:
    """A split's members: `low` (input) and `high` (target), `scale` (the target is `scale` times the input's
    height and width: 2 for a packed Bayer input beside its developed image, 1 for everything else) and
    `encoding` (how they are stored: an entry of `encoding.ENCODINGS`, raw pixels by default)."""

    low: Member = Member()
    high: Member = Member()
    scale: int = 1
    encoding: Encoding = RAW

    def __post_init__(self) -> None:
        if not isinstance(self.scale, int) or isinstance(self.scale, bool) or not 1 <= self.scale <= 8:
            raise ShardError(f"members scale {self.scale!r}: expected a whole number from 1 to 8")
        if not isinstance(self.encoding, Encoding):
            raise ShardError(f"members encoding {self.encoding!r}: expected an entry of pairload.format.encoding."
                             "ENCODINGS (raw, zstd or encoded)")

    @property
    def default(self) -> bool:
        """uint8 RGB on both sides, same size: what versions 1-3 of the format hold."""
        return self.low == Member() and self.high == Member() and self.scale == 1

    def as_targets(self) -> "Members":
        """The members of this split read as targets only: the target's type on both sides, at one size."""
        return Members(low=self.high, high=self.high, scale=1, encoding=self.encoding)

    def side(self, k: int) -> Member:
        return self.high if k else self.low

    @property
    def bytes_per_input_pixel(self) -> int:
        """Pixel bytes of a pair per pixel of its input (the target's scale² pixels included)."""
        return self.low.pixel_bytes + self.scale * self.scale * self.high.pixel_bytes

    def pair_bytes(self, h: int, w: int) -> int:
        """Pixel bytes of one pair whose input is h×w."""
        return int(h) * int(w) * self.bytes_per_input_pixel

    def batch(self, n: int, h: int, w: int) -> "BatchLayout":
        """Where a batch of n input windows of h×w and their targets lie in one flat buffer."""
        return _batch_layout(self.low, self.high, self.scale, int(n), int(h), int(w))

    def to_doc(self) -> dict | None:
        """The manifest's "members" value (None for the default, which manifests leave out)."""
        if self.default:
            return None
        return {"low": {"dtype": self.low.dtype, "channels": self.low.channels},
                "high": {"dtype": self.high.dtype, "channels": self.high.channels}, "scale": self.scale}

    def describe(self) -> str:
        s = f"input {self.low.describe()}, target {self.high.describe()}"
        return s + (f" at {self.scale}× the input's size" if self.scale != 1 else "")


ALIGN = 64  # the target block of a batch buffer starts at a multiple of this (any dtype's view is aligned)


@dataclass(frozen=True)
class BatchLayout:
    """One batch in one flat uint8 buffer: the n input windows (n, h, w, C) from byte 0, the n target windows from
    `high_offset`. `stacked`: both sides have one shape and dtype and lie back to back, so the buffer is also one
    (2, n, h, w, C) array (the default members: one view, one transform for both)."""

    low: Member
    high: Member
    low_shape: tuple[int, int, int, int]
    high_shape: tuple[int, int, int, int]
    high_offset: int
    total: int
    stacked: bool  # see above; then `stacked_shape` is the (2, n, h, w, C) shape of the whole block

    @property
    def stacked_shape(self) -> tuple[int, int, int, int, int]:
        return (2, *self.low_shape)

    def shaped(self, flat: np.ndarray) -> np.ndarray:
        """The block as the array it is handed on as: (2, n, h, w, C) of the members' dtype when stacked, else the
        flat uint8 bytes (`views` splits them)."""
        block = flat[:self.total]
        return block.view(self.low.np_dtype).reshape(self.stacked_shape) if self.stacked else block

    def views(self, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) arrays over `flat` (a uint8 buffer of at least `total` bytes, or a stacked block)."""
        if flat.ndim == 5:
            return flat[0], flat[1]
        if self.stacked:
            both = self.shaped(flat)
            return both[0], both[1]
        n, h, w, c = self.low_shape
        nb = self.low.nbytes(h, w) * n
        low = flat[:nb].view(self.low.np_dtype).reshape(self.low_shape)
        n, h, w, c = self.high_shape
        high = flat[self.high_offset:self.high_offset + self.high.nbytes(h, w) * n].view(self.high.np_dtype)
        return low, high.reshape(self.high_shape)


@functools.lru_cache(maxsize=256)
def _batch_layout(low: Member, high: Member, scale: int, n: int, h: int, w: int) -> BatchLayout:
    low_bytes = n * low.nbytes(h, w)
    offset = -(-low_bytes // ALIGN) * ALIGN
    stacked = low == high and scale == 1 and offset == low_bytes
    return BatchLayout(low, high, (n, h, w, low.channels), (n, h * scale, w * scale, high.channels), offset,
                       offset + n * high.nbytes(h * scale, w * scale), stacked)


DEFAULT = Members()


def members_of(entry: dict, where: str, split: str) -> Members:
    """The members of one split from its manifest entry (absent: the default; its encoding from its
    "compression"), checked; a malformed value is a ShardError naming the manifest and the split."""
    encoding = of_entry(entry, where, split)
    doc = entry.get(FIELD)
    if doc is None:
        return Members(encoding=encoding)
    try:
        if not isinstance(doc, dict) or set(doc) - {"low", "high", "scale"}:
            raise TypeError("expected an object with low, high and scale")
        sides = [Member(dtype=doc[k]["dtype"], channels=doc[k]["channels"]) for k in ("low", "high")]
        return Members(low=sides[0], high=sides[1], scale=doc.get("scale", 1), encoding=encoding)
    except (KeyError, TypeError, ShardError) as exc:
        raise ShardError(f"{where}: split {split!r}: \"{FIELD}\" is {doc!r} ({exc}); the manifest is damaged or was "
                         "edited: re-run the same `pairload pack` command to rewrite it") from None
