"""`Degradation`: which model degrades the targets into inputs and with which parameter ranges (validated on
construction), from a string ("lowlight", "lowlight,gamma=2..3,shot=0.001",
"raw-physics,profile=NikonD850,ratio=100..200"), a dict or itself; `draw` turns a batch's per-sample uniforms into its
parameter table. Numpy only."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ConfigError
from .models import Model, models
from .models.rawphysics import DEFAULT_PROFILE


@dataclass(frozen=True)
class Degradation:
    """`model`: a name of `pairload.degrade.MODELS`; `ranges`: ((parameter, (low, high)), …) replacing the model's
    default ranges (a number: fixed); `profile`: raw-physics' camera profile (a built-in name or a JSON file)."""

    model: str
    ranges: tuple[tuple[str, tuple[float, float]], ...] = ()
    profile: str | None = None
    _extra: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        m = _model(self.model)
        checked = []
        for name, value in _settings(m, self.ranges):
            p = m.param(name)
            if p is None:
                raise _unknown(m, name)
            checked.append((name, p.check(value, self.model)))
        object.__setattr__(self, "ranges", tuple(sorted(checked)))
        self._check_profile(m)
        prepare = getattr(m, "prepare", None)
        object.__setattr__(self, "_extra", prepare(self.profile, dict(self.ranges)) if prepare else None)

    def _check_profile(self, m: Model) -> None:
        if isinstance(self.profile, os.PathLike):
            object.__setattr__(self, "profile", os.fspath(self.profile))
        if self.profile is None:
            return
        if not m.needs_levels:
            raise ConfigError(f"degradation {self.model!r}: profile={self.profile!r} is raw-physics' option (a "
                              "camera noise profile); leave it out")
        if not isinstance(self.profile, str) or not self.profile.strip():
            raise ConfigError(f"degradation {self.model!r}: profile={self.profile!r}: expected the name of a built-in "
                              f"camera profile or the path of a .json profile, e.g. {_example(m, 'profile')}")
        if "," in self.profile:
            raise ConfigError(f"degradation {self.model!r}: profile={self.profile!r}: a comma in the path; a spec "
                              "string (what loader states and configs record) cannot hold it", fix="rename or move the "
                              "profile file to a path without commas")

    @classmethod
    def of(cls, value) -> "Degradation | None":
        """None, a Degradation, a model name with options ("lowlight,gamma=2..3"), or a dict ({"model": …, name:
        value, "profile": …})."""
        if value is None or isinstance(value, Degradation):
            return value
        if isinstance(value, dict):
            doc = dict(value)
            if "model" not in doc:
                raise ConfigError(f"degradation {value!r}: expected a \"model\" key (one of {', '.join(models())}), "
                                  "e.g. {'model': 'lowlight', 'gamma': [2, 3]}")
            model, profile = doc.pop("model"), doc.pop("profile", None)
            return cls(model, tuple(doc.items()), profile)
        if isinstance(value, str):
            return cls(*_parse(value))
        raise ConfigError(f"degrade={value!r} ({type(value).__name__}): expected a model name such as 'lowlight', a "
                          "dict or a pairload.degrade.Degradation")

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
        """Refuse targets this model cannot degrade into inputs (`members` of the split, its `sensor` rows), naming
        the split, the model and what it takes."""
        why = self.spec.takes(members, _raw(sensor))
        if why is not None:
            raise ConfigError(f"{where}: degradation {self.model!r} cannot make inputs from this split: {why}; "
                              f"choose a model that takes them ({', '.join(takers(members, sensor)) or 'none does'})")

    def describe(self) -> str:
        """The canonical string (what `of` reads back; loader states and digests record it)."""
        parts = [self.model] + [f"{k}={_exact(lo)}" if lo == hi else f"{k}={_exact(lo)}..{_exact(hi)}"
                                for k, (lo, hi) in self.ranges]
        if self.profile is not None:
            parts.append(f"profile={self.profile}")
        return ",".join(parts)

    def __str__(self) -> str:
        return self.describe()


def _exact(value: float) -> str:
    """`value` as `describe` writes it: short (2, 0.5, 1e-05) where that reads back the same float, else every digit
    it needs (a digest or a recorded spec must not merge 0.1234567891 with 0.123457)."""
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


def takers(members, sensor) -> list[str]:
    """The models that can degrade targets of `members` (a split's, with its `sensor` rows) into inputs."""
    return [name for name, m in models().items() if m.takes(members, _raw(sensor)) is None]


def suggested_model(members, sensor) -> str:
    """The model a message suggests for targets of `members`: the first that takes them."""
    return (takers(members, sensor) or [next(iter(models()))])[0]


def _raw(sensor) -> bool:
    """Whether a split's targets are camera raw mosaics with levels (what raw-physics takes)."""
    return sensor is not None and sensor.levels_high is not None


def _parse(text: str) -> tuple[str, tuple[tuple[str, str], ...], str | None]:
    """A string spec as (model, ((name, value), …), profile): the model's name, then name=value options after
    single commas. Whitespace around a name or a value is dropped ("lowlight, gamma = 2..3" is
    "lowlight,gamma=2..3"); an empty option, one without a name or a value, or one given twice is refused."""
    name, *items = (part.strip() for part in text.split(","))
    m = _model(name)
    options: dict[str, str] = {}
    for item in items:
        key, eq, val = (part.strip() for part in item.partition("="))
        if not item:
            problem = (f"an empty option in {text!r} (two commas in a row, or one at an end); expected name=value "
                       "options after single commas")
        elif not eq:
            problem = f"option {item!r} has no '='; expected name=value or name=low..high"
        elif not key:
            problem = f"option {item!r} has no name before '='; expected name=value"
        elif key != "profile" and m.param(key) is None:
            raise _unknown(m, key)
        elif not val:
            problem = f"{key}= has no value; expected " + ("the name or .json file of a camera profile"
                                                            if key == "profile" else "a number or a range low..high")
        elif key in options:
            raise _twice(m, key, options[key], val)
        else:
            options[key] = val
            continue
        raise ConfigError(f"degradation {name!r}: {problem}, e.g. {_example(m, key)}")
    profile = options.pop("profile", None)
    return name, tuple(options.items()), profile


def _model(name) -> Model:
    """The model called `name`, or a ConfigError listing them."""
    table = models()
    if not isinstance(name, str) or name not in table:
        raise ConfigError(f"degradation {name!r}: expected one of {', '.join(table)}, then its options after commas, "
                          "e.g. lowlight,gamma=2..3 (see docs/degrade.md)")
    return table[name]


def _settings(m: Model, ranges) -> list[tuple[Any, Any]]:
    """`ranges` (a dict, or (name, value) pairs) as pairs, a name given twice refused."""
    pairs = list(ranges.items()) if isinstance(ranges, dict) else ranges
    if not isinstance(pairs, (tuple, list)) or not all(isinstance(p, (tuple, list)) and len(p) == 2 for p in pairs):
        raise ConfigError(f"degradation {m.name!r}: ranges={ranges!r}: expected (name, value) pairs or a dict, e.g. "
                          "{'gamma': (2, 3)}; Degradation.of reads a string such as 'lowlight,gamma=2..3'")
    seen: dict = {}
    for name, value in pairs:
        if not isinstance(name, str):
            raise _unknown(m, name)
        if name in seen:
            raise _twice(m, name, seen[name], value)
        seen[name] = value
    return list(pairs)


def _twice(m: Model, name, first, second) -> ConfigError:
    shown = [v if isinstance(v, str) else repr(v) for v in (first, second)]
    return ConfigError(f"degradation {m.name!r}: {name} is given twice ({name}={shown[0]}, then {name}={shown[1]}); "
                       f"give it once, as one value or one range, e.g. {_example(m, name)}")


def _unknown(m: Model, name) -> ConfigError:
    others = [o.name for o in models().values() if o is not m and o.param(name) is not None]
    return ConfigError(f"degradation {m.name!r}: no parameter {name!r}"
                       + (f" (that is a parameter of {' and '.join(others)})" if others else "")
                       + f"; its parameters are {', '.join(p.name for p in m.params)}"
                       + (" and profile" if m.needs_levels else "") + f", e.g. {_example(m)}")


def _example(m: Model, key=None) -> str:
    """A valid spec of model `m` that sets `key` (a parameter, or "profile") where it can, its first parameter
    otherwise."""
    if key == "profile" and m.needs_levels:
        return f"{m.name},profile={DEFAULT_PROFILE}"
    p = (m.param(key) if isinstance(key, str) else None) or m.params[0]
    return f"{m.name},{p.example()}"
