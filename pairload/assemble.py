"""Host-side execution of a batch plan: copy the planned windows out of the memory-mapped shards.

Used in the loading process and in the RAM loader's worker processes, which write into slots of one
shared-memory ring. Numpy only: workers never import torch, so each costs a few tens of MB, not hundreds.
"""

from __future__ import annotations

import sys
import traceback
from multiprocessing import shared_memory

import numpy as np

from .errors import PairloadError
from .plan import BatchPlan, PlanConfig, key_hashes, plan_epoch
from .shards import ShardDataset


def fill(ds: ShardDataset, dst: np.ndarray, bp: BatchPlan) -> None:
    """Copy batch `bp`'s windows into dst, a (2, N, H, W, 3) uint8 array (low, then high)."""
    h, w = dst.shape[2:4]
    arrays = ds.arrays
    for j, (i, y, x) in enumerate(zip(bp.index.tolist(), bp.y.tolist(), bp.x.tolist())):
        low, high = arrays(i)
        dst[0, j] = low[y:y + h, x:x + w]
        dst[1, j] = high[y:y + h, x:x + w]


def out_hw(cfg: PlanConfig, hw: np.ndarray, bp: BatchPlan) -> tuple[int, int]:
    if cfg.crop is not None:
        return cfg.crop, cfg.crop
    h, w = hw[bp.index[0]]
    return int(h), int(w)


def slot_view(flat: np.ndarray, n: int, h: int, w: int) -> np.ndarray:
    """The (2, n, h, w, 3) array at the start of one ring slot (a flat uint8 row)."""
    return flat[: 2 * n * h * w * 3].reshape(2, n, h, w, 3)


def attach(name: str) -> shared_memory.SharedMemory:
    """Open the loader's shared-memory block in a worker. Workers are spawned by the block's owner and share its
    resource tracker, so attaching needs no bookkeeping here: the owner alone unlinks the block."""
    if sys.version_info >= (3, 13):
        return shared_memory.SharedMemory(name=name, track=False)
    return shared_memory.SharedMemory(name=name)


def worker_main(root: str, split: str, cfg: dict, shm_name: str, depth: int, slot_bytes: int, tasks, results) -> None:
    """A RAM-loader worker: plans epochs itself (the planner is pure) and fills the ring slots it is told to."""
    try:
        ds = ShardDataset(root, split)
        config = PlanConfig(**cfg)
        key_hash = key_hashes(ds.keys)
        shm = attach(shm_name)
        ring = np.ndarray((depth, slot_bytes), dtype=np.uint8, buffer=shm.buf)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        results.put((-1, (type(exc).__name__, str(exc))))
        return
    plans: dict[int, list[BatchPlan]] = {}
    while True:
        msg = tasks.get()
        if msg is None:
            break
        slot, epoch, b = msg
        try:
            if epoch not in plans:
                if len(plans) >= 2:
                    plans.pop(min(plans))
                plans[epoch] = plan_epoch(config, key_hash, ds.sizes, epoch)
            bp = plans[epoch][b]
            h, w = out_hw(config, ds.sizes, bp)
            fill(ds, slot_view(ring[slot], len(bp), h, w), bp)
            results.put((slot, None))
        except PairloadError as exc:
            results.put((slot, (type(exc).__name__, str(exc))))
        except BaseException as exc:  # noqa: BLE001
            results.put((slot, ("RuntimeError", f"worker failed on epoch {epoch} batch {b}: "
                                                f"{''.join(traceback.format_exception_only(exc)).strip()}")))
    del ring
    shm.close()
