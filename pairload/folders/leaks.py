"""One image in two roles: a pair whose two sides are one image, an image in two splits (one file, a symlink to
it, or identical bytes: test data leaking into training), and one file reached twice through linked folders (packed
once). Folders and pairs files both go through here."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from ..errors import PairingError
from .model import Discovery, Pair, listing
from .names import split_alias
from .pairsfile import marks_splits, read_pairs_file
from .realpaths import RealPaths, path_hash

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


def _same_bytes(a: str, b: str, chunk: int = 1 << 16) -> bool:
    """Whether two files of one size hold identical bytes, read side by side to the first difference (not
    `filecmp.cmp`, whose module-wide cache keeps an entry for every pair it compared: a pack of files of equal sizes,
    uncompressed images, would keep one per pair)."""
    try:
        with open(a, "rb") as fa, open(b, "rb") as fb:
            while True:
                x, y = fa.read(chunk), fb.read(chunk)
                if x != y:
                    return False
                if not x:
                    return True
    except OSError as exc:
        raise PairingError(f"{exc.filename}: cannot be read ({exc.strerror})") from None


def _size(path: str | Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError as exc:
        raise PairingError(f"{path}: cannot be read ({exc.strerror})") from None


def _repeated_lows(pairs: list[Pair], real_path: RealPaths) -> list[tuple[str, list[Pair]]]:
    """(real path, its pairs) of every low file that more than one pair reaches, in the order of each one's first
    pair. Compared by 64-bit hashes in an array (a dict of every pair's real path took 200 bytes a pair); only the
    pairs of a repeated hash are looked at as paths."""
    if len(pairs) < 2:
        return []
    hashes = np.fromiter((path_hash(real_path(p.files()[0])) for p in pairs), dtype=np.int64, count=len(pairs))
    order = np.argsort(hashes, kind="stable")
    ranked = hashes[order]
    same = ranked[1:] == ranked[:-1]  # (a sorted position and the next hold one hash)
    repeated = order[np.r_[False, same] | np.r_[same, False]]
    groups: dict[str, list[Pair]] = {}
    for k in np.sort(repeated).tolist():  # (two paths with one hash are two files: grouped by their paths)
        groups.setdefault(real_path(pairs[k].files()[0]), []).append(pairs[k])
    return [(real, group) for real, group in groups.items() if len(group) > 1]


def drop_repeated_files(raw: Path, out: Discovery, real_path: RealPaths) -> dict[str, str]:
    """One pair per low image file, however many paths reach it: the pair whose low is reached without a link is
    kept, else the first. Returns {dropped low path: kept low path}, both relative to RAW.

    A second path through a linked folder (`extra/low -> train/low`) is that folder walked twice, and is dropped;
    a pair in another split whose own files link to the kept pair's (`test/low/x.png -> ../../train/low/x.png`)
    is one image in two splits, and is refused naming both pairs."""
    dropped: dict[str, str] = {}
    for real, group in _repeated_lows(out.pairs, real_path):
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
        out.pairs.keep(np.fromiter((p.low_rel not in dropped for p in out.pairs), bool, count=len(out.pairs)))
    return dropped


def refuse_self_pairs_and_leaks(pairs: list[Pair], origins: list[tuple[str, str]], listed: bool,
                                real_path: RealPaths) -> np.ndarray:
    """Refuse a pair whose low and high are one file (one path, a link to the other, or identical bytes) and an
    image in two splits (one file, or two files with identical bytes: test data leaking into training). The pairs
    file and the folder walk both go through here; `origins[i]` is (where pair i came from, for the start of the
    message; a short reference to it), `listed` says the fix is editing a line rather than a folder.

    Only files that could be one image are compared: same size, then the first MiB, then all bytes. Returns the
    64-bit hashes (`path_hash`) of every pair's files' real paths, low then high (`inventory` takes them)."""
    fix_leak = "keep one line" if listed else _FIX_FOLDERS
    sizes = np.zeros(2 * len(pairs), dtype=np.int64)
    # Files are compared by a 64-bit hash of their real path in arrays (a million pairs: 32 MB, where a dict of
    # paths took hundreds), and only the few that could be one image in two splits are looked at as paths.
    real = np.zeros(2 * len(pairs), dtype=np.int64)
    for n, (p, (where, _)) in enumerate(zip(pairs, origins)):
        low, high = p.files()
        if low == high:
            raise PairingError(f"{where}: the low and the high image are the same file {p.low_rel}; "
                               "a pair needs two images")
        real_low, real_high = real_path(low), real_path(high)
        if real_low == real_high:
            raise PairingError(f"{where}: the low {p.low_rel} and the high {p.high_rel} are the same file (one links "
                               "to the other); a pair needs two images: put the real input or target in its place")
        real[2 * n], real[2 * n + 1] = path_hash(real_low), path_hash(real_high)
        sizes[2 * n], sizes[2 * n + 1] = _size(low), _size(high)
        if sizes[2 * n] == sizes[2 * n + 1] and _same_bytes(low, high):
            raise PairingError(f"{where}: the low {p.low_rel} and the high {p.high_rel} hold identical bytes; a pair "
                               "needs two different images (one side is probably a copy of the other): put the "
                               "real input or target in its place, or remove the pair")
    if not pairs:
        return real
    # (a few arrays of every file at a time, each freed once used: this is discovery's high-water mark)
    split_of = np.repeat(_split_codes(pairs), 2)
    order = np.argsort(real, kind="stable")  # positions of one real file together, first occurrence first
    ranked = real[order]
    new = np.empty(len(ranked), dtype=bool)
    new[0] = True
    np.not_equal(ranked[1:], ranked[:-1], out=new[1:])
    del ranked
    starts = np.flatnonzero(new)
    del new
    # a position whose split is not its file's first split's: the same file in two splits
    lengths = np.diff(np.r_[starts, len(order)])
    in_order = split_of[order]
    crossed_at = np.flatnonzero(in_order != np.repeat(in_order[starts], lengths))
    del in_order, lengths
    first = order[starts[np.searchsorted(starts, crossed_at, side="right") - 1]]  # where each one's file is first
    first_of = dict(zip(order[crossed_at].tolist(), first.tolist()))

    def info(k: int) -> tuple[int, str, str, str, str]:
        """(position, split, path, where, short) of the file at position k (pair k // 2, low or high)."""
        p = pairs[k // 2]
        return k, p.split, (p.low_rel, p.high_rel)[k % 2], *origins[k // 2]

    def real_of(k: int) -> str:
        return real_path(pairs[k // 2].files()[k % 2])

    for k in sorted(first_of):  # in order: the first file found in a second split is the one named
        seen, mine = info(first_of[k]), info(k)
        if real_of(seen[0]) != real_of(k):
            continue  # two paths with one 64-bit hash: not one file
        also = "" if seen[2] == mine[2] else f" (the same file as {seen[2]})"
        ref = f" ({seen[4]})" if seen[4] else ""
        raise PairingError(f"{mine[3]}: {mine[2]}{also} is in split {mine[1]!r} but already in split {seen[1]!r}"
                           f"{ref}; an image in two splits leaks test data into training: {fix_leak}")
    unique = order[starts]  # each real file's first position
    del order, starts
    ranked = unique[np.argsort(sizes[unique], kind="stable")]
    del unique
    bounds = np.flatnonzero(np.r_[True, sizes[ranked][1:] != sizes[ranked][:-1], True])
    groups = []
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        group = ranked[a:b]
        if b - a > 1 and len(set(split_of[group].tolist())) > 1:
            groups.append(sorted(group.tolist()))

    def spans(group: list[int]) -> bool:
        return len({split_of[k] for k in group}) > 1

    for full in (False, True):  # the first MiB, then all bytes, of the files that could still be one image
        narrowed = []
        for group in groups:
            by_digest: dict[bytes, list[int]] = {}
            for k in group:
                by_digest.setdefault(_digest(Path(real_of(k)), full), []).append(k)
            narrowed += [g for g in by_digest.values() if spans(g)]
        groups = narrowed
    clashes = []  # (the later file, the first one in another split) of every image found in two splits
    for group in groups:
        a = min(info(k) for k in group)
        clashes.append((min(info(k) for k in group if info(k)[1] != a[1]), a))
    if clashes:
        (_, b_split, b_rel, b_where, _), (_, a_split, a_rel, _, a_short) = min(clashes)
        ref = f", {a_short}" if a_short else ""
        raise PairingError(f"{b_where}: {b_rel} (split {b_split!r}) holds the same bytes as {a_rel} (split "
                           f"{a_split!r}{ref}); an image in two splits leaks test data into training: {fix_leak}")
    return real


def _split_codes(pairs) -> np.ndarray:
    """Each pair's split as a small integer (a `PairTable`'s own codes; else the rank of its name)."""
    if hasattr(pairs, "split_codes"):
        return pairs.split_codes()
    names = {name: k for k, name in enumerate(sorted({p.split for p in pairs}))}
    return np.fromiter((names[p.split] for p in pairs), dtype=np.int32, count=len(pairs))


def refuse_pairs_lists_marking_other_splits(raw: Path, pairs: list[Pair], lists: list[Path], sides,
                                            real_path: RealPaths) -> None:
    """Folder discovery's pairs against the pairs lists lying in RAW that were not given with --pairs-file and mark
    a split, by their name (`Sony_test_list.txt`, `meta_info_test.txt`) or a split column: a pair a list marks for
    one split and folders put in another (a test pair packed as train) is refused, naming the pairs and the options
    that pack by the lists. A list pack cannot read stays in `Discovery.unused` with the option that uses it."""
    marked: dict[str, tuple[str, Path]] = {}  # real path of a listed file -> (the split its list marks, the list)
    usable: list[tuple[str | None, Path]] = []
    for path in lists:
        named = split_alias(path.stem)
        if named is None and not marks_splits(path):
            continue  # marks no split: nothing it says can move a pair to another split
        listed = Discovery(pairs=[])
        try:
            read_pairs_file(raw, path, named, listed, [], sides)
        except PairingError:
            continue
        usable.append((named, path))
        for p in listed.pairs:
            for f in p.files():
                marked.setdefault(real_path(f), (p.split, path))
    wrong: dict[tuple[str, str, Path], list[str]] = {}
    for p in pairs:
        hit = next((marked[r] for r in map(real_path, p.files()) if r in marked and marked[r][0] != p.split), None)
        if hit is not None:
            wrong.setdefault((hit[0], p.split, hit[1]), []).append(p.low_rel)
    if not wrong:
        return
    (split, packed, path), names = min(wrong.items(), key=lambda kv: (kv[0][0] != "test", kv[0]))
    fix = " ".join(f"--pairs-file {s}={p}" if s else f"--pairs-file {p}" for s, p in usable)
    more = sum(map(len, wrong.values())) - len(names)
    raise PairingError(
        f"{path}: lists {len(names)} pair(s) as {split!r} ({listing(names)}) that folder discovery would pack into "
        f"{packed!r}{f' (and {more} more pair(s) of other splits)' if more else ''}: a {split} pair packed as "
        f"{packed} leaks into it; pack by the list(s) with {fix} (pairs they do not list are then left out and "
        f"reported), or move those pairs into {split}/low and {split}/high")
