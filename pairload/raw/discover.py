"""Finding low/high pairs in a raw dataset folder as the public datasets ship it.

Layouts: side folders (`low|input|…` and `high|normal|…`, any case) at any depth below a split folder
(`our485/low`, `Training data/Huawei/low`), side folders that carry the split in their name
(`VE-LOL-L-Cap-Low_train`), SICE's `<seq>/*` ↔ `Label/<seq>.*`, or a pairs file. Split folder names are mapped to
`train`/`val`/`test` through the usual aliases. Inside a pair of side folders, files pair by the first rule that
pairs every file on both sides: the same relative path without extension, the side word swapped (`low00001` ↔
`normal00001`, `x_input` ↔ `x`), a `--name-template`, the target's name as the prefix of the lows' names, or every
file of `low/<scene>/` ↔ the one file of `high/<scene>/`. Never by sorted order, never by elimination. Each real
folder is walked once; every image-like file that ends up in no pair is listed in `Discovery.unused` with the
reason, and so is a pairs list lying in RAW that was not given. A pair whose two sides are one image, and an image
in two splits (one file, or identical bytes), are refused whether folders or a pairs file gave them; a RAW that gives
no pair is refused naming what it holds (raw sensor files, arrays, images with no targets). `pack`, the DALI file
reader and the baselines all pair through `find_pairs`, so they never disagree.
"""

from __future__ import annotations

import filecmp
import hashlib
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PairingError
from ..format.schema import check_split_name, key_from_relpath

LOW_NAMES = ("low", "input", "dark", "lq", "img", "short")
HIGH_NAMES = ("high", "normal", "gt", "target", "hq", "long", "label", "expertc")
TRAIN_ALIASES = ("train", "training", "our485", "training data", "training_data", "train_data", "trainset",
                 "train_set", "training_set", "dataset_part1")
TEST_ALIASES = ("test", "testing", "eval15", "eval", "testset", "test_set", "testing_set", "test_data",
                "dataset_part2")
VAL_ALIASES = ("val", "valid", "validation", "val_data", "valset", "val_set", "validation_set", "mini_val",
               "minival")
# a folder name holding one of these words as a token (`Train_Low_Light_2025`) names that split
SPLIT_WORDS = {"train": "train", "training": "train", "test": "test", "testing": "test", "eval": "test",
               "val": "val", "valid": "val", "validation": "val"}
IMAGE_EXTS = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".pnm"})
SENSOR_EXTS = frozenset({".arw", ".raf", ".cr2", ".cr3", ".nef", ".dng", ".rw2", ".orf", ".npy", ".mat", ".raw"})
# image files pack does not read: never dropped in silence, reported with the reason
OTHER_IMAGE_EXTS = frozenset({".gif", ".heic", ".heif", ".avif", ".jxl", ".jp2", ".j2k", ".jpx", ".jpe", ".jfif",
                              ".exr", ".hdr", ".pfm", ".pbm", ".tga", ".psd", ".ico", ".svg", ".qoi", ".dds",
                              ".sr", ".ras", ".pxm", ".xcf"})
IMAGE_LIKE_EXTS = IMAGE_EXTS | SENSOR_EXTS | OTHER_IMAGE_EXTS
DEFAULT_SPLIT = "train"
MAX_LISTED = 10
MAX_DEPTH = 6
_SEP = re.compile(r"[-_ .]+")


@dataclass(frozen=True)
class Pair:
    split: str
    key: str
    low: Path  # absolute paths
    high: Path
    low_rel: str  # relative to the raw folder, '/'-separated
    high_rel: str


# Why an image-like file under RAW is in no pair (Unused.reason).
UNSUPPORTED = "unsupported extension"
UNMATCHED = "unmatched"
TOO_DEEP = "too deep"
UNKNOWN_SPLIT = "not under a recognised split folder"
NO_SIDE_FOLDER = "not in a pair of side folders"
NOT_LISTED = "not in the pairs file"
SAME_FILE = "same file as a packed image"
PAIRS_LIST = "a pairs list not given with --pairs-file"


@dataclass(frozen=True)
class Unused:
    """Image-like files of one folder that are in no pair, and why: every image-like file under RAW is either in
    a pair or in one of these."""

    folder: str  # relative to RAW, '/'-separated; '.' for RAW itself
    reason: str  # one of the constants above
    count: int
    names: tuple[str, ...]  # the first MAX_LISTED file names in the folder
    hint: str  # how to pack them, or why they stay out

    def describe(self) -> str:
        return (f"{self.count} file(s) in {self.folder} ({self.reason}): {_listing(list(self.names), self.count)}; "
                f"{self.hint}")

    def as_dict(self) -> dict:
        return {"folder": self.folder, "reason": self.reason, "count": self.count, "names": list(self.names),
                "hint": self.hint}


@dataclass
class Discovery:
    pairs: list[Pair]
    skipped_low: list[str] = field(default_factory=list)  # unmatched files skipped with skip_unmatched
    skipped_high: list[str] = field(default_factory=list)
    sources: dict[str, list[str]] = field(default_factory=dict)  # split -> folders (relative to RAW) it came from
    rules: dict[str, list[str]] = field(default_factory=dict)  # split -> pairing rules used
    skipped_per_split: dict[str, int] = field(default_factory=dict)
    unused: list[Unused] = field(default_factory=list)  # per folder and reason: image-like files in no pair
    split_folders: dict[str, tuple[str, str]] = field(default_factory=dict)  # folder name -> (split, how it mapped)

    def splits(self) -> dict[str, list[Pair]]:
        out: dict[str, list[Pair]] = {}
        for p in self.pairs:
            out.setdefault(p.split, []).append(p)
        return out

    def layout(self) -> dict:
        """What was found, for the manifest: per split the folders it came from and the pairing rule(s)."""
        return {split: {"folders": self.sources.get(split, []), "rules": self.rules.get(split, [])}
                for split in sorted(self.splits())}


def _listing(items: list[str], total: int | None = None) -> str:
    total = len(items) if total is None else total
    shown = ", ".join(items[:MAX_LISTED])
    return shown + (f" … and {total - MAX_LISTED} more" if total > MAX_LISTED else "")


def _unreadable(exc: OSError) -> PairingError:
    return PairingError(f"{exc.filename}: cannot be listed ({exc.strerror}); fix its permissions (chmod a+rx) or move it "
                        "out of the dataset folder, so that no pair is dropped in silence")


def _subfolders(folder: Path) -> list[Path]:
    """Visible subfolders (symlinks to folders included), sorted; an unreadable folder is an error."""
    try:
        return sorted(p for p in folder.iterdir() if not p.name.startswith(".") and p.is_dir())
    except OSError as exc:
        raise _unreadable(exc) from None


def _norm(name: str) -> str:
    return _SEP.sub(" ", name.lower()).strip()


_ALIASES = {_norm(a): canon for canon, names in (("train", TRAIN_ALIASES), ("test", TEST_ALIASES),
                                                  ("val", VAL_ALIASES)) for a in names}


def _alias(name: str) -> tuple[str, bool] | None:
    """(split, whether the whole name is an alias) for `our485` (train, True) or `Train_Low_Light_2025` (train,
    False: a split word is one of its tokens, and no other split word is), else None."""
    n = _norm(name)
    if n in _ALIASES:
        return _ALIASES[n], True
    words = {SPLIT_WORDS[t] for t in _tokens(name) if t in SPLIT_WORDS}
    return (words.pop(), False) if len(words) == 1 else None


def split_alias(name: str) -> str | None:
    """'train', 'test' or 'val' when a folder name is a usual alias of a split or holds one split word as a token,
    else None."""
    found = _alias(name)
    return found[0] if found else None


def _tokens(name: str) -> list[str]:
    return [t for t in _SEP.split(name.lower()) if t]


# ------------------------------------------------------------------ side folders

@dataclass(frozen=True)
class _Unit:
    """One source of pairs: a low folder and a high folder (or SICE's sequence folders and their Label folder)."""

    parent: Path  # folder holding the side folders
    low: Path | tuple[Path, ...]  # one folder, or the sequence folders of the label layout
    high: Path
    split_token: str | None = None  # from the side folder names (`…-Low_train`)
    family: str = ""  # the rest of a suffix-style name, to tell two families apart


def _side_word(name: str) -> str:
    """The side word of a folder name: the name lowercased, or its one other word beside `images`/`imgs`
    (MSEC's `INPUT_IMAGES`, `GT_IMAGES`)."""
    toks = _tokens(name)
    rest = [t for t in toks if t not in ("images", "image", "imgs")]
    return rest[0] if len(rest) == 1 and len(toks) > 1 else name.lower()


def _side_of(name: str, low_dir: str | None, high_dir: str | None) -> str | None:
    n = name.lower()
    if n == low_dir.lower() if low_dir is not None else _side_word(n) in LOW_NAMES:
        return "low"
    if n == high_dir.lower() if high_dir is not None else _side_word(n) in HIGH_NAMES:
        return "high"
    return None


def _suffix_side(name: str, overrides: dict[str, str]) -> tuple[str, str, str] | None:
    """(side, split token, family) for a folder named like `VE-LOL-L-Cap-Low_train`, else None. A token named in
    --split-name counts as a split word."""
    toks = _tokens(name)
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
    toks = _tokens(name)
    sides = [t for t in toks if t in LOW_NAMES or t in HIGH_NAMES]
    if len(sides) != 1 or len(toks) < 2 or any(split_alias(t) or t in overrides for t in toks):
        return None
    return ("low" if sides[0] in LOW_NAMES else "high"), "", " ".join(t for t in toks if t != sides[0])


def _unknown_suffix_pairs(children: list[Path], overrides: dict[str, str]) -> dict[Path, str]:
    """Side folders named like `Cap-Low_part3` / `Cap-Normal_part3` (a side word followed by one word that is no
    known split name) -> that word: they look like a split that --split-name would pack."""
    families: dict[tuple[str, str], dict[str, Path]] = {}
    for c in children:
        toks = _tokens(c.name)
        sides = [i for i, t in enumerate(toks) if t in LOW_NAMES or t in HIGH_NAMES]
        if len(sides) != 1 or sides[0] != len(toks) - 2 or _suffix_side(c.name, overrides):
            continue
        word = toks[-1]
        side = "low" if toks[sides[0]] in LOW_NAMES else "high"
        families.setdefault((" ".join(toks[:-2]), word), {})[side] = c
    return {p: word for (_, word), sides in families.items() if len(sides) == 2 for p in sides.values()}


def _units_in(folder: Path, children: list[Path], low_dir: str | None, high_dir: str | None,
              overrides: dict[str, str]) -> list[_Unit]:
    by_side: dict[str, list[Path]] = {"low": [], "high": []}
    for c in children:
        side = _side_of(c.name, low_dir, high_dir)
        if side:
            by_side[side].append(c)
    for side, found in by_side.items():
        if len(found) > 1:
            raise PairingError(f"{folder}: folders {', '.join(p.name for p in found)} are all names for the {side} side; "
                               "say which to use with --low-dir/--high-dir")
    units: list[_Unit] = []
    if by_side["low"] and by_side["high"]:
        units.append(_Unit(folder, by_side["low"][0], by_side["high"][0]))
    elif by_side["high"] and low_dir is None:  # SICE: <seq>/* next to Label/<seq>.*
        label = by_side["high"][0]
        stems = {os.path.splitext(n)[0] for n in _names(label)}
        seqs = tuple(c for c in children if c != label and c.name in stems)
        if seqs:
            return [_Unit(folder, seqs, label)]
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
    units += [_Unit(folder, sides["low"], sides["high"], token or None, family)
              for (token, family), sides in sorted(families.items()) if len(sides) == 2]
    named = {split_alias(u.split_token) or u.split_token for u in units if u.split_token}
    if named and "train" not in named:  # `input` beside `test-input`: the unnamed pair of side folders is the training set
        units = [u if u.split_token else _Unit(u.parent, u.low, u.high, "train", u.family) for u in units]
    if len({u.family for u in units}) == 1:
        units = [_Unit(u.parent, u.low, u.high, u.split_token, "") for u in units]
    return units


def _names(folder: Path) -> list[str]:
    try:
        return sorted(n for n in os.listdir(folder) if not n.startswith("."))
    except OSError as exc:
        raise _unreadable(exc) from None


def _real_id(path: Path) -> tuple[int, int]:
    try:
        st = os.stat(path)
    except OSError as exc:
        raise _unreadable(exc) from None
    return st.st_dev, st.st_ino


@dataclass
class _Scan:
    """What the walk for side folders found: units, and the folders whose files cannot be in any unit."""

    units: list[_Unit] = field(default_factory=list)
    too_deep: list[Path] = field(default_factory=list)  # folders below MAX_DEPTH, not walked
    unknown_split: dict[Path, str] = field(default_factory=dict)  # side folder -> its unknown split word


def _scan(raw: Path, low_dir: str | None, high_dir: str | None, overrides: dict[str, str]) -> _Scan:
    """Side folders at any depth below `raw`. Each real folder is walked once: real subfolders first, symlinked
    ones after (so a link never takes the place of the folder it points to), and a link to a folder already
    walked (a loop such as `train/again -> .`, or a second path to one folder) is not followed."""
    found = _Scan()
    visited = {_real_id(raw)}
    links: list[tuple[Path, int]] = []

    def scan(folder: Path, depth: int) -> None:
        children = _subfolders(folder)
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
        rid = _real_id(folder)
        if rid in visited:
            return
        if depth > MAX_DEPTH:
            found.too_deep.append(folder)
            return
        visited.add(rid)
        scan(folder, depth)

    scan(raw, 0)
    while links:
        visit(*links.pop(0))
    return found


# ------------------------------------------------------------------ files and pairing rules

def _walk(top: Path, seen: set[tuple[int, int]] | None = None):
    """(folder, visible file names) for every real folder under `top` once: real subfolders first, then the
    symlinked ones not walked yet (a loop is walked once, and a link never hides the folder it points to)."""
    seen = set() if seen is None else seen

    def fail(exc: OSError) -> None:
        raise _unreadable(exc)

    queue = [top]
    while queue:
        start = queue.pop(0)
        for dirpath, dirnames, filenames in os.walk(start, onerror=fail, followlinks=False):
            rid = _real_id(Path(dirpath))
            if rid in seen:
                dirnames[:] = []
                continue
            seen.add(rid)
            visible = sorted(d for d in dirnames if not d.startswith("."))
            linked = [d for d in visible if os.path.islink(os.path.join(dirpath, d))]
            queue.extend(Path(dirpath) / d for d in linked)
            dirnames[:] = [d for d in visible if d not in linked]
            yield Path(dirpath), sorted(n for n in filenames if not n.startswith("."))


def _images(folder: Path) -> tuple[dict[str, tuple[Path, str]], Counter]:
    """Images under `folder` by relative path without extension, and a count of the other extensions seen.
    Two files with one stem are refused."""
    found: dict[str, tuple[Path, str]] = {}
    others: Counter = Counter()
    for dirpath, filenames in _walk(folder):
        for name in filenames:
            ext = os.path.splitext(name)[1].lower()
            if ext not in IMAGE_EXTS:
                others[ext or "(no extension)"] += 1
                continue
            path = dirpath / name
            rel = path.relative_to(folder).as_posix()
            stem = rel.rsplit(".", 1)[0]
            if stem in found:
                raise PairingError(
                    f"{folder}: two files with the same stem {stem!r}: {found[stem][1]} and {rel}; "
                    "keep one of them (pairs are matched by name without extension)"
                )
            found[stem] = (path, rel)
    return found, others


def _no_images(folder: Path, raw: Path, others: Counter) -> PairingError:
    where = folder.relative_to(raw).as_posix() if folder != raw else str(raw)
    if not others:
        return PairingError(f"{raw}: {where} holds no images; remove the empty folder or fill it")
    found = ", ".join(f"{n} {ext}" for ext, n in others.most_common(5))
    sensor = [ext for ext in others if ext in SENSOR_EXTS]
    hint = (f"raw sensor or array files ({', '.join(sorted(sensor))}): convert them to sRGB images (PNG/JPEG) first, "
            f"or pack a folder that holds the sRGB version ({_conversion(sensor)})" if sensor else
            f"expected one of {', '.join(sorted(IMAGE_EXTS))}")
    return PairingError(f"{raw}: {where} holds no usable images (found {found}); {hint}")


ARRAY_EXTS = frozenset({".npy", ".mat"})


def _conversion(exts) -> str:
    """How to turn raw sensor files or arrays with these extensions into images pack reads."""
    arrays = sorted(e for e in exts if e in ARRAY_EXTS)
    sensor = sorted(e for e in exts if e not in ARRAY_EXTS)
    how = []
    if sensor:
        how.append(f"{', '.join(sensor)}: raw sensor files must be converted to RGB images first, e.g. with rawpy "
                   "(`rawpy.imread(f).postprocess(output_bps=16)`, written as 16-bit PNG) or dcraw (`dcraw -T -6`), "
                   "and then paired")
    if arrays:
        how.append(f"{', '.join(arrays)}: arrays, one image each: `a = np.load(f)` and "
                   "`cv2.imwrite(name + '.png', a[..., ::-1])` (uint8 gives an 8-bit PNG; uint16 a 16-bit PNG, packed "
                   "with --to-8bit; floats in 0..1: `(a * 255).round().astype(np.uint8)` first), keeping the low/high "
                   "folders")
    return "; ".join(how)


def _side_images(raw: Path, folder: Path) -> dict[str, tuple[Path, str]]:
    found, others = _images(folder)
    if not found:
        raise _no_images(folder, raw, others)
    return found


def _strip_word(stem: str, words: set[str]) -> str:
    """The base name of `stem` with one side word removed as a prefix or suffix (`low00001` → `00001`)."""
    head, _, base = stem.rpartition("/")
    low = base.lower()
    for w in sorted(words, key=len, reverse=True):
        if low.startswith(w) and len(base) > len(w):
            base = base[len(w):].lstrip("-_ .") or base
            break
        if low.endswith(w) and len(base) > len(w):
            base = base[: -len(w)].rstrip("-_ .") or base
            break
    return f"{head}/{base}" if head else base


def _match(lows: dict, highs: dict, rule: str, low_words: set[str], high_words: set[str],
           template: str | None) -> dict[str, str] | None:
    """{low stem: high stem} under `rule`, or None when the rule does not apply (not one to one, or collisions)."""
    if rule == "same name":
        return {s: s for s in lows if s in highs}
    if rule == "side word swapped":
        lk = {s: _strip_word(s, low_words) for s in lows}
        hk: dict[str, str] = {}
        for s in highs:
            k = _strip_word(s, high_words)
            if k in hk:
                return None
            hk[k] = s
        if len(set(lk.values())) != len(lk):
            return None
        return {s: hk[k] for s, k in lk.items() if k in hk}
    if rule == "name template" and template:
        by_low = {}
        for h in highs:
            head, _, base = h.rpartition("/")
            by_low[f"{head}/{template.format(base)}" if head else template.format(base)] = h
        return {s: by_low[s] for s in lows if s in by_low}
    if rule == "target name as prefix":  # `scene7_ev-1`, `scene7_ev+1` ↔ `scene7`: the names say it
        by_dir: dict[str, list[tuple[str, str]]] = {}
        for h in highs:
            head, _, base = h.rpartition("/")
            by_dir.setdefault(head, []).append((base.lower(), h))
        out = {}
        for s in lows:
            head, _, base = s.rpartition("/")
            base = base.lower()
            cands = [h for hb, h in by_dir.get(head, ()) if base == hb or (base.startswith(hb) and base[len(hb)] in "-_ .")]
            if len(cands) > 1:
                return None
            if cands:
                out[s] = cands[0]
        return out
    if rule == "one target per folder":
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
    return None


RULES = ("same name", "side word swapped", "name template", "target name as prefix", "one target per folder")
MANY_TO_ONE = ("target name as prefix", "one target per folder")  # several lows may share one target


def _pair_unit(raw: Path, unit: _Unit, template: str | None) -> tuple[dict, dict, dict[str, str], str]:
    """(lows, highs, {low stem: high stem}, rule) for one unit; the mapping may leave files unmatched."""
    if isinstance(unit.low, tuple):  # SICE: every file of <seq>/ ↔ Label/<seq>.*
        lows, others_l = {}, Counter()
        for seq in unit.low:
            found, other = _images(seq)
            others_l += other
            lows.update({f"{seq.name}/{s}": (p, f"{seq.name}/{r}") for s, (p, r) in found.items()})
        if not lows:
            raise _no_images(unit.low[0], raw, others_l)
        highs = _side_images(raw, unit.high)
        return lows, highs, {s: s.split("/")[0] for s in lows if s.split("/")[0] in highs}, "sequence to label"
    lows, highs = _side_images(raw, unit.low), _side_images(raw, unit.high)
    low_words = set(LOW_NAMES) | set(_tokens(unit.low.name))
    high_words = set(HIGH_NAMES) | set(_tokens(unit.high.name))
    best: tuple[dict[str, str], str] = ({}, RULES[0])
    for rule in RULES:
        m = _match(lows, highs, rule, low_words, high_words, template)
        if m is None:
            continue
        every_high = set(m.values()) == set(highs) and (rule in MANY_TO_ONE or len(m) == len(highs))
        if len(m) == len(lows) and every_high:
            return lows, highs, m, rule
        if len(m) > len(best[0]):
            best = (m, rule)
    return lows, highs, best[0], best[1]


# ------------------------------------------------------------------ splits

def _canonical_splits(names: list[str], overrides: dict[str, str], reserved: tuple[str, ...] = ()
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
        exact = [n for n in cands if _norm(n) == canon]
        pick = exact if exact else cands
        if len(pick) == 1 and canon not in taken:
            found = _alias(pick[0])
            word = "" if found is None or found[1] else f", a word of its name"
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


def _locate(raw: Path, unit: _Unit) -> tuple[tuple[str, ...], str, tuple[str, ...]]:
    """(dataset folders, split folder name, group folders) of a unit from its path below RAW."""
    comps = unit.parent.relative_to(raw).parts
    if unit.split_token is not None:
        return comps, unit.split_token, ((unit.family,) if unit.family else ())
    for whole in (True, False):  # a folder that is an alias wins over one holding a split word (`Train_2025`)
        for i, c in enumerate(comps):
            found = _alias(c)
            if found and found[1] == whole:
                return comps[:i], c, comps[i + 1:]
    if not comps:
        return (), "", ()
    return (), comps[0], comps[1:]


# ------------------------------------------------------------------ pairs files

def _parse_pairs_files(specs) -> list[tuple[str | None, Path]]:
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


RAW_RELATIVE = "paths relative to RAW"


class _SideFolders:
    """The (low, high) side folders of each split, for pairs-file lines written relative to them (BasicSR's
    meta-info files: `x 2.png x.png` for `low/x 2.png`, `high/x.png`). Found on first use only."""

    def __init__(self, raw: Path, low_dir: str | None, high_dir: str | None, overrides: dict[str, str]):
        self.raw, self.low_dir, self.high_dir, self.overrides = raw, low_dir, high_dir, overrides
        self._by_split: dict[str, list[tuple[Path, Path]]] | None = None

    def of(self, split: str) -> list[tuple[Path, Path]]:
        """The side folders of `split`; all of them where no folder maps to it (a flat `low/`, `high/`)."""
        if self._by_split is None:
            scan = _scan(self.raw, self.low_dir, self.high_dir, {k.lower(): v for k, v in self.overrides.items()})
            units = [u for u in scan.units if isinstance(u.low, Path)]
            located = [(_locate(self.raw, u), u) for u in units]
            names = _split_names_of(located, self.overrides)
            self._by_split = {}
            for (_, folder, _), u in located:
                self._by_split.setdefault(names[folder][0], []).append((u.low, u.high))
        return self._by_split.get(split) or [f for fs in self._by_split.values() for f in fs]


def _inside(raw: Path, path: Path) -> Path | None:
    path = Path(os.path.normpath(path))  # './' goes; symlinks inside RAW are fine; '..' out of it is not
    return path if path == raw or raw in path.parents else None


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

    image = lambda name: os.path.splitext(name)[1].lower() in IMAGE_EXTS
    more = [(words(0, i), words(i, j)) for i in range(1, n) for j in range(i + 1, n + 1)]
    return [first] + [r for r in more if r != first and image(r[0]) and image(r[1])]


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


def _read_pairs_file(raw: Path, pairs_file: Path, forced_split: str | None, out: Discovery,
                     origins: list[tuple[str, str]], sides: _SideFolders) -> None:
    try:
        lines = Path(pairs_file).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise PairingError(f"{pairs_file}: cannot read the pairs file ({exc})") from None
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
                               f"--pairs-file {forced_split}={pairs_file}; an option never overrides the file: remove "
                               f"the split column, or give the file without '{forced_split}=' so that its column decides")
        split = forced_split or (check_split_name(column) if column else DEFAULT_SPLIT)
        readings = _line_readings(line, cols, tabbed)
        low_rel, high_rel = readings[0]
        for rel in (low_rel, high_rel):
            path = raw / rel
            if _inside(raw, path) is None:
                raise PairingError(f"{here}: {rel} lies outside {raw}; paths are relative to RAW and "
                                   "must stay inside it (move the file in, or pack from a folder that holds both)")
            if path.suffix.lower() in SENSOR_EXTS:
                raise PairingError(f"{here}: {rel} is a raw sensor or array file ({path.suffix}); "
                                   "convert the dataset to sRGB images (PNG/JPEG) first and list those")
        found: list[tuple[Path, Path, str]] = []
        for reading in readings:  # the first two columns, when they name two files; else every other reading
            found += [(reading, *hit) for hit in _resolve(raw, *reading, lambda: sides.of(split))]
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
            raise PairingError(f"{here}: {missing} does not exist under {raw}"
                               + (f", and the line is not a pair of names in the side folders either ({tried})"
                                  if folders else "") + "; fix the path or remove the line")
        _, low_path, high_path, convention = found[0]
        low_key_rel = low_path.relative_to(raw).as_posix()
        high_key_rel = high_path.relative_to(raw).as_posix()
        origins.append((here, f"{pairs_file.name}:{lineno}"))
        out.pairs.append(Pair(split, key_from_relpath(low_key_rel), low_path, high_path, low_key_rel, high_key_rel))
        out.sources.setdefault(split, [])
        if pairs_file.name not in out.sources[split]:
            out.sources[split].append(pairs_file.name)
        rule = f"pairs file ({convention})"
        if rule not in out.rules.setdefault(split, []):
            out.rules[split].append(rule)


# ------------------------------------------------------------------ one image, two roles

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


def _refuse_self_pairs_and_leaks(pairs: list[Pair], origins: list[tuple[str, str]], listed: bool) -> None:
    """Refuse a pair whose low and high are one file (one path, a link to the other, or identical bytes) and an
    image in two splits (one file, or two files with identical bytes: test data leaking into training). The pairs
    file and the folder walk both go through here; `origins[i]` is (where pair i came from, for the start of the
    message; a short reference to it), `listed` says the fix is editing a line rather than a folder.

    Only files that could be one image are compared: same size, then the first MiB, then all bytes."""
    fix_leak = ("keep one line" if listed else
                "remove the copy from one split (or pack with a --pairs-file that lists it once)")
    for p, (where, _) in zip(pairs, origins):
        if p.low == p.high:
            raise PairingError(f"{where}: the low and the high image are the same file {p.low_rel}; "
                               "a pair needs two images")
        if os.path.realpath(p.low) == os.path.realpath(p.high):
            raise PairingError(f"{where}: the low {p.low_rel} and the high {p.high_rel} are the same file (one links "
                               "to the other); a pair needs two images: put the real input or target in its place")
        if _size(p.low) == _size(p.high) and filecmp.cmp(p.low, p.high, shallow=False):
            raise PairingError(f"{where}: the low {p.low_rel} and the high {p.high_rel} hold identical bytes; a pair "
                               "needs two different images (one side is probably a copy of the other): put the "
                               "real input or target in its place, or remove the pair")
    first: dict[str, tuple[int, str, str, str, str]] = {}  # real path -> (order, split, path, where, short)
    for p, (where, short) in zip(pairs, origins):
        for rel, path in ((p.low_rel, p.low), (p.high_rel, p.high)):
            real = os.path.realpath(path)
            seen = first.setdefault(real, (len(first), p.split, rel, where, short))
            if seen[1] != p.split:
                also = "" if seen[2] == rel else f" (the same file as {seen[2]})"
                ref = f" ({seen[4]})" if seen[4] else ""
                raise PairingError(f"{where}: {rel}{also} is in split {p.split!r} but already in split {seen[1]!r}"
                                   f"{ref}; an image in two splits leaks test data into training: {fix_leak}")
    by_size: dict[int, list[str]] = {}
    for real in first:
        by_size.setdefault(_size(Path(real)), []).append(real)
    spans = lambda group: len({first[r][1] for r in group}) > 1
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


# ------------------------------------------------------------------ entry point

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
    files = _parse_pairs_files(pairs_file)
    scan, dropped = None, {}
    if files:
        origins: list[tuple[str, str]] = []
        sides = _SideFolders(raw, low_dir, high_dir, split_names or {})
        for split, path in files:
            _read_pairs_file(raw, path, check_split_name(split) if split else None, out, origins, sides)
        _refuse_self_pairs_and_leaks(out.pairs, origins, listed=True)
    else:
        scan = _scan(raw, low_dir, high_dir, {k.lower(): v for k, v in (split_names or {}).items()})
        _find_in_folders(raw, scan.units, skip_unmatched, split_names or {}, name_template, out)
        dropped = _drop_repeated_files(raw, out)
        out.pairs.sort(key=lambda p: (p.split, p.key))
        _refuse_self_pairs_and_leaks(out.pairs, [(str(raw), "")] * len(out.pairs), listed=False)
    if not out.pairs:
        raise _no_pairs(raw, low_dir, high_dir, bool(files))
    seen: dict[tuple[str, str], Pair] = {}
    for p in out.pairs:
        other = seen.get((p.split, p.key))
        if other is not None:
            raise PairingError(f"{raw}: {other.low_rel} and {p.low_rel} give the same sample key {p.key!r} in split "
                               f"{p.split!r}; rename one of them")
        seen[(p.split, p.key)] = p
    out.pairs.sort(key=lambda p: (p.split, p.key))
    _inventory(raw, out, scan, dropped, {os.path.realpath(path) for _, path in files})
    return out


def _no_pairs(raw: Path, low_dir: str | None, high_dir: str | None, listed: bool) -> PairingError:
    """The refusal for a RAW that gives no pair, naming what it holds: raw sensor files, arrays, images with no
    targets (an unpaired set), or folders pack could not read as sides."""
    low_names = low_dir or "|".join(LOW_NAMES)
    high_names = high_dir or "|".join(HIGH_NAMES)
    generic = (f"{raw}: no pairs found; expected {raw.name}/{{{low_names}}}/ and {{{high_names}}}/ folders, or "
               f"{raw.name}/<split>/{{low,high}}/ (use --low-dir/--high-dir for other folder names, or --pairs-file)")
    if listed:
        return PairingError(generic)
    images: dict[Path, list[str]] = {}
    others: Counter = Counter()
    lists: list[Path] = []
    for folder, names in _walk(raw):
        for name in names:
            ext = os.path.splitext(name)[1].lower()
            if ext in IMAGE_EXTS:
                images.setdefault(folder, []).append(name)
            elif ext in SENSOR_EXTS:
                others[ext] += 1
            elif ext in LIST_EXTS and _is_pairs_list(folder / name):
                lists.append(folder / name)
    also = (f"; {_listing([p.relative_to(raw).as_posix() for p in lists])} look(s) like a pairs list: pack by it "
            f"with --pairs-file {lists[0]}" if lists else "")
    if not images:
        if not others:
            return PairingError(generic + also)
        found = ", ".join(f"{n} {ext} files" for ext, n in others.most_common())
        kind = ("raw sensor files (SID/ELD releases ship these)" if set(others) - ARRAY_EXTS else
                "NumPy arrays (SMID/SDSD/SID .npy releases ship these)")
        return PairingError(f"{raw}: holds {found} and no RGB images: they are {kind}, and pairload packs pairs of "
                            f"images; convert them to images first ({_conversion(others)}), then pack the folder of "
                            f"converted low/high images{also}")
    n = sum(len(v) for v in images.values())
    where = [f.relative_to(raw).as_posix() if f != raw else raw.name for f in images]
    high = [f for f in images if _side_of(f.name, low_dir, high_dir) == "high"]
    low = [f for f in images if _side_of(f.name, low_dir, high_dir) == "low"]
    stems = Counter(os.path.splitext(name)[0].lower() for names in images.values() for name in set(names))
    shared = any(c > 1 for c in stems.values())  # names found in two folders: maybe inputs and targets
    if not high and (len(images) == 1 or low or not shared):
        return PairingError(
            f"{raw}: {n} images and no targets: this looks like an unpaired (test-only) set; pairload packs pairs. "
            f"Found {n} images in {_listing(where)} and no {high_names} folder of targets for them. If the targets "
            f"exist, put them in a high/ folder beside a low/ folder of the inputs (or name the two folders with "
            f"--low-dir/--high-dir), or list the pairs in a --pairs-file; an unpaired set (DARK FACE, ExDark, DICM, "
            f"LIME, MEF, NPE, VV) is for no-reference evaluation: read its images directly{also}")
    return PairingError(f"{generic}; found {n} images in {len(images)} folder(s) ({_listing(where)}){also}")


def _drop_repeated_files(raw: Path, out: Discovery) -> dict[str, str]:
    """One pair per low image file, however many paths (symlinks) reach it: the pair whose low is reached without
    a link is kept, else the first. Returns {dropped low path: kept low path}, both relative to RAW."""
    by_file: dict[str, list[Pair]] = {}
    for p in out.pairs:
        by_file.setdefault(os.path.realpath(p.low), []).append(p)
    dropped: dict[str, str] = {}
    for real, group in by_file.items():
        if len(group) > 1:
            keep = min(group, key=lambda p: (str(p.low) != real, p.split, p.key))
            dropped.update({p.low_rel: keep.low_rel for p in group if p is not keep})
    if dropped:
        out.pairs = [p for p in out.pairs if p.low_rel not in dropped]
    return dropped


_HINTS = {
    UNMATCHED: "restore their partners, or list the pairs in a --pairs-file",
    TOO_DEEP: f"side folders are looked for at most {MAX_DEPTH} folders below RAW; pack a folder nearer to them",
    NOT_LISTED: "add lines for them to the pairs file if they belong to the dataset",
    SAME_FILE: "a symlink reaches a file that is already packed; it is packed once",
}


LIST_EXTS = frozenset({".txt", ".tsv", ".csv", ".lst", ".list"})
_IMAGE_NAME = re.compile(r"\.(?:" + "|".join(sorted(e[1:] for e in IMAGE_LIKE_EXTS)) + r")(?=$|[\s,;\"'])", re.I)


def _is_pairs_list(path: Path) -> bool:
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


def _pairs_list_hint(folder: Path, names: list[str]) -> str:
    named = next((n for n in names if split_alias(os.path.splitext(n)[0])), None)
    example = (f"--pairs-file {split_alias(os.path.splitext(named)[0])}={folder / named}" if named
               else f"--pairs-file {folder / names[0]}")
    return (f"it lists pairs, and folder discovery does not read it: the splits it gives are lost (pairs it lists "
            f"as test may be packed as train); pack by it with {example} (SPLIT=FILE once per list; lines relative "
            "to RAW or to the split's low and high folders)")


def _inventory(raw: Path, out: Discovery, scan: _Scan | None, dropped: dict[str, str], given: set[str]) -> None:
    """Every image-like file under RAW that is in no pair goes into `out.unused`, per folder and reason, and so does
    every pairs list under RAW that is not one of the `given` pairs files (real paths)."""
    pairs_file = bool(given)
    used = {os.path.realpath(p) for pair in out.pairs for p in (pair.low, pair.high)}
    unmatched = set(out.skipped_low) | set(out.skipped_high)
    deep = [d.relative_to(raw).as_posix() + "/" for d in (scan.too_deep if scan else ())]
    unknown = {d.relative_to(raw).as_posix() + "/": w for d, w in (scan.unknown_split if scan else {}).items()}
    groups: dict[tuple[str, str], list[str]] = {}
    hints: dict[tuple[str, str], str] = {}
    for rel, kept in sorted(dropped.items()):  # the walk below reaches each real folder once, so not these
        where, _, name = rel.rpartition("/")
        groups.setdefault((where or ".", SAME_FILE), []).append(name)
        hints.setdefault((where or ".", SAME_FILE), f"{_HINTS[SAME_FILE]} (as {kept})")
    for folder, names in _walk(raw):
        where = folder.relative_to(raw).as_posix()
        for name in names:
            ext = os.path.splitext(name)[1].lower()
            rel = f"{where}/{name}" if where != "." else name
            if ext in LIST_EXTS and os.path.realpath(folder / name) not in given and _is_pairs_list(folder / name):
                groups.setdefault((where, PAIRS_LIST), []).append(name)
                hints[(where, PAIRS_LIST)] = _pairs_list_hint(folder, groups[(where, PAIRS_LIST)])
                continue
            if ext not in IMAGE_LIKE_EXTS:
                continue
            if os.path.realpath(folder / name) in used or rel in dropped:
                continue
            if ext not in IMAGE_EXTS:
                reason = UNSUPPORTED
                hint = ("raw sensor or array files: convert them to sRGB images (PNG/JPEG)" if ext in SENSOR_EXTS
                        else f"pack reads {', '.join(sorted(IMAGE_EXTS))}: convert them (e.g. to PNG) to pack them")
            elif rel in unmatched:
                reason, hint = UNMATCHED, _HINTS[UNMATCHED]
            elif any(rel.startswith(d) for d in deep):
                root = next(d for d in deep if rel.startswith(d)).rstrip("/")
                reason, hint = TOO_DEEP, _HINTS[TOO_DEEP] + f", e.g. `pairload pack {raw / root} SHARDS`"
            elif any(rel.startswith(d) for d in unknown):
                word = next(w for d, w in unknown.items() if rel.startswith(d))
                reason = UNKNOWN_SPLIT
                hint = (f"its folder looks like the side folder of a split {word!r}, which is not a known split name; "
                        f"pass --split-name {word}=SPLIT (e.g. {word}=val) to pack it")
            elif pairs_file:
                reason, hint = NOT_LISTED, _HINTS[NOT_LISTED]
            else:
                reason = NO_SIDE_FOLDER
                split = next((c for c in Path(where).parts if split_alias(c)), None)
                hint = ((f"{split!r} looks like a split folder, but " if split else "") +
                        "no low|input|… folder beside a high|normal|… folder holds these files; name the folders "
                        "with --low-dir/--high-dir, or list the pairs in a --pairs-file")
            groups.setdefault((where, reason), []).append(name)
            hints[(where, reason)] = hint
    out.unused = [Unused(folder, reason, len(names), tuple(names[:MAX_LISTED]), hints[(folder, reason)])
                  for (folder, reason), names in sorted(groups.items())]


def _split_names_of(located: list, overrides: dict[str, str]) -> dict[str, tuple[str, str]]:
    """Split folder name ('' for none) -> (split, how it mapped), for units located by `_locate`."""
    folders = {s for (_, s, _), _ in located}
    names = _canonical_splits(sorted(folders - {""}), overrides, (DEFAULT_SPLIT,) if "" in folders else ())
    names[""] = (DEFAULT_SPLIT, "no split folder: the default split")
    return names


def _find_in_folders(raw: Path, units: list[_Unit], skip_unmatched: bool, overrides: dict[str, str],
                     template: str | None, out: Discovery) -> None:
    if not units:
        return
    located = [(_locate(raw, u), u) for u in units]
    datasets = sorted({"/".join(d) for (d, _, _), _ in located})
    if len(datasets) > 1:
        shown = ", ".join(d or "(top level)" for d in datasets)
        raise PairingError(f"{raw}: holds several datasets, each with its own splits ({shown}); pack one at a time, "
                           f"e.g. `pairload pack {raw / datasets[-1]} SHARDS`")
    names = _split_names_of(located, overrides)
    problems: list[str] = []
    for (_, split_folder, group), unit in located:
        split = names[split_folder][0]
        out.split_folders[split_folder or "."] = names[split_folder]
        lows, highs, mapping, rule = _pair_unit(raw, unit, template)
        only_low = sorted(set(lows) - set(mapping))
        only_high = sorted(set(highs) - set(mapping.values()))
        low_where = unit.low.relative_to(raw).as_posix() if isinstance(unit.low, Path) else unit.parent.relative_to(raw).as_posix()
        high_where = unit.high.relative_to(raw).as_posix()
        if only_low or only_high:
            parts = []
            if only_low:
                parts.append(f"{len(only_low)} in {low_where} without a partner in {high_where}: "
                             f"{_listing([lows[s][0].relative_to(raw).as_posix() for s in only_low])}")
            if only_high:
                parts.append(f"{len(only_high)} in {high_where} without a partner in {low_where}: "
                             f"{_listing([highs[s][0].relative_to(raw).as_posix() for s in only_high])}")
            problems.append(f"split {split!r}: " + "; ".join(parts))
            out.skipped_low.extend(lows[s][0].relative_to(raw).as_posix() for s in only_low)
            out.skipped_high.extend(highs[s][0].relative_to(raw).as_posix() for s in only_high)
            out.skipped_per_split[split] = out.skipped_per_split.get(split, 0) + len(only_low) + len(only_high)
        prefix = "/".join(group)
        for stem in sorted(mapping):
            lp, lrel = lows[stem]
            hp = highs[mapping[stem]][0]
            rel = f"{prefix}/{lrel}" if prefix else lrel
            out.pairs.append(Pair(split, key_from_relpath(rel), lp, hp, lp.relative_to(raw).as_posix(),
                                  hp.relative_to(raw).as_posix()))
        srcs = out.sources.setdefault(split, [])
        for folder in (low_where, high_where):
            if folder not in srcs:
                srcs.append(folder)
        if rule not in out.rules.setdefault(split, []):
            out.rules[split].append(rule)
    if problems and not skip_unmatched:
        raise PairingError(f"{raw}: unmatched images, " + " | ".join(problems) +
                           " (no naming rule pairs them one to one, and pairload never pairs by elimination: restore "
                           "the missing files, list the pairs in a --pairs-file, give --name-template for another "
                           "naming rule, or pass --skip-unmatched to pack the rest)")
