"""Executing a loader's degradation where its batches are made. `synthesize` runs on the oriented (N, H, W, C)
sides of one block (one or more planned batches cut together) before they become `PairBatch`es: called by
`batch.batches_of` on the stream the block is ready on (the Triton kernels on a CUDA device, one launch per block, no
host synchronisation), and by DALI's external source where it feeds a pipeline. A host cutter making a batch that
stays on the CPU runs the same numpy executor itself (`pairload.workers.windows.synthesize_window`). `RunTables`
holds a run's per-sample rows (parameters, noise keys, orientation codes, whether each row is synthesized, raw
levels), on the host and copied to the device once per run; `SynthRows` is one planned batch's place in them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from ..errors import ConfigError
from .spec import Degradation


class RunTables:
    """A run's per-sample degradation rows, in plan order: on the host (numpy: `host`) and on the loader's device (one
    copy each, from page-locked memory on a GPU: `table`, `keys`, `code`, `apply`, `levels`). `table` (rows,
    columns) float32 (NaN where the row is not synthesized), `keys` int64 (the noise keys' bits), `code` int32,
    `apply` int32, `levels` (rows, 5) float32 (black of each packed channel, white) for a model that needs them."""

    def __init__(self, degrade: Degradation, plans, applies: np.ndarray | None, sensor_rows, device: torch.device):
        self.degrade = degrade
        index = np.concatenate([bp.index for bp in plans])
        apply = np.ones(len(index), dtype=bool) if applies is None else applies[index]
        table = np.concatenate([bp.synth for bp in plans]).copy()
        table[~apply] = np.nan  # rows of a source that is not synthesized carry no parameters
        self.host = [table, np.concatenate([bp.noise for bp in plans]).view(np.int64),
                     np.concatenate([bp.code for bp in plans]).astype(np.int32), apply.astype(np.int32)]
        if degrade.spec.needs_levels:
            if sensor_rows is None:
                raise ConfigError(f"degradation {degrade.model!r} needs each sample's camera raw levels, and this "
                                  "split has none: pack the clean raw targets with --raw-target packed")
            rows = sensor_rows.take(index)
            levels = rows.levels_high if rows.levels_high is not None else rows.levels
            self.host.append(np.ascontiguousarray(levels, dtype=np.float32))
        else:
            self.host.append(None)
        staged = [None if a is None else torch.from_numpy(a) for a in self.host]
        if device.type == "cuda":
            staged = [None if t is None else t.pin_memory().to(device, non_blocking=True) for t in staged]
        self.table, self.keys, self.code, self.apply, self.levels = staged
        self.no_code = torch.zeros_like(self.code)  # windows not yet oriented: drawn where they lie
        self.any = bool(apply.any())
        self.at: dict[int, tuple[int, int]] = {}
        start = 0
        for bp in plans:
            self.at[id(bp)] = (start, len(bp))
            start += len(bp)

    def rows(self, bp, done: bool = False) -> "SynthRows":
        """A planned batch's place in the tables; `done`: its inputs are synthesized before the batch is converted
        (a DALI feed), so `batch.batches_of` leaves them."""
        start, n = self.at[id(bp)]
        return SynthRows(self, start, n, done)

    def ratios(self) -> np.ndarray | None:
        """Each row's synthesized amplification ratio (NaN where not synthesized), for a model that has one."""
        cols = self.degrade.columns
        return self.host[0][:, cols.index("ratio")] if "ratio" in cols else None

    @property
    def host_apply(self) -> np.ndarray:
        return self.host[3].astype(bool)


@dataclass(frozen=True)
class SynthRows:
    """One planned batch's rows of its run's tables."""

    run: RunTables
    start: int
    n: int
    done: bool = False

    def made(self) -> "SynthRows":
        """The same rows, their inputs already made (`batch.batches_of` leaves them)."""
        return SynthRows(self.run, self.start, self.n, True)

    def params(self) -> dict[str, torch.Tensor]:
        """`PairBatch.degradation`: each parameter's (n,) values, views of the run's table."""
        table = self.run.table[self.start:self.start + self.n]
        return {name: table[:, k] for k, name in enumerate(self.run.degrade.columns)}


def synthesize(low, high, parts: Sequence[SynthRows], *, oriented: bool = True) -> None:
    """Write the inputs `low` of the block `high` ((N, H, W, C) torch tensors or numpy arrays holding `parts`'
    planned batches, in order) for the rows synthesized: on a CUDA block on the current stream, on a host block with
    numpy. `oriented` False: the windows are not yet oriented (a DALI pipeline orients them), so their noise is drawn
    where they lie, as it would be mapped back from the oriented window."""
    run = parts[0].run
    if not run.any:
        return
    start, end = parts[0].start, parts[-1].start + parts[-1].n
    if any(b.start != a.start + a.n or b.run is not run for a, b in zip(parts, parts[1:])) or end - start != len(low):
        sizes = [p.n for p in parts]
        split = (lambda t: t.split(sizes)) if isinstance(low, torch.Tensor) else \
            (lambda a: np.split(a, np.cumsum(sizes)[:-1]))
        for part, lo, hi in zip(parts, split(low), split(high)):
            synthesize(lo, hi, [part], oriented=oriented)  # not one stretch of the run: one batch at a time
        return
    span = slice(start, end)
    model, extra = run.degrade.spec, run.degrade.extra
    if isinstance(high, torch.Tensor) and high.device.type == "cuda":
        from .launch import launch

        args = (run.table[span], run.keys[span], (run.code if oriented else run.no_code)[span], run.apply[span],
                None if run.levels is None else run.levels[span])
        if not (high.is_contiguous() and low.is_contiguous()):  # blocks are; anything else goes through a copy
            out = torch.empty_like(high, memory_format=torch.contiguous_format)
            launch(model, extra, high.contiguous(), out, *args)
            low.copy_(torch.where(run.apply[span].bool().view(-1, 1, 1, 1), out, low))
            return
        launch(model, extra, high, low, *args)
        return
    table, keys, code, apply, levels = (None if a is None else a[span] for a in run.host)
    todo = np.flatnonzero(apply)
    hi, lo = _numpy_view(high), _numpy_view(low)
    lo[todo] = model.numpy(hi[todo], table[todo], keys[todo].view(np.uint64),
                           code[todo] if oriented else np.zeros(len(todo), dtype=np.int32),
                           None if levels is None else levels[todo], extra)


def _numpy_view(t) -> np.ndarray:
    """A (N, H, W, C) CPU tensor's or array's numpy view (uint16 tensors through their int16 bits)."""
    if not isinstance(t, torch.Tensor):
        return t
    if t.dtype == torch.uint16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()
