"""Finding low/high pairs in a raw dataset folder: split layouts, folder-name synonyms and pairs files.

`pack` and the DALI file reader both pair images through `find_pairs`, so the two never disagree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from .errors import PairingError
from .schema import check_split_name, key_from_relpath

LOW_NAMES = ("low", "input", "dark", "lq", "img")
HIGH_NAMES = ("high", "normal", "gt", "target", "hq")
IMAGE_EXTS = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".pnm"})
DEFAULT_SPLIT = "train"
MAX_LISTED = 10


@dataclass(frozen=True)
class Pair:
    split: str
    key: str
    low: Path  # absolute paths
    high: Path
    low_rel: str  # relative to the raw folder, '/'-separated
    high_rel: str


@dataclass
class Discovery:
    pairs: list[Pair]
    skipped_low: list[str] = field(default_factory=list)  # unmatched files skipped with skip_unmatched
    skipped_high: list[str] = field(default_factory=list)

    def splits(self) -> dict[str, list[Pair]]:
        out: dict[str, list[Pair]] = {}
        for p in self.pairs:
            out.setdefault(p.split, []).append(p)
        return out


def _listing(items: list[str]) -> str:
    shown = ", ".join(items[:MAX_LISTED])
    return shown + (f" … and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else "")


def _pick(children: dict[str, Path], names: tuple[str, ...], override: str | None, where: Path) -> Path | None:
    if override is not None:
        return children.get(override.lower())
    found = [children[n] for n in names if n in children]
    if len(found) > 1:
        raise PairingError(
            f"{where}: folders {', '.join(p.name for p in found)} are all names for the same side; "
            "say which to use with --low-dir/--high-dir"
        )
    return found[0] if found else None


def _unreadable(exc: OSError) -> PairingError:
    return PairingError(f"{exc.filename}: cannot be listed ({exc.strerror}); fix its permissions (chmod a+rx) or move it "
                        "out of the dataset folder, so that no pair is dropped in silence")


def _subfolders(folder: Path) -> list[Path]:
    """Visible subfolders (symlinks to folders included), sorted; an unreadable folder is an error."""
    try:
        return sorted(p for p in folder.iterdir() if not p.name.startswith(".") and p.is_dir())
    except OSError as exc:
        raise _unreadable(exc) from None


def _side_folders(folder: Path, low_dir: str | None, high_dir: str | None) -> tuple[Path, Path] | None:
    children = {p.name.lower(): p for p in _subfolders(folder)}
    low = _pick(children, LOW_NAMES, low_dir, folder)
    high = _pick(children, HIGH_NAMES, high_dir, folder)
    return (low, high) if low is not None and high is not None else None


def _images(folder: Path) -> dict[str, tuple[Path, str]]:
    """Images under `folder` by relative path without extension; two files with one stem are refused."""
    found: dict[str, tuple[Path, str]] = {}
    seen: set[tuple[int, int]] = set()  # (device, inode) of every folder walked: a symlink loop is walked once

    def fail(exc: OSError) -> None:
        raise _unreadable(exc)

    for dirpath, dirnames, filenames in os.walk(folder, onerror=fail, followlinks=True):
        st = os.stat(dirpath)
        if (st.st_dev, st.st_ino) in seen:
            dirnames[:] = []
            continue
        seen.add((st.st_dev, st.st_ino))
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith(".") or os.path.splitext(name)[1].lower() not in IMAGE_EXTS:
                continue
            path = Path(dirpath) / name
            rel = path.relative_to(folder).as_posix()
            stem = rel.rsplit(".", 1)[0]
            if stem in found:
                raise PairingError(
                    f"{folder}: two files with the same stem {stem!r}: {found[stem][1]} and {rel}; "
                    "keep one of them (pairs are matched by name without extension)"
                )
            found[stem] = (path, rel)
    return found


def _pair_folders(raw: Path, split: str, low: Path, high: Path, skip_unmatched: bool, out: Discovery) -> None:
    lows, highs = _images(low), _images(high)
    only_low = sorted(set(lows) - set(highs))
    only_high = sorted(set(highs) - set(lows))
    if (only_low or only_high) and not skip_unmatched:
        parts = []
        if only_low:
            parts.append(f"{len(only_low)} in {low.relative_to(raw)} without a partner in {high.relative_to(raw)}: "
                         f"{_listing([lows[s][0].relative_to(raw).as_posix() for s in only_low])}")
        if only_high:
            parts.append(f"{len(only_high)} in {high.relative_to(raw)} without a partner in {low.relative_to(raw)}: "
                         f"{_listing([highs[s][0].relative_to(raw).as_posix() for s in only_high])}")
        raise PairingError(f"{raw}: unmatched images, " + "; ".join(parts) +
                           " (pass --skip-unmatched to pack the rest, or --pairs-file to pair differing names)")
    out.skipped_low.extend(lows[s][0].relative_to(raw).as_posix() for s in only_low)
    out.skipped_high.extend(highs[s][0].relative_to(raw).as_posix() for s in only_high)
    for stem in sorted(set(lows) & set(highs)):
        lp, hp = lows[stem][0], highs[stem][0]
        out.pairs.append(Pair(split, key_from_relpath(lows[stem][1]), lp, hp,
                              lp.relative_to(raw).as_posix(), hp.relative_to(raw).as_posix()))


def _read_pairs_file(raw: Path, pairs_file: Path, out: Discovery) -> None:
    try:
        lines = Path(pairs_file).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise PairingError(f"{pairs_file}: cannot read the pairs file ({exc})") from None
    where: dict[tuple[str, str], tuple[str, int]] = {}  # (side, path) -> (split, line) where it first appeared
    for lineno, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        cols = line.split("\t")
        if len(cols) not in (2, 3):
            raise PairingError(
                f"{pairs_file}:{lineno}: expected 2 or 3 tab-separated columns (low path, high path, optional split), "
                f"found {len(cols)}"
            )
        low_rel, high_rel = cols[0].strip(), cols[1].strip()
        split = check_split_name(cols[2].strip()) if len(cols) == 3 and cols[2].strip() else DEFAULT_SPLIT
        paths = []
        for rel in (low_rel, high_rel):
            path = Path(os.path.normpath(raw / rel))  # symlinks inside RAW are fine; '..' out of it is not
            if path != raw and raw not in path.parents:
                raise PairingError(f"{pairs_file}:{lineno}: {rel} lies outside {raw}; paths are relative to RAW and "
                                   "must stay inside it (move the file in, or pack from a folder that holds both)")
            if not path.is_file():
                raise PairingError(f"{pairs_file}:{lineno}: {rel} does not exist under {raw}; fix the path or remove the line")
            paths.append(path)
        if paths[0] == paths[1]:
            raise PairingError(f"{pairs_file}:{lineno}: the low and the high image are the same file {low_rel}; "
                               "a pair needs two images")
        low_key_rel = paths[0].relative_to(raw).as_posix()
        high_key_rel = paths[1].relative_to(raw).as_posix()
        for side, rel in (("low", low_key_rel), ("high", high_key_rel)):
            first = where.setdefault((side, rel), (split, lineno))
            if first[0] != split:
                raise PairingError(f"{pairs_file}:{lineno}: {rel} is in split {split!r} but already in split {first[0]!r} "
                                   f"(line {first[1]}); an image in two splits leaks test data into training: keep "
                                   "one line")
        out.pairs.append(Pair(split, key_from_relpath(low_key_rel), paths[0], paths[1], low_key_rel, high_key_rel))


def find_pairs(
    raw_dir: str | os.PathLike,
    *,
    low_dir: str | None = None,
    high_dir: str | None = None,
    pairs_file: str | os.PathLike | None = None,
    skip_unmatched: bool = False,
) -> Discovery:
    """All pairs under `raw_dir`, grouped into splits and sorted by key within each split.

    Layouts: `raw/{low,high}/…` is one split named `train`; otherwise each first-level folder that holds a
    low and a high folder is a split. Subfolders pair by relative path, extensions are ignored.
    """
    raw = Path(raw_dir).resolve()
    if not raw.is_dir():
        raise PairingError(f"{raw_dir}: no such folder")
    out = Discovery(pairs=[])
    if pairs_file is not None:
        _read_pairs_file(raw, Path(pairs_file), out)
    else:
        top = _side_folders(raw, low_dir, high_dir)
        if top is not None:
            _pair_folders(raw, DEFAULT_SPLIT, top[0], top[1], skip_unmatched, out)
        else:
            for sub in _subfolders(raw):
                sides = _side_folders(sub, low_dir, high_dir)
                if sides is not None:
                    _pair_folders(raw, check_split_name(sub.name), sides[0], sides[1], skip_unmatched, out)
    if not out.pairs:
        low_names = low_dir or "|".join(LOW_NAMES)
        high_names = high_dir or "|".join(HIGH_NAMES)
        raise PairingError(
            f"{raw}: no pairs found; expected {raw.name}/{{{low_names}}}/ and {{{high_names}}}/ folders, or "
            f"{raw.name}/<split>/{{low,high}}/ (use --low-dir/--high-dir for other folder names, or --pairs-file)"
        )
    seen: dict[tuple[str, str], Pair] = {}
    for p in out.pairs:
        other = seen.get((p.split, p.key))
        if other is not None:
            raise PairingError(f"{raw}: {other.low_rel} and {p.low_rel} give the same sample key {p.key!r} in split "
                               f"{p.split!r}; rename one of them")
        seen[(p.split, p.key)] = p
    out.pairs.sort(key=lambda p: (p.split, p.key))
    return out
