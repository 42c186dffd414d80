"""Pairs files: `--pairs-file [SPLIT=]FILE` lines of low and high paths, relative to RAW or to a split's side
folders (BasicSR's meta-info files), read with the line number in every refusal; and telling whether a text file
under RAW looks like such a list."""

from __future__ import annotations

import os
import re
import unicodedata
from functools import partial
from pathlib import Path

from ..errors import PairingError
from ..format.schema import check_split_name, key_from_relpath
from .filetypes import ARRAY_EXTS, IMAGE_EXTS, IMAGE_LIKE_EXTS, conversion
from .model import Discovery, Pair, escaped
from .scan import scan
from .splits import DEFAULT_SPLIT, locate, split_names_of

RAW_RELATIVE = "paths relative to RAW"
_IMAGE_NAME = re.compile(r"\.(?:" + "|".join(sorted(e[1:] for e in IMAGE_LIKE_EXTS)) + r")(?=$|[\s,;\"'])", re.I)


def parse_pairs_files(specs) -> list[tuple[str | None, Path]]:
    """`path` or `split=path` (repeatable) → [(split or None, path)]."""
    if specs is None:
        return []
    if isinstance(specs, (str, os.PathLike)):
        specs = [specs]
    out = []
    for spec in specs:
        text = os.fspath(spec)
        split, sep, path = text.partition("=")
        if sep and re.fullmatch(r"[A-Za-z0-9_-]+", split) and not Path(text).exists():
            out.append((split, Path(path)))
        else:
            out.append((None, Path(text)))
    return out


def is_pairs_list(path: Path) -> bool:
    """Whether a text file lists pairs: most of its first lines (comments and blank lines aside) name two or more
    image files (`low/1.png high/1.png`, `a 2.png,a.png`, SID's `./Sony/short/x.ARW ./Sony/long/y.ARW ISO200`)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(64 * 1024).decode("utf-8", errors="replace")
    except OSError:
        return False  # not ours to read: a list nobody can open is no list pack could use
    lines = [ln for ln in head.splitlines()[:40] if ln.strip() and not ln.lstrip().startswith("#")][:20]
    paired = sum(len(_IMAGE_NAME.findall(ln)) >= 2 for ln in lines)
    return paired > 0 and 2 * paired >= len(lines)


def marks_splits(path: Path) -> bool:
    """Whether a pairs list carries a split column (tab-separated low, high, split) on any line."""
    try:
        lines = path.read_text(encoding="utf-8-sig", errors="replace").splitlines()
    except OSError:
        return False
    return any(len(cols) == 3 and cols[2].strip() for cols in (ln.split("\t") for ln in lines if "\t" in ln))


class SideFolders:
    """The (low, high) side folders of each split, for pairs-file lines written relative to them (BasicSR's
    meta-info files: `x 2.png x.png` for `low/x 2.png`, `high/x.png`). Found on first use only."""

    def __init__(self, raw: Path, low_dir: str | None, high_dir: str | None, overrides: dict[str, str]):
        self.raw, self.low_dir, self.high_dir, self.overrides = raw, low_dir, high_dir, overrides
        self._by_split: dict[str, list[tuple[Path, Path]]] | None = None

    def of(self, split: str) -> list[tuple[Path, Path]]:
        """The side folders of `split`; all of them where no folder maps to it (a flat `low/`, `high/`)."""
        if self._by_split is None:
            found = scan(self.raw, self.low_dir, self.high_dir, {k.lower(): v for k, v in self.overrides.items()})
            units = [u for u in found.units if isinstance(u.low, Path)]
            located = [(locate(self.raw, u), u) for u in units]
            names = split_names_of(located, self.overrides)
            self._by_split = {}
            for (_, folder, _), u in located:
                self._by_split.setdefault(names[folder][0], []).append((u.low, u.high))
        return self._by_split.get(split) or [f for fs in self._by_split.values() for f in fs]


def _inside(raw: Path, path: Path) -> Path | None:
    path = Path(os.path.normpath(path))  # './' goes; symlinks inside RAW are fine; '..' out of it is not
    return path if path == raw or raw in path.parents else None


def _is_image_name(name: str) -> bool:
    return os.path.splitext(name)[1].lower() in IMAGE_EXTS


def _line_readings(line: str, cols: list[str], tabbed: bool) -> list[tuple[str, str]]:
    """(low, high) readings of a line: the first two columns, then, for a whitespace-separated line, every split of
    its words into two names that end like image files (`a3102-JI2E4053 2.png a3102-JI2E4053.png`: names with
    spaces, as BasicSR's meta-info files write them)."""
    first = (cols[0], cols[1])
    if tabbed:
        return [first]
    parts = re.split(r"(\s+)", line.strip())  # words at even positions, the spaces between them at odd ones
    n = (len(parts) + 1) // 2

    def words(i: int, j: int) -> str:
        return "".join(parts[2 * i: 2 * j - 1])

    more = [(words(0, i), words(i, j)) for i in range(1, n) for j in range(i + 1, n + 1)]
    return [first] + [r for r in more if r != first and _is_image_name(r[0]) and _is_image_name(r[1])]


def _resolve(raw: Path, low: str, high: str, sides) -> list[tuple[Path, Path, str]]:
    """(low path, high path, convention) for each place that holds both files of one reading of a line: RAW, else
    each pair of side folders of the split (`sides()`, called only when RAW does not hold them)."""
    at_raw = [_inside(raw, raw / low), _inside(raw, raw / high)]
    if all(p is not None and p.is_file() for p in at_raw):
        return [(at_raw[0], at_raw[1], RAW_RELATIVE)]
    hits = []
    for lf, hf in sides():
        lp, hp = _inside(raw, lf / low), _inside(raw, hf / high)
        if lp is not None and hp is not None and lp.is_file() and hp.is_file():
            hits.append((lp, hp, f"names relative to {lf.relative_to(raw).as_posix()}/ and "
                                 f"{hf.relative_to(raw).as_posix()}/"))
    return hits


def _invisible(name: str) -> list[str]:
    """The control and format characters of a name (a zero-width space, a BOM, a stray control code): they show as
    nothing, so a name holding one looks right and names no file."""
    return [c for c in dict.fromkeys(name) if unicodedata.category(c) in ("Cf", "Cc")]


def _missing(raw: Path, here: str, rel: str, tried: str) -> PairingError:
    """The refusal for a line naming a file that does not exist; a name with invisible characters says which."""
    hidden = _invisible(rel)
    if not hidden:
        return PairingError(f"{here}: {rel} does not exist under {raw}{tried}; fix the path or remove the line")
    chars = ", ".join(f"U+{ord(c):04X} {unicodedata.name(c, 'control character')}" for c in hidden)
    clean = "".join(c for c in rel if c not in hidden)
    tried = escaped(tried)
    exists = f" ({clean} exists)" if (raw / clean).is_file() else ""
    return PairingError(f"{here}: '{escaped(rel)}' does not exist under {raw}: the name holds invisible characters "
                        f"({chars}){tried}; delete them from the line{exists}")


def read_pairs_file(raw: Path, pairs_file: Path, forced_split: str | None, out: Discovery,
                    origins: list[tuple[str, str]], sides: SideFolders) -> None:
    """Add the pairs `pairs_file` lists to `out`, and for each the line it came from to `origins` (for the leak
    checks' messages). A UTF-8 byte-order mark at its start is fine."""
    try:
        lines = Path(pairs_file).read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise PairingError(f"{pairs_file}: cannot read the pairs file ({exc})") from None
    listed: dict[tuple[str, Path, Path], int] = {}  # (split, low, high) -> the line that listed it first
    for lineno, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        here = f"{pairs_file}:{lineno}"
        tabbed = "\t" in line
        cols = [c.strip() for c in line.split("\t")] if tabbed else line.split()
        if len(cols) < 2 or (tabbed and len(cols) > 3):
            raise PairingError(
                f"{here}: expected 'low high' (whitespace-separated, extra columns ignored) or 2-3 "
                f"tab-separated columns (low path, high path, optional split), found {len(cols)} column(s)"
            )
        column = cols[2] if tabbed and len(cols) == 3 and cols[2] else None
        if column is not None and forced_split is not None and check_split_name(column) != forced_split:
            raise PairingError(f"{here}: the line's split column says {column!r}, but the file was given as "
                               f"--pairs-file {forced_split}={pairs_file}; an option never overrides the file: "
                               f"remove the split column, or give the file without '{forced_split}=' so that its "
                               "column decides")
        split = forced_split or (check_split_name(column) if column else DEFAULT_SPLIT)
        readings = _line_readings(line, cols, tabbed)
        low_rel, high_rel = readings[0]
        for rel in (low_rel, high_rel):
            path = raw / rel
            if _inside(raw, path) is None:
                raise PairingError(f"{here}: {rel} lies outside {raw}; paths are relative to RAW and "
                                   "must stay inside it (move the file in, or pack from a folder that holds both)")
            if path.suffix.lower() in ARRAY_EXTS:
                how = conversion([path.suffix.lower()])
                raise PairingError(f"{here}: {rel} is an array file pack cannot read; {how} and list those")
        found: list[tuple[Path, Path, str]] = []
        for reading in readings:  # the first two columns, when they name two files; else every other reading
            found += [(reading, *hit) for hit in _resolve(raw, *reading, partial(sides.of, split))]
            if found and reading is readings[0]:
                break
        if len(found) > 1:
            shown = "; ".join(f"{lp.relative_to(raw).as_posix()} + {hp.relative_to(raw).as_posix()}"
                              for _, lp, hp, _ in found[:3])
            raise PairingError(f"{here}: the line can be read as more than one pair ({shown}); write it with "
                               "paths relative to RAW, separated by a tab")
        if not found:
            missing = next(rel for rel in (low_rel, high_rel) if not (raw / rel).is_file())
            folders = sides.of(split)
            tried = ", ".join(f"{lf.relative_to(raw).as_posix()}/{low_rel} + {hf.relative_to(raw).as_posix()}/"
                              f"{high_rel}" for lf, hf in folders[:3])
            raise _missing(raw, here, missing, f", and the line is not a pair of names in the side folders either "
                                               f"({tried})" if folders else "")
        _, low_path, high_path, convention = found[0]
        first = listed.setdefault((split, low_path, high_path), lineno)
        if first != lineno:
            raise PairingError(f"{here}: repeats line {first} of {pairs_file} (the same pair "
                               f"{low_path.relative_to(raw).as_posix()} + {high_path.relative_to(raw).as_posix()}); "
                               f"a pair is listed once: delete the repeated line {lineno}")
        low_key_rel = low_path.relative_to(raw).as_posix()
        high_key_rel = high_path.relative_to(raw).as_posix()
        origins.append((here, f"{pairs_file.name}:{lineno}"))
        out.pairs.append(Pair(split, key_from_relpath(low_key_rel), low_path, high_path, low_key_rel, high_key_rel))
        out.add_source(split, pairs_file.name, f"pairs file ({convention})")
