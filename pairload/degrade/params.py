"""A degradation model's parameters: what each one is, its default range and distribution, the bounds a user's
range must stay within, its unit and the paper or repository the range comes from. A sample's values are drawn by
the planner from uniforms of (seed, epoch, key, draw) (`pairload.plan.draws.uniforms`). Numpy only."""

from __future__ import annotations

import math
import numbers
import re
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
        """A user's value for this parameter (a number: fixed; (low, high) or "low..high": a range) as (low, high),
        or a ConfigError naming the model, the parameter, the value, what was expected and an example."""
        where = f"degradation {model!r}: {self.name}"
        lo, hi = self._numbers(value, where)
        example = f"e.g. {self.example()}"
        a, b = self.legal
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ConfigError(f"{where}={_show(lo, hi)}: expected finite numbers, {example}")
        if lo > hi:
            raise ConfigError(f"{where}={lo:g}..{hi:g}: its low end is above its high end; expected low <= high, "
                              f"e.g. {self.name}={hi:g}..{lo:g}")
        if lo < a or hi > b:
            raise ConfigError(f"{where}={_show(lo, hi)}: outside {self.name}'s bounds; expected a range low <= high "
                              f"within [{a:g}, {b:g}] ({self.unit or 'no unit'}), {example}")
        if self.dist == "log-uniform" and lo <= 0:
            raise ConfigError(f"{where}={_show(lo, hi)}: expected values above 0 ({self.name} is drawn "
                              f"log-uniformly), {example}")
        return lo, hi

    def _numbers(self, value, where: str) -> tuple[float, float]:
        """(low, high) of a number, a (low, high) pair or a string "v" or "low..high" (whitespace around each
        number allowed; nan and inf are read, for `check` to refuse them by name)."""
        example = f"e.g. {self.example()}"
        if isinstance(value, str):
            parts = [p.strip() for p in value.split("..")]
            if "..." in value or len(parts) > 2 or not all(_NUMBER.fullmatch(p) for p in parts):
                raise ConfigError(f"{where}={value!r}: expected a number or a range low..high (two dots), {example}")
            value = tuple(float(p) for p in parts) if len(parts) == 2 else float(parts[0])
        if is_number(value):
            return _float(value), _float(value)
        if isinstance(value, (tuple, list)) and len(value) == 2 and all(is_number(v) for v in value):
            return _float(value[0]), _float(value[1])
        raise ConfigError(f"{where}={value!r}: expected a number or a (low, high) range, {example}")

    def draw(self, u: np.ndarray, span: tuple[float, float] | None = None) -> np.ndarray:
        """Values of uniforms `u` (float64 in (0, 1)) over `span` (default: the parameter's range), float64."""
        lo, hi = span or (self.low, self.high)
        if self.dist == "log-uniform":
            return np.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))
        return lo + u * (hi - lo)

    def example(self) -> str:
        """Its default as an option, "gamma=1.5..5": what a message shows as an example."""
        return f"{self.name}={_show(self.low, self.high)}"

    def describe(self) -> str:
        return f"{self.name} {self.dist} {_show(self.low, self.high)}" + (f" {self.unit}" if self.unit else "")


# a decimal number ("2", "-0.5", ".5", "1e-3"), or nan/inf, which `check` refuses by name; never "1_0", "0x10" or
# digits of other scripts ("٢", which float() reads as 2)
_NUMBER = re.compile(r"[+-]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|inf|infinity|nan)", re.IGNORECASE | re.ASCII)


def is_number(value) -> bool:
    """A real number (Python or numpy), and not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _float(value) -> float:
    """A real number as a float; an int too big for one is ±inf (for `check` to refuse as not finite)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _show(lo: float, hi: float) -> str:
    return f"{lo:g}" if lo == hi or (math.isnan(lo) and math.isnan(hi)) else f"{lo:g}..{hi:g}"


def normal_of(u: np.ndarray) -> np.ndarray:
    """Standard normal deviates of float64 uniforms (for per-sample parameters, drawn on the host)."""
    from .rng import normal

    return normal(u, np.float64)
