"""`Degradation`: which model synthesizes the inputs and with which parameter ranges (validated on construction),
from a string ("lowlight", "lowlight,gamma=2..3,shot=0.001", "raw-physics,profile=NikonD850,ratio=100..200"), a
dict or itself; `draw` turns a batch's per-sample uniforms into its parameter table. Numpy only."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ConfigError
from .models import Model, models


@dataclass(frozen=True)
class Degradation:
    """`model`: a name of `pairload.synth.MODELS`; `ranges`: ((parameter, (low, high)), …) replacing the model's
    default ranges (a number: fixed); `profile`: raw-physics' camera profile (a built-in name or a JSON file)."""

    model: str
    ranges: tuple[tuple[str, tuple[float, float]], ...] = ()
    profile: str | None = None
    _extra: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        table = models()
        if self.model not in table:
            raise ConfigError(f"degradation {self.model!r}: expected one of {', '.join(table)} (see "
                              "docs/synthesis.md)")
        m = table[self.model]
        checked = []
        given = dict(self.ranges) if not isinstance(self.ranges, dict) else self.ranges
        for name, value in given.items():
            p = m.param(name)
            if p is None:
                raise ConfigError(f"degradation {self.model!r}: no parameter {name!r}; its parameters are "
                                  f"{', '.join(q.name for q in m.params)}" + (" and profile" if m.needs_levels else ""))
            checked.append((name, p.check(value, self.model)))
        object.__setattr__(self, "ranges", tuple(sorted(checked)))
        if self.profile is not None and not m.needs_levels:
            raise ConfigError(f"degradation {self.model!r}: profile={self.profile!r} is raw-physics' option (a "
                              "camera noise profile); leave it out")
        prepare = getattr(m, "prepare", None)
        object.__setattr__(self, "_extra", prepare(self.profile, dict(self.ranges)) if prepare else None)

    @classmethod
    def of(cls, value) -> "Degradation | None":
        """None, a Degradation, a model name with options ("lowlight,gamma=2..3"), or a dict ({"model": …, name:
        value, "profile": …})."""
        if value is None or isinstance(value, Degradation):
            return value
        if isinstance(value, dict):
            doc = dict(value)
            if "model" not in doc:
                raise ConfigError(f"degradation {value!r}: expected a \"model\" key (one of {', '.join(models())})")
            model, profile = doc.pop("model"), doc.pop("profile", None)
            return cls(model, tuple(doc.items()), profile)
        if isinstance(value, str):
            name, *options = [p.strip() for p in value.split(",")]
            ranges, profile = [], None
            for option in filter(None, options):
                key, eq, val = option.partition("=")
                if not eq:
                    raise ConfigError(f"degradation {value!r}: option {option!r}: expected name=value or "
                                      "name=low..high, e.g. lowlight,gamma=2..3")
                if key.strip() == "profile":
                    profile = val.strip()
                else:
                    ranges.append((key.strip(), val.strip()))
            return cls(name, tuple(ranges), profile)
        raise ConfigError(f"degrade={value!r} ({type(value).__name__}): expected a model name such as 'lowlight', a "
                          "dict or a pairload.synth.Degradation")

    @property
    def spec(self) -> Model:
        return models()[self.model]

    @property
    def columns(self) -> tuple[str, ...]:
        return self.spec.columns

    @property
    def codes(self) -> tuple[int, ...] | None:
        return self.spec.codes

    @property
    def extra(self) -> Any:
        """What the model prepared from the options (raw-physics: the camera profile)."""
        return self._extra

    def draw(self, u: np.ndarray) -> np.ndarray:
        """(n, columns) float32 parameter table from (n, uniforms) uniforms."""
        return self.spec.table(u, dict(self.ranges), self._extra)

    def check_source(self, members, sensor, where: str) -> None:
        """Refuse targets this model cannot synthesize inputs from (`members` of the split, its `sensor` rows), naming
        the split, the model and what it takes."""
        raw = sensor is not None and sensor.levels_high is not None
        why = self.spec.takes(members, raw)
        if why is not None:
            raise ConfigError(f"{where}: degradation {self.model!r} cannot make inputs from this split: {why}; "
                              f"choose a model that takes them ({', '.join(_takers(members, raw)) or 'none does'})")

    def describe(self) -> str:
        """The canonical string (what `of` reads back; loader states and digests record it)."""
        parts = [self.model] + [f"{k}={lo:g}" if lo == hi else f"{k}={lo:g}..{hi:g}" for k, (lo, hi) in self.ranges]
        if self.profile is not None:
            parts.append(f"profile={self.profile}")
        return ",".join(parts)

    def __str__(self) -> str:
        return self.describe()


def _takers(members, raw: bool) -> list[str]:
    return [name for name, m in models().items() if m.takes(members, raw) is None]
