"""`RealPaths`: `os.path.realpath` for the many files of a few folders. The standard function checks every component
of every path with a system call (nine per pair in discovery, most of its time at a million pairs); here each folder
is resolved once and a file's own link is looked up in its folder's listing."""

from __future__ import annotations

import hashlib
import os


class RealPaths:
    """Callable: the real path of an absolute path, as `os.path.realpath` gives it. One instance per discovery, so
    that links made or removed between two discoveries are seen."""

    def __init__(self):
        self._folders: dict[str, tuple[str, frozenset[str] | None]] = {}  # folder -> (real folder, its links)

    def __call__(self, path: str | os.PathLike) -> str:
        text = os.fspath(path)
        folder, name = os.path.split(text)
        if not os.path.isabs(text) or name in ("", ".", ".."):
            return os.path.realpath(text)
        known = self._folders.get(folder)
        if known is None:
            try:
                with os.scandir(folder) as entries:
                    links = frozenset(e.name for e in entries if e.is_symlink())
            except OSError:
                links = None  # unreadable: every file of it goes through os.path.realpath
            known = self._folders[folder] = (os.path.realpath(folder), links)
        real, links = known
        if links is None or name in links:
            return os.path.realpath(text)
        return os.path.join(real, name)


def path_hash(path: str) -> int:
    """A 64-bit hash of a path, for sets of a million of them kept as arrays (a collision is checked by the caller
    where it matters)."""
    return int.from_bytes(hashlib.blake2b(path.encode("utf-8", "surrogateescape"), digest_size=8).digest(), "little")
