"""Camera noise profiles of the `raw-physics` low-light model: what a camera's noise is (system gain K, read, row
noise, Tukey-λ shape, colour bias) as ranges and log-linear laws, how one sample's values are drawn from uniforms
(`Profile.sample`), the built-in profiles of ELD, LED and PMN (`PROFILES`), and the JSON file a user's own camera is
described in (`load_profile`, `save_profile`). Numpy only.

Units: counts (DN) of the camera's raw file, above the black level. K is DN per electron: a mosaic in sensor counts
holds (counts - black) / K electrons, and shot noise is Poisson(electrons) · K. ELD, LED and PMN work on images scaled
by (white - black) and multiply them back before their noise is added, so their numbers are in these units already.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from dataclasses import dataclass, fields
from pathlib import Path
from types import MappingProxyType

import numpy as np

from ..errors import ConfigError, OutputError
from ..format.atomic import atomic_open

READ_DISTS = ("tukey", "gaussian")
UNIFORMS = 6  # columns of `Profile.sample`'s input: K, read (2, Box-Muller), row (2, Box-Muller), Tukey λ
COLUMNS = ("K", "read_scale", "row_sigma", "tukey_lambda")  # columns of its output


@dataclass(frozen=True, kw_only=True)
class LogLinear:
    """A noise scale that grows with the gain, as ELD models it: log(σ) = slope · log(K) + bias + N(0, spread²),
    natural logs, σ in DN and K in DN per electron."""

    slope: float
    bias: float
    spread: float = 0.0

    def __post_init__(self) -> None:
        values = _log_linear({"slope": self.slope, "bias": self.bias, "spread": self.spread}, "LogLinear")
        for key, value in values.items():
            object.__setattr__(self, key, value)

    def at(self, k) -> np.ndarray:
        """The median σ (DN) at gain `k` (DN per electron): exp(slope · log k + bias)."""
        return np.exp(self.slope * np.log(np.asarray(k, np.float64)) + self.bias)

    def to_dict(self) -> dict:
        """The law as a profile file holds it."""
        return {"slope": self.slope, "bias": self.bias, "spread": self.spread}


@dataclass(frozen=True, kw_only=True)
class Profile:
    """One camera's noise, or a family of cameras', for the raw-physics model; every value in DN of the raw file.

    `log_k`: the range of log K (natural log; K in DN per electron), drawn uniformly (ELD's and LED's Kmin/Kmax are
    exp of it); `read`: the read noise's scale (the Tukey-λ scale, or the Gaussian σ under `read_dist="gaussian"`) as a
    function of K; `row`: the σ of the offset shared by each sensor row (in the packed mosaic: by R and the G of R's
    row, or by B and the G of B's row, of one packed row); `tukey_lambda`: the Tukey-λ shape's range, drawn uniformly
    (lo == hi: one value; None with a Gaussian read noise); `color_bias`: the mean of each packed channel (R, G, B, G)
    above the black level when no light falls; `white_level`, `black_level`: the raw file's levels where the source
    states them (for reference: the model takes each sample's own levels); `source`: where the numbers come from."""

    name: str
    source: str
    log_k: tuple[float, float]
    read: LogLinear
    row: LogLinear
    tukey_lambda: tuple[float, float] | None = None
    read_dist: str = "tukey"
    color_bias: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    white_level: float | None = None
    black_level: tuple[float, float, float, float] | None = None

    def __post_init__(self) -> None:
        try:
            values = check_fields({f.name: getattr(self, f.name) for f in fields(self)})
        except ConfigError as exc:
            raise ConfigError(f"profile {self.name!r}: {exc.problem}", fix=exc.fix) from None
        for key, value in values.items():
            object.__setattr__(self, key, value)

    @property
    def k_range(self) -> tuple[float, float]:
        """(Kmin, Kmax) in DN per electron."""
        return math.exp(self.log_k[0]), math.exp(self.log_k[1])

    def sample(self, u: np.ndarray) -> np.ndarray:
        """Each row of `u` (n × 6 float64 uniforms in (0, 1), drawn per sample by the planner) turned into one
        sample's noise: an n × 4 float64 array of columns `COLUMNS`, K (DN per electron), read scale (DN), row σ (DN)
        and Tukey λ (NaN under a Gaussian read noise). A pure function of `u`: column 0 gives log K uniformly in
        `log_k`, columns 1-2 and 3-4 the standard normals of the read and row laws (Box-Muller), column 5 λ uniformly
        in `tukey_lambda`. A λ near 0 is the logistic limit of the Tukey-λ family: a kernel must not divide by it."""
        u = np.asarray(u, dtype=np.float64)
        if u.ndim != 2 or u.shape[1] != UNIFORMS:
            raise ConfigError(f"profile {self.name!r}: sample(u) of shape {u.shape}: expected (n, {UNIFORMS}) "
                              "uniforms, one row per sample")
        if not np.all((u > 0) & (u < 1)):
            raise ConfigError(f"profile {self.name!r}: sample(u): expected uniforms strictly between 0 and 1, found "
                              f"{u.min():g} to {u.max():g}")
        lo, hi = self.log_k
        log_k = lo + (hi - lo) * u[:, 0]
        z_read = _box_muller(u[:, 1], u[:, 2])
        z_row = _box_muller(u[:, 3], u[:, 4])
        out = np.empty((u.shape[0], len(COLUMNS)), np.float64)
        out[:, 0] = np.exp(log_k)
        out[:, 1] = np.exp(self.read.slope * log_k + self.read.bias + self.read.spread * z_read)
        out[:, 2] = np.exp(self.row.slope * log_k + self.row.bias + self.row.spread * z_row)
        if self.tukey_lambda is None or self.read_dist != "tukey":
            out[:, 3] = np.nan
        else:
            lam_lo, lam_hi = self.tukey_lambda
            out[:, 3] = lam_lo + (lam_hi - lam_lo) * u[:, 5]
        return out

    def describe(self) -> str:
        """One line: the name, K's range, the read and row noise at both ends of it, λ, and the source."""
        k_lo, k_hi = self.k_range
        read = "Tukey-λ scale" if self.read_dist == "tukey" else "Gaussian σ"
        lam = ""
        if self.read_dist == "tukey":
            lam_lo, lam_hi = self.tukey_lambda
            lam = f", λ {lam_lo:.3g}" + ("" if lam_lo == lam_hi else f" to {lam_hi:.3g}")
        return (f"{self.name}: K {k_lo:.3g} to {k_hi:.3g} DN/e-, read ({read}) {self._ends(self.read)} DN, row "
                f"{self._ends(self.row)} DN{lam} ({self.source})")

    def _ends(self, law: LogLinear) -> str:
        low, high = law.at(self.k_range)
        return f"{low:.3g}" if self.log_k[0] == self.log_k[1] else f"{low:.3g} to {high:.3g}"

    def to_dict(self) -> dict:
        """The profile as its JSON file holds it (`save_profile`); None fields are left out."""
        doc = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, LogLinear):
                value = value.to_dict()
            elif isinstance(value, tuple):
                value = list(value)
            if value is not None:
                doc[f.name] = value
        return doc


def _box_muller(u1: np.ndarray, u2: np.ndarray) -> np.ndarray:
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


# ------------------------------------------------------------------ validation

REQUIRED = ("name", "source", "read", "row")
OPTIONAL = ("tukey_lambda", "read_dist", "color_bias", "white_level", "black_level")
FILE_KEYS = ("name", "source", "log_k", "k", *REQUIRED[2:], *OPTIONAL)  # `k`: K's range instead of log K's


def _shown(value) -> str:
    """A value as a message shows it: JSON where it can be (a list or array whole, on one line), else its repr."""
    if isinstance(value, (tuple, np.ndarray)):
        value = value.tolist() if isinstance(value, np.ndarray) else list(value)
    if isinstance(value, (list, dict, str, bool, type(None))):
        return json.dumps(value, default=repr, ensure_ascii=False)
    return repr(value)


def _finite(value) -> float | None:
    """`value` as a float if it is a finite real number (not a bool), else None (an int too big for a float too)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _number(key: str, value, expected: str, fix: str | None = None) -> float:
    number = _finite(value)
    if number is None:
        raise ConfigError(f"{key}={_shown(value)}: expected {expected}", fix=fix)
    return number


def _numbers(key: str, value, count: int, expected: str, fix: str | None = None) -> tuple[float, ...]:
    """`count` finite numbers; anything else is refused showing the whole value, not the element at fault."""
    listed = isinstance(value, (list, tuple)) or isinstance(value, np.ndarray) and value.ndim == 1
    numbers = [_finite(v) for v in value] if listed and len(value) == count else [None]
    if None in numbers:
        raise ConfigError(f"{key}={_shown(value)}: expected {expected}", fix=fix)
    return tuple(numbers)


def _range(key: str, value, what: str) -> tuple[float, float]:
    lo, hi = _numbers(key, value, 2, f"[low, high], two finite numbers: {what}")
    if lo > hi:
        raise ConfigError(f"{key}={_shown(list(value))}: expected [low, high] with low <= high ({what})",
                          fix="swap the two numbers")
    return lo, hi


def _log_linear(value, key: str) -> dict:
    """slope, bias and spread of a log-linear law given as a LogLinear or a JSON object, checked."""
    if isinstance(value, LogLinear):
        value = value.to_dict()
    if not isinstance(value, dict):
        raise ConfigError(f"{key}={_shown(value)}: expected an object {{\"slope\": …, \"bias\": …, \"spread\": …}} "
                          "(log σ = slope · log K + bias, natural logs)")
    unknown = sorted(set(value) - {"slope", "bias", "spread"})
    if unknown:
        raise ConfigError(f"{key}: unknown key {unknown[0]!r}; expected slope, bias and spread",
                          fix="remove it or correct its spelling")
    for needed in ("slope", "bias"):
        if needed not in value:
            raise ConfigError(f"{key}: missing key {needed!r}; expected slope, bias and spread (spread may be left "
                              "out: 0)", fix=f"add {key}.{needed}")
    out = {name: _number(f"{key}.{name}", value[name], "a finite number")
           for name in ("slope", "bias") if name in value}
    out["spread"] = _number(f"{key}.spread", value.get("spread", 0.0),
                            "a finite number >= 0 (the standard deviation of log σ around the line)")
    if out["spread"] < 0:
        raise ConfigError(f"{key}.spread={_shown(value['spread'])}: expected a number >= 0 (the standard deviation of "
                          "log σ around the line)", fix="drop its sign")
    return out


def check_fields(values: dict, *, k_key: str = "log_k") -> dict:
    """A Profile's field values checked and normalised (tuples of floats, LogLinear laws); a value that cannot work,
    or that no camera has (`check_camera`), is a ConfigError of the form "key=value: expected …; fix". `k_key`: the
    key K's range was given as ("k" in a file that gives K itself), for messages."""
    out = dict(values)
    for key in ("name", "source"):
        if not isinstance(values[key], str) or not values[key].strip():
            raise ConfigError(f"{key}={_shown(values[key])}: expected a non-empty string",
                              fix="name the camera" if key == "name" else "say where the numbers come from")
    out["log_k"] = _range("log_k", values["log_k"], "natural logs of K, DN per electron")
    if max(abs(v) for v in out["log_k"]) > 20:
        raise ConfigError(f"log_k={_shown(list(values['log_k']))}: expected natural logs of K (DN per electron), "
                          "within ±20", fix="give log K, not K (or give K's range as `k` in a JSON file)")
    for key in ("read", "row"):
        out[key] = LogLinear(**_log_linear(values[key], key))
    if values["read_dist"] not in READ_DISTS:
        raise ConfigError(f"read_dist={_shown(values['read_dist'])}: expected one of {', '.join(READ_DISTS)}")
    if values["tukey_lambda"] is None:
        if values["read_dist"] == "tukey":
            raise ConfigError("tukey_lambda: missing; a Tukey-λ read noise needs its shape's range [low, high] "
                              "(one value: low == high)", fix="add tukey_lambda, or set read_dist to gaussian")
    elif values["read_dist"] == "gaussian":
        raise ConfigError(f"tukey_lambda={_shown(values['tukey_lambda'])}: a Gaussian read noise (read_dist gaussian) "
                          "has no Tukey-λ shape; the model would ignore it", fix="remove tukey_lambda, or set "
                          "read_dist to tukey")
    else:
        out["tukey_lambda"] = _range("tukey_lambda", values["tukey_lambda"], "the Tukey-λ shape")
    out["color_bias"] = _numbers("color_bias", values["color_bias"], 4,
                                 "4 numbers, DN above black of channels R, G, B, G with no light")
    out.update(_levels(values["white_level"], values["black_level"]))
    check_camera(out, k_key)
    return out


def _levels(white, black) -> dict:
    out = {}
    if white is not None:
        out["white_level"] = _number("white_level", white, "a positive number of DN (the raw file's saturation)")
        if not 0 < out["white_level"] <= UINT16_TOP:
            raise ConfigError(f"white_level={_shown(white)}: expected a positive number of DN, at most {UINT16_TOP} "
                              "(a raw file's counts have 16 bits at most)", fix="give the raw file's white level")
    if black is not None:
        shown = _shown(black)
        if isinstance(black, (int, float)) and not isinstance(black, bool):
            black = [black] * 4
        out["black_level"] = _numbers("black_level", black, 4, "a number of DN >= 0, or 4 (R, G, B, G)")
        top = out.get("white_level", UINT16_TOP)
        if min(out["black_level"]) < 0 or max(out["black_level"]) >= top:
            raise ConfigError(f"black_level={shown}: expected DN >= 0 and below white_level ({_g(top)}"
                              f"{'' if white is not None else ': none given, a 16-bit raw'})",
                              fix="give the raw file's black level")
    return out


# ------------------------------------------------------------------ what a camera can be

K_BOUNDS = (1e-4, 1e3)  # DN per electron: raw-physics' own bounds of its K parameter
LAMBDA_BOUNDS = (-0.5, 1.0)  # below -0.5 (excluded) the Tukey-λ noise has no finite variance; above 1 it is narrower
# than a uniform one; ELD's and LED's cameras span -0.28 to 0.2
SPREAD_MAX = 1.0  # σ of log σ around a law: ELD's and LED's cameras have 0.2 to 0.4
SHARE = 16  # one electron (K), the read and row noise's σ and a colour bias: each at most 1/SHARE of white - black,
# i.e. 4 stops or more between the noise and saturation at the highest gain (the built-ins keep 5.9 or more)
TAIL = 3.0  # a law's upper end: its median at the top of K's range times exp(TAIL · spread)
UINT16_TOP = 65535  # the white level of a raw whose levels are not known: the largest count of 16 bits
LAMBDA_EXPECTED = (f"expected Tukey-λ shapes above {LAMBDA_BOUNDS[0]:g} and at most {LAMBDA_BOUNDS[1]:g} (at "
                   f"{LAMBDA_BOUNDS[0]:g} and below the read noise has no finite variance; ELD's and LED's cameras "
                   "span -0.28 to 0.2)")


@dataclass(frozen=True)
class Ceiling:
    """The largest K (DN per electron), noise σ or colour bias (DN) of a camera whose raw has these levels: 1/SHARE
    of white - black; `levels` says which levels, for messages."""

    dn: float
    levels: str

    @classmethod
    def of(cls, white: float | None, black) -> "Ceiling":
        top = UINT16_TOP if white is None else float(white)
        low = 0.0 if black is None else float(np.max(black))
        note = "" if white is not None else ": no white level known, a 16-bit raw's"
        return cls((top - low) / SHARE, f"1/{SHARE} of white - black ({_g(top)} - {_g(low)}{note})")


def lambda_ok(lam: float) -> bool:
    """Whether a camera's read noise can have the Tukey-λ shape `lam`."""
    return LAMBDA_BOUNDS[0] < lam <= LAMBDA_BOUNDS[1]


def tukey_sd(lam: float) -> float:
    """The standard deviation of the Tukey-λ distribution of shape `lam` (> -0.5) and scale 1; it falls as λ rises."""
    if abs(lam) < 1e-4:  # the logistic limit; the formula below loses its digits to cancellation there
        return math.pi / math.sqrt(3)
    ratio = math.exp(2 * math.lgamma(lam + 1) - math.lgamma(2 * lam + 2))
    return math.sqrt(2 / lam ** 2 * (1 / (1 + 2 * lam) - ratio))


def check_camera(p: dict, k_key: str = "log_k") -> None:
    """Refuse checked field values `p` that no camera has: K outside K_BOUNDS or above the ceiling (`Ceiling`), a
    Tukey-λ shape outside LAMBDA_BOUNDS, a law's spread above SPREAD_MAX, a read or row noise whose upper end (its σ
    at either end of K's range, TAIL spreads above the median) is above the ceiling, or a colour bias beyond it."""
    ceiling = Ceiling.of(p["white_level"], p["black_level"])
    k_lo, k_hi = (math.exp(v) for v in p["log_k"])
    k_top = min(K_BOUNDS[1], ceiling.dn)
    if k_lo < K_BOUNDS[0] or k_hi > k_top:
        shown = f"[{k_lo:.6g}, {k_hi:.6g}]" if k_key == "k" else _shown(list(p["log_k"]))
        raise ConfigError(f"{k_key}={shown}: K {k_lo:.4g} to {k_hi:.4g} DN per electron; expected K from "
                          f"{K_BOUNDS[0]:g} to {k_top:.4g}: at most {K_BOUNDS[1]:g}, and at most {ceiling.levels} so "
                          "that 16 electrons or more fill the range", fix="give K of this camera's raw in DN per "
                          "electron" + ("" if k_key == "k" else " (log_k: its natural logs)"))
    lam = p["tukey_lambda"]
    if lam is not None and not (lambda_ok(lam[0]) and lambda_ok(lam[1])):
        raise ConfigError(f"tukey_lambda={_shown(list(lam))}: {LAMBDA_EXPECTED}",
                          fix="fit λ on dark frames (`pairload calibrate`), or set read_dist to gaussian")
    for key in ("read", "row"):
        _check_law(key, p, ceiling)
    if max(abs(v) for v in p["color_bias"]) > ceiling.dn:
        raise ConfigError(f"color_bias={_shown(list(p['color_bias']))}: expected each within ±{ceiling.dn:.4g} DN, "
                          f"{ceiling.levels}", fix="give the dark frames' mean above the black level (a few DN), "
                          "not the level itself")


def _check_law(key: str, p: dict, ceiling: Ceiling) -> None:
    law = p[key]
    if law.spread > SPREAD_MAX:
        raise ConfigError(f"{key}.spread={law.spread:g}: expected at most {SPREAD_MAX:g} (the standard deviation of "
                          "log σ around the line, natural logs; ELD's and LED's cameras have 0.2 to 0.4)",
                          fix="give the spread of natural logs")
    # in logs: a law far off (a bias of 1000) must be refused, not overflow
    log_k, log_median = max(((v, law.slope * v + law.bias) for v in p["log_k"]), key=lambda kv: kv[1])
    shape = 1.0 if key == "row" or p["read_dist"] == "gaussian" else tukey_sd(p["tukey_lambda"][0])
    log_top = log_median + TAIL * law.spread + math.log(shape)
    if not log_top <= math.log(ceiling.dn):
        what = "row noise's σ" if key == "row" else "read noise's σ"
        parts = [f"median {_dn(log_median)} DN", f"× e^({TAIL:g}·spread)"]
        if shape != 1.0:
            parts.append(f"× {shape:.3g}, the σ of a Tukey-λ of scale 1 at λ {p['tukey_lambda'][0]:.3g}")
        raise ConfigError(f"{key}={_shown(law.to_dict())}: the {what} reaches {_dn(log_top)} DN at K "
                          f"{math.exp(log_k):.4g} ({' '.join(parts)}); expected at most {ceiling.dn:.4g} DN, "
                          f"{ceiling.levels}", fix="give σ in DN of this camera's raw: log σ = slope · log K + bias, "
                          "natural logs")


def _dn(log_value: float) -> str:
    """exp(`log_value`) for a message, where a float holds it."""
    return f"{math.exp(log_value):.4g}" if log_value < 700 else f"e^{log_value:.4g}"


def _g(value: float) -> str:
    return f"{value:g}"


# ------------------------------------------------------------------ files

def load_profile(name_or_path: str | os.PathLike) -> Profile:
    """A built-in profile by name (`PROFILES`), or the profile in a JSON file (`.json`; keys: Profile's fields,
    `k: [Kmin, Kmax]` in place of `log_k` if you like). Anything wrong is a ConfigError naming the file and key."""
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise ConfigError(f"profile {name_or_path!r} ({type(name_or_path).__name__}): expected a built-in profile's "
                          f"name ({', '.join(PROFILES)}) or the path of a JSON profile file (.json)")
    text = os.fspath(name_or_path)
    if text in PROFILES:
        return PROFILES[text]
    path = Path(text)
    if text.strip() and path.is_dir():
        raise ConfigError(f"{path}: a folder; expected a built-in profile's name or the path of a JSON profile file "
                          "(.json)", fix="give the file in it (`pairload calibrate -o` writes one)")
    if path.suffix.lower() != ".json" and not path.is_file():
        raise ConfigError(f"unknown profile {text!r}; built-in profiles: {', '.join(PROFILES)}",
                          fix="pick one, or give the path of a JSON profile file (.json)")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=_once)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such profile file", fix="check the path (`pairload calibrate` writes one)") \
            from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the profile ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})",
                          fix="correct the file (docs/calibration.md shows the format)") from None
    except ConfigError as exc:  # a key given twice (`_once`)
        raise ConfigError(f"{path}: {exc.problem}", fix=exc.fix) from None
    return profile_from_dict(doc, str(path))


def _once(pairs: list) -> dict:
    """A JSON object whose keys are each given once (json's own reading keeps the last of two silently)."""
    doc: dict = {}
    for key, value in pairs:
        if key in doc:
            raise ConfigError(f"key {key!r} is given twice ({key}={_shown(doc[key])}, then {key}={_shown(value)})",
                              fix="keep one")
        doc[key] = value
    return doc


def profile_from_dict(doc, where: str) -> Profile:
    """A Profile from a JSON object (`where`: its file, for messages)."""
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}: expected a JSON object of the profile's keys, found {type(doc).__name__}")
    unknown = sorted(set(doc) - set(FILE_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; expected keys: {', '.join(FILE_KEYS)}",
                          fix="remove it or correct its spelling")
    values = dict(doc)
    try:
        if ("k" in doc) == ("log_k" in doc):
            raise ConfigError("log_k: give K's range once: log_k (natural logs) or k (DN per electron)",
                              fix="keep one of the two keys")
        if "k" in doc:
            k = _range("k", doc["k"], "K in DN per electron")
            if k[0] <= 0:
                raise ConfigError(f"k={_shown(doc['k'])}: expected K > 0 (DN per electron)")
            values["log_k"] = [math.log(k[0]), math.log(k[1])]
            del values["k"]
        missing = [key for key in REQUIRED if key not in doc]
        if missing:
            raise ConfigError(f"{missing[0]}: missing; a profile needs {', '.join(REQUIRED)} and log_k (or k)",
                              fix=f"add {missing[0]}")
        defaults = {f.name: f.default for f in fields(Profile) if f.name in OPTIONAL}
        checked = check_fields({**defaults, **values}, k_key="k" if "k" in doc else "log_k")
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc.problem}", fix=exc.fix) from None
    return Profile(**checked)


def save_profile(profile: Profile, path: str | os.PathLike) -> None:
    """Write `profile` as JSON (atomically), in the format `load_profile` reads; a failed write is an OutputError
    naming `path` (`writing`)."""
    with writing(path, "profile"), atomic_open(path, "w") as fh:
        json.dump(profile.to_dict(), fh, indent=2, ensure_ascii=False)
        fh.write("\n")


@contextlib.contextmanager
def writing(path: str | os.PathLike, what: str):
    """An OSError while writing the JSON `what` at `path` becomes an OutputError naming `path`, not the temporary
    file beside it."""
    try:
        yield
    except OSError as exc:
        folder = Path(path).parent
        if Path(path).is_dir():
            raise OutputError(f"{path}: a folder; expected the path of the {what} JSON file to write; name a file in "
                              "it") from None
        raise OutputError(f"{path}: cannot write the {what} ({exc.strerror or exc}); check that {folder} is a folder "
                          "you can write with free space, or write it elsewhere") from None


# ------------------------------------------------------------------ built-in profiles

ELD = "ELD (Wei et al., CVPR 2020), github.com/Vandermode/ELD camera_params/release/{}_params.npy, Profile-1"
LED = "LED (Jin et al., ICCV 2023), github.com/Srameo/LED options/base/noise_g/{}"
PMN = ("PMN (Feng et al., ACM MM 2022), github.com/megvii-research/PMN data_process/process.py "
       "get_camera_noisy_params['{}']")


def _eld(name: str, k: tuple[float, float], tukey: tuple[float, float, float], row: tuple[float, float, float],
         lam: tuple[float, float], bias: tuple[float, float, float, float], **levels) -> Profile:
    """An ELD calibration: K's range (Kmin, Kmax), (slope, bias, sigma) of G_scale (Tukey-λ scale) and R_scale
    (row), λ's range over G_shape, and color_bias averaged over its rows (one per calibrated ISO)."""
    return Profile(name=name, source=ELD.format(name), log_k=(math.log(k[0]), math.log(k[1])),
                   read=LogLinear(slope=tukey[0], bias=tukey[1], spread=tukey[2]),
                   row=LogLinear(slope=row[0], bias=row[1], spread=row[2]), tukey_lambda=lam, color_bias=bias,
                   **levels)


def _led_virtual(index: int, count: int = 5) -> Profile:
    """LED's virtual camera IC<index> of noise_g_virtual.yaml: every parameter at index/(count-1) of its range
    (sample_strategy coverage, shuffle false); its random colour biases are left out."""
    def at(lo: float, hi: float) -> float:
        return lo + (hi - lo) * index / (count - 1)

    lam = at(-0.24285714285714288, 0.2)
    return Profile(name=f"led-virtual-{index}", source=LED.format(f"noise_g_virtual.yaml, virtual camera IC{index}"),
                   log_k=(math.log(0.1), math.log(30.0)),
                   read=LogLinear(slope=at(0.46210495986526035, 0.6558756156508007),
                                  bias=at(-0.09044499670414502, 1.5370438794284738),
                                  spread=at(0.23920060971003035, 0.3888189465002228)),
                   row=LogLinear(slope=at(0.44829219631519307, 0.7292220505388829),
                                 bias=at(-1.7977103277112132, -0.5917002648887661),
                                 spread=at(0.2321799439489326, 0.29428813016491145)),
                   tukey_lambda=(lam, lam))


def _pmn(name: str, log_k: tuple[float, float], lam: float, tukey: tuple[float, float, float],
         row: tuple[float, float, float], white: float, black: float) -> Profile:
    return Profile(name=f"pmn-{name}", source=PMN.format(name), log_k=log_k,
                   read=LogLinear(slope=tukey[0], bias=tukey[1], spread=tukey[2]),
                   row=LogLinear(slope=row[0], bias=row[1], spread=row[2]), tukey_lambda=(lam, lam),
                   white_level=white, black_level=(black,) * 4)


_BUILT_IN = [
    _eld("SonyA7S2", (0.09391607086816033, 6.010628535562261),
         (0.46210495986526035, 0.5657147358616816, 0.2633712220097871),
         (0.5275360468633209, -0.5917002648887661, 0.29428813016491145),
         (-0.14285714285714285, 0.12857142857142856), (0.58374, 0.52148, 0.65819, 0.60054),
         white_level=16383, black_level=(512, 512, 512, 512)),
    _eld("NikonD850", (0.4150393264348262, 26.562516891828878),
         (0.4773896839219417, -0.09044499670414502, 0.23920060971003035),
         (0.44829219631519307, -1.7977103277112132, 0.2321799439489326),
         (-0.24285714285714288, -0.10000000000000003), (0.00907, 0.47774, 0.14121, -0.12428), white_level=16383),
    _eld("CanonEOS70D", (0.40749699481911256, 26.079807668423204),
         (0.4868061424083776, 1.4642678570994598, 0.3820056048326114),
         (0.7292220505388829, -0.9370565150367796, 0.2502155842967251),
         (-0.17142857142857143, 0.1428571428571428), (1.51849, 1.89125, 0.48405, 0.14636), white_level=16383),
    _eld("CanonEOS700D", (0.44762889266510675, 28.648249130566832),
         (0.5982361749821256, 1.5370438794284738, 0.3888189465002228),
         (0.6220587550621577, -0.7756471105987757, 0.24848083434051538),
         (-0.15714285714285714, 0.12857142857142856), (0.87570, 0.92015, -0.34120, -0.30385), white_level=16383),
    _eld("CanonEOS5D4", (0.2181895124454343, 13.964128796507795),
         (0.6558756156508007, 1.09268679594838, 0.28604721742277756),
         (0.4712797750747537, -0.8078958947116487, 0.2436176299944695),
         (0.014285714285714235, 0.2), (0.29289, 0.34462, 0.53829, 0.22124), white_level=16383),
    Profile(name="SonyA7M4", source=LED.format("noise_g_SonyA7M4.yaml (LED's own calibration)"),
            log_k=(math.log(0.5176822379876143), math.log(37.48342111254088)),
            read=LogLinear(slope=0.8741245752046553, bias=-0.7834371464250983, spread=0.24359869793646144),
            row=LogLinear(slope=0.8498868627654588, bias=-2.508114778989769, spread=0.2539644785570933),
            tukey_lambda=(-0.28266826272010803, -0.09686645120382309), color_bias=(0.30073, 0.21893, 0.59808, 0.55753)),
    *(_led_virtual(i) for i in range(5)),
    _pmn("SonyA7S2_lowISO", (-1.67214, 0.42228), -0.026, (0.74043, 0.86182, 0.00712), (0.78782, -0.34227, 0.02832),
         16383, 512),
    _pmn("SonyA7S2_highISO", (0.64567, 2.51606), -0.025, (0.74901, -0.12348, 0.00638), (0.62945, -1.51040, 0.02609),
         16383, 512),
]
PROFILES: MappingProxyType[str, Profile] = MappingProxyType({p.name: p for p in _BUILT_IN})
