"""Reading folders under RAW: visible subfolders and files, each real folder once however many symlinks reach it,
and the images of a side folder by relative path without extension. An unreadable folder is refused by name."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path

from ..errors import PairingError
from .filetypes import ARRAY_EXTS, IMAGE_EXTS, READABLE, conversion


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
    folder), made when asked for. Only each stem and a shared extension are kept (a million files: one dict of short
    names, where the two paths and a tuple per file took three times as much)."""

    def __init__(self, folder: Path):
        self.prefix = os.path.join(folder, "")
        self._ext: dict[str, str] = {}  # stem -> its extension as spelled (one string per distinct extension)
        self._odd: dict[str, tuple[str, str]] = {}  # (path, rel) of a file whose path is not prefix + rel

    def add(self, stem: str, path: str, rel: str) -> None:
        if path == self.prefix + rel and rel.startswith(stem):
            ext = rel[len(stem):]
            self._ext[stem] = _EXTS.setdefault(ext, ext)
        else:
            self._odd[stem] = (path, rel)

    def __getitem__(self, stem: str) -> tuple[str, str]:
        ext = self._ext.get(stem)
        if ext is None:
            return self._odd[stem]
        rel = stem + ext
        return self.prefix + rel, rel

    def __contains__(self, stem) -> bool:
        return stem in self._ext or stem in self._odd

    def __iter__(self) -> Iterator[str]:
        yield from self._ext
        yield from self._odd

    def __len__(self) -> int:
        return len(self._ext) + len(self._odd)


_EXTS: dict[str, str] = {}  # each extension spelling once, whatever the number of files


def images(folder: Path) -> tuple[Stems, Counter]:
    """Images under `folder` by relative path without extension (each: its absolute path, its path relative to
    `folder`), and a count of the other extensions seen.
    Two files with one stem are refused."""
    found = Stems(folder)
    others: Counter = Counter()
    prefix = found.prefix
    for dirpath, filenames in walk(folder):
        for name in filenames:
            ext = os.path.splitext(name)[1].lower()
            if ext not in IMAGE_EXTS:
                others[ext or "(no extension)"] += 1
                continue
            path = os.path.join(dirpath, name)  # a string: a million Paths would be most of discovery's memory
            rel = path[len(prefix):] if path.startswith(prefix) else Path(path).relative_to(folder).as_posix()
            stem = rel.rsplit(".", 1)[0]
            if stem in found:
                raise PairingError(
                    f"{folder}: two files with the same stem {stem!r}: {found[stem][1]} and {rel}; "
                    "keep one of them (pairs are matched by name without extension)"
                )
            found.add(stem, path, rel)
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
