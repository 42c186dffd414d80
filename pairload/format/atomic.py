"""Atomic file writes: a temporary name in the same folder, fsync, rename; the temporary file never outlives a
failure. Every writer in pairload (manifest, make-pairs PNGs, checkpoints, reports, charts) goes through here.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import IO, Any, Iterator

PARTIAL_SUFFIX = ".partial"


def temp_name(path: Path) -> Path:
    """The hidden temporary name `path` is written under: `.name.<pid>.partial` beside it."""
    return path.with_name(f".{path.name}.{os.getpid()}{PARTIAL_SUFFIX}")


def is_temp_of(name: str, target: str) -> bool:
    """Whether `name` is a temporary file of `target` left by some (possibly killed) process."""
    return name.startswith(f".{target}.") and name.endswith(PARTIAL_SUFFIX)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "wb", *, fsync: bool = True) -> Iterator[IO]:
    """Open a temporary file for writing; on success it is fsynced and renamed over `path`, on any error removed."""
    path = Path(path)
    tmp = temp_name(path)
    try:
        with open(tmp, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
            yield fh
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    if fsync:
        fsync_dir(path.parent)


def write_bytes_atomic(path: str | os.PathLike, data: bytes, *, fsync: bool = True) -> None:
    with atomic_open(path, "wb", fsync=fsync) as fh:
        fh.write(data)


def write_json_atomic(path: str | os.PathLike, doc: Any) -> None:
    """Write JSON under a temporary name in the same folder, fsync, then rename over `path`."""
    with atomic_open(path, "w") as fh:
        json.dump(doc, fh, separators=(",", ":"), sort_keys=False)


def fsync_dir(folder: str | os.PathLike) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
