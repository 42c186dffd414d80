"""What every degradation model declares (`Model`) and the full scale of each stored type. Numpy only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..params import Param

FULL = {"uint8": 255.0, "uint16": 65535.0}


@dataclass(frozen=True)
class Model:
    """What every model declares. `uniforms`: per-sample uniforms the planner draws for its table; `codes`: the
    orientation codes it allows (None: all eight); `needs_levels`: it takes a camera raw split's black and white
    levels; `kernel`: the name of its Triton kernel; `outputs`: what its inputs are."""

    name: str
    summary: str
    source: str
    params: tuple[Param, ...]
    columns: tuple[str, ...]
    uniforms: int
    kernel: str  # its kernel in `pairload.degrade.kernels`
    outputs: str = "inputs of the target's type and size"
    codes: tuple[int, ...] | None = None
    needs_levels: bool = False

    def lut(self, dtype: str) -> np.ndarray | None:
        """The float32 table from stored values to the light the model works in (None: it reads counts)."""
        return None

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    def takes(self, members, raw: bool) -> str | None:
        """Why this model cannot degrade targets of `members` (`format.members.Members`; `raw`: the target is a
        packed camera raw mosaic with levels) into inputs, or None."""
        raise NotImplementedError

    def table(self, u: np.ndarray, spans: dict[str, tuple[float, float]], extra: Any = None) -> np.ndarray:
        """(n, len(columns)) float32: each sample's parameters from its uniforms `u` (n, uniforms) and the ranges in
        force (`spans`: the user's, else each parameter's own)."""
        raise NotImplementedError

    def numpy(self, high: np.ndarray, table: np.ndarray, keys: np.ndarray, code: np.ndarray,
              levels: np.ndarray | None = None, extra: Any = None) -> np.ndarray:
        """The degraded inputs (n, h, w, C) of oriented targets `high` (n, h, w, C) of one batch: `table` (n,
        columns), `keys` (n,) uint64 noise keys, `code` (n,) the orientation each window was cut in, `levels` (n, 5)
        black of each packed channel and white (camera raw)."""
        raise NotImplementedError

    def drawn(self, u: np.ndarray, spans: dict, j: int) -> np.ndarray:
        """Parameter j of `params` drawn from uniform column j."""
        p = self.params[j]
        return p.draw(u[:, j], spans.get(p.name))


def rgb_only(members, raw: bool) -> str | None:
    """Why an sRGB model cannot take these targets (8- or 16-bit RGB, not camera raw), or None."""
    high = members.high
    if raw or high.channels != 3 or high.dtype not in FULL:
        return (f"it takes 8- or 16-bit RGB targets (3 channels), and these are {high.describe()}"
                + (" camera raw" if raw else ""))
    return None
