"""A split's distinct image sizes counted a chunk of rows at a time (`format.sizes.size_counts`: what `pairload info`
reports, and `pack` records) equal numpy's row-wise unique, and a WILLNEED larger than the kernel reads at once is
asked for in pieces (`pairload.willneed`), so that every byte of the range is read ahead."""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
import time

import numpy as np
import pytest

from pairload import willneed
from pairload.format.sizes import size_counts


def test_size_counts_equal_the_row_wise_unique_across_chunks():
    rng = np.random.default_rng(3)
    hw = rng.choice(np.array([[400, 600], [600, 400], [2160, 3840], [3, 70000]]), size=10_001)
    for chunk in (97, 4096, 1 << 22):
        sizes, counts, pixels = size_counts(hw, chunk=chunk)
        want, want_counts = np.unique(hw, axis=0, return_counts=True)
        assert np.array_equal(sizes, want) and np.array_equal(counts, want_counts)
        assert pixels == int((hw[:, 0] * hw[:, 1]).sum())
    sizes, counts, pixels = size_counts(np.zeros((0, 2), np.int64))
    assert sizes.shape == (0, 2) and len(counts) == 0 and pixels == 0


def resident(path, nbytes: int) -> float:
    """The share of a file's first nbytes in the page cache (mincore)."""
    libc = ctypes.CDLL(None, use_errno=True)
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), nbytes, access=mmap.ACCESS_READ) as mm:
        pages = -(-nbytes // mmap.PAGESIZE)
        vec = (ctypes.c_ubyte * pages)()
        addr = np.frombuffer(mm, dtype=np.uint8, count=0).ctypes.data
        assert libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(nbytes), vec) == 0, ctypes.get_errno()
        return sum(v & 1 for v in vec) / pages


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's read-ahead")
def test_a_large_willneed_reads_the_whole_range(tmp_path):
    assert [n for _, n in willneed.pieces(10, 3 * willneed.PIECE)] == [willneed.PIECE] * 3
    assert list(willneed.pieces(10, 5 << 20, 2 << 20)) == [(10, 2 << 20), (10 + (2 << 20), 2 << 20),
                                                          (10 + (4 << 20), 1 << 20)]
    path = tmp_path / "column"
    nbytes = 24 << 20  # more than any common device reads of one WILLNEED (8 MB on the CI machine)
    path.write_bytes(np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8).tobytes())
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        if resident(path, nbytes) > 0.5:
            pytest.skip("this filesystem keeps the file in memory (tmpfs): nothing to read ahead")
        # in pieces of the device's largest request (4 MB on the CI machine): each read whole
        assert willneed.PIECE <= willneed.piece(fd) <= willneed.MOST
        willneed.file_range(fd, 0, nbytes)
        deadline = time.monotonic() + 10
        while resident(path, nbytes) < 0.99 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert resident(path, nbytes) >= 0.99
    finally:
        os.close(fd)


def test_a_file_without_a_block_device_is_asked_for_in_the_usual_pieces():
    # a pipe (as a file on tmpfs or overlay: no device whose largest request can be read) gets PIECE
    r, w = os.pipe()
    try:
        assert willneed.piece(r) == willneed.PIECE
    finally:
        os.close(r)
        os.close(w)
