"""Batches for the degradation tests: targets whose values sweep the stored range, each model's parameter table for
them (drawn as the planner draws it, or given), noise keys and orientation codes."""

from __future__ import annotations

import numpy as np

from pairload.plan.draws import noise_keys, uniforms
from pairload.degrade import Degradation
from pairload.degrade.models import models

RAW_LEVELS = (512.0, 16383.0)  # black, white of the raw cases (a 14-bit camera)
RAW_TABLE = (150.0, 2.5, 4.0, 0.8, 0.05, 0.5, -0.25, 0.0, 0.25)  # ratio K read row lam biases: one raw row


def targets(model: str, n: int, h: int, w: int, dtype: str = "uint8", seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if model == "raw-physics":
        black, white = RAW_LEVELS
        return rng.integers(int(black), int(white), (n, h, w, 4)).astype(np.uint16)
    top = 255 if dtype == "uint8" else 65535
    return rng.integers(0, top + 1, (n, h, w, 3)).astype(dtype)


def table(model: str, n: int, seed: int = 0) -> np.ndarray:
    """The planner's parameter table for keys 0..n-1 (raw-physics: RAW_TABLE in every row, no profile needed)."""
    if model == "raw-physics":
        return np.tile(np.asarray(RAW_TABLE, dtype=np.float32), (n, 1))
    spec = Degradation(model)
    u = uniforms(np.arange(n, dtype=np.uint64), seed=seed, epoch=0, count=spec.spec.uniforms)
    return spec.draw(u)


def keys(n: int, seed: int = 0) -> np.ndarray:
    return noise_keys(np.arange(n, dtype=np.uint64), seed=seed, epoch=0)


def levels(n: int) -> np.ndarray:
    black, white = RAW_LEVELS
    return np.tile(np.array([black] * 4 + [white], dtype=np.float32), (n, 1))


def run_numpy(model: str, high, tab, key, code) -> np.ndarray:
    return models()[model].numpy(high, tab, key, code, levels(len(high)) if model == "raw-physics" else None)
