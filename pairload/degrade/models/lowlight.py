"""`lowlight`: a normal-light sRGB photograph made into a low-light one. Linearise (sRGB), darken each sample by
I = β·(α·I)^γ (the ranges of the large-scale low-light simulation of Lv, Li and Lu, IJCV 2021), optional red and
blue gains (a white-balance error), Poisson-Gaussian sensor noise in its heteroscedastic Gaussian form (variance
shot·I + read, the noise levels of Brooks et al., "Unprocessing Images for Learned Raw Denoising", CVPR 2019), clip,
re-encode to sRGB and quantize to the stored type. Numpy only."""

from __future__ import annotations

import numpy as np

from ..params import Param, normal_of
from ..rng import box_muller, philox, uniform, window_counter
from .base import FULL, Model, rgb_only
from .srgb import encode, log2_linear

LV = ("Lv, Li, Lu: Attention guided low-light image enhancement with a large scale low-light simulation dataset "
      "(IJCV 2021)")
BROOKS = "Brooks et al.: Unprocessing Images for Learned Raw Denoising (CVPR 2019), unprocess.py random_noise_levels"
OFF = "pairload (off by default)"
READ_LINE = (2.18, 1.20, 0.26)  # log(read) = 2.18·log(shot) + 1.20 + N(0, 0.26²) (Brooks et al.)


class Lowlight(Model):
    def lut(self, dtype: str) -> np.ndarray:
        return log2_linear(dtype)

    def takes(self, members, raw: bool) -> str | None:
        return rgb_only(members, raw)

    def table(self, u, spans, extra=None) -> np.ndarray:
        cols = [self.drawn(u, spans, j) for j in range(len(self.params))]
        slope, bias, spread = READ_LINE
        read = np.exp(slope * np.log(cols[5]) + bias + spread * normal_of(u[:, 6]))
        return np.stack(cols + [read], axis=1).astype(np.float32)

    def numpy(self, high, table, keys, code, levels=None, extra=None) -> np.ndarray:
        f = np.float32
        n, h, w, _ = high.shape
        full = FULL[high.dtype.name]
        log_lin = log2_linear(high.dtype.name)[high]
        a, b, g, gr, gb, shot, read = (table[:, k].reshape(n, 1, 1) for k in range(7))
        counter, _ = window_counter(code, h, w)
        bits = philox(np.asarray(keys, dtype=np.uint64).reshape(n, 1, 1), counter)
        z = (*box_muller(uniform(bits[0]), uniform(bits[1])), box_muller(uniform(bits[2]), uniform(bits[3]))[0])
        out = np.empty(high.shape, dtype=high.dtype)
        with np.errstate(divide="ignore"):
            la = np.log2(a)
            for c, gain in enumerate((gr, f(1.0), gb)):
                d = b * np.exp2(g * (la + log_lin[..., c])) * gain
                x = np.clip(d + np.sqrt(shot * d + read) * z[c], f(0.0), f(1.0))
                out[..., c] = encode(x, full)
        return out


LOWLIGHT = Lowlight(
    name="lowlight",
    summary="sRGB photo → darkened (β·(α·I)^γ), colour gains, Poisson-Gaussian noise, re-encoded",
    source=f"{LV}; {BROOKS}",
    params=(
        Param(name="alpha", low=0.9, high=1.0, legal=(0.0, 1.0), source=LV, doc="exposure scale inside the power"),
        Param(name="beta", low=0.5, high=1.0, legal=(0.0, 1.0), source=LV, doc="exposure scale outside it"),
        Param(name="gamma", low=1.5, high=5.0, legal=(0.1, 20.0), source=LV, doc="darkening power"),
        Param(name="gain_r", low=1.0, high=1.0, dist="log-uniform", legal=(0.25, 4.0), source=OFF,
              doc="red gain: a white-balance error"),
        Param(name="gain_b", low=1.0, high=1.0, dist="log-uniform", legal=(0.25, 4.0), source=OFF,
              doc="blue gain"),
        Param(name="shot", low=1e-4, high=1.2e-2, dist="log-uniform", legal=(0.0, 1.0), unit="variance per unit signal",
              source=BROOKS, doc="shot-noise level K: variance K·I of linear signal I in [0, 1]"),
    ),
    columns=("alpha", "beta", "gamma", "gain_r", "gain_b", "shot", "read"),
    uniforms=7,
    kernel='lowlight_kernel',
    outputs="sRGB inputs of the target's type (8 or 16 bits) and size",
)
