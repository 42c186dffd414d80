"""Degraded low-light inputs: degradation models (`MODELS`) that make a sample's input from its target, with
parameters the planner draws from (seed, epoch, key) and noise from a counter-based generator keyed the same way, so
a degraded pair is the same whatever batch, rank, loader kind or resume it arrives through. `Degradation` is what
loaders take (`degrade=`). Numpy only here; the CUDA kernels live in `pairload.degrade.kernels`."""

from __future__ import annotations

from .models import MODELS
from .spec import Degradation


__all__ = ["Degradation", "MODELS"]
