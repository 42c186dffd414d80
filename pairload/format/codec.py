"""zstd frames for compressed image members (`pairload pack --compress zstd`, shard format version 3): what the
`zstd` entry of the encoding table (`encoding.ENCODINGS`) encodes and decodes with.

A compressed member is a whole .npy file (header + pixels) as one zstd frame, with its decoded size and a content
checksum in the frame. `zstandard` is optional (`pip install 'pairload[zstd]'`) and imported only when a compressed
pack is written or read. Each thread of each process keeps one compressor per level and one decompressor, reused
for every frame. Imports nothing of pairload but its errors (the encoding table imports this module), and neither
torch nor DALI.
"""

from __future__ import annotations

import threading

from ..errors import ConfigError

INSTALL = "pip install 'pairload[zstd]'"
LEVELS = range(1, 23)  # zstd's levels: the lowest compress fast, the highest far slower for a little more
DEFAULT_LEVEL = 3

_local = threading.local()  # per thread (and, after a fork, per process): {"dctx": ..., level: cctx}


class FrameError(Exception):
    """A stored member that does not decode to the .npy file expected (the caller names the shard and the member)."""


def zstandard(what: str = "reading compressed shards"):
    """The `zstandard` module, or a ConfigError naming the extra that installs it (`what` needs it)."""
    try:
        import zstandard as zstd
    except ImportError:
        raise ConfigError(f"{what} needs the zstandard package, which is not installed: {INSTALL}") from None
    return zstd


def _state() -> dict:
    state = getattr(_local, "state", None)
    if state is None:
        state = _local.state = {}
    return state


def compress(npy, level: int = DEFAULT_LEVEL) -> bytes:
    """A .npy file (any buffer: header + pixels, `members.npy_file`) as one zstd frame."""
    state = _state()
    cctx = state.get(level)
    if cctx is None:
        cctx = state[level] = zstandard().ZstdCompressor(level=level, write_checksum=True, write_content_size=True)
    return cctx.compress(npy)


def decompress(frame, size: int) -> bytes:
    """Decode one frame (any buffer: a slice of a memory-mapped shard) that must hold exactly `size` bytes; raises
    FrameError saying what is wrong. The frame's declared size is checked before anything is allocated."""
    zstd = zstandard()
    state = _state()
    dctx = state.get("dctx")
    if dctx is None:
        dctx = state["dctx"] = zstd.ZstdDecompressor()
    try:
        declared = zstd.frame_content_size(frame)
    except zstd.ZstdError as exc:
        raise FrameError(f"not a zstd frame ({exc})") from None
    if declared != size:
        raise FrameError(f"its frame header declares {declared} decoded bytes, expected {size}")
    try:
        out = dctx.decompress(frame)
    except zstd.ZstdError as exc:
        raise FrameError(f"zstd: {exc}") from None
    if len(out) != size:
        raise FrameError(f"it decodes to {len(out)} bytes, expected {size}")
    return out
