"""Crop geometry: the registry of crop policies that turn a `crop` setting into each sample's window. A window is
drawn in input pixels; the target's window is the same place through the split's size relation
(`pairload.format.members.Members.scale`), which the executors apply. Numpy only.

- "square" (`crop=256`): a uniform random corner of a 256×256 window; every orientation code.
- "rect" (`crop=(192, 256)`, height × width): a uniform random corner; flips only unless the window is square.
- "whole" (`crop=None`): the whole image; flips only unless the image is square.
A new policy is one class here and one entry in `POLICIES`.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ConfigError

Crop = Any  # int (square), (height, width) (rect) or None (whole images): a policy's setting


def is_whole(value: Any) -> bool:
    """An integer (Python or numpy), and not a bool (True would be a batch of 1)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


@dataclass(frozen=True)
class Square:
    name: str = "square"

    def accepts(self, crop: Crop) -> bool:
        return is_whole(crop)

    def check(self, crop: Crop, where: str) -> Crop:
        if crop < 1:
            raise ConfigError(f"{where}={crop}: expected a positive size in pixels, or None for whole images")
        return int(crop)

    def window(self, crop: Crop, hw: np.ndarray) -> np.ndarray:
        return np.full((len(hw), 2), crop, dtype=np.int64)

    def size(self, crop: Crop) -> tuple[int, int]:
        return crop, crop


@dataclass(frozen=True)
class Rect:
    name: str = "rect"

    def accepts(self, crop: Crop) -> bool:
        return isinstance(crop, (tuple, list)) and len(crop) == 2 and all(is_whole(v) for v in crop)

    def check(self, crop: Crop, where: str) -> Crop:
        if min(crop) < 1:
            raise ConfigError(f"{where}={tuple(crop)}: expected a positive (height, width) in pixels")
        return int(crop[0]), int(crop[1])

    def window(self, crop: Crop, hw: np.ndarray) -> np.ndarray:
        return np.tile(np.asarray(crop, dtype=np.int64), (len(hw), 1))

    def size(self, crop: Crop) -> tuple[int, int]:
        return crop[0], crop[1]


@dataclass(frozen=True)
class Whole:
    name: str = "whole"

    def accepts(self, crop: Crop) -> bool:
        return crop is None

    def check(self, crop: Crop, where: str) -> Crop:
        return None

    def window(self, crop: Crop, hw: np.ndarray) -> np.ndarray:
        return np.asarray(hw, dtype=np.int64).reshape(-1, 2)

    def size(self, crop: Crop) -> None:
        return None  # each image's own


POLICIES = {p.name: p for p in (Square(), Rect(), Whole())}


def policy_of(crop: Crop, where: str = "crop"):
    """The policy whose setting `crop` is; a value no policy takes is a ConfigError naming what each takes."""
    for policy in POLICIES.values():
        if policy.accepts(crop):
            return policy
    raise ConfigError(f"{where}={crop!r} ({type(crop).__name__}): expected a whole number of pixels (square crops), "
                      "(height, width) (rectangular crops) or None (whole images)")


def check_crop(crop: Crop, where: str = "crop") -> Crop:
    """`crop` in its policy's canonical form (an int, a (height, width) tuple, also from a list, or None), or a
    ConfigError."""
    return policy_of(crop, where).check(crop, where)


def crop_size(crop: Crop) -> tuple[int, int] | None:
    """(height, width) of every window of this setting; None: each image's own size (whole images)."""
    return policy_of(crop).size(crop)


def windows(crop: Crop, hw: np.ndarray) -> np.ndarray:
    """(n, 2) window height and width for images of sizes hw (n, 2) under this crop setting."""
    return policy_of(crop).window(crop, hw)
