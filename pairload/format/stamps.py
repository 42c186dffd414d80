"""The one identity of a file on disk that readers compare to notice a replaced or rewritten file: (device, inode,
size, mtime in ns). Numpy-free, torch-free."""

from __future__ import annotations

import os
from typing import NamedTuple


class Stamp(NamedTuple):
    device: int
    inode: int
    size: int
    mtime_ns: int


def stamp_of(st: os.stat_result) -> Stamp:
    return Stamp(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def stamp(path: str | os.PathLike) -> Stamp | None:
    """The stamp of the file at `path` (symlinks followed), None if it is gone or unreadable."""
    try:
        return stamp_of(os.stat(path))
    except OSError:
        return None
