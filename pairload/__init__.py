"""pairload: fast, correct loading of paired low/normal-light images for training.

Packing (`pairload.pack`, `pairload.open_shards`) needs only numpy and OpenCV; the readers and the torch loaders are
imported on first use, so `import pairload` stays light and never needs DALI.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .errors import (ConfigError, ImageError, MissingDependencyError, OutputError, PairingError,  # noqa: F401
                     PairloadError, ShardError)

_LAZY = {  # imported on first use: a worker or decode process (`python -m pairload.workers…`) imports none of them
    "ShardDataset": "pairload.read.shards",
    "open_shards": "pairload.read.shards",
    "make_loader": "pairload.loaders",
    "PairBatch": "pairload.batch",
    "Normalize": "pairload.batch",
    "RawNormalize": "pairload.batch",
    "SensorBatch": "pairload.batch",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pairload' has no attribute {name!r}")
