"""`unprocess`: an sRGB photograph taken back to camera space and made dark and noisy there, then processed back,
after Brooks et al., "Unprocessing Images for Learned Raw Denoising" (CVPR 2019): inverse tone curve and gamma, a
random camera colour matrix (a convex combination of four XYZ→camera matrices), inverted white-balance and
brightness gains with highlights preserved; a darkening factor (MAET's dark ISP, Cui et al., ICCV 2021); shot and
read noise with Brooks' log-linear relation; then white balance, the colour matrix, gamma and tone curve again.
The noise is added to each of the three camera channels of every pixel (no mosaic and demosaic), which keeps the
output an RGB image of the target's size. Numpy only."""

from __future__ import annotations

import functools

import numpy as np

from ..params import Param, normal_of
from ..rng import box_muller, philox, uniform, window_counter
from .base import FULL, Model, rgb_only
from .lowlight import BROOKS, READ_LINE

BROOKS_GAINS = "Brooks et al.: Unprocessing Images for Learned Raw Denoising (CVPR 2019), unprocess.py random_gains"

MAET = "Cui et al.: Multitask AET with Orthogonal Tangent Regularity for Dark Object Detection (ICCV 2021), dark ISP"
XYZ2CAMS = np.array([[[1.0234, -0.2969, -0.2266], [-0.5625, 1.6328, -0.0469], [-0.0703, 0.2188, 0.6406]],
                     [[0.4913, -0.0541, -0.0202], [-0.613, 1.3513, 0.2906], [-0.1564, 0.2151, 0.7183]],
                     [[0.838, -0.263, -0.0639], [-0.2887, 1.0725, 0.2496], [-0.0627, 0.1427, 0.5438]],
                     [[0.6596, -0.2079, -0.0562], [-0.4782, 1.3016, 0.1933], [-0.097, 0.1581, 0.5181]]])
RGB2XYZ = np.array([[0.4124564, 0.3575761, 0.1804375], [0.2126729, 0.7151522, 0.0721750],
                    [0.0193339, 0.1191920, 0.9503041]])
RGB_GAIN = (0.8, 0.1)  # brightness gain 1 / N(0.8, 0.1²) (Brooks et al.)
COLUMNS = tuple(f"rgb2cam_{i}{j}" for i in range(3) for j in range(3)) + tuple(
    f"cam2rgb_{i}{j}" for i in range(3) for j in range(3)) + ("red_gain", "blue_gain", "rgb_gain", "darkness", "shot",
                                                             "read")


@functools.lru_cache(maxsize=4)
def to_camera_light(dtype: str) -> np.ndarray:
    """float32 table: stored sRGB value → linear light, inverse tone curve then inverse gamma (Brooks et al.)."""
    v = np.arange(int(FULL[dtype]) + 1, dtype=np.float64) / FULL[dtype]
    t = 0.5 - np.sin(np.arcsin(1.0 - 2.0 * v) / 3.0)
    return (np.maximum(t, 1e-8) ** 2.2).astype(np.float32)


def mix3(m: np.ndarray, x: tuple, row: int) -> np.ndarray:
    """Row `row` of 3×3 matrices m (n, 9) applied to channels x (three (n, …) arrays), in the kernels' order."""
    n = len(m)
    shape = (n,) + (1,) * (x[0].ndim - 1)
    return m[:, 3 * row].reshape(shape) * x[0] + m[:, 3 * row + 1].reshape(shape) * x[1] \
        + m[:, 3 * row + 2].reshape(shape) * x[2]


class Unprocess(Model):
    def lut(self, dtype: str) -> np.ndarray:
        return to_camera_light(dtype)

    def takes(self, members, raw: bool) -> str | None:
        return rgb_only(members, raw)

    def table(self, u, spans, extra=None) -> np.ndarray:
        n = len(u)
        red, blue, dark, shot = (self.drawn(u, spans, j) for j in range(4))
        w = 1e-8 + u[:, 4:8] * (1e8 - 1e-8)  # Brooks' convex weights of the four matrices
        xyz2cam = np.einsum("nk,kij->nij", w / w.sum(axis=1, keepdims=True), XYZ2CAMS)
        rgb2cam = xyz2cam @ RGB2XYZ
        rgb2cam /= rgb2cam.sum(axis=2, keepdims=True)
        cam2rgb = np.linalg.inv(rgb2cam)
        rgb_gain = 1.0 / (RGB_GAIN[0] + RGB_GAIN[1] * normal_of(u[:, 8]))
        slope, bias, spread = READ_LINE
        read = np.exp(slope * np.log(shot) + bias + spread * normal_of(u[:, 9]))
        return np.concatenate([rgb2cam.reshape(n, 9), cam2rgb.reshape(n, 9),
                               np.stack([red, blue, rgb_gain, dark, shot, read], axis=1)], axis=1).astype(np.float32)

    def numpy(self, high, table, keys, code, levels=None, extra=None) -> np.ndarray:
        f = np.float32
        n, h, w, _ = high.shape
        lin = to_camera_light(high.dtype.name)[high]
        col = {name: table[:, k].reshape(n, 1, 1) for k, name in enumerate(COLUMNS)}
        rgb = (lin[..., 0], lin[..., 1], lin[..., 2])
        cam = [mix3(table[:, :9], rgb, c) for c in range(3)]
        inv = (f(1.0) / (col["red_gain"] * col["rgb_gain"]), f(1.0) / col["rgb_gain"],
               f(1.0) / (col["blue_gain"] * col["rgb_gain"]))
        gray = (cam[0] + cam[1] + cam[2]) * f(1 / 3)
        mask = np.square(np.maximum(gray - f(0.9), f(0.0)) * f(10.0))
        counter, _ = window_counter(code, h, w)
        bits = philox(np.asarray(keys, dtype=np.uint64).reshape(n, 1, 1), counter)
        forward = (col["red_gain"], f(1.0), col["blue_gain"])
        z = (*box_muller(uniform(bits[0]), uniform(bits[1])), box_muller(uniform(bits[2]), uniform(bits[3]))[0])
        noisy = []
        for c in range(3):
            x = np.clip(cam[c] * np.maximum(mask + (f(1.0) - mask) * inv[c], inv[c]), f(0.0), f(1.0)) * col["darkness"]
            x = x + np.sqrt(col["shot"] * x + col["read"]) * z[c]
            noisy.append(np.clip(x * forward[c], f(0.0), f(1.0)))
        out = np.empty(high.shape, dtype=high.dtype)
        full = f(FULL[high.dtype.name])
        with np.errstate(divide="ignore"):
            for c in range(3):
                x = np.clip(mix3(table[:, 9:18], noisy, c), f(0.0), f(1.0))
                x = np.exp2(np.log2(np.maximum(x, f(1e-8))) * f(1 / 2.2))
                x = f(3.0) * x * x - f(2.0) * x * x * x
                out[..., c] = np.floor(x * full + f(0.5))
        return out


UNPROCESS = Unprocess(
    name="unprocess",
    summary="sRGB photo → camera space (random CCM, inverse gains), darkened, shot/read noise, processed back",
    source=f"{BROOKS}; {MAET}",
    params=(
        Param(name="red_gain", low=1.9, high=2.4, legal=(0.5, 8.0), source=BROOKS_GAINS, doc="white-balance red gain"),
        Param(name="blue_gain", low=1.5, high=1.9, legal=(0.5, 8.0), source=BROOKS_GAINS,
              doc="white-balance blue gain"),
        Param(name="darkness", low=0.01, high=1.0, legal=(1e-4, 1.0), source=MAET,
              doc="the camera-space signal's scale (1: Brooks' denoising setting, no darkening)"),
        Param(name="shot", low=1e-4, high=1.2e-2, dist="log-uniform", legal=(0.0, 1.0), unit="variance per unit signal",
              source=BROOKS, doc="shot-noise level"),
    ),
    columns=COLUMNS,
    uniforms=10,
    kernel='unprocess_kernel',
    outputs="sRGB inputs of the target's type (8 or 16 bits) and size",
)
