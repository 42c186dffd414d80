"""Executing a loader's degradation on the batches it delivers: each `PairBatch`'s input is synthesized from its
oriented target, on the batch's device (the Triton kernels on CUDA, on the current stream, no host synchronisation;
the numpy executors on the CPU), from the per-sample parameters and noise keys the planner drew; the batch then
carries its parameters (`PairBatch.degradation`). One `RunTables` per planned run: its tables reach the device in one
copy each, as views per batch."""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from ..errors import ConfigError
from .spec import Degradation


class RunTables:
    """A run's per-sample degradation rows (parameters, noise keys, orientation codes, whether each row is
    synthesized) on the loader's device; `view(plans, values)` is the loader's one-copy-per-run staging."""

    def __init__(self, degrade: Degradation, plans, applies: np.ndarray | None,
                 stage: Callable[[list, np.ndarray], Callable]):
        index = np.concatenate([bp.index for bp in plans])
        apply = np.ones(len(index), dtype=bool) if applies is None else applies[index]
        table = np.concatenate([bp.synth for bp in plans]).copy()
        table[~apply] = np.nan  # rows of a source that is not synthesized carry no parameters
        self.table = stage(plans, table)
        self.keys = stage(plans, np.concatenate([bp.noise for bp in plans]).view(np.int64))
        self.code = stage(plans, np.concatenate([bp.code for bp in plans]).astype(np.int32))
        self.apply = stage(plans, apply.astype(np.int32))
        self.any = bool(apply.any())


def synthesize(degrade: Degradation, batch, tables: RunTables, bp) -> None:
    """Write `batch.low` from `batch.high` for the rows `tables` synthesize, and attach `batch.degradation`."""
    table = tables.table(bp)
    batch.degradation = {name: table[:, k] for k, name in enumerate(degrade.columns)}
    if not tables.any:
        return
    levels = None
    if degrade.spec.needs_levels:
        s = batch.sensor
        if s is None:
            raise ConfigError(f"degradation {degrade.model!r} needs the batch's camera raw levels, and this split has "
                              "none: pack the clean raw targets with --raw-target packed")
        black, white = (s.black_high, s.white_high) if s.black_high is not None else (s.black, s.white)
        levels = torch.cat([black, white.view(-1, 1)], dim=1).contiguous()
    if batch.high.device.type == "cuda":
        from .launch import launch

        launch(degrade.spec, degrade.extra, batch.high, batch.low, table, tables.keys(bp), tables.code(bp),
               tables.apply(bp), levels)
    else:
        _numpy(degrade, batch, table, tables.keys(bp), tables.code(bp), tables.apply(bp), levels)
    if degrade.spec.needs_levels and "ratio" in degrade.columns:
        _sensor_ratio(batch, table[:, degrade.columns.index("ratio")], tables.apply(bp))


def _nhwc(t: torch.Tensor) -> np.ndarray:
    """A N×C×H×W batch tensor's N×H×W×C numpy view (uint16 through its int16 bits)."""
    t = t.permute(0, 2, 3, 1)
    if t.dtype == torch.uint16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def _numpy(degrade, batch, table, keys, code, apply, levels) -> None:
    rows = np.flatnonzero(apply.numpy())
    high, low = _nhwc(batch.high), _nhwc(batch.low)
    lv = None if levels is None else levels.numpy()[rows]
    low[rows] = degrade.spec.numpy(high[rows], table.numpy()[rows], keys.numpy()[rows].view(np.uint64),
                                   code.numpy()[rows], lv, degrade.extra)


def _sensor_ratio(batch, ratio: torch.Tensor, apply: torch.Tensor) -> None:
    """A synthesized raw input's amplification is the drawn ratio, its exposure the target's over it."""
    values = batch.sensor.values
    on = apply.bool()
    values[:, 0] = torch.where(on, ratio, values[:, 0])
    values[:, 1] = torch.where(on, values[:, 2] / ratio, values[:, 1])
