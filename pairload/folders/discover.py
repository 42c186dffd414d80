"""Finding low/high pairs in a raw dataset folder: `find_pairs`, the one entry point, which runs the modules beside
it in order (scan or read a pairs file, pair, refuse leaks, take the inventory). Also the names other packages import
from here (`Pair`, `Discovery`, `Unused`, `split_alias`, `IMAGE_EXTS`)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..errors import PairingError
from ..format.schema import check_split_name
from .filetypes import IMAGE_EXTS, IMAGE_LIKE_EXTS
from .pairing import pairs_from_folders
from .inventory import inventory, no_pairs
from .leaks import drop_repeated_files, refuse_pairs_lists_marking_other_splits, refuse_self_pairs_and_leaks
from .model import Discovery, Pair, PairTable, Unused
from .names import split_alias
from .realpaths import RealPaths
from .pairsfile import SideFolders, marks_splits, parse_pairs_files, read_pairs_file
from .scan import scan

__all__ = ["IMAGE_EXTS", "IMAGE_LIKE_EXTS", "Discovery", "Pair", "PairTable", "Unused", "find_pairs", "split_alias"]


def find_pairs(
    raw_dir: str | os.PathLike,
    *,
    low_dir: str | None = None,
    high_dir: str | None = None,
    pairs_file=None,
    skip_unmatched: bool = False,
    split_names: dict[str, str] | None = None,
    name_template: str | None = None,
) -> Discovery:
    """All pairs under `raw_dir`, grouped into splits and sorted by key within each split.

    Layouts: side folders (`low|input|…` and `high|normal|…`, any case) at any depth below a split folder
    (`our485/low`, `Training data/Huawei/low`), side folders that carry the split in their name
    (`VE-LOL-L-Cap-Low_train`), SICE's `<seq>/*` ↔ `Label/<seq>.*` (`scan`), or a pairs file (`pairsfile`). Split
    folder names are mapped to `train`/`val`/`test` through the usual aliases (`splits`). Inside a pair of side
    folders, files pair by the first rule that pairs every file on both sides (`rules`); never by sorted order, never
    by elimination. Each real folder is walked once (`walk`); every image-like file that ends up in no pair is listed
    in `Discovery.unused` with the reason, and so is a pairs list lying in RAW that was not given (`inventory`). A
    pair whose two sides are one image, and an image in two splits (one file, a link to it, or identical bytes), are
    refused whether folders or a pairs file gave them (`leaks`). `pack`, the DALI file reader and the baselines all
    pair through `find_pairs`, so they never disagree.

    `pairs_file`: a path, `split=path`, or a list of them. `split_names`: {folder name: split name} overrides.
    `name_template`: BasicSR's `filename_tmpl`, the low stem as a function of the high stem (`'{}x4'`).
    """
    raw = Path(raw_dir).resolve()
    if not raw.is_dir():
        raise PairingError(f"{raw_dir}: no such folder")
    if name_template is not None and name_template.count("{}") != 1:
        raise PairingError(f"--name-template {name_template!r}: expected exactly one '{{}}' where the high image's "
                           "name goes, e.g. '{}x4'")
    out = Discovery(pairs=[])
    real_path = RealPaths()
    files = parse_pairs_files(pairs_file)
    found, dropped = None, {}
    if files:
        origins: list[tuple[str, str]] = []
        sides = SideFolders(raw, low_dir, high_dir, split_names or {})
        for split, path in files:  # a file given without SPLIT= and no split column: its name's split, if any
            named = check_split_name(split) if split else None if marks_splits(path) else split_alias(path.stem)
            read_pairs_file(raw, path, named, out, origins, sides)
        real = refuse_self_pairs_and_leaks(out.pairs, origins, listed=True, real_path=real_path)
    else:
        found = scan(raw, low_dir, high_dir, {k.lower(): v for k, v in (split_names or {}).items()})
        pairs_from_folders(raw, found.units, skip_unmatched, split_names or {}, name_template, out)
        dropped = drop_repeated_files(raw, out, real_path)
        out.pairs.sort_keys()
        real = refuse_self_pairs_and_leaks(out.pairs, [(str(raw), "")] * len(out.pairs), listed=False,
                                           real_path=real_path)
    if not out.pairs:
        raise no_pairs(raw, low_dir, high_dir, bool(files))
    _refuse_repeated_keys(raw, out.pairs)
    if files:  # (the folders' pairs are in key order already)
        out.pairs.sort_keys()
    lists = inventory(raw, out, found, dropped, {real_path(path) for _, path in files}, real_path, real)
    if not files:  # a list lying in RAW that marks a pair for another split than its folder: refused, never leaked
        refuse_pairs_lists_marking_other_splits(raw, out.pairs, lists, SideFolders(raw, low_dir, high_dir,
                                                                                   split_names or {}), real_path)
    return out


def _refuse_repeated_keys(raw: Path, pairs: PairTable) -> None:
    """Refuse two pairs of one split with one sample key (found side by side in key order, as columns)."""
    key, split = pairs.fixed("key"), pairs.split_codes()
    order = np.lexsort((key, split))
    key, split = key[order], split[order]
    same = np.flatnonzero((key[1:] == key[:-1]) & (split[1:] == split[:-1]))
    if len(same):
        other, p = pairs[int(order[same[0]])], pairs[int(order[same[0] + 1])]
        raise PairingError(f"{raw}: {other.low_rel} and {p.low_rel} give the same sample key {p.key!r} in split "
                           f"{p.split!r}; rename one of them")
