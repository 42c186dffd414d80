"""A degradation model's parameters: what each one is, its default range and distribution, the bounds a user's
range must stay within, its unit and the paper or repository the range comes from. A sample's values are drawn by
the planner from uniforms of (seed, epoch, key, draw) (`pairload.plan.draws.uniforms`). Numpy only."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError

DISTRIBUTIONS = ("uniform", "log-uniform")


@dataclass(frozen=True, kw_only=True)
class Param:
    """One drawn parameter: `low`..`high` (the default range), `dist` ("uniform" or "log-uniform"), `legal` (the
    bounds a range given by the user must stay within), `unit` and `source`."""

    name: str
    low: float
    high: float
    dist: str = "uniform"
    legal: tuple[float, float] = (-math.inf, math.inf)
    unit: str = ""
    source: str = ""
    doc: str = ""

    def __post_init__(self) -> None:
        if self.dist not in DISTRIBUTIONS:
            raise ConfigError(f"parameter {self.name}: dist {self.dist!r}: expected one of {', '.join(DISTRIBUTIONS)}")

    def check(self, value, model: str) -> tuple[float, float]:
        """A user's value for this parameter (a number: fixed; (low, high): a range) as (low, high), or a
        ConfigError naming the model, the parameter, what was expected and found."""
        where = f"degradation {model!r}: {self.name}"
        if isinstance(value, str):
            parts = value.split("..")
            try:
                value = tuple(float(p) for p in parts) if len(parts) == 2 else float(value)
            except ValueError:
                raise ConfigError(f"{where}={value!r}: expected a number or a range low..high, e.g. "
                                  f"{self.name}={self.low:g}..{self.high:g}") from None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            lo = hi = float(value)
        elif isinstance(value, (tuple, list)) and len(value) == 2 and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            lo, hi = float(value[0]), float(value[1])
        else:
            raise ConfigError(f"{where}={value!r}: expected a number or a (low, high) range")
        a, b = self.legal
        if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi or lo < a or hi > b \
                or (self.dist == "log-uniform" and lo <= 0):
            raise ConfigError(f"{where}={_show(lo, hi)}: expected {'a positive' if self.dist == 'log-uniform' else 'a'}"
                              f" range low <= high within [{a:g}, {b:g}] ({self.unit or 'no unit'}); the default is "
                              f"{_show(self.low, self.high)}")
        return lo, hi

    def draw(self, u: np.ndarray, span: tuple[float, float] | None = None) -> np.ndarray:
        """Values of uniforms `u` (float64 in (0, 1)) over `span` (default: the parameter's range), float64."""
        lo, hi = span or (self.low, self.high)
        if self.dist == "log-uniform":
            return np.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))
        return lo + u * (hi - lo)

    def describe(self) -> str:
        return f"{self.name} {self.dist} {_show(self.low, self.high)}" + (f" {self.unit}" if self.unit else "")


def _show(lo: float, hi: float) -> str:
    return f"{lo:g}" if lo == hi else f"{lo:g}..{hi:g}"


def normal_of(u: np.ndarray) -> np.ndarray:
    """Standard normal deviates of float64 uniforms (for per-sample parameters, drawn on the host)."""
    from .rng import normal

    return normal(u, np.float64)
