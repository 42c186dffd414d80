"""Host-side execution of a batch plan: copy the planned windows out of the memory-mapped shards.

Used in the loading process and in the RAM loader's worker processes, which write into slots of one
shared-memory ring. Numpy only: workers never import torch, so each costs a few tens of MB, not hundreds.
Workers watch their parent and exit within a fraction of a second when it is gone (killed, SIGTERM), so no
orphan keeps the ring alive.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from multiprocessing import shared_memory

import numpy as np

from ..errors import PairloadError
from ..plan import HFLIP, TRANSPOSE, VFLIP, BatchPlan, PlanConfig, key_hashes, plan_epoch
from .shards import ShardDataset

READY = -2  # result-queue slot number a worker sends once it has opened the shards and the ring
FAILED = -1  # ... and the one it sends when it could not


def _oriented(window: np.ndarray, code: int) -> np.ndarray:
    """A view of `window` under the planner's code: transpose, then vertical flip, then horizontal flip."""
    if code & TRANSPOSE:
        window = window.transpose(1, 0, 2)
    if code & VFLIP:
        window = window[::-1]
    if code & HFLIP:
        window = window[:, ::-1]
    return window


def fill(ds: ShardDataset, dst: np.ndarray, bp: BatchPlan, apply_codes: bool = False) -> None:
    """Copy batch `bp`'s windows into dst, a (2, N, H, W, 3) uint8 array (low, then high). With `apply_codes`
    the flips/transposes are applied while copying (for CPU batches: nearly free here, a full extra pass later)."""
    h, w = dst.shape[2:4]
    arrays = ds.arrays
    codes = bp.code.tolist() if apply_codes else [0] * len(bp)
    for j, (i, y, x, c) in enumerate(zip(bp.index.tolist(), bp.y.tolist(), bp.x.tolist(), codes)):
        low, high = arrays(i)
        dst[0, j] = _oriented(low[y:y + h, x:x + w], c)
        dst[1, j] = _oriented(high[y:y + h, x:x + w], c)


def slot_bytes(cfg: PlanConfig, hw: np.ndarray) -> int:
    """Bytes of one ring slot: a batch of low and high, crops or the split's largest whole image (the largest
    batch of any schedule stage)."""
    whole = int((hw[:, 0] * hw[:, 1]).max())
    return max(2 * st.batch_size * (st.crop * st.crop if st.crop is not None else whole) * 3 for st in cfg.stages)


def slot_view(flat: np.ndarray, n: int, h: int, w: int) -> np.ndarray:
    """The (2, n, h, w, 3) array at the start of one ring slot (a flat uint8 row)."""
    return flat[: 2 * n * h * w * 3].reshape(2, n, h, w, 3)


def attach(name: str) -> shared_memory.SharedMemory:
    """Open the loader's shared-memory block in a worker. Workers are spawned by the block's owner and share its
    resource tracker, so attaching needs no bookkeeping here: the owner alone unlinks the block."""
    if sys.version_info >= (3, 13):
        return shared_memory.SharedMemory(name=name, track=False)
    return shared_memory.SharedMemory(name=name)


def _watch_parent(parent: int, period: float = 0.2) -> None:
    """Exit as soon as the parent is gone (re-parented): a killed loader leaves no worker behind."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(period)
        os._exit(0)

    threading.Thread(target=watch, name="pairload-parent-watch", daemon=True).start()


def worker_start(parent: int, shm_name: str, depth: int, slot_bytes: int, results, setup):
    """The start every ring worker shares: watch the parent, run `setup()`, attach the ring, report READY; on any
    failure report FAILED (the parent raises it) and return None. Returns (shared memory, ring, setup's result)."""
    _watch_parent(parent)
    try:
        state = setup()
        shm = attach(shm_name)
        ring = np.ndarray((depth, slot_bytes), dtype=np.uint8, buffer=shm.buf)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        results.put((FAILED, (type(exc).__name__, str(exc))))
        return None
    results.put((READY, os.getpid()))
    return shm, ring, state


def worker_main(source: ShardDataset, config: PlanConfig, apply_codes: bool, ahead: int, worker: int, shm_name: str,
                depth: int, slot_bytes: int, tasks, results, parent: int) -> None:
    """A RAM-loader worker: plans epochs itself (the planner is pure) and fills the ring slots it is told to. Before
    each batch it asks the kernel to read the samples of the batch `ahead` places later (`ShardDataset.willneed`),
    so a split that is not in the page cache streams in ahead of the copies."""
    started = worker_start(parent, shm_name, depth, slot_bytes, results, lambda: source)
    if started is None:
        return
    shm, ring, ds = started
    key_hash = key_hashes(ds.keys)
    plans: dict[tuple, list[BatchPlan]] = {}
    while True:
        msg = tasks.get()
        if msg is None:
            break
        slot, epoch, consumed, b = msg
        try:
            run = (epoch, consumed)
            if run not in plans:
                if len(plans) >= 2:
                    plans.pop(next(iter(plans)))
                plans[run] = plan_epoch(config, key_hash, ds.sizes, epoch, consumed=consumed, groups=ds.groups)
            bp = plans[run][b]
            if ahead and b + ahead < len(plans[run]):
                ds.willneed(plans[run][b + ahead].index.tolist())
            h, w = bp.out_hw(ds.sizes)
            fill(ds, slot_view(ring[slot], len(bp), h, w), bp, apply_codes)
            results.put((slot, None))
        except PairloadError as exc:
            results.put((slot, (type(exc).__name__, str(exc))))
        except BaseException as exc:  # noqa: BLE001
            results.put((slot, ("RuntimeError", f"worker failed on epoch {epoch} batch {b}: "
                                                f"{''.join(traceback.format_exception_only(exc)).strip()}")))
    del ring
    shm.close()
