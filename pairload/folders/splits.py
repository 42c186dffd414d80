"""Naming splits: where a unit's split folder lies on its path below RAW, and which split each split folder name
maps to (--split-name first, then the usual aliases where unambiguous, else the name kept)."""

from __future__ import annotations

import re
from pathlib import Path

from ..format.schema import check_split_name
from .names import alias, norm, split_alias
from .scan import Unit

DEFAULT_SPLIT = "train"


def canonical_splits(names: list[str], overrides: dict[str, str], reserved: tuple[str, ...] = ()
                     ) -> dict[str, tuple[str, str]]:
    """Folder name → (split name, how it was mapped): overrides first, then aliases (`our485` → train, `valid` →
    val, a validation folder → test where nothing else is the test split) where unambiguous, else the name
    lowercased, with characters other than letters, digits, '_' and '-' replaced by '_'."""
    out: dict[str, tuple[str, str]] = {}
    lowered = {k.lower(): v for k, v in overrides.items()}
    for n in names:
        if n.lower() in lowered:
            out[n] = (check_split_name(lowered[n.lower()]), "--split-name")
    taken = {split for split, _ in out.values()} | set(reserved)

    def assign(canon: str, cands: list[str], how: str) -> None:
        exact = [n for n in cands if norm(n) == canon]
        pick = exact if exact else cands
        if len(pick) == 1 and canon not in taken:
            found = alias(pick[0])
            word = "" if found is None or found[1] else ", a word of its name"
            out[pick[0]] = (canon, how + word)
            taken.add(canon)

    for canon in ("train", "test", "val"):
        assign(canon, [n for n in names if n not in out and split_alias(n) == canon], f"alias of {canon}")
    if "test" not in taken and not any(split_alias(n) == "test" for n in names):  # train + val only: val is the test
        vals = [n for n, (split, how) in out.items() if split == "val" and how != "--split-name"]
        if len(vals) == 1:
            out[vals[0]] = ("test", "alias of val, used as test: no test folder")
    for n in names:
        if n not in out:
            out[n] = (re.sub(r"[^a-z0-9_-]", "_", n.lower()) or "split",
                      "name kept: not a known split name (--split-name FOLDER=SPLIT renames it)")
    return out


def locate(raw: Path, unit: Unit) -> tuple[tuple[str, ...], str, tuple[str, ...]]:
    """(dataset folders, split folder name, group folders) of a unit from its path below RAW."""
    comps = unit.parent.relative_to(raw).parts
    if unit.split_token is not None:
        return comps, unit.split_token, ((unit.family,) if unit.family else ())
    for whole in (True, False):  # a folder that is an alias wins over one holding a split word (`Train_2025`)
        for i, c in enumerate(comps):
            found = alias(c)
            if found and found[1] == whole:
                return comps[:i], c, comps[i + 1:]
    if not comps:
        return (), "", ()
    return (), comps[0], comps[1:]


def split_names_of(located: list, overrides: dict[str, str]) -> dict[str, tuple[str, str]]:
    """Split folder name ('' for none) -> (split, how it mapped), for units located by `locate`."""
    folders = {s for (_, s, _), _ in located}
    names = canonical_splits(sorted(folders - {""}), overrides, (DEFAULT_SPLIT,) if "" in folders else ())
    names[""] = (DEFAULT_SPLIT, "no split folder: the default split")
    return names
