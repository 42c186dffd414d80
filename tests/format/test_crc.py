"""The index's CRC-32 (ISA-L's where installed) is zlib's, on every kind of buffer pack and the readers hand it."""

import zlib

import numpy as np
import pytest

from pairload.format.crc import crc32


@pytest.mark.parametrize("n", [0, 1, 7, 4099, 720_000 + 5])
def test_crc32_is_zlibs(n):
    data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
    assert crc32(data) == zlib.crc32(data.tobytes())
    assert crc32(memoryview(data)[1:]) == zlib.crc32(data[1:].tobytes())  # a view into a shard's bytes
    if n >= 2:
        pixels = data[: n // 2 * 2].view("<u2")  # 16-bit members
        assert crc32(pixels) == zlib.crc32(pixels.tobytes())


def test_isal_is_what_runs():
    """The dependency is installed, so the fast one is used (a stripped install falls back to zlib)."""
    pytest.importorskip("isal")
    assert crc32 is not zlib.crc32
