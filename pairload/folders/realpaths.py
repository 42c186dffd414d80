"""`RealPaths`: `os.path.realpath` for the many files of a few folders. The standard function checks every component
of every path with a system call (nine per pair in discovery, most of its time at a million pairs); here each folder
is resolved once and a file's own link is looked up in its folder's listing."""

from __future__ import annotations

import os


class RealPaths:
    """Callable: the real path of an absolute path, as `os.path.realpath` gives it. One instance per discovery, so
    that links made or removed between two discoveries are seen."""

    def __init__(self):
        self._folders: dict[str, tuple[str, frozenset[str] | None]] = {}  # folder -> (real folder, its links)

    def __call__(self, path: str | os.PathLike) -> str:
        text = path if type(path) is str else os.fspath(path)
        folder, _, name = text.rpartition("/")
        if not folder or not text.startswith("/") or name in ("", ".", "..") or "//" in text:
            return os.path.realpath(text)  # relative, the root's own files, or not plain: the standard way
        known = self._folders.get(folder)
        if known is None:
            try:
                with os.scandir(folder) as entries:
                    links = frozenset(e.name for e in entries if e.is_symlink())
            except OSError:
                links = None  # unreadable: every file of it goes through os.path.realpath
            real = os.path.realpath(folder)
            known = self._folders[folder] = (real if real != "/" else "", links)
        real, links = known
        if links is None or name in links:
            return os.path.realpath(text)
        return f"{real}/{name}"


def path_hash(path: str) -> int:
    """A 64-bit hash of a path (signed, numpy's int64), for sets of a million of them kept as arrays: valid within
    one process only (Python's string hash is seeded per process), which is all discovery needs; a collision is
    checked by the caller where it matters."""
    return hash(path)
