"""Executing a loader's degradation where its batches are made: `batch.batches_of` calls `synthesize` on the
oriented (N, H, W, C) sides of one block (one or more planned batches cut together), before they are split into
`PairBatch`es, on the stream the block is ready on: the Triton kernels on a CUDA device (one launch per block, no
host synchronisation), the numpy executors on the CPU. `RunTables` holds a run's per-sample rows (parameters,
noise keys, orientation codes, whether each row is synthesized, raw levels), copied to the device once per run;
`SynthRows` is one planned batch's place in them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from ..errors import ConfigError
from .spec import Degradation


class RunTables:
    """A run's per-sample degradation rows on the loader's device, in plan order (one copy each, from page-locked
    memory on a GPU): `table` (rows, columns) float32 (NaN rows where the row is not synthesized), `keys` int64
    (the noise keys' bits), `code` int32, `apply` int32, `levels` (rows, 5) float32 (black of each packed channel,
    white) for a model that needs them."""

    def __init__(self, degrade: Degradation, plans, applies: np.ndarray | None, sensor_rows, device: torch.device):
        self.degrade = degrade
        index = np.concatenate([bp.index for bp in plans])
        apply = np.ones(len(index), dtype=bool) if applies is None else applies[index]
        table = np.concatenate([bp.synth for bp in plans]).copy()
        table[~apply] = np.nan  # rows of a source that is not synthesized carry no parameters
        self.host_table, self.host_apply = table, apply
        arrays = [table, np.concatenate([bp.noise for bp in plans]).view(np.int64),
                  np.concatenate([bp.code for bp in plans]).astype(np.int32), apply.astype(np.int32)]
        if degrade.spec.needs_levels:
            if sensor_rows is None:
                raise ConfigError(f"degradation {degrade.model!r} needs each sample's camera raw levels, and this "
                                  "split has none: pack the clean raw targets with --raw-target packed")
            rows = sensor_rows.take(index)
            levels = rows.levels_high if rows.levels_high is not None else rows.levels
            arrays.append(np.ascontiguousarray(levels, dtype=np.float32))
        staged = [torch.from_numpy(a) for a in arrays]
        if device.type == "cuda":
            staged = [t.pin_memory().to(device, non_blocking=True) for t in staged]
        self.table, self.keys, self.code, self.apply = staged[:4]
        self.levels = staged[4] if len(staged) > 4 else None
        self.any = bool(apply.any())
        self.at: dict[int, tuple[int, int]] = {}
        start = 0
        for bp in plans:
            self.at[id(bp)] = (start, len(bp))
            start += len(bp)

    def rows(self, bp) -> "SynthRows":
        start, n = self.at[id(bp)]
        return SynthRows(self, start, n)

    def ratios(self) -> np.ndarray | None:
        """Each row's synthesized amplification ratio (NaN where not synthesized), for a model that has one."""
        cols = self.degrade.columns
        return self.host_table[:, cols.index("ratio")] if "ratio" in cols else None


@dataclass(frozen=True)
class SynthRows:
    """One planned batch's rows of its run's tables."""

    run: RunTables
    start: int
    n: int

    def params(self) -> dict[str, torch.Tensor]:
        """`PairBatch.degradation`: each parameter's (n,) values, views of the run's table."""
        table = self.run.table[self.start:self.start + self.n]
        return {name: table[:, k] for k, name in enumerate(self.run.degrade.columns)}


def synthesize(low: torch.Tensor, high: torch.Tensor, rows: Sequence) -> None:
    """Write the inputs `low` of the block `high` (oriented (N, H, W, C) sides holding `rows`' planned batches, in
    order) for the rows synthesized, on the current stream."""
    parts = [r.synth for r in rows]
    run = parts[0].run
    if not run.any:
        return
    start, end = parts[0].start, parts[-1].start + parts[-1].n
    if any(b.start != a.start + a.n or b.run is not run for a, b in zip(parts, parts[1:])) or end - start != len(low):
        for r, lo, hi in zip(rows, low.split([p.n for p in parts]), high.split([p.n for p in parts])):
            synthesize(lo, hi, [r])  # batches of the block that are not one stretch of the run: one at a time
        return
    span = slice(start, end)
    levels = None if run.levels is None else run.levels[span]
    args = (run.table[span], run.keys[span], run.code[span], run.apply[span], levels)
    model, extra = run.degrade.spec, run.degrade.extra
    if high.device.type == "cuda":
        from .launch import launch

        if not (high.is_contiguous() and low.is_contiguous()):  # blocks are; anything else goes through a copy
            out = torch.empty_like(high, memory_format=torch.contiguous_format)
            launch(model, extra, high.contiguous(), out, *args)
            low.copy_(torch.where(run.apply[span].bool().view(-1, 1, 1, 1), out, low))
            return
        launch(model, extra, high, low, *args)
        return
    table, keys, code, apply, levels = (None if a is None else a.numpy() for a in args)
    todo = np.flatnonzero(apply)
    hi, lo = _numpy_view(high), _numpy_view(low)
    lo[todo] = model.numpy(hi[todo], table[todo], keys[todo].view(np.uint64), code[todo],
                           None if levels is None else levels[todo], extra)


def _numpy_view(t: torch.Tensor) -> np.ndarray:
    """A (N, H, W, C) CPU tensor's numpy view (uint16 through its int16 bits)."""
    if t.dtype == torch.uint16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()
