"""Pairs from side folders: each unit `scan` found is paired by `rules`, its split named by `splits`, and files no
rule pairs are refused (or skipped with --skip-unmatched) by name; a pair split only by Unicode normalisation of its
names is refused with the fix."""

from __future__ import annotations

import unicodedata
import os
from pathlib import Path

from ..errors import PairingError
from ..format.schema import key_from_relpath
from .model import Discovery, Pair, escaped, listing
from .realpaths import path_hash
from .rules import pair_unit, paired, unpaired
from .scan import Unit
from .splits import locate, split_names_of


def _refuse_normalisation_twins(raw: Path, unit_low: dict, unit_high: dict, only_low: list[str],
                                only_high: list[str]) -> None:
    """Refuse unmatched low and high names that are one name in two Unicode spellings (`café` as U+00E9, and as
    `e` + U+0301): pairing them silently would hide that the dataset's names are not what its list says."""
    by_nfc = {unicodedata.normalize("NFC", s): s for s in only_high}
    twins = [(s, by_nfc[n]) for s in only_low if (n := unicodedata.normalize("NFC", s)) in by_nfc]
    if not twins:
        return
    low, high = twins[0]
    low_rel = _rel(raw, unit_low[low][0])
    high_rel = _rel(raw, unit_high[high][0])
    more = f" (and {len(twins) - 1} more such pairs)" if len(twins) > 1 else ""
    raise PairingError(f"{raw}: {low_rel} and {high_rel} differ only in Unicode normalisation (NFC/NFD, typical of "
                       f"files copied from macOS): the low is spelled '{escaped(low)}', the high '{escaped(high)}'"
                       f"{more}; pairload does not pair them silently: rename one so that both are spelled alike, "
                       f"e.g. `convmv -r -f utf8 -t utf8 --nfc --notest {raw}`")


def pairs_from_folders(raw: Path, units: list[Unit], skip_unmatched: bool, overrides: dict[str, str],
                       template: str | None, out: Discovery) -> None:
    """Add the pairs of every unit to `out`, with the folders and rules each split came from."""
    if not units:
        return
    located = [(locate(raw, u), u) for u in units]
    datasets = sorted({"/".join(d) for (d, _, _), _ in located})
    if len(datasets) > 1:
        shown = ", ".join(d or "(top level)" for d in datasets)
        raise PairingError(f"{raw}: holds several datasets, each with its own splits ({shown}); pack one at a time, "
                           f"e.g. `pairload pack {raw / datasets[-1]} SHARDS`")
    names = split_names_of(located, overrides)
    problems: list[str] = []
    for (_, split_folder, group), unit in located:
        split = names[split_folder][0]
        out.split_folders[split_folder or "."] = names[split_folder]
        lows, highs, mapping, rule, aside = pair_unit(raw, unit, template)
        out.aside.extend(_rel(raw, path) for path in aside)
        only_low, only_high = unpaired(lows, highs, mapping)
        low_where = (unit.low if isinstance(unit.low, Path) else unit.parent).relative_to(raw).as_posix()
        high_where = unit.high.relative_to(raw).as_posix()
        if only_low or only_high:
            _refuse_normalisation_twins(raw, lows, highs, only_low, only_high)
            parts = []
            if only_low:
                parts.append(f"{len(only_low)} in {low_where} without a partner in {high_where}: "
                             f"{listing([_rel(raw, lows[s][0]) for s in only_low])}")
            if only_high:
                parts.append(f"{len(only_high)} in {high_where} without a partner in {low_where}: "
                             f"{listing([_rel(raw, highs[s][0]) for s in only_high])}")
            problems.append(f"split {split!r}: " + "; ".join(parts))
            out.skipped_low.extend(_rel(raw, lows[s][0]) for s in only_low)
            out.skipped_high.extend(_rel(raw, highs[s][0]) for s in only_high)
            out.skipped_per_split[split] = out.skipped_per_split.get(split, 0) + len(only_low) + len(only_high)
        prefix = "/".join(group)
        for _, (lp, lrel), hp in paired(lows, highs, mapping):
            rel = f"{prefix}/{lrel}" if prefix else lrel
            low_rel = _rel(raw, lp)
            out.pairs.append(Pair(split, key_from_relpath(rel), lp, hp, low_rel, _rel(raw, hp)))
            if "/" not in lrel:  # directly in its side folder: in no folder of its own (`Discovery.loose`)
                out.loose.append(path_hash(low_rel))
        out.add_source(split, low_where, rule)
        out.add_source(split, high_where, rule)
    if problems and not skip_unmatched:
        raise PairingError(f"{raw}: unmatched images, " + " | ".join(problems) +
                           " (no naming rule pairs them one to one, and pairload never pairs by elimination: restore "
                           "the missing files, list the pairs in a --pairs-file, give --name-template for another "
                           "naming rule, or pass --skip-unmatched to pack the rest)")


def _rel(raw: Path, path: str) -> str:
    """`path` (a file found under `raw`) relative to `raw`, '/'-separated."""
    prefix = os.path.join(raw, "")
    return path[len(prefix):] if path.startswith(prefix) else Path(path).relative_to(raw).as_posix()
