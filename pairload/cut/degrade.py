"""The degrade stage: a loader's inputs made from their targets (`degrade=`), as a stage of the cut path.

`Degrade` is made once per loader. For each run it builds the tables of each block of the run once
(`Degrade.begin` → `DegradeRuns`, a `DegradeRun` per block: each row's parameters, noise key, orientation code,
whether it is made, camera raw levels; on the host and copied to the device once), which give each batch its
`PairBatch.degradation` views and make the inputs of a `Cut` (`DegradeRuns.apply`): on a device block, on the stream
the cut is ready on (the Triton kernels, one launch per block, no host synchronisation); on a host block with the
model's numpy executor (`pairload.degrade.host.make_inputs`, which the worker processes run too). Where the stage runs
(after the device cut, in the worker processes, in a DALI feed) is the cut path's (`pairload.cut.paths`): a cutter
that makes the inputs itself has `degrades` set.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np
import torch

from ..errors import ConfigError
from ..degrade.host import make_inputs
from .payload import Cut


class DegradeRun:
    """A block of a run's (`plan.run.Block`) per-sample degradation rows, in plan order: on the host (numpy:
    `host`) and on the loader's device (one copy each, from page-locked memory on a GPU: `table`, `keys`, `code`,
    `made`, `levels`). `table` (rows, columns) float32 (NaN where the row is not made), `keys` int64 (the noise
    keys' bits), `code` int32, `made` int32, `levels` (rows, 5) float32 (black of each packed channel, white) for a
    model that needs them."""

    def __init__(self, degrade, block, applies: np.ndarray | None, sensor_rows, device: torch.device):
        self.degrade = degrade
        index = block.column("index")
        apply = np.ones(len(index), dtype=bool) if applies is None else applies[index]
        table = block.column("params").copy()
        table[~apply] = np.nan  # rows of a source that is not degraded carry no parameters
        self.host = [table, block.column("noise").view(np.int64), block.column("code").astype(np.int32),
                     apply.astype(np.int32)]
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
        self.table, self.keys, self.code, self.made, self.levels = staged
        self.no_code = torch.zeros_like(self.code)  # windows not yet oriented: drawn where they lie
        self.any = bool(apply.any())
        self.block = block

    def span(self, bp) -> tuple[int, int]:
        """(first row, rows) of a planned batch of this block."""
        return self.block.start(bp), len(bp)

    def params(self, bp) -> dict[str, torch.Tensor]:
        """`PairBatch.degradation` of a planned batch of this block: each parameter's (n,) values, views of the
        table."""
        start, n = self.span(bp)
        table = self.table[start:start + n]
        return {name: table[:, k] for k, name in enumerate(self.degrade.columns)}

    def ratios(self) -> np.ndarray | None:
        """Each row's drawn amplification ratio (NaN where not made), for a model that has one."""
        cols = self.degrade.columns
        return self.host[0][:, cols.index("ratio")] if "ratio" in cols else None

    @property
    def host_apply(self) -> np.ndarray:
        return self.host[3].astype(bool)

    def make(self, low, high, plans: Sequence, *, oriented: bool = True) -> None:
        """Write the inputs `low` of the block `high` ((N, H, W, C) torch tensors or numpy arrays holding `plans`'
        rows, in order) for the rows made: on a CUDA block on the current stream, on a host block with numpy.
        `oriented` False: the windows are not yet oriented (a DALI pipeline orients them), so their noise is drawn
        where they lie, as it would be mapped back from the oriented window."""
        if not self.any:
            return
        start, n = self.span(plans[0])
        span = slice(start, start + n + sum(len(bp) for bp in plans[1:]))
        if isinstance(high, torch.Tensor) and high.device.type == "cuda":
            self._launch(low, high, span, oriented)
            return
        table, keys, code, apply, levels = (None if a is None else a[span] for a in self.host)
        make_inputs(self.degrade, _numpy_view(high), _numpy_view(low), table, keys, code if oriented else None,
                    apply, levels)

    def _launch(self, low: torch.Tensor, high: torch.Tensor, span: slice, oriented: bool) -> None:
        from ..degrade.launch import launch

        model, extra = self.degrade.spec, self.degrade.extra
        args = (self.table[span], self.keys[span], (self.code if oriented else self.no_code)[span], self.made[span],
                None if self.levels is None else self.levels[span])
        if not (high.is_contiguous() and low.is_contiguous()):  # blocks are; anything else goes through a copy
            out = torch.empty_like(high, memory_format=torch.contiguous_format)
            launch(model, extra, high.contiguous(), out, *args)
            low.copy_(torch.where(self.made[span].bool().view(-1, 1, 1, 1), out, low))
            return
        launch(model, extra, high, low, *args)


class DegradeRuns:
    """A run's degradation tables, a `DegradeRun` per block of the run, made when a batch of the block first needs
    them (the last `KEPT` kept: the block delivered, the one cut ahead, one more for a DALI feed running ahead)."""

    KEPT = 3

    def __init__(self, stage: "Degrade", run):
        self.stage, self.run = stage, run
        self._blocks: dict[int, DegradeRun] = {}

    def of_block(self, block) -> DegradeRun:
        got = self._blocks.get(block.first)
        if got is None:
            if len(self._blocks) >= self.KEPT:
                self._blocks.pop(next(iter(self._blocks)))
            s = self.stage
            got = self._blocks[block.first] = DegradeRun(s.degrade, block, s.applies, s.sensor_rows, s.device)
        return got

    def of(self, bp) -> DegradeRun:
        return self.of_block(self.run.block_of(bp))

    def params(self, bp) -> dict[str, torch.Tensor]:
        return self.of(bp).params(bp)

    def apply(self, cut: Cut, stream: torch.cuda.Stream | None = None) -> Cut:
        """The cut with its inputs made. A device cut: on `stream` once the cut is ready, the returned cut ready once
        they are made; a host cut: now."""
        if not cut.on_device or stream is None:
            self.make(*cut.sides(), cut.plans, oriented=cut.oriented)
            return cut
        with torch.cuda.stream(stream):
            if cut.ready is not None:
                stream.wait_event(cut.ready)
            self.make(*cut.sides(), cut.plans, oriented=cut.oriented)
            ready = torch.cuda.Event()
            ready.record(stream)
        return replace(cut, ready=ready)

    def make(self, low, high, plans: Sequence, *, oriented: bool = True) -> None:
        """`DegradeRun.make` for `plans`' rows of `low` and `high`: at once when they are one stretch of one block,
        else a batch at a time."""
        tables = self.of(plans[0])
        first = tables.span(plans[0])[0]
        at = first
        stretch = True
        for bp in plans:
            got = self.of(bp)
            stretch = stretch and got is tables and got.span(bp)[0] == at
            at += len(bp)
        if stretch and at - first == len(low):
            tables.make(low, high, plans, oriented=oriented)
            return
        sizes = [len(bp) for bp in plans]
        split = (lambda t: t.split(sizes)) if isinstance(low, torch.Tensor) else \
            (lambda a: np.split(a, np.cumsum(sizes)[:-1]))
        for bp, lo, hi in zip(plans, split(low), split(high)):
            self.of(bp).make(lo, hi, [bp], oriented=oriented)


class Degrade:
    """The degrade stage of one loader: `degrade` (a `Degradation`), `applies` (bool per sample: its source is
    degraded; None: every sample), the split's camera raw rows and the loader's device. `begin(run)` gives a run's
    `DegradeRuns`, made once and kept while the run is (a DALI feed and the batches' rows share it)."""

    name = "degrade"
    KEPT = 3  # runs kept: the current one, the next (cut ahead), one more

    def __init__(self, degrade, applies: np.ndarray | None, sensor_rows, device: torch.device):
        self.degrade, self.applies, self.sensor_rows, self.device = degrade, applies, sensor_rows, device
        self._runs: list[DegradeRuns] = []

    def begin(self, run) -> DegradeRuns:
        for got in self._runs:
            if got.run is run:
                return got
        if len(self._runs) >= self.KEPT:
            self._runs.pop(0)
        self._runs.append(DegradeRuns(self, run))
        return self._runs[-1]


def _numpy_view(t) -> np.ndarray:
    """A (N, H, W, C) CPU tensor's or array's numpy view (uint16 tensors through their int16 bits)."""
    if not isinstance(t, torch.Tensor):
        return t
    if t.dtype == torch.uint16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()
