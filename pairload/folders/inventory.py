"""What RAW holds beyond the pairs: every image-like file in no pair, listed per folder with the reason and how to
pack it (`Discovery.unused`), and the refusal for a RAW that gives no pair, naming what it holds instead."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np

from ..errors import PairingError
from .filetypes import ARRAY_EXTS, IMAGE_EXTS, IMAGE_LIKE_EXTS, LIST_EXTS, READABLE, conversion
from .model import (MAX_LISTED, NO_SIDE_FOLDER, NOT_LISTED, NOT_THE_TARGET, PAIRS_LIST, SAME_FILE, TOO_DEEP,
                    UNKNOWN_SPLIT, UNMATCHED, UNSUPPORTED, Discovery, Unused, listing)
from .names import HIGH_NAMES, LOW_NAMES, side_of, split_alias
from .pairsfile import is_pairs_list
from .realpaths import RealPaths, path_hash
from .scan import MAX_DEPTH, Scan
from .walk import subfolders, walk, walk_chunks

_HINTS = {
    UNMATCHED: "restore their partners, or list the pairs in a --pairs-file",
    TOO_DEEP: f"side folders are looked for at most {MAX_DEPTH} folders below RAW; pack a folder nearer to them",
    NOT_LISTED: "add lines for them to the pairs file if they belong to the dataset",
    SAME_FILE: "a symlink reaches a file that is already packed; it is packed once",
    NOT_THE_TARGET: ("DRV's raw long exposure (.ARW) and its half-size development (half*), beside the scene's one "
                     "target, which SMID's loader skips too; the other file of the folder is the scene's target"),
}


def _pairs_list_hint(folder: Path, names: list[str]) -> str:
    named = next((n for n in names if split_alias(os.path.splitext(n)[0])), None)
    example = (f"--pairs-file {split_alias(os.path.splitext(named)[0])}={folder / named}" if named
               else f"--pairs-file {folder / names[0]}")
    return (f"it lists pairs, and folder discovery does not read it: the splits it gives are lost (pairs it lists "
            f"as test may be packed as train); pack by it with {example} (SPLIT=FILE once per list; lines relative "
            "to RAW or to the split's low and high folders)")


def _reason(raw: Path, where: str, rel: str, ext: str, unmatched: set[str], deep: list[str],
            unknown: dict[str, str], pairs_file: bool, aside: set[str] = frozenset()) -> tuple[str, str]:
    """(reason, hint) for an image-like file in no pair."""
    if rel in aside:
        return NOT_THE_TARGET, _HINTS[NOT_THE_TARGET]
    if ext in ARRAY_EXTS:
        return UNSUPPORTED, conversion([ext])
    if ext not in IMAGE_EXTS:
        return UNSUPPORTED, f"pack reads {READABLE}: convert them (e.g. to PNG) to pack them"
    if rel in unmatched:
        return UNMATCHED, _HINTS[UNMATCHED]
    if any(rel.startswith(d) for d in deep):
        root = next(d for d in deep if rel.startswith(d)).rstrip("/")
        return TOO_DEEP, _HINTS[TOO_DEEP] + f", e.g. `pairload pack {raw / root} SHARDS`"
    if any(rel.startswith(d) for d in unknown):
        word = next(w for d, w in unknown.items() if rel.startswith(d))
        return UNKNOWN_SPLIT, (f"its folder looks like the side folder of a split {word!r}, which is not a known split "
                               f"name; pass --split-name {word}=SPLIT (e.g. {word}=val) to pack it")
    if pairs_file:
        return NOT_LISTED, _HINTS[NOT_LISTED]
    split = next((c for c in Path(where).parts if split_alias(c)), None)
    return NO_SIDE_FOLDER, ((f"{split!r} looks like a split folder, but " if split else "") +
                            "no low|input|… folder beside a high|normal|… folder holds these files; name the folders "
                            "with --low-dir/--high-dir, or list the pairs in a --pairs-file")


def _member(sorted_hashes: np.ndarray, hashes: np.ndarray) -> np.ndarray:
    """For each of `hashes`: is it in `sorted_hashes` (sorted; repeats allowed)?"""
    if not len(sorted_hashes):
        return np.zeros(len(hashes), dtype=bool)
    k = np.minimum(np.searchsorted(sorted_hashes, hashes), len(sorted_hashes) - 1)
    return sorted_hashes[k] == hashes


def inventory(raw: Path, out: Discovery, scan: Scan | None, dropped: dict[str, str], given: set[str],
              real_path: RealPaths, real: np.ndarray) -> list[Path]:
    """Every image-like file under RAW that is in no pair goes into `out.unused`, per folder and reason, and so does
    every pairs list under RAW that is not one of the `given` pairs files (real paths); those lists are returned.
    `real`: the 64-bit hashes of the packed files' real paths (`refuse_self_pairs_and_leaks` made them; sorted here,
    in place)."""
    # the packed files as sorted 64-bit hashes, of their real paths and of the paths they were found by: a million
    # pairs cost 32 MB, not sets of paths; a file found by its own path needs no real path
    # (sorted in place, repeats kept: `_member` needs no unique array, and np.unique held two more copies)
    used = real
    used.sort()
    found = np.fromiter((path_hash(p) for pair in out.pairs for p in pair.files()), dtype=np.int64,
                        count=2 * len(out.pairs))
    found.sort()

    def used_of(folder: Path, names: list[str]) -> np.ndarray:
        """For each of a folder's files: is it (its real path) one of the packed files?"""
        where = str(folder)  # (each path made twice at most, not kept: a list of a folder's paths, 90 B a file)
        hit = _member(found, np.fromiter((path_hash(f"{where}/{name}") for name in names), dtype=np.int64,
                                         count=len(names)))
        rest = np.flatnonzero(~hit)
        if len(rest):  # reached another way (a link to a packed file, or the folder by a linked path)
            hit[rest] = _member(used, np.fromiter((path_hash(real_path(f"{where}/{names[k]}")) for k in rest.tolist()),
                                                  dtype=np.int64, count=len(rest)))
        return hit
    unmatched = set(out.skipped_low) | set(out.skipped_high)
    aside = set(out.aside)
    deep = [d.relative_to(raw).as_posix() + "/" for d in (scan.too_deep if scan else ())]
    unknown = {d.relative_to(raw).as_posix() + "/": w for d, w in (scan.unknown_split if scan else {}).items()}
    groups: dict[tuple[str, str], list[str]] = {}
    hints: dict[tuple[str, str], str] = {}
    lists: list[Path] = []
    for rel, kept in sorted(dropped.items()):  # the walk below reaches each real folder once, so not these
        where, _, name = rel.rpartition("/")
        groups.setdefault((where or ".", SAME_FILE), []).append(name)
        hints.setdefault((where or ".", SAME_FILE), f"{_HINTS[SAME_FILE]} (as {kept})")
    for folder, names in walk_chunks(raw):  # (a chunk of a folder's names at a time: a folder of a million files
        where = folder.relative_to(raw).as_posix()  # is never listed whole)
        for name, is_used in zip(names, used_of(folder, names).tolist()):
            ext = os.path.splitext(name)[1].lower()
            rel = f"{where}/{name}" if where != "." else name
            if ext in LIST_EXTS and real_path(folder / name) not in given and is_pairs_list(folder / name):
                groups.setdefault((where, PAIRS_LIST), []).append(name)
                lists.append(folder / name)
                continue
            if ext not in IMAGE_LIKE_EXTS or is_used or rel in dropped:
                continue
            reason, hint = _reason(raw, where, rel, ext, unmatched, deep, unknown, bool(given), aside)
            groups.setdefault((where, reason), []).append(name)
            hints[(where, reason)] = hint
    for (where, reason), names in groups.items():
        names.sort()  # (found in the order the folder lists them)
        if reason == PAIRS_LIST:
            hints[(where, reason)] = _pairs_list_hint(raw / where if where != "." else raw, names)
        elif reason != SAME_FILE:  # the hint of the group's last name, whatever order the folder listed them in
            rel = f"{where}/{names[-1]}" if where != "." else names[-1]
            hints[(where, reason)] = _reason(raw, where, rel, os.path.splitext(names[-1])[1].lower(), unmatched, deep,
                                             unknown, bool(given), aside)[1]
    out.unused = [Unused(folder, reason, len(names), tuple(names[:MAX_LISTED]), hints[(folder, reason)])
                  for (folder, reason), names in sorted(groups.items())]
    return sorted(lists)


def no_pairs(raw: Path, low_dir: str | None, high_dir: str | None, listed: bool) -> PairingError:
    """The refusal for a RAW that gives no pair, naming what it holds: raw sensor files, arrays, images with no
    targets (an unpaired set), or folders pack could not read as sides."""
    low_names = low_dir or "|".join(LOW_NAMES)
    high_names = high_dir or "|".join(HIGH_NAMES)
    generic = (f"{raw}: no pairs found; expected {raw.name}/{{{low_names}}}/ and {{{high_names}}}/ folders, or "
               f"{raw.name}/<split>/{{low,high}}/ (use --low-dir/--high-dir for other folder names, or --pairs-file)")
    if listed:
        return PairingError(generic)
    side = side_of(raw.name, low_dir, high_dir)
    other = "high" if side == "low" else "low"
    sibling = next((f for f in (subfolders(raw.parent) if side else ()) if side_of(f.name, low_dir, high_dir) == other),
                   None)
    if sibling is not None:
        return PairingError(f"{raw}: is the {side} side of a dataset, and its {other} side {sibling.name}/ sits beside "
                            f"it; pack the folder that holds both: `pairload pack {raw.parent} SHARDS`")
    images: dict[Path, list[str]] = {}
    others: Counter = Counter()
    lists: list[Path] = []
    for folder, names in walk(raw):
        for name in names:
            ext = os.path.splitext(name)[1].lower()
            if ext in IMAGE_EXTS:
                images.setdefault(folder, []).append(name)
            elif ext in ARRAY_EXTS:
                others[ext] += 1
            elif ext in LIST_EXTS and is_pairs_list(folder / name):
                lists.append(folder / name)
    also = (f"; {listing([p.relative_to(raw).as_posix() for p in lists])} look(s) like a pairs list: pack by it "
            f"with --pairs-file {lists[0]}" if lists else "")
    if not images:
        if not others:
            return PairingError(generic + also)
        found = ", ".join(f"{n} {ext} files" for ext, n in others.most_common())
        return PairingError(f"{raw}: holds {found} and no images: they are MATLAB arrays, and pairload packs pairs "
                            f"of images or .npy arrays; convert them first ({conversion(others)}), then pack the "
                            f"folder of converted low/high files{also}")
    n = sum(len(v) for v in images.values())
    where = [f.relative_to(raw).as_posix() if f != raw else raw.name for f in images]
    high = [f for f in images if side_of(f.name, low_dir, high_dir) == "high"]
    low = [f for f in images if side_of(f.name, low_dir, high_dir) == "low"]
    stems = Counter(os.path.splitext(name)[0].lower() for names in images.values() for name in set(names))
    shared = any(c > 1 for c in stems.values())  # names found in two folders: maybe inputs and targets
    if not high and (len(images) == 1 or low or not shared):
        return PairingError(
            f"{raw}: {n} images and no targets: this looks like an unpaired (test-only) set; pairload packs pairs. "
            f"Found {n} images in {listing(where)} and no {high_names} folder of targets for them. If the targets "
            f"exist, put them in a high/ folder beside a low/ folder of the inputs (or name the two folders with "
            f"--low-dir/--high-dir), or list the pairs in a --pairs-file; an unpaired set (DARK FACE, ExDark, DICM, "
            f"LIME, MEF, NPE, VV) is for no-reference evaluation: read its images directly; normal-light photos to "
            f"degrade into inputs: pack them with --targets-only{also}")
    return PairingError(f"{generic}; found {n} images in {len(images)} folder(s) ({listing(where)}){also}")
