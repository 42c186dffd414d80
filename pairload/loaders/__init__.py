"""`make_loader`: one entry point for every backend; all of them yield `PairBatch`.

The kinds are the registry in `pairload.kinds` (one entry per kind: the class that executes it and its preset
options). Every kind executes the one planner's batches (`pairload.plan`); ram, wds and dali-external cut them with
one of the cutters (`cutters`).
"""

from __future__ import annotations

import os
from typing import Any

from ..kinds import KINDS, lookup
from ..plan import REQUIRED
from .base import Loader, LoaderOptions, check_options


def make_loader(kind: str, source: str | os.PathLike | dict, *, split: str = "train", batch_size: int | None = None,
                crop: Any = REQUIRED, seed: int = 0, rank: int = 0, world_size: int = 1, num_workers: int = 0,
                device: Any = "cpu", last_batch: str = "drop", augment: bool = True, shuffle: bool = True,
                repeats: int = 1, weights: dict | None = None, epoch_size: int | None = None, schedule: Any = (),
                degrade: Any = None, degrade_sources: Any = (), clips: Any = None, **backend: Any):
    """A loader over `source` (a shard folder; the dataset folder for "dali-file") for this rank.

    Planning (every kind over shards): `repeats=k` passes over the split per epoch, each with fresh crops and flips.
    `source={"real": folder, "made": folder}` with `weights={"real": 1, "made": 3}` and `epoch_size=N`: each
    epoch is N draws mixed in proportion to the weights, every batch mixing the sources (`PairBatch.source` names
    each row's); within a source no sample is drawn again before all were (across epochs). A value may be
    (folder, split). `schedule=[(step, crop, batch), …]` or "0:128:8,92000:160:5": from each global step on
    (batches per rank since epoch 0) batches of that crop and per-rank size; `batch_size`/`crop` are then the
    first phase's and may be left out.

    Degradation: `degrade="lowlight"` (a model of `pairload.degrade.MODELS`, with ranges: "lowlight,gamma=2..3", or a
    `pairload.degrade.Degradation`) makes each sample's input from its target, with parameters and noise drawn from
    (seed, epoch, key) (`PairBatch.degradation` holds them); a targets-only pack needs it, and a pair pack's stored
    inputs are then ignored. With mixed sources, `degrade_sources=("made",)` names the sources it applies to
    (default: all).

    Clips (video and burst splits packed with `--sequences`): `clips=5` (or "5,stride=2,start=grid,short=pad", a
    `pairload.plan.Clips`) makes each batch `batch_size` clips of 5 consecutive frames of one sequence, one window
    and one orientation for every frame of both sides: `PairBatch.low`/`high` N×T×C×H×W.

    Every kind has `len()` (batches per epoch on this rank; `batches_in(e)` for any epoch), `set_epoch(e)`,
    `state_dict()`/`load_state_dict()`, `close()`, and yields `PairBatch`es on `device` of the split's member types
    (uint8 N×3×crop×crop by default; `pairload.format.members`). `crop`: a size (square windows), (height, width)
    or None (whole images; `pairload.plan.crops`). `num_workers` is each kind's CPU parallelism: worker processes
    (ram, wds) or DALI CPU threads. Backend options: ram: `resident=True` keeps the split in device memory,
    `zero_copy` (on a CUDA device the GPU cuts the crops from the page cache, no workers: None = when it can, with a
    warning saying why not; also dali-external), `pin_budget` (bytes it may pin), `prefetch`, `timeout` (seconds to
    wait for a worker's batch; also wds, dali-external); wds: `shuffle_buffer` (samples shuffled together: whole
    shards, default 1 GiB of pairs), `prefetch`; DALI: `prefetch`, and for dali-file `low_dir`, `high_dir`,
    `pairs_file`. An unknown option is a ConfigError that lists the accepted ones.
    """
    entry = lookup(kind)
    opts = LoaderOptions.build(split=split, batch_size=batch_size, crop=crop, seed=seed, rank=rank,
                               world_size=world_size, num_workers=num_workers, device=str(device),
                               last_batch=last_batch, augment=augment, shuffle=shuffle, repeats=repeats,
                               weights=weights or (), epoch_size=epoch_size, schedule=schedule or (),
                               degrade=degrade, degrade_sources=degrade_sources, clips=clips)
    cls = entry.load()
    check_options(cls, backend, f"make_loader({kind!r})", entry.options)
    return cls(source, opts, **entry.preset, **backend)


__all__ = ["KINDS", "Loader", "LoaderOptions", "make_loader"]
