"""`raw-physics`: a clean long exposure (a packed Bayer mosaic R, G, B, G in sensor counts, with its black and white
levels) made into a short one, after ELD (Wei et al., "A Physics-based Noise Formation Model for Extreme Low-light
Raw Denoising", CVPR 2020) and LED (Jin et al., "Lighting Every Darkness in Two Pairs", ICCV 2023): the signal above
black divided by a sampled ratio, Poisson shot noise in electrons (system gain K), Tukey-λ (or Gaussian) read noise,
row noise shared by the two packed channels of one sensor row, the camera's colour bias, and quantization as the ADC
does it (rounding to whole counts), clipped to [0, white]. K, read and row noise come from a camera profile
(`pairload.degrade.profiles`). Poisson counts are exact below 4 electrons and a second-order Cornish-Fisher quantile
above (`poisson`). Numpy only."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..params import Param
from ..rng import (ROW_TAG, SECOND, TUKEY_ZERO, box_muller, logistic, normal32, philox, tukey, uniform,
                   window_counter)
from .base import Model

ELD = "Wei et al.: A Physics-based Noise Formation Model for Extreme Low-light Raw Denoising (CVPR 2020)"
LED = "Jin et al.: Lighting Every Darkness in Two Pairs (ICCV 2023)"
INVERSION_BELOW = 4.0  # electrons: Poisson by inversion below, its Cornish-Fisher quantile above (`poisson`)
KMAX = 32  # above every inversion cap (4 + 6·2 + 6 = 22)
COLUMNS = ("ratio", "K", "read", "row", "lam", "bias_r", "bias_g", "bias_b", "bias_g2")
ROWS = (0, 0, 1, 1)  # packed channel → which of a packed row's two sensor rows it lies on (R and its G; B and its G)


def inversion_cap(e: np.ndarray) -> np.ndarray:
    """The largest count inversion returns for means `e` below INVERSION_BELOW: e + 6√e + 6 (P(X > cap) < 1e-9)."""
    f = np.float32
    return np.floor(e + f(6.0) * np.sqrt(e) + f(6.0))


INVERSE_FACTORIALS = tuple(1.0 / math.factorial(k) for k in range(KMAX))


def poisson(e: np.ndarray, u: np.ndarray) -> np.ndarray:
    """float32 Poisson counts of means `e` from one uniform each. Below INVERSION_BELOW electrons, exactly, by
    inversion: the count of k with u·e^e > S(k), S(k) = Σ_{i<=k} e^i/i! the CDF's partial sums times e^e (so each term
    is one product and one multiply-add, g = e^k and S += g·(1/k!)), up to `inversion_cap`. Above it, the
    Cornish-Fisher expansion of the Poisson quantile to the second order around the normal of variance e - 1/12 (the
    rounding's own 1/12 restores e), rounded: its mean and variance are within 0.1% of e's from 4 electrons on and its
    skewness 1/√e."""
    f = np.float32
    small = e < f(INVERSION_BELOW)
    es = np.where(small, e, f(0.0))
    cap = inversion_cap(es)
    d = f(1.0) - np.where(small, u * np.exp(es), f(0.0))  # S(0) - u·e^e: negative while the count goes on
    g = np.ones_like(es)
    k = (d < 0).astype(np.float32)
    for kk in range(1, KMAX):
        if not ((d < 0) & (kk < cap)).any():
            break
        g = g * es
        d = d + g * f(INVERSE_FACTORIALS[kk])
        k = k + (d < 0)
    el = np.where(small, f(INVERSION_BELOW), e)
    z = normal32(u)
    x = el + np.sqrt(el - f(1 / 12)) * z + (z * z - f(1.0)) * f(1 / 6) + (z - z * z * z) * (f(1 / 72) / np.sqrt(el))
    return np.where(small, np.minimum(k, cap), np.maximum(np.floor(x + f(0.5)), f(0.0)))


class RawPhysics(Model):
    def takes(self, members, raw: bool) -> str | None:
        high = members.high
        if not raw or high.channels != 4 or high.dtype != "uint16":
            return (f"it takes camera raw targets kept as packed Bayer mosaics (uint16 ×4 with their levels: pack with "
                    f"--raw-target packed), and these are {high.describe()}" + ("" if raw else ", not camera raw"))
        return None

    def prepare(self, profile_name: str | None, spans: dict):
        """The camera profile in force (the user's K range replacing the profile's)."""
        from ..profiles import load_profile

        profile = load_profile(profile_name or DEFAULT_PROFILE)
        if "K" in spans:
            lo, hi = spans["K"]
            profile = dataclasses.replace(profile, log_k=(math.log(lo), math.log(hi)))
        return profile

    def table(self, u, spans, extra=None) -> np.ndarray:
        profile = extra
        ratio = self.drawn(u, spans, 0)
        k, read, row, lam = profile.sample(u[:, 1:7]).T
        bias = np.broadcast_to(np.asarray(profile.color_bias, dtype=np.float64), (len(u), 4))
        return np.concatenate([np.stack([ratio, k, read, row, lam], axis=1), bias], axis=1).astype(np.float32)

    def numpy(self, high, table, keys, code, levels=None, extra=None) -> np.ndarray:
        f = np.float32
        n, h, w, _ = high.shape
        gaussian = extra is not None and getattr(extra, "read_dist", "tukey") == "gaussian"
        col = {name: table[:, k].reshape(n, 1, 1) for k, name in enumerate(COLUMNS)}
        black = levels[:, :4].astype(np.float32).reshape(n, 1, 1, 4)
        white = levels[:, 4].astype(np.float32).reshape(n, 1, 1)
        inv = f(1.0) / (col["ratio"] * col["K"])
        counter, row = window_counter(code, h, w)
        key = np.asarray(keys, dtype=np.uint64).reshape(n, 1, 1)
        shot_bits = philox(key, counter)
        read_bits = philox(key, counter, c2=SECOND)
        row_bits = philox(key, row.astype(np.uint32), c1=ROW_TAG)
        row_noise = [z * col["row"] for z in box_muller(uniform(row_bits[0]), uniform(row_bits[1]))]
        lam = col["lam"]
        small_lam = np.abs(lam) < f(TUKEY_ZERO)
        y = high.astype(np.float32)
        out = np.empty(high.shape, dtype=np.uint16)
        for c in range(4):
            e = np.maximum(y[..., c] - black[..., c], f(0.0)) * inv
            shot = poisson(e, uniform(shot_bits[c])) * col["K"]
            ur = uniform(read_bits[c])
            read = col["read"] * (normal32(ur) if gaussian else np.where(small_lam, logistic(ur),
                                                                       tukey(ur, np.where(small_lam, f(1.0), lam))))
            v = black[..., c] + col[COLUMNS[5 + c]] + shot + read + row_noise[ROWS[c]]
            out[..., c] = np.clip(np.floor(v + f(0.5)), f(0.0), white)
        return out


DEFAULT_PROFILE = "SonyA7S2"

RAW_PHYSICS = RawPhysics(
    name="raw-physics",
    summary="clean packed raw → short exposure: ratio, Poisson shot (K), Tukey-λ read, row noise, colour bias, ADC",
    source=f"{ELD}; {LED}",
    params=(
        Param(name="ratio", low=100.0, high=300.0, legal=(1.0, 1e4), source=ELD,
              doc="the exposure ratio: the long exposure's signal is divided by it"),
        Param(name="K", low=1.0, high=1.0, dist="log-uniform", legal=(1e-4, 1e3), unit="counts per electron",
              source="the camera profile", doc="system gain (default: the profile's range)"),
    ),
    columns=COLUMNS,
    uniforms=7,
    kernel='raw_kernel',
    outputs="packed Bayer inputs in sensor counts, at the sampled ratio (PairBatch.sensor.ratio)",
    codes=(0, 1, 2, 3),  # no transpose: row noise stays along rows, as PMN restricts augmentation
    needs_levels=True,
)
