"""Asking the kernel to read a file's pages ahead (WILLNEED), the one way pairload does it: in pieces of PIECE bytes.
Linux reads at most max(the device's read-ahead, its largest request) of one WILLNEED (`force_page_cache_ra`): the
rest of a larger range is silently not read (of a 200 MB range, 8 MB on this project's CI machine, whose disk reads
ahead 8 MB, 2026-11-29; 128 KB where `read_ahead_kb` is the usual 128). PIECE is under that bound on any common
device, so every byte asked for is read. Numpy-free; errors are advice's: ignored by the callers."""

from __future__ import annotations

import mmap
import os

PIECE = 128 << 10  # the usual read_ahead_kb: a WILLNEED of up to this many bytes is read whole


def pieces(start: int, length: int):
    """(start, length) of the pieces of [start, start + length), each at most PIECE bytes."""
    end = start + length
    for a in range(start, end, PIECE):
        yield a, min(PIECE, end - a)


def file_range(fd: int, start: int, length: int) -> None:
    """posix_fadvise(WILLNEED) of bytes [start, start + length) of an open file, a piece at a time."""
    for a, n in pieces(start, length):
        os.posix_fadvise(fd, a, n, os.POSIX_FADV_WILLNEED)


def map_range(mm: mmap.mmap, start: int, length: int) -> None:
    """madvise(WILLNEED) of bytes [start, start + length) of a file's mmap (start a multiple of the page size), a
    piece at a time."""
    for a, n in pieces(start, length):
        mm.madvise(mmap.MADV_WILLNEED, a, n)
