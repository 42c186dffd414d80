"""`crc32`: the CRC-32 of the index (zlib's polynomial), from ISA-L where `isal` is installed (faster than zlib's
on a pair's pixels, which pack computes once per image and verify once per read) and from zlib otherwise. Both give
the same value for the same bytes."""

from __future__ import annotations

import zlib

try:
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - isal is a dependency; a stripped install still works, slower
    crc32 = zlib.crc32

__all__ = ["crc32"]
