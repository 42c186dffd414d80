"""Asking the kernel to read a file's pages ahead (WILLNEED), the one way pairload does it: in pieces. Linux reads at
most max(the device's read-ahead, its largest request) of one WILLNEED (`force_page_cache_ra`): the rest of a larger
range is silently not read (of a 200 MB range, 8 MB on this project's CI machine, whose disk reads ahead 8 MB,
2026-11-29; 128 KB where `read_ahead_kb` is the usual 128). A file's pieces (`piece`) are its device's largest request
(`max_sectors_kb`), which is read whole whatever the file's read-ahead, or PIECE where that cannot be told: every byte
asked for is read, in as few requests as the device takes. Numpy-free; errors are advice's: ignored by the callers."""

from __future__ import annotations

import functools
import mmap
import os

PIECE = 128 << 10  # the usual read_ahead_kb: a WILLNEED of up to this many bytes is read whole on any device
MOST = 8 << 20  # the largest piece


def pieces(start: int, length: int, piece: int | None = None):
    """(start, length) of the pieces of [start, start + length), each at most `piece` bytes (PIECE)."""
    piece = piece or PIECE
    end = start + length
    for a in range(start, end, piece):
        yield a, min(piece, end - a)


def piece(fd: int) -> int:
    """The bytes one WILLNEED of this open file reads whole: its device's largest request, from PIECE to MOST;
    PIECE where the device cannot be told (tmpfs, overlay, not Linux). Requests of 128 KB where the device takes 4 MB
    read an epoch's random members at 0.68 of a disk's sequential rate, requests of a member at 0.78-0.83 (600x400
    tiled members, H200 host, 2026-12-01)."""
    try:
        return _device_piece(os.fstat(fd).st_dev)
    except OSError:
        return PIECE


@functools.lru_cache(maxsize=64)
def _device_piece(dev: int) -> int:
    block = f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}"
    for queue in (f"{block}/queue", f"{block}/../queue"):  # a disk's, or a partition's disk's
        try:
            with open(f"{queue}/max_sectors_kb") as fh:
                return min(MOST, max(PIECE, int(fh.read()) << 10))
        except (OSError, ValueError):
            continue
    return PIECE


def file_range(fd: int, start: int, length: int) -> None:
    """posix_fadvise(WILLNEED) of bytes [start, start + length) of an open file, a piece at a time (`piece`)."""
    for a, n in pieces(start, length, piece(fd)):
        os.posix_fadvise(fd, a, n, os.POSIX_FADV_WILLNEED)


def map_range(mm: mmap.mmap, start: int, length: int) -> None:
    """madvise(WILLNEED) of bytes [start, start + length) of a file's mmap (start a multiple of the page size), a
    piece at a time."""
    for a, n in pieces(start, length):
        mm.madvise(mmap.MADV_WILLNEED, a, n)
