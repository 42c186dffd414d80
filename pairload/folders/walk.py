"""Reading folders under RAW: visible subfolders and files, each real folder once however many symlinks reach it,
and the images of a side folder by relative path without extension. An unreadable folder is refused by name."""

from __future__ import annotations

import os
from array import array
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from ..errors import PairingError
from .filetypes import ARRAY_EXTS, IMAGE_EXTS, READABLE, conversion
from .model import fixed_width


def unreadable(exc: OSError) -> PairingError:
    return PairingError(f"{exc.filename}: cannot be listed ({exc.strerror}); fix its permissions (chmod a+rx) or move "
                        "it out of the dataset folder, so that no pair is dropped in silence")


def subfolders(folder: Path) -> list[Path]:
    """Visible subfolders (symlinks to folders included), sorted; an unreadable folder is an error."""
    try:
        return sorted(p for p in folder.iterdir() if not p.name.startswith(".") and p.is_dir())
    except OSError as exc:
        raise unreadable(exc) from None


def visible_names(folder: Path) -> list[str]:
    """Visible entries of `folder`, sorted."""
    try:
        return sorted(n for n in os.listdir(folder) if not n.startswith("."))
    except OSError as exc:
        raise unreadable(exc) from None


def real_id(path: Path) -> tuple[int, int]:
    """(device, inode) of what `path` reaches, to walk each real folder once."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise unreadable(exc) from None
    return st.st_dev, st.st_ino


def walk(top: Path, seen: set[tuple[int, int]] | None = None):
    """(folder, visible file names) for every real folder under `top` once: real subfolders first, then the
    symlinked ones not walked yet (a loop is walked once, and a link never hides the folder it points to)."""
    seen = set() if seen is None else seen

    def fail(exc: OSError) -> None:
        raise unreadable(exc)

    queue = [top]
    while queue:
        start = queue.pop(0)
        for dirpath, dirnames, filenames in os.walk(start, onerror=fail, followlinks=False):
            rid = real_id(Path(dirpath))
            if rid in seen:
                dirnames[:] = []
                continue
            seen.add(rid)
            visible = sorted(d for d in dirnames if not d.startswith("."))
            linked = [d for d in visible if os.path.islink(os.path.join(dirpath, d))]
            queue.extend(Path(dirpath) / d for d in linked)
            dirnames[:] = [d for d in visible if d not in linked]
            yield Path(dirpath), sorted(n for n in filenames if not n.startswith("."))


def walk_chunks(top: Path, chunk: int = 4096):
    """(folder, some of its visible file names) for every real folder under `top` once, as `walk` finds them but
    in lists of at most `chunk` names, in the order the folder lists them (not sorted): a folder of a million files
    is never held as a list of its names."""
    seen: set[tuple[int, int]] = set()
    queue = [Path(top)]
    while queue:
        stack = [queue.pop(0)]
        while stack:
            folder = stack.pop()
            rid = real_id(folder)
            if rid in seen:
                continue
            seen.add(rid)
            real, names = [], []
            try:
                with os.scandir(folder) as entries:
                    for entry in entries:
                        if entry.name.startswith("."):
                            continue
                        if entry.is_dir():  # (a link to a folder: walked after the real ones, as `walk` does)
                            (queue.append(folder / entry.name) if entry.is_symlink() else real.append(entry.name))
                            continue
                        names.append(entry.name)
                        if len(names) >= chunk:
                            yield folder, names
                            names = []
            except OSError as exc:
                raise unreadable(exc) from None
            if names:
                yield folder, names
            stack.extend(folder / d for d in sorted(real, reverse=True))


class Stems(Mapping):
    """A side folder's images by relative path without extension: stems[stem] is (absolute path, path relative to the
    folder), made when asked for. Kept as columns: the stems' UTF-8 bytes joined end to end with int64 ends, each
    one's extension as a small code, and, once the folder is read (`freeze`), their 64-bit hashes sorted for lookups:
    about 30 bytes a file, where a dict of the stems took 100 (a million files: 30 MB, not 100). A file whose path is
    not the folder joined to its relative path is kept whole, by its stem."""

    def __init__(self, folder: Path):
        self.prefix = os.path.join(folder, "")
        self._blob = bytearray()
        self._ends = array("q")
        self._ext = array("H")  # code of each stem's extension as spelled
        self._exts: list[str] = []
        self._ext_code: dict[str, int] = {}
        self._odd: dict[str, tuple[str, str]] = {}  # (path, rel) of a file whose path is not prefix + rel
        self._hashes: np.ndarray | None = None  # the stems' hashes, sorted (`freeze`)
        self._by_hash: np.ndarray | None = None  # the rows in that order
        self._twice: tuple[str, str, str] | None = None  # a stem two files kept whole share

    def add(self, stem: str, path: str, rel: str) -> None:
        if path == self.prefix + rel and rel.startswith(stem):
            ext = rel[len(stem):]
            code = self._ext_code.get(ext)
            if code is None:
                code = self._ext_code[ext] = len(self._exts)
                self._exts.append(ext)
            self._blob += stem.encode("utf-8", "surrogateescape")
            self._ends.append(len(self._blob))
            self._ext.append(code)
        elif stem in self._odd:
            self._twice = self._twice or (stem, *sorted((self._odd[stem][1], rel)))
        else:
            self._odd[stem] = (path, rel)
        self._hashes = self._by_hash = None

    def _stem(self, row: int) -> str:
        ends = self._ends
        return self._blob[ends[row - 1] if row else 0:ends[row]].decode("utf-8", "surrogateescape")

    def freeze(self) -> "Stems":
        """Index the stems for lookups (each `add` undoes it)."""
        n = len(self._ends)
        hashes = np.fromiter((hash(self._stem(k)) for k in range(n)), dtype=np.int64, count=n)
        self._by_hash = np.argsort(hashes, kind="stable")
        self._hashes = hashes[self._by_hash]
        return self

    def _row(self, stem: str) -> int:
        """The row of `stem` among the plain files (-1: none)."""
        if self._hashes is None:
            self.freeze()
        h = hash(stem)
        at = int(np.searchsorted(self._hashes, h))
        while at < len(self._hashes) and int(self._hashes[at]) == h:
            row = int(self._by_hash[at])
            if self._stem(row) == stem:
                return row
            at += 1
        return -1

    def repeated(self) -> tuple[str, str, str] | None:
        """(stem, its two relative paths, sorted) of a stem two files share (the one first in hash order), or None."""
        if self._twice is not None:
            return self._twice
        if self._hashes is None:
            self.freeze()
        same = np.flatnonzero(self._hashes[1:] == self._hashes[:-1])
        for at in same.tolist():
            for a in range(at, -1, -1):  # (a hash may be shared by more than two rows)
                if int(self._hashes[a]) != int(self._hashes[at]):
                    break
                x, y = int(self._by_hash[a]), int(self._by_hash[at + 1])
                if self._stem(x) == self._stem(y):
                    stem = self._stem(x)
                    return stem, *sorted((stem + self._exts[self._ext[x]], stem + self._exts[self._ext[y]]))
        for stem in self._odd:
            if self._row(stem) >= 0:
                return stem, *sorted((self[stem][1], self._odd[stem][1]))
        return None

    def _fixed(self) -> np.ndarray:
        """The plain files' stems as a fixed-width bytes array (`model.fixed_width`)."""
        return fixed_width(np.frombuffer(self._blob, np.uint8), np.frombuffer(self._ends, np.int64))

    def sorted_rows(self) -> np.ndarray:
        """The plain files' rows in the order of their stems (code point order), with numpy."""
        return np.argsort(self._fixed(), kind="stable")

    def same_stems(self, other: "Stems") -> bool:
        """Both hold the very same stems (their hashes, then their bytes in hash order, compared with numpy)."""
        if len(self) != len(other) or self._odd or other._odd:
            return False
        if self._hashes is None:
            self.freeze()
        if other._hashes is None:
            other.freeze()
        return (np.array_equal(self._hashes, other._hashes)
                and np.array_equal(self._fixed()[self._by_hash], other._fixed()[other._by_hash]))

    def plain(self, row: int) -> tuple[str, str]:
        """(stem, relative path) of plain row `row`."""
        stem = self._stem(row)
        return stem, stem + self._exts[self._ext[row]]

    def __getitem__(self, stem: str) -> tuple[str, str]:
        got = self._odd.get(stem)
        if got is not None:
            return got
        row = self._row(stem)
        if row < 0:
            raise KeyError(stem)
        rel = stem + self._exts[self._ext[row]]
        return self.prefix + rel, rel

    def __contains__(self, stem) -> bool:
        return stem in self._odd or (isinstance(stem, str) and self._row(stem) >= 0)

    def __iter__(self) -> Iterator[str]:
        for row in range(len(self._ends)):
            yield self._stem(row)
        yield from self._odd

    def __len__(self) -> int:
        return len(self._ends) + len(self._odd)


def images(folder: Path) -> tuple[Stems, Counter]:
    """Images under `folder` by relative path without extension (each: its absolute path, its path relative to
    `folder`), and a count of the other extensions seen. Two files with one stem are refused."""
    found = Stems(folder)
    others: Counter = Counter()
    prefix = found.prefix
    for dirpath, filenames in walk_chunks(folder):
        for name in filenames:
            ext = os.path.splitext(name)[1].lower()
            if ext not in IMAGE_EXTS:
                others[ext or "(no extension)"] += 1
                continue
            path = os.path.join(dirpath, name)  # a string: a million Paths would be most of discovery's memory
            rel = path[len(prefix):] if path.startswith(prefix) else Path(path).relative_to(folder).as_posix()
            found.add(rel.rsplit(".", 1)[0], path, rel)
    repeated = found.freeze().repeated()
    if repeated is not None:
        stem, a, b = repeated
        raise PairingError(f"{folder}: two files with the same stem {stem!r}: {a} and {b}; keep one of them (pairs are "
                           "matched by name without extension)")
    return found, others


def no_images(folder: Path, raw: Path, others: Counter) -> PairingError:
    """The refusal for a side folder with no image pack reads, naming what it holds instead."""
    where = folder.relative_to(raw).as_posix() if folder != raw else str(raw)
    if not others:
        return PairingError(f"{raw}: {where} holds no images; remove the empty folder or fill it")
    found = ", ".join(f"{n} {ext}" for ext, n in others.most_common(5))
    arrays = [ext for ext in others if ext in ARRAY_EXTS]
    hint = (conversion(arrays) if arrays else
            f"expected one of {READABLE}")
    return PairingError(f"{raw}: {where} holds no usable images (found {found}); {hint}")


def side_images(raw: Path, folder: Path) -> Stems:
    """The images of one side folder; a side folder without any is refused."""
    found, others = images(folder)
    if not found:
        raise no_images(folder, raw, others)
    return found
