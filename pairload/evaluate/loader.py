"""The validation loader over whole test images (`whole_image_loader`): each image once across ranks, in the
split's order, at its own size.

Whole images of different sizes cannot be stacked into one batch, and the planner refuses `crop=None` with a
batch of several such images. So when a split's images differ in size (the real test sets of FiveK, SICE and
LSRW do), this loader takes them one at a time, as BasicSR-family validation always does, and `batch_size`
applies only when every image has the same size (LOL). The reference loop (`pairload.recipes.data`) and
`pairload.lightning.PairDataModule` validate through it.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import numpy as np

from ..plan.clips import Clips


def whole_image_loader(source: str | os.PathLike | Any, split: str = "test", *, batch_size: int = 1, rank: int = 0,
                       world_size: int = 1, device: Any = "cpu", num_workers: int = 0, seed: int = 0,
                       cache_dir: str | os.PathLike | None = None, cache_limit: int | None = None,
                       storage_options: dict | None = None, clips: Any = None, **options: Any):
    """A `ram` loader over the whole images of `split` of `source` (a shard folder, its URL or an opened
    `ShardDataset`): no crop, no shuffling, no flips, each image exactly once across the `world_size` ranks
    (`last_batch='partial'`: the last batches may be short, and ranks may get different numbers of batches).
    Images come `batch_size` at a time when they all have one size, one at a time otherwise. `clips` (a split packed
    with --sequences: `make_loader`'s clip policy) makes them clips of whole frames on the grid (start="grid", the
    same every epoch). Other `options` (`degrade=`, `prefetch=`, ...) go to `make_loader`."""
    from ..loaders import make_loader
    from ..read.shards import open_shards

    remote = {"cache_dir": cache_dir, "cache_limit": cache_limit, "storage_options": storage_options}
    ds = open_shards(source, split, **remote)  # the index is mapped once, for the sizes and for the loader
    if len(np.unique(ds.sizes, axis=0)) > 1:
        batch_size = 1
    clips = Clips.of(clips)
    if clips is not None:
        clips = replace(clips, start="grid")
    return make_loader("ram", ds, split=split, batch_size=batch_size, crop=None, last_batch="partial",
                       augment=False, shuffle=False, seed=seed, rank=rank, world_size=world_size,
                       num_workers=num_workers, device=device, clips=clips,
                       **{k: v for k, v in remote.items() if v is not None}, **options)
