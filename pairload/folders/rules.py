"""The pairing rules inside one pair of side folders, tried in order (`RULES`): a rule pairs a side's files only
when it pairs every file on both sides; never by sorted order, never by elimination. `pair_unit` applies them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..camera.files import sid_scene
from .names import HIGH_NAMES, LOW_NAMES, tokens
from .scan import Unit
from . import walk
from .walk import images, no_images, side_images

# relative path without extension -> (absolute path, relative path): `walk.Stems`, or a dict for SICE's sequences
Stems = Mapping[str, tuple[str, str]]


@dataclass(frozen=True)
class RuleInput:
    """What a rule may use besides the two sides' stems."""

    low_words: frozenset[str]  # side words a low name may carry (`low00001`, `x_input`)
    high_words: frozenset[str]
    template: str | None  # --name-template: the low stem as a function of the high stem


def _strip_word(stem: str, words: frozenset[str]) -> str:
    """The base name of `stem` with one side word removed as a prefix or suffix (`low00001` → `00001`)."""
    head, _, base = stem.rpartition("/")
    low = base.lower()
    for w in sorted(words, key=lambda w: (-len(w), w)):  # longest first; ties in a fixed order, not hash order
        if low.startswith(w) and len(base) > len(w):
            base = base[len(w):].lstrip("-_ .") or base
            break
        if low.endswith(w) and len(base) > len(w):
            base = base[: -len(w)].rstrip("-_ .") or base
            break
    return f"{head}/{base}" if head else base


# Each rule returns {low stem: high stem} (a mapping), or None when it does not apply (not one to one, or
# collisions).

class Identity(Mapping):
    """{stem: stem} for every stem of `stems`: what the same-name rule pairs when both sides hold the same stems (the
    usual layout), without a dict of a million stems."""

    def __init__(self, stems: Stems):
        self._stems = stems

    def __getitem__(self, stem: str) -> str:
        if stem not in self._stems:
            raise KeyError(stem)
        return stem

    def __contains__(self, stem) -> bool:
        return stem in self._stems

    def __iter__(self):
        return iter(self._stems)

    def __len__(self) -> int:
        return len(self._stems)


def _same_name(lows: walk.Stems, highs: walk.Stems, how: RuleInput) -> Mapping[str, str] | None:
    if lows.same_stems(highs):  # (the rules are given side folders' `walk.Stems`)
        return Identity(lows)
    return {s: s for s in lows if s in highs}


def paired(lows: Stems, highs: Stems, mapping: Mapping[str, str]):
    """(low stem, (low path, low relative path), high path) of every pair of `mapping`, in the order of the low stems:
    two side folders of the same stems (an `Identity`: `_same_name` found them so) go side by side in that order
    (numpy sorts them), the others by lookups."""
    if isinstance(mapping, Identity):
        for a, b in zip(lows.sorted_rows().tolist(), highs.sorted_rows().tolist()):
            stem, low_rel = lows.plain(a)
            high_rel = highs.plain(b)[1]
            yield stem, (lows.prefix + low_rel, low_rel), highs.prefix + high_rel
        return
    for stem in sorted(mapping):
        yield stem, lows[stem], highs[mapping[stem]][0]


def unpaired(lows: Stems, highs: Stems, mapping: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """The low stems `mapping` leaves unpaired and the high stems it pairs with none, sorted (nothing built for a
    mapping that pairs every file on both sides)."""
    only_low = [] if len(mapping) == len(lows) else sorted(set(lows) - set(mapping))
    only_high = [] if _every_high(mapping, highs) else sorted(set(highs) - set(mapping.values()))
    return only_low, only_high


def _every_high(mapping: Mapping[str, str], highs: Stems) -> bool:
    """Every high stem is some low's partner. An `Identity` of the lows pairs each with itself; the other rules'
    mappings pair each high at most once except MANY_TO_ONE's, so their counts say it without a set."""
    if isinstance(mapping, Identity) or len(mapping) < len(highs):
        return len(mapping) == len(highs)
    return len(set(mapping.values())) == len(highs)


def _matched_by(lows: Stems, highs: Stems, low_key, high_key) -> dict[str, str] | None:
    """{low stem: high stem} of the stems whose keys agree; None when two stems of one side share a key."""
    hk: dict[str, str] = {}
    for s in highs:
        k = high_key(s)
        if k in hk:
            return None
        hk[k] = s
    lk = {s: low_key(s) for s in lows}
    if len(set(lk.values())) != len(lk):
        return None
    return {s: hk[k] for s, k in lk.items() if k in hk}


def _side_word_swapped(lows: Stems, highs: Stems, how: RuleInput) -> dict[str, str] | None:
    return _matched_by(lows, highs, lambda s: _strip_word(s, how.low_words), lambda s: _strip_word(s, how.high_words))


def _name_template(lows: Stems, highs: Stems, how: RuleInput) -> dict[str, str] | None:
    if not how.template:
        return None
    by_low = {}
    for h in highs:
        head, _, base = h.rpartition("/")
        by_low[f"{head}/{how.template.format(base)}" if head else how.template.format(base)] = h
    return {s: by_low[s] for s in lows if s in by_low}


def _target_name_as_prefix(lows: Stems, highs: Stems, how: RuleInput) -> dict[str, str] | None:
    # `scene7_ev-1`, `scene7_ev+1` ↔ `scene7`: the names say it
    by_dir: dict[str, list[tuple[str, str]]] = {}
    for h in highs:
        head, _, base = h.rpartition("/")
        by_dir.setdefault(head, []).append((base.lower(), h))
    out = {}
    for s in lows:
        head, _, base = s.rpartition("/")
        base = base.lower()
        cands = [h for hb, h in by_dir.get(head, ())
                 if base == hb or (base.startswith(hb) and base[len(hb)] in "-_ .")]
        if len(cands) > 1:
            return None
        if cands:
            out[s] = cands[0]
    return out


def _one_target_per_folder(lows: Stems, highs: Stems, how: RuleInput) -> dict[str, str] | None:
    # SID/SICE-style `low/<scene>/*` ↔ `high/<scene>/<one file>`: the scene FOLDER says which lows share a
    # target. A file at the top of a side folder never pairs this way: with one target left (an interrupted
    # copy) or `low/a.png` beside `high/b.png`, that would be pairing by elimination.
    groups: dict[str, list[str]] = {}
    for h in highs:
        head = h.rpartition("/")[0]
        if head:
            groups.setdefault(head, []).append(h)
    if not groups or any(len(v) != 1 for v in groups.values()):
        return None
    return {s: groups[s.rpartition("/")[0]][0] for s in lows if s.rpartition("/")[0] in groups}


def _without_side_word(name: str, words: frozenset[str]) -> str:
    """A folder name with its one side word removed as a whole word (`low_light_10` → `light_10`), else unchanged."""
    toks = tokens(name)
    found = [t for t in toks if t in words]
    return "_".join(t for t in toks if t not in words) if len(found) == 1 and len(toks) > 1 else name


def _side_word_in_folders(lows: Stems, highs: Stems, how: RuleInput) -> dict[str, str] | None:
    # BVI-RLV's `input/S01/low_light_10/00001.png` ↔ `gt/S01/normal_light_10/00001.png`: the same file names, in
    # folders whose names differ by their side word alone
    def folders_without(stem: str, words: frozenset[str]) -> str:
        head, _, base = stem.rpartition("/")
        return "/".join([_without_side_word(c, words) for c in head.split("/")] + [base]) if head else stem

    if all(folders_without(s, how.low_words) == s for s in lows):
        return None  # no side word in the input's folders: another rule's layout
    return _matched_by(lows, highs, lambda s: folders_without(s, how.low_words),
                       lambda s: folders_without(s, how.high_words))


def _sid_scene(lows: Stems, highs: Stems, how: RuleInput) -> dict[str, str] | None:
    # SID's `00001_03_0.1s` ↔ `00001_00_10s`: short exposures of a scene share its one long exposure, the scene
    # number being the first field; only names that all have SID's form, and one long exposure per scene
    def scene(stem: str) -> tuple[str, str] | None:
        head, _, base = stem.rpartition("/")
        number = sid_scene(base)
        return None if number is None else (head, number)

    by_scene: dict[tuple[str, str], str] = {}
    for h in highs:
        key = scene(h)
        if key is None or key in by_scene:
            return None
        by_scene[key] = h
    keys = {s: scene(s) for s in lows}
    if any(k is None for k in keys.values()):
        return None
    return {s: by_scene[k] for s, k in keys.items() if k in by_scene}


Rule = Callable[[Stems, Stems, RuleInput], "Mapping[str, str] | None"]
RULES: dict[str, Rule] = {  # in the order they are tried; the name is what the manifest records
    "same name": _same_name,
    "side word swapped": _side_word_swapped,
    "name template": _name_template,
    "target name as prefix": _target_name_as_prefix,
    "one target per folder": _one_target_per_folder,
    "SID scene number": _sid_scene,
    "side word swapped in folders": _side_word_in_folders,
}
# several lows may share one target
MANY_TO_ONE = ("target name as prefix", "one target per folder", "SID scene number")
SEQUENCE_TO_LABEL = "sequence to label"  # SICE's layout, which needs no rule: the folder name is the label's name
# the pairings of several exposures of a scene to its one target (SICE's sequences, MSEC's `<name>_N1.5` … `_P1.5`):
# exposure correction, whose over-exposed inputs are brighter than their targets (pack accepts that of them)
EXPOSURE_BRACKETS = ("target name as prefix", SEQUENCE_TO_LABEL)
ONE_TARGET_BESIDE_COPIES = "one target per folder, DRV's copies set aside"


def _drv_copy(rel: str) -> bool:
    """A file of a scene's target folder that SMID's loader passes over (`video_samesize_dataset_smid.py` skips
    paths holding '.ARW' or 'half'): DRV's raw long exposure (`.ARW`) and its half-size development (`half*.png`)."""
    base = rel.rpartition("/")[2]
    return base.lower().endswith(".arw") or base.lower().startswith("half")


def _beside_copies(lows: Stems, highs: Stems, how: RuleInput) -> tuple[dict[str, str], list[str]] | None:
    """SMID's `SMID_Long_np/<scene>/` holding DRV's copies beside the scene's one target: ({low: high}, the copies)
    when setting the copies aside leaves one target in every folder that pairs every file; else None."""
    copies = {s for s, (_, rel) in highs.items() if _drv_copy(rel)}
    if not copies or len(copies) == len(highs):
        return None
    kept = {s: v for s, v in highs.items() if s not in copies}
    m = _one_target_per_folder(lows, kept, how)
    folders = {s.rpartition("/")[0] for s in kept}
    if (m is None or len(m) != len(lows) or set(m.values()) != set(kept)
            or any(s.rpartition("/")[0] not in folders for s in copies)):
        return None
    return m, sorted(highs[s][0] for s in copies)


def pair_unit(raw: Path, unit: Unit, template: str | None
              ) -> tuple[Stems, Stems, dict[str, str], str, list[str]]:
    """(lows, highs, {low stem: high stem}, rule, set aside) for one unit: the first rule that pairs every file on both
    sides, else the rule that pairs the most (the caller reports what it leaves unmatched). `set aside`: the target
    side's files (absolute paths) left out of `highs` because they are not a target (DRV's copies beside SMID's
    targets, when no rule pairs every file otherwise)."""
    if isinstance(unit.low, tuple):  # SICE: every file of <seq>/ ↔ Label/<seq>.*
        lows, others_l = {}, Counter()
        for seq in unit.low:
            found, other = images(seq)
            others_l += other
            lows.update({f"{seq.name}/{s}": (p, f"{seq.name}/{r}") for s, (p, r) in found.items()})
        if not lows:
            raise no_images(unit.low[0], raw, others_l)
        highs = side_images(raw, unit.high)
        return lows, highs, {s: s.split("/")[0] for s in lows if s.split("/")[0] in highs}, SEQUENCE_TO_LABEL, []
    lows, highs = side_images(raw, unit.low), side_images(raw, unit.high)
    how = RuleInput(frozenset(LOW_NAMES) | frozenset(tokens(unit.low.name)),
                    frozenset(HIGH_NAMES) | frozenset(tokens(unit.high.name)), template)
    first = next(iter(RULES))
    best: tuple[dict[str, str], str] = ({}, first)
    for name, rule in RULES.items():
        m = rule(lows, highs, how)
        if m is None:
            continue
        every_high = _every_high(m, highs) and (name in MANY_TO_ONE or len(m) == len(highs))
        if len(m) == len(lows) and every_high:
            return lows, highs, m, name, []
        if len(m) > len(best[0]):
            best = (m, name)
    beside = _beside_copies(lows, highs, how)
    if beside is not None:
        m, copies = beside
        targets = set(m.values())
        return lows, {s: v for s, v in highs.items() if s in targets}, m, ONE_TARGET_BESIDE_COPIES, copies
    return lows, highs, best[0], best[1], []
