"""`tiles`: the lossless image member of an encoded split (`pack --store encoded`): the image cut into TILE×TILE tiles
(the last row and column smaller), each tile's channel planes filtered by a predictor chosen for that tile and each
plane (each byte plane of a 16-bit image) compressed as one standard zstd frame. Decoding it is exact integer
arithmetic, so a CPU (`decode_tiles`, zstandard and numpy) and a GPU (nvCOMP's batched zstd and the cut path's
kernel, `cut.memory.tiles`) give the very pixels stored; a crop decodes only the tiles it touches (`touched`): at
most 2 per side for a crop of up to TILE + 1 pixels.

Why this encoding (measured on real photographs, 600×400, 2026-11-28; benchmarks/results/lossless-probe-h200-*):
zstd frames of filtered planes come to 1.96× smaller than uint8 per pair (targets 2.16×, noisy low-light inputs
1.80×; PNG 1.8×) and an H200 decodes them at 21,000 images/s in batches of 256 (nvCOMP); HTJ2K lossless is 5% smaller
but decodes at 8,000 images/s (nvJPEG2000) and has no CPU encoder among pairload's dependencies.

Predictors (`MODES`, one byte per tile): `as is`; `gradient`: each value minus its upper and left neighbours plus
the upper-left one (modulo 2^bits; undone by summing down and across, which a GPU does in parallel); `colour
gradient`: red and blue as their differences from green first (three channels only). Noise-dominated tiles (dark
inputs) compress best as they are, detailed ones with the gradient; pack keeps whichever is smaller.

Layout of a member (little-endian): a 32-byte header (magic `PLT1`, height, width, channels, bytes per value, tile
side, frames, CRC-32 of the tables that follow), one mode byte per tile, then per frame its offset from the member's
start and its length (uint32 pairs), then per tile the CRC-32 of its bytes (from its first frame to the end of its
last), then the frames, each at a 16-byte boundary. Frame f of tile t, channel c, byte plane b (high byte first) is
f = (t·C + c)·B + b; it holds th·tw bytes. A crop's tiles are checked alone: a reader checks what it decodes.

Numpy and zstandard only (pack imports this); never torch or DALI.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from .codec import zstandard
from .crc import crc32
from .members import Member, MemberError

TILE = 256  # a tile's side: a crop of 256 touches at most 2×2 tiles
LEVEL = 1  # zstd level: on real photographs' filtered planes level 1 comes out 2% smaller than level 3, at twice its
# speed (2026-11-28)
STARTS_MAX = 64  # a split's index keeps where each tile of its tiled members starts (`tile_starts`) for members of
# at most this many tiles (a 2048x2048 image), so that a reader knows where a crop's tiles lie without reading the
# member's header first; a larger member's crop reads a small share of it, and its header is read
MAGIC = b"PLT1"
HEADER = struct.Struct("<4sIIBBHII8x")  # magic, h, w, channels, itemsize, tile, frames, crc of the tables
ALIGN = 16
AS_IS, GRADIENT, COLOUR_GRADIENT = 0, 1, 2
MODES = {AS_IS: "as is", GRADIENT: "gradient", COLOUR_GRADIENT: "colour gradient"}


@dataclass(frozen=True)
class TiledImage:
    """A `tiles` member's header and tables, checked against its bytes (`read_tiled`)."""

    h: int
    w: int
    channels: int
    itemsize: int
    tile: int
    modes: np.ndarray  # (tiles,) uint8
    offsets: np.ndarray  # (frames,) int64, from the member's start
    lengths: np.ndarray  # (frames,) int64
    crcs: np.ndarray  # (tiles,) int64: the CRC-32 of each tile's bytes (`span`)

    @property
    def grid(self) -> tuple[int, int]:
        """Tiles down and across."""
        return -(-self.h // self.tile), -(-self.w // self.tile)

    @property
    def planes(self) -> int:
        """Frames per tile."""
        return self.channels * self.itemsize

    def tile_box(self, t: int) -> tuple[int, int, int, int]:
        """(top, left, height, width) of tile t."""
        gy, gx = divmod(int(t), self.grid[1])
        y, x = gy * self.tile, gx * self.tile
        return y, x, min(self.tile, self.h - y), min(self.tile, self.w - x)

    def span(self, t: int) -> tuple[int, int]:
        """Where tile t's bytes (its frames) start and end in the member."""
        first, last = int(t) * self.planes, (int(t) + 1) * self.planes - 1
        return int(self.offsets[first]), int(self.offsets[last] + self.lengths[last])

    def touched(self, y: int, x: int, h: int, w: int) -> np.ndarray:
        """The tiles a window (top, left, height, width) reads, in order."""
        across, t = self.grid[1], self.tile
        cols = range(x // t, (x + w - 1) // t + 1)
        return np.array([r * across + c for r in range(y // t, (y + h - 1) // t + 1) for c in cols], dtype=np.int64)


def encode_tiles(img: np.ndarray, *, tile: int = TILE, level: int = LEVEL) -> bytes:
    """An H×W×C uint8 or uint16 image as a `tiles` member."""
    if img.ndim != 3 or img.dtype not in (np.uint8, np.uint16):
        raise ValueError(f"encode_tiles takes H×W×C uint8 or uint16, not {img.dtype} {img.shape}")
    h, w, c = img.shape
    zstd = zstandard("packing lossless members (pack --store encoded)")
    cctx = zstd.ZstdCompressor(level=level, write_checksum=False, write_content_size=True)
    itemsize = img.dtype.itemsize
    gh, gw = -(-h // tile), -(-w // tile)
    modes, frames = [], []
    for t in range(gh * gw):
        y, x = divmod(t, gw)
        block = img[y * tile:(y + 1) * tile, x * tile:(x + 1) * tile]
        # the predictor whose planes' bytes are least surprising (their histograms' entropy, on every 4th row):
        # as small as compressing each way and keeping the smallest (on real photographs, within 0.1%), at a third
        # of the time
        planes = {mode: _byte_planes(_filtered(block, mode))
                  for mode in ((AS_IS, GRADIENT, COLOUR_GRADIENT) if c == 3 else (AS_IS, GRADIENT))}
        mode = min(planes, key=lambda m: _surprise(planes[m]))
        modes.append(mode)
        frames += [cctx.compress(p) for p in planes[mode]]
    table_at, crcs_at, tables_end = _layout(len(modes), len(frames))
    pos = _aligned(tables_end)
    offsets = []
    for f in frames:
        pos = _aligned(pos)
        offsets.append(pos)
        pos += len(f)
    out = bytearray(pos)  # no padding after the last frame: every byte past the tables is some tile's
    out[HEADER.size:HEADER.size + len(modes)] = bytes(modes)
    table = np.array([(o, len(f)) for o, f in zip(offsets, frames)], dtype="<u4")
    out[table_at:crcs_at] = table.tobytes()
    for o, f in zip(offsets, frames):
        out[o:o + len(f)] = f
    per = len(frames) // len(modes)
    ends = [o + len(f) for o, f in zip(offsets, frames)]
    crcs = np.array([crc32(memoryview(out)[offsets[t * per]:ends[t * per + per - 1]]) for t in range(len(modes))],
                    dtype="<u4")
    out[crcs_at:tables_end] = crcs.tobytes()
    out[:HEADER.size] = HEADER.pack(MAGIC, h, w, c, itemsize, tile, len(frames),
                                    crc32(memoryview(out)[HEADER.size:tables_end]))
    return bytes(out)


def read_tiled(data: np.ndarray, member: Member, h: int, w: int, *, check_crc: bool = True,
               size: int | None = None) -> TiledImage:
    """The header and tables of a `tiles` member (uint8 bytes), checked: its magic, its size against the index's
    (h, w and `member`), the CRC-32 of its tables, every frame within its bytes, and (`check_crc`) every tile's
    CRC-32 (a reader of some tiles checks those: `check_tiles`); a MemberError says what is wrong. `size`: the
    member's stored bytes where `data` holds only its start (at least its header and tables: `tables_size`; then
    `check_crc` must be False)."""
    if size is None:
        size = len(data)
    elif check_crc:
        raise ValueError("read_tiled checks the tiles' CRC-32 of a whole member only")
    if len(data) < HEADER.size:
        raise MemberError(f"is cut short: {len(data)} bytes, fewer than a tiled member's {HEADER.size}-byte header")
    magic, mh, mw, c, itemsize, tile, nframes, crc = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise MemberError(f"is not a tiled member: it starts with {magic.hex(' ')}, not {MAGIC.hex(' ')} ({MAGIC!r})")
    if (mh, mw, c, itemsize) != (h, w, member.channels, member.np_dtype.itemsize):
        raise MemberError(f"holds a {mh}x{mw}x{c} image of {8 * itemsize}-bit values, the index says "
                          f"{h}x{w}x{member.channels} {member.dtype}")
    if tile < 1:
        raise MemberError(f"has tile side {tile}")
    gh, gw = -(-mh // tile), -(-mw // tile)
    tiles = gh * gw
    if nframes != tiles * c * itemsize:
        raise MemberError(f"has {nframes} frames, expected {tiles * c * itemsize} ({gh}x{gw} tiles of {c} channels)")
    table_at, crcs_at, tables_end = _layout(tiles, nframes)
    if len(data) < tables_end:
        raise MemberError(f"is cut short: {len(data)} bytes end inside its frame table")
    if crc32(data[HEADER.size:tables_end]) != crc:
        raise MemberError(DAMAGED)
    table = np.ascontiguousarray(data[table_at:crcs_at]).view("<u4").reshape(-1, 2).astype(np.int64)
    ends = table[:, 0] + table[:, 1]
    if nframes and int(ends.max()) > size:  # a member cut short, not one damaged
        raise MemberError(f"is cut short: its frames end at byte {int(ends.max())}, {size} bytes are stored")
    modes = np.array(data[HEADER.size:HEADER.size + tiles])  # a copy: a kept header holds no view of a shard
    if tiles and int(modes.max()) not in MODES:
        raise MemberError(f"has predictor code {int(modes.max())}, which this pairload does not know")
    if nframes and int(table[:, 0].min()) < tables_end:
        raise MemberError("has a frame inside its tables")
    crcs = np.ascontiguousarray(data[crcs_at:tables_end]).view("<u4").astype(np.int64)
    t = TiledImage(mh, mw, c, itemsize, tile, modes, table[:, 0], table[:, 1], crcs)
    if check_crc:
        check_tiles(data, t, range(tiles))
    return t


def tile_count(h: int, w: int, tile: int = TILE) -> int:
    """The tiles of an h×w image."""
    return -(-h // tile) * -(-w // tile)


def tile_starts(data) -> np.ndarray:
    """Where each tile of a `tiles` member starts (its first frame), from its header and frame table: uint32 offsets
    from the member's start (`data`: its bytes, at least its tables; pack's, of the member it has just made)."""
    data = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data
    _, mh, mw, c, itemsize, tile, nframes, _ = HEADER.unpack_from(data)
    table_at = _layout(tile_count(mh, mw, tile), nframes)[0]
    return np.ascontiguousarray(data[table_at:table_at + 8 * nframes]).view("<u4")[0::2][::c * itemsize].copy()


def tables_size(data: np.ndarray) -> int:
    """How many bytes from a `tiles` member's start its header and tables take, from its header (`data`: at least
    its first HEADER.size bytes); a MemberError where they are not a tiled member's."""
    if len(data) < HEADER.size:
        raise MemberError(f"is cut short: {len(data)} bytes, fewer than a tiled member's {HEADER.size}-byte header")
    magic, mh, mw, _, _, tile, nframes, _ = HEADER.unpack_from(data)
    if magic != MAGIC or tile < 1:
        raise MemberError(f"is not a tiled member: it starts with {bytes(data[:4]).hex(' ')}")
    return _layout(tile_count(mh, mw, tile), nframes)[2]


def _layout(tiles: int, frames: int) -> tuple[int, int, int]:
    """Where a member's frame table and its tiles' CRC-32s start, and where its tables end."""
    table_at = HEADER.size + _aligned(tiles)
    crcs_at = table_at + 8 * frames
    return table_at, crcs_at, crcs_at + 4 * tiles


DAMAGED = "is damaged: the CRC-32 of its bytes differs from the one written when it was packed"


def check_tiles(data, t: TiledImage, tiles) -> None:
    """A MemberError for the first of `tiles` whose bytes are not those packed (their CRC-32)."""
    for tile in tiles:
        lo, hi = t.span(tile)
        if crc32(data[lo:hi]) != int(t.crcs[tile]):
            raise MemberError(f"{DAMAGED} (tile {int(tile)})")


def decode_tiles(data: np.ndarray, member: Member, h: int, w: int) -> np.ndarray:
    """The pixels of a `tiles` member (a fresh H×W×C array): the `imageformats` decode of the `tiles` format."""
    t = read_tiled(data, member, h, w)
    out = np.empty((h, w, t.channels), dtype=member.np_dtype)
    for tile in range(len(t.modes)):
        y, x, th, tw = t.tile_box(tile)
        out[y:y + th, x:x + tw] = tile_pixels(data, t, tile)
    return out


def tile_pixels(data: np.ndarray, t: TiledImage, tile: int) -> np.ndarray:
    """One tile of a `tiles` member, decoded (th×tw×C)."""
    zstd = zstandard("reading lossless members")
    y, x, th, tw = t.tile_box(tile)
    dctx = zstd.ZstdDecompressor()
    planes = []
    for f in range(tile * t.planes, (tile + 1) * t.planes):
        frame = data[t.offsets[f]:t.offsets[f] + t.lengths[f]]
        try:
            raw = dctx.decompress(frame, max_output_size=th * tw)
        except zstd.ZstdError as exc:
            raise MemberError(f"tile {tile} does not decompress (zstd: {exc})") from None
        if len(raw) != th * tw:
            raise MemberError(f"tile {tile} decompresses to {len(raw)} bytes, expected {th * tw}")
        planes.append(np.frombuffer(raw, np.uint8).reshape(th, tw))
    values = np.stack(planes[::2], axis=-1).astype(np.uint16) << 8 | np.stack(planes[1::2], axis=-1) \
        if t.itemsize == 2 else np.stack(planes, axis=-1)
    return _unfiltered(values, int(t.modes[tile]))


def _filtered(block: np.ndarray, mode: int) -> np.ndarray:
    """th×tw×C: what `mode` stores of a tile (modular arithmetic in the values' dtype)."""
    x = np.array(block, copy=True)
    if mode == COLOUR_GRADIENT:
        x[..., 0] -= block[..., 1]
        x[..., 2] -= block[..., 1]
    if mode in (GRADIENT, COLOUR_GRADIENT):
        r = x.copy()
        r[:, 1:] -= x[:, :-1]
        x = r.copy()
        x[1:] -= r[:-1]
    return x


def _unfiltered(values: np.ndarray, mode: int) -> np.ndarray:
    if mode in (GRADIENT, COLOUR_GRADIENT):
        values = np.cumsum(np.cumsum(values, axis=0, dtype=values.dtype), axis=1, dtype=values.dtype)
    if mode == COLOUR_GRADIENT:
        values = values.copy()
        values[..., 0] += values[..., 1]
        values[..., 2] += values[..., 1]
    return values


def _byte_planes(x: np.ndarray) -> list[np.ndarray]:
    """Each channel's plane (th×tw bytes; a 16-bit channel's high bytes, then its low bytes), contiguous."""
    out = []
    for c in range(x.shape[2]):
        v = x[..., c]
        if x.dtype == np.uint16:
            out += [np.ascontiguousarray(v >> 8).astype(np.uint8), np.ascontiguousarray(v & 0xFF).astype(np.uint8)]
        else:
            out.append(np.ascontiguousarray(v))
    return out


def _surprise(planes: list[np.ndarray]) -> float:
    """Bits the planes' bytes would take coded by their own histograms (every 4th row), less a constant per size."""
    out = 0.0
    for p in planes:
        counts = np.bincount(p[::4].reshape(-1), minlength=256)
        out -= float((counts * np.log2(np.maximum(counts, 1))).sum())
    return out


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


