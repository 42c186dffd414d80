"""`make_loader`: one entry point for every backend; all of them yield `PairBatch`.

kinds: "ram" (memory-mapped shards, batch-level crops, pinned async copies, optional device-resident split),
"wds" (the webdataset package over the same shards), "dali-external" and "dali-file" (`pairload.dali`).
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import ConfigError
from ..kinds import LOADER_KINDS as KINDS
from .base import Loader, LoaderOptions


def make_loader(kind: str, source: str | os.PathLike, *, split: str = "train", batch_size: int, crop: int | None,
                seed: int = 0, rank: int = 0, world_size: int = 1, num_workers: int = 0, device: Any = "cpu",
                last_batch: str = "drop", augment: bool = True, shuffle: bool = True, **backend: Any):
    """A loader over `source` (a shard folder; the raw image folder for "dali-file") for this rank.

    Every kind has `len()` (batches per epoch on this rank), `set_epoch(e)`, `state_dict()`/`load_state_dict()`,
    `close()`, and yields `PairBatch`es of uint8 N×3×crop×crop tensors on `device`. `num_workers` is each kind's CPU
    parallelism: worker processes (ram, wds) or DALI CPU threads. Backend options: ram: `resident=True` keeps the
    split in device memory, `prefetch`; wds: `shuffle_buffer`, `prefetch`; DALI: `prefetch`, and for dali-file
    `low_dir`, `high_dir`, `pairs_file`. An unknown option is a ConfigError that lists the accepted ones.
    """
    import inspect

    if kind not in KINDS:
        raise ConfigError(f"loader kind {kind!r}: expected one of {', '.join(KINDS)}")
    opts = LoaderOptions.build(split=split, batch_size=batch_size, crop=crop, seed=seed, rank=rank,
                               world_size=world_size, num_workers=num_workers, device=str(device),
                               last_batch=last_batch, augment=augment, shuffle=shuffle)
    if kind == "ram":
        from .ram import RamLoader as cls
    elif kind == "wds":
        from .wds import WdsLoader as cls
    else:
        from .. import dali

        cls = dali.DaliExternalLoader if kind == "dali-external" else dali.DaliFileLoader
    accepted = sorted(name for name, p in inspect.signature(cls.__init__).parameters.items()
                      if p.kind is inspect.Parameter.KEYWORD_ONLY)
    unknown = sorted(set(backend) - set(accepted))
    if unknown:
        raise ConfigError(f"make_loader({kind!r}): unknown option(s) {', '.join(unknown)}; this kind accepts "
                          f"{', '.join(accepted) or 'no options'} besides the common ones (CPU parallelism is "
                          "num_workers for every kind)")
    return cls(source, opts, **backend)


__all__ = ["KINDS", "Loader", "LoaderOptions", "make_loader"]
