"""The window task: copy a planned batch's windows (input and target, optionally oriented) out of the
memory-mapped shards into one ring slot, laid out by the split's members. The parent planned every number in it.
Numpy only."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..dihedral import orient
from ..format.members import DEFAULT, Members


class WindowTask(NamedTuple):
    """Fill ring slot `slot` with one batch laid out by `members.batch(n, h, w)`: row j is sample `index[j]`'s
    input window at (y[j], x[j]) of h×w and its target window at the same place (scaled by `members.scale`),
    oriented by `code[j]` (None: not oriented here, the device does it). `evict`: drop the batch's samples from the
    page cache once cut (a split larger than the memory that could cache it). Workers only cut: the loading process
    asks the kernel to read the coming batches (`pairload.read.ahead.ReadAhead`)."""

    slot: int
    index: np.ndarray
    y: np.ndarray
    x: np.ndarray
    code: np.ndarray | None
    h: int
    w: int
    members: Members = DEFAULT
    degrade: "DegradeRows | None" = None
    evict: bool = False


class DegradeRows(NamedTuple):
    """A batch's inputs to make after cutting (the host cutter runs the degrade stage itself): the degradation
    (`pairload.degrade.Degradation`), each row's parameters (n, columns) and noise key (n,) from its plan, and which
    rows it makes (their source holds targets)."""

    degrade: object
    table: np.ndarray
    keys: np.ndarray
    apply: np.ndarray


def fill(ds, low_dst: np.ndarray, high_dst: np.ndarray, index, y, x, code=None, scale: int = 1) -> None:
    """Copy the windows into low_dst (N, h, w, C) and high_dst (N, h·scale, w·scale, C'), oriented by `code` if
    given (for CPU batches: nearly free here, a full extra pass later). `ds`: a `ShardDataset`."""
    h, w = low_dst.shape[1:3]
    arrays = ds.arrays
    codes = code.tolist() if code is not None else [0] * len(index)
    s = scale
    for j, (i, yy, xx, c) in enumerate(zip(np.asarray(index).tolist(), np.asarray(y).tolist(),
                                           np.asarray(x).tolist(), codes)):
        low, high = arrays(i)
        low_dst[j] = orient(low[yy:yy + h, xx:xx + w], c)
        high_dst[j] = orient(high[yy * s:(yy + h) * s, xx * s:(xx + w) * s], c)


def degrade_window(ds, low: np.ndarray, high: np.ndarray, index, code, rows: DegradeRows) -> None:
    """Make the inputs `low` of the cut targets `high` (`make_inputs`); `code`: the orientation the windows were cut
    in (None: not yet oriented). A camera raw model reads each row's levels from the split."""
    from ..degrade.host import make_inputs  # imported by the tasks that degrade: a worker starts without it

    levels = None
    if rows.degrade.spec.needs_levels:
        taken = ds.sensor.take(np.asarray(index))
        levels = taken.levels_high if taken.levels_high is not None else taken.levels
    make_inputs(rows.degrade, high, low, rows.table, rows.keys, code, rows.apply, levels)


def run_window(ds, ring: np.ndarray, task: WindowTask) -> None:
    low, high = task.members.batch(len(task.index), task.h, task.w).views(ring[task.slot])
    fill(ds, low, high, task.index, task.y, task.x, task.code, task.members.scale)
    if task.degrade is not None:
        degrade_window(ds, low, high, task.index, task.code, task.degrade)
    if task.evict:
        ds.dontneed(task.index)
    if ds.transient:  # cached remote shards may be evicted once released: keep no map of them
        ds.drop_evicted()
