"""One image in two roles: a pair whose two sides are one image, an image in two splits (one file, a symlink to
it, or identical bytes: test data leaking into training), and one file reached twice through linked folders (packed
once). Folders and pairs files both go through here."""

from __future__ import annotations

import filecmp
import hashlib
import os
from pathlib import Path

from ..errors import PairingError
from .model import Discovery, Pair
from .realpaths import RealPaths

_FIX_FOLDERS = "remove the copy from one split (or pack with a --pairs-file that lists it once)"


def _digest(path: Path, full: bool) -> bytes:
    """blake2b of the first MiB of a file, or of all of it."""
    h = hashlib.blake2b(digest_size=16)
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
                if not full:
                    break
    except OSError as exc:
        raise PairingError(f"{path}: cannot be read ({exc.strerror})") from None
    return h.digest()


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError as exc:
        raise PairingError(f"{path}: cannot be read ({exc.strerror})") from None


def drop_repeated_files(raw: Path, out: Discovery, real_path: RealPaths) -> dict[str, str]:
    """One pair per low image file, however many paths reach it: the pair whose low is reached without a link is
    kept, else the first. Returns {dropped low path: kept low path}, both relative to RAW.

    A second path through a linked folder (`extra/low -> train/low`) is that folder walked twice, and is dropped;
    a pair in another split whose own files link to the kept pair's (`test/low/x.png -> ../../train/low/x.png`)
    is one image in two splits, and is refused naming both pairs."""
    by_file: dict[str, list[Pair]] = {}
    for p in out.pairs:
        by_file.setdefault(real_path(p.files()[0]), []).append(p)
    dropped: dict[str, str] = {}
    for real, group in by_file.items():
        if len(group) > 1:
            keep = min(group, key=lambda p: (str(p.low) != real, p.split, p.key))
            for p in group:
                if p is keep:
                    continue
                same_folder = real_path(p.low.parent) == real_path(keep.low.parent)
                if p.split != keep.split and not same_folder:
                    both = real_path(p.high) == real_path(keep.high)
                    raise PairingError(
                        f"{raw}: the {p.split!r} pair {p.low_rel} + {p.high_rel} and the {keep.split!r} pair "
                        f"{keep.low_rel} + {keep.high_rel} {'are the same files' if both else 'share one low file'} "
                        f"(symlinks); an image in two splits leaks test data into training: {_FIX_FOLDERS}")
                dropped[p.low_rel] = keep.low_rel
    if dropped:
        out.pairs = [p for p in out.pairs if p.low_rel not in dropped]
    return dropped


def refuse_self_pairs_and_leaks(pairs: list[Pair], origins: list[tuple[str, str]], listed: bool,
                                real_path: RealPaths) -> None:
    """Refuse a pair whose low and high are one file (one path, a link to the other, or identical bytes) and an
    image in two splits (one file, or two files with identical bytes: test data leaking into training). The pairs
    file and the folder walk both go through here; `origins[i]` is (where pair i came from, for the start of the
    message; a short reference to it), `listed` says the fix is editing a line rather than a folder.

    Only files that could be one image are compared: same size, then the first MiB, then all bytes."""
    fix_leak = "keep one line" if listed else _FIX_FOLDERS
    for p, (where, _) in zip(pairs, origins):
        low, high = p.files()
        if low == high:
            raise PairingError(f"{where}: the low and the high image are the same file {p.low_rel}; "
                               "a pair needs two images")
        if real_path(low) == real_path(high):
            raise PairingError(f"{where}: the low {p.low_rel} and the high {p.high_rel} are the same file (one links "
                               "to the other); a pair needs two images: put the real input or target in its place")
        if _size(low) == _size(high) and filecmp.cmp(low, high, shallow=False):
            raise PairingError(f"{where}: the low {p.low_rel} and the high {p.high_rel} hold identical bytes; a pair "
                               "needs two different images (one side is probably a copy of the other): put the "
                               "real input or target in its place, or remove the pair")
    first: dict[str, tuple[int, str, str, str, str]] = {}  # real path -> (order, split, path, where, short)
    for p, (where, short) in zip(pairs, origins):
        for rel, path in zip((p.low_rel, p.high_rel), p.files()):
            real = real_path(path)
            seen = first.setdefault(real, (len(first), p.split, rel, where, short))
            if seen[1] != p.split:
                also = "" if seen[2] == rel else f" (the same file as {seen[2]})"
                ref = f" ({seen[4]})" if seen[4] else ""
                raise PairingError(f"{where}: {rel}{also} is in split {p.split!r} but already in split {seen[1]!r}"
                                   f"{ref}; an image in two splits leaks test data into training: {fix_leak}")
    by_size: dict[int, list[str]] = {}
    for real in first:
        by_size.setdefault(_size(Path(real)), []).append(real)

    def spans(group: list[str]) -> bool:
        return len({first[r][1] for r in group}) > 1

    groups = [g for g in by_size.values() if spans(g)]
    for full in (False, True):  # the first MiB, then all bytes, of the files that could still be one image
        narrowed = []
        for group in groups:
            by_digest: dict[bytes, list[str]] = {}
            for real in group:
                by_digest.setdefault(_digest(Path(real), full), []).append(real)
            narrowed += [g for g in by_digest.values() if spans(g)]
        groups = narrowed
    clashes = []  # (the later file, the first one in another split) of every image found in two splits
    for group in groups:
        a = min((first[r] for r in group))
        clashes.append((min(first[r] for r in group if first[r][1] != a[1]), a))
    if clashes:
        (_, b_split, b_rel, b_where, _), (_, a_split, a_rel, _, a_short) = min(clashes)
        ref = f", {a_short}" if a_short else ""
        raise PairingError(f"{b_where}: {b_rel} (split {b_split!r}) holds the same bytes as {a_rel} (split "
                           f"{a_split!r}{ref}); an image in two splits leaks test data into training: {fix_leak}")
