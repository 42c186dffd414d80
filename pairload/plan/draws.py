"""Per-sample randomness: stable key hashes, the epoch's order, and each sample's crop corner and
augmentation code, all pure functions of (seed, epoch, key, draw). Numpy only.

Augmentation codes: `pairload.dihedral` (one per sample, applied to both images after cropping).
"""

from __future__ import annotations

import numpy as np

from ..dihedral import HFLIP, TRANSPOSE, VFLIP, allowed  # noqa: F401 - the planner's codes, re-exported
# the planner's handle on a sample: a stable 64-bit hash of its key, defined beside the binary index that stores it
from ..format.binindex import key_hashes  # noqa: F401
from .crops import Crop, windows
from .bijection import order_key, permute
from ..splitmix import splitmix as _splitmix, splitmix_int as _splitmix_int


def _stream(key_hash: np.ndarray, seed: int, epoch: int, stream: int, draw: np.ndarray | None = None) -> np.ndarray:
    base = (seed & 0xFFFFFFFF) << 32 | (epoch & 0xFFFFFF) << 8 | stream
    if draw is None:
        return _splitmix(np.asarray(key_hash, dtype=np.uint64) ^ np.uint64(_splitmix_int(base)))
    # the k-th draw of a sample in an epoch (repeats, mixing): draw 0 is the plain epoch's
    mixed = np.uint64(base) + np.asarray(draw, dtype=np.uint64) * np.uint64(0xD1B54A32D192ED03)
    return _splitmix(np.asarray(key_hash, dtype=np.uint64) ^ _splitmix(mixed))


def sample_params(key_hash: np.ndarray, hw: np.ndarray, *, seed: int, epoch: int, crop: Crop,
                  augment: bool, draw: np.ndarray | None = None,
                  codes: tuple[int, ...] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Crop corner (y, x) and orientation code for each sample, from its key (and, for a sample drawn more than
    once in an epoch, which draw it is) alone: (y, x, code) int64 arrays. `crop`: a crop policy's setting
    (`pairload.plan.crops`); the corner is uniform over the places the window fits, and a window that is not
    square is only flipped, never transposed. `codes`: the orientation codes allowed (a degradation model's
    restriction; None: all eight), the drawn one mapped onto them."""
    key_hash = np.atleast_1d(np.asarray(key_hash, dtype=np.uint64))
    hw = np.asarray(hw, dtype=np.int64).reshape(-1, 2)
    n = len(key_hash)
    win = windows(crop, hw)
    if crop is None:
        y = x = np.zeros(n, dtype=np.int64)
    else:
        y = (_stream(key_hash, seed, epoch, 1, draw) % (hw[:, 0] - win[:, 0] + 1).astype(np.uint64)).astype(np.int64)
        x = (_stream(key_hash, seed, epoch, 2, draw) % (hw[:, 1] - win[:, 1] + 1).astype(np.uint64)).astype(np.int64)
    if not augment:
        return y, x, np.zeros(n, dtype=np.int64)
    code = (_stream(key_hash, seed, epoch, 3, draw) & np.uint64(7)).astype(np.int64)
    if codes is not None:
        code = np.asarray(codes, dtype=np.int64)[code % len(codes)]
    return y, x, allowed(code, win[:, 0], win[:, 1])


def epoch_order(n: int, *, seed: int, epoch: int, shuffle: bool = True, salt: tuple[int, ...] = (),
                positions: np.ndarray | None = None) -> np.ndarray:
    """The epoch's order of a split's sample indices, the same on every rank: the sample at each of `positions`
    (None: all n, the whole permutation), from a keyed bijection (`plan.bijection`; `salt`: another, independent
    order of the same epoch, e.g. for a repeat)."""
    pos = np.arange(n, dtype=np.int64) if positions is None else np.asarray(positions, dtype=np.int64)
    if not shuffle:
        return pos.copy()
    return permute(pos, n, order_key(seed, epoch, salt))


NOISE_STREAM = 31  # the stream of a sample's noise key (the Philox key of its degraded pixels)
PARAMS_STREAM = 32  # the stream of a sample's first degradation-parameter uniform (then 33, 34, ...)


def uniforms(key_hash: np.ndarray, *, seed: int, epoch: int, count: int,
             draw: np.ndarray | None = None) -> np.ndarray:
    """(n, count) float64 uniforms in (0, 1) per sample, from its key alone (streams PARAMS_STREAM on): what a
    degradation model turns into the sample's parameters."""
    key_hash = np.atleast_1d(np.asarray(key_hash, dtype=np.uint64))
    out = np.empty((len(key_hash), count), dtype=np.float64)
    for j in range(count):
        bits = _stream(key_hash, seed, epoch, PARAMS_STREAM + j, draw) >> np.uint64(11)
        out[:, j] = (bits.astype(np.float64) + 0.5) * 2.0 ** -53
    return out


def noise_keys(key_hash: np.ndarray, *, seed: int, epoch: int, draw: np.ndarray | None = None) -> np.ndarray:
    """(n,) uint64: each sample's noise key, from its key alone (stream NOISE_STREAM)."""
    return _stream(np.atleast_1d(np.asarray(key_hash, dtype=np.uint64)), seed, epoch, NOISE_STREAM, draw)
