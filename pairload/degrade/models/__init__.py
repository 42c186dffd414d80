"""The degradation models, a registry as the crop policies are: each model names its parameters (`Param`: range,
distribution, unit, source), the members it takes, the columns of its per-sample table (what `PairBatch.degradation`
holds) and its numpy executor; `pairload.degrade.kernels` holds the same model as one Triton kernel. A new model is one
module here and one entry in `MODELS`. Numpy only."""

from __future__ import annotations

from .base import FULL, Model
from .lowlight import LOWLIGHT
from .rawphysics import RAW_PHYSICS
from .unprocess import UNPROCESS

MODELS: dict[str, Model] = {m.name: m for m in (LOWLIGHT, UNPROCESS, RAW_PHYSICS)}


def models() -> dict[str, Model]:
    """The registry."""
    return MODELS


__all__ = ["FULL", "MODELS", "Model", "models"]
