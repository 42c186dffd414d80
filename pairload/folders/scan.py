"""Finding side folders at any depth below RAW: plain `low`/`high` pairs, side folders that carry a split or family
in their name (`VE-LOL-L-Cap-Low_train`, `Our_low`), and SICE's `<seq>/` ↔ `Label/<seq>.*`. Each one is a `Unit`;
`scan` also notes the folders too deep to walk and side folders named with an unknown split word."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PairingError
from .names import HIGH_NAMES, LOW_NAMES, side_of, split_alias, tokens
from .walk import real_id, subfolders, visible_names

MAX_DEPTH = 6  # folders below RAW searched for side folders


@dataclass(frozen=True)
class Unit:
    """One source of pairs: a low folder and a high folder (or SICE's sequence folders and their Label folder)."""

    parent: Path  # folder holding the side folders
    low: Path | tuple[Path, ...]  # one folder, or the sequence folders of the label layout
    high: Path
    split_token: str | None = None  # from the side folder names (`…-Low_train`)
    family: str = ""  # the rest of a suffix-style name, to tell two families apart


def _suffix_side(name: str, overrides: dict[str, str]) -> tuple[str, str, str] | None:
    """(side, split token, family) for a folder named like `VE-LOL-L-Cap-Low_train`, else None. A token named in
    --split-name counts as a split word."""
    toks = tokens(name)
    sides = [t for t in toks if t in LOW_NAMES or t in HIGH_NAMES]
    splits = [t for t in toks if split_alias(t) or t in overrides]
    if len(sides) != 1 or len(splits) != 1 or len(toks) < 2:
        return None
    side = "low" if sides[0] in LOW_NAMES else "high"
    family = " ".join(t for t in toks if t != sides[0] and t != splits[0])
    return side, splits[0], family


def _family_side(name: str, overrides: dict[str, str]) -> tuple[str, str, str] | None:
    """(side, split token or "", family) for a side folder named with more words than its side: with a split word
    as `_suffix_side` reads it, or without one (`Our_low`, `Our_normal`)."""
    parsed = _suffix_side(name, overrides)
    if parsed:
        return parsed
    toks = tokens(name)
    sides = [t for t in toks if t in LOW_NAMES or t in HIGH_NAMES]
    if len(sides) != 1 or len(toks) < 2 or any(split_alias(t) or t in overrides for t in toks):
        return None
    return ("low" if sides[0] in LOW_NAMES else "high"), "", " ".join(t for t in toks if t != sides[0])


def _unknown_suffix_pairs(children: list[Path], overrides: dict[str, str]) -> dict[Path, str]:
    """Side folders named like `Cap-Low_part3` / `Cap-Normal_part3` (a side word followed by one word that is no
    known split name) -> that word: they look like a split that --split-name would pack."""
    families: dict[tuple[str, str], dict[str, Path]] = {}
    for c in children:
        toks = tokens(c.name)
        sides = [i for i, t in enumerate(toks) if t in LOW_NAMES or t in HIGH_NAMES]
        if len(sides) != 1 or sides[0] != len(toks) - 2 or _suffix_side(c.name, overrides):
            continue
        word = toks[-1]
        side = "low" if toks[sides[0]] in LOW_NAMES else "high"
        families.setdefault((" ".join(toks[:-2]), word), {})[side] = c
    return {p: word for (_, word), sides in families.items() if len(sides) == 2 for p in sides.values()}


def _units_in(folder: Path, children: list[Path], low_dir: str | None, high_dir: str | None,
              overrides: dict[str, str]) -> list[Unit]:
    by_side: dict[str, list[Path]] = {"low": [], "high": []}
    for c in children:
        side = side_of(c.name, low_dir, high_dir)
        if side:
            by_side[side].append(c)
    for side, found in by_side.items():
        if len(found) > 1:
            raise PairingError(f"{folder}: folders {', '.join(p.name for p in found)} are all names for the {side} "
                               "side; say which to use with --low-dir/--high-dir")
    units: list[Unit] = []
    if by_side["low"] and by_side["high"]:
        units.append(Unit(folder, by_side["low"][0], by_side["high"][0]))
    elif by_side["high"] and low_dir is None:  # SICE: <seq>/* next to Label/<seq>.*
        label = by_side["high"][0]
        stems = {os.path.splitext(n)[0] for n in visible_names(label)}
        seqs = tuple(c for c in children if c != label and c.name in stems)
        if seqs:
            return [Unit(folder, seqs, label)]
    if low_dir is not None or high_dir is not None:
        return units
    # side folders named with more words: `VE-LOL-L-Cap-Low_train` (a split word), LCDP's `test-input` beside its
    # `input`, and the DRBN release's `Our_low`/`Our_normal` beside `Our_low_test`/`Our_normal_test` (no split word:
    # the split comes from where they are, as for plain `low`/`high`)
    taken = {u.low for u in units} | {u.high for u in units} | set(_unknown_suffix_pairs(children, overrides))
    families: dict[tuple[str, str], dict[str, Path]] = {}
    for c in children:
        parsed = None if c in taken else _family_side(c.name, overrides)
        if parsed:
            side, token, family = parsed
            families.setdefault((token, family), {})[side] = c
    units += [Unit(folder, sides["low"], sides["high"], token or None, family)
              for (token, family), sides in sorted(families.items()) if len(sides) == 2]
    named = {split_alias(u.split_token) or u.split_token for u in units if u.split_token}
    if named and "train" not in named:  # `input` beside `test-input`: the unnamed side folders are the training set
        units = [u if u.split_token else Unit(u.parent, u.low, u.high, "train", u.family) for u in units]
    if len({u.family for u in units}) == 1:
        units = [Unit(u.parent, u.low, u.high, u.split_token, "") for u in units]
    return units


@dataclass
class Scan:
    """What the walk for side folders found: units, and the folders whose files cannot be in any unit."""

    units: list[Unit] = field(default_factory=list)
    too_deep: list[Path] = field(default_factory=list)  # folders below MAX_DEPTH, not walked
    unknown_split: dict[Path, str] = field(default_factory=dict)  # side folder -> its unknown split word


def scan(raw: Path, low_dir: str | None, high_dir: str | None, overrides: dict[str, str]) -> Scan:
    """Side folders at any depth below `raw`. Each real folder is walked once: real subfolders first, symlinked
    ones after (so a link never takes the place of the folder it points to), and a link to a folder already
    walked (a loop such as `train/again -> .`, or a second path to one folder) is not followed.
    `overrides`: the --split-name folder names, lowercased."""
    found = Scan()
    visited = {real_id(raw)}
    links: list[tuple[Path, int]] = []

    def look(folder: Path, depth: int) -> None:
        children = subfolders(folder)
        units = _units_in(folder, children, low_dir, high_dir, overrides)
        found.units.extend(units)
        used = set()
        for u in units:
            used.update(u.low if isinstance(u.low, tuple) else (u.low,))
            used.add(u.high)
        if low_dir is None and high_dir is None:
            found.unknown_split.update(_unknown_suffix_pairs([c for c in children if c not in used], overrides))
        for c in children:
            if c in used:
                continue
            if c.is_symlink():
                links.append((c, depth + 1))
            else:
                visit(c, depth + 1)

    def visit(folder: Path, depth: int) -> None:
        rid = real_id(folder)
        if rid in visited:
            return
        if depth > MAX_DEPTH:
            found.too_deep.append(folder)
            return
        visited.add(rid)
        look(folder, depth)

    look(raw, 0)
    while links:
        visit(*links.pop(0))
    return found
