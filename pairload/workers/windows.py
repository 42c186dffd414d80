"""The window task: copy a planned batch's crop windows (both images, optionally oriented) out of the
memory-mapped shards into one ring slot. The parent planned every number in it. Numpy only."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..dihedral import orient


class WindowTask(NamedTuple):
    """Fill ring slot `slot` with a (2, N, h, w, 3) batch: row j is sample `index[j]`'s window at (y[j], x[j]),
    oriented by `code[j]` (None: not oriented here, the device does it). `ahead`: samples of a coming batch to
    ask the kernel to read now (a split not in the page cache streams in ahead of the copies)."""

    slot: int
    index: np.ndarray
    y: np.ndarray
    x: np.ndarray
    code: np.ndarray | None
    h: int
    w: int
    ahead: tuple = ()


def slot_view(flat: np.ndarray, n: int, h: int, w: int) -> np.ndarray:
    """The (2, n, h, w, 3) array at the start of one ring slot (a flat uint8 row)."""
    return flat[: 2 * n * h * w * 3].reshape(2, n, h, w, 3)


def fill(ds, dst: np.ndarray, index, y, x, code=None) -> None:
    """Copy the windows into dst, a (2, N, H, W, 3) uint8 array (low, then high), oriented by `code` if given
    (for CPU batches: nearly free here, a full extra pass later). `ds`: a `ShardDataset`."""
    h, w = dst.shape[2:4]
    arrays = ds.arrays
    codes = code.tolist() if code is not None else [0] * len(index)
    for j, (i, yy, xx, c) in enumerate(zip(np.asarray(index).tolist(), np.asarray(y).tolist(),
                                           np.asarray(x).tolist(), codes)):
        low, high = arrays(i)
        dst[0, j] = orient(low[yy:yy + h, xx:xx + w], c)
        dst[1, j] = orient(high[yy:yy + h, xx:xx + w], c)


def run_window(ds, ring: np.ndarray, task: WindowTask) -> None:
    if task.ahead:
        ds.willneed(task.ahead)
    fill(ds, slot_view(ring[task.slot], len(task.index), task.h, task.w), task.index, task.y, task.x, task.code)
    if ds.transient:  # cached remote shards may be evicted once released: keep no map of them
        ds.drop_evicted()
