"""The words of raw dataset folders: which folder names mean the low or the high side, and which mean a split
(`our485` → train, `Train_Low_Light_2025` → train by one of its words)."""

from __future__ import annotations

import re

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
_SEP = re.compile(r"[-_ .]+")


def tokens(name: str) -> list[str]:
    """The words of a name, lowercased (`VE-LOL-L-Cap-Low_train` → ve, lol, l, cap, low, train)."""
    return [t for t in _SEP.split(name.lower()) if t]


def norm(name: str) -> str:
    """A name lowercased with its separators made single spaces, as aliases are compared."""
    return _SEP.sub(" ", name.lower()).strip()


_ALIASES = {norm(a): canon for canon, names in (("train", TRAIN_ALIASES), ("test", TEST_ALIASES),
                                                 ("val", VAL_ALIASES)) for a in names}


def alias(name: str) -> tuple[str, bool] | None:
    """(split, whether the whole name is an alias) for `our485` (train, True) or `Train_Low_Light_2025` (train,
    False: a split word is one of its tokens, and no other split word is), else None."""
    n = norm(name)
    if n in _ALIASES:
        return _ALIASES[n], True
    words = {SPLIT_WORDS[t] for t in tokens(name) if t in SPLIT_WORDS}
    return (words.pop(), False) if len(words) == 1 else None


def split_alias(name: str) -> str | None:
    """'train', 'test' or 'val' when a folder name is a usual alias of a split or holds one split word as a token,
    else None."""
    found = alias(name)
    return found[0] if found else None


def side_word(name: str) -> str:
    """The side word of a folder name: the name lowercased, or its one other word beside `images`/`imgs`
    (MSEC's `INPUT_IMAGES`, `GT_IMAGES`)."""
    toks = tokens(name)
    rest = [t for t in toks if t not in ("images", "image", "imgs")]
    return rest[0] if len(rest) == 1 and len(toks) > 1 else name.lower()


def side_of(name: str, low_dir: str | None, high_dir: str | None) -> str | None:
    """'low' or 'high' for a side folder's name (the --low-dir/--high-dir names where given), else None."""
    n = name.lower()
    if n == low_dir.lower() if low_dir is not None else side_word(n) in LOW_NAMES:
        return "low"
    if n == high_dir.lower() if high_dir is not None else side_word(n) in HIGH_NAMES:
        return "high"
    return None
