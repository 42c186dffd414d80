"""Planned batches cut on the host: the part of the `ram` loader that `dali-external` reuses.

A batch is one (2, N, H, W, 3) uint8 array (low, then high) holding the planned windows of its samples. With
`num_workers` > 0, that many numpy-only processes (free of the GIL) copy batches into the slots of one
shared-memory ring, page-locked when `pin` so host→device copies are asynchronous; they run ahead into the next
epoch's first batches while the current one ends. With no workers the calling process copies each batch itself.
"""

from __future__ import annotations

from collections import deque
from typing import Callable

import torch

from ..read.assemble import fill, slot_bytes, slot_view, worker_main
from ..errors import LoaderError
from ..plan import BatchPlan, PlanConfig
from ..read.shards import ShardDataset
from .pool import WorkerPool, worker_error

Run = tuple  # (epoch, consumed): one pass over an epoch, or over the rest of a started one


class HostWindows:
    """`batches(run, plans)` yields (array, release) for each plan of `run`; `release()` (None without workers)
    gives the ring slot back once the caller no longer needs the array. `hold` more slots are added to the ring
    for callers that keep released-later arrays in use (DALI's `no_copy` inputs)."""

    def __init__(self, ds: ShardDataset, cfg: PlanConfig, plan_for: Callable[[int, tuple], list[BatchPlan]], *,
                 num_workers: int, prefetch: int, pin: bool, apply_codes: bool, name: str, hold: int = 0):
        self.ds, self.cfg, self._plan_for = ds, cfg, plan_for
        self.num_workers, self.pin, self.apply_codes, self.name = num_workers, pin, apply_codes, name
        self.prefetch, self.hold = prefetch, hold
        self.pool: WorkerPool | None = None
        self._pending: deque = deque()  # (run, batch, slot) submitted to workers, in delivery order
        self._free: deque = deque()
        self._done: dict[int, object] = {}
        self._plans: dict[Run, list[BatchPlan]] = {}

    @property
    def depth(self) -> int:
        """Ring slots: every worker busy, `prefetch` ready, 2 in copy, `hold` held by the caller."""
        return self.num_workers + self.prefetch + 2 + self.hold

    # ------------------------------------------------------------------ plans

    def plans(self, run: Run, plans: list[BatchPlan] | None = None) -> list[BatchPlan]:
        """The plans of one run; the last two are kept (workers run ahead into the next epoch)."""
        if run not in self._plans:
            if len(self._plans) >= 2:
                self._plans.pop(next(iter(self._plans)))
            self._plans[run] = plans if plans is not None else self._plan_for(*run)
        return self._plans[run]

    # ------------------------------------------------------------------ life cycle

    def set_hold(self, hold: int) -> None:
        """Hold this many slots besides the working ones (a ring of another size: running workers stop first)."""
        if hold != self.hold:
            self.close()
            self.hold = hold

    def start(self) -> WorkerPool | None:
        """Start the workers (if any) and wait until they are ready; no shard data is read."""
        if self.num_workers:
            self._ensure().wait_ready()
        return self.pool

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        self._pending.clear()

    def _ensure(self) -> WorkerPool:
        if self.pool is None:
            ahead = 2 * self.num_workers  # the others work on the next batches; read the ones after them
            self.pool = WorkerPool(worker_main, (self.ds, self.cfg, self.apply_codes, ahead),
                                   num_workers=self.num_workers, depth=self.depth,
                                   slot_bytes=slot_bytes(self.cfg, self.ds.sizes), pin=self.pin, name=self.name,
                                   shared_tasks=True, files=self.ds.files, file_bytes=self.ds.shard_bytes)
            self._free = deque(range(self.depth))
            self._pending.clear()
            self._done.clear()
        return self.pool

    # ------------------------------------------------------------------ batches

    def batches(self, run: Run, plans: list[BatchPlan], reclaim: Callable[[], None] = lambda: None):
        """(array, release) per plan; `reclaim()` is called before slots are counted (the caller frees the slots
        whose copies have finished)."""
        self.plans(run, plans)
        self.ds.check_files()  # a shard truncated or replaced between epochs is an error here, not a SIGBUS later
        try:
            if self.num_workers:
                yield from self._worker_batches(run, plans, reclaim)
            else:
                for bp in plans:
                    h, w = bp.out_hw(self.ds.sizes)
                    host = torch.empty((2, len(bp), h, w, 3), dtype=torch.uint8, pin_memory=self.pin).numpy()
                    fill(self.ds, host, bp, apply_codes=self.apply_codes)
                    yield host, None
        except LoaderError:
            self.close()  # the other workers stop too; the next iteration starts fresh ones
            raise

    def _submit(self, run: Run, b: int, reclaim) -> tuple[Run, int]:
        """Queue tasks until the ring is full, continuing into the following epoch; returns the next (run, b)."""
        reclaim()
        skipped = 0
        while self._free:
            plans = self.plans(run)
            if b >= len(plans):
                run, b = (run[0] + 1, ()), 0
                skipped += 1
                if skipped > 2:  # empty epochs (the rest of a finished epoch): nothing to run ahead into
                    break
                continue
            slot = self._free.popleft()
            self.pool.tasks[0].put((slot, run[0], run[1], b))
            self._pending.append((run, b, slot))
            b += 1
        return run, b

    def _wait(self, slot: int) -> None:
        while slot not in self._done:
            got, err = self.pool.get()
            self._done[got] = err
        err = self._done.pop(slot)
        if err is not None:
            raise worker_error(err)

    def _drain(self) -> None:
        """Wait out tasks queued for a batch sequence that is not going to be used (out-of-order set_epoch)."""
        while self._pending:
            _, _, slot = self._pending.popleft()
            try:
                self._wait(slot)
            except LoaderError:
                raise
            except Exception:  # noqa: BLE001 - the data is discarded anyway
                pass
            self._free.append(slot)

    def _release(self, slot: int, pool: WorkerPool) -> None:
        if pool is self.pool:  # a slot of a pool closed since (after a worker error) is not this ring's
            self._free.append(slot)

    def _worker_batches(self, run: Run, plans: list[BatchPlan], reclaim):
        pool = self._ensure()
        if self._pending and self._pending[0][:2] != (run, 0):
            self._drain()
        nxt = (self._pending[-1][0], self._pending[-1][1] + 1) if self._pending else (run, 0)
        nxt = self._submit(*nxt, reclaim)
        for b, bp in enumerate(plans):
            got, bb, slot = self._pending.popleft()
            assert (got, bb) == (run, b), "internal: ring out of order"
            self._wait(slot)
            h, w = bp.out_hw(self.ds.sizes)
            yield slot_view(pool.ring[slot], len(bp), h, w), (lambda slot=slot, pool=pool: self._release(slot, pool))
            nxt = self._submit(*nxt, reclaim)

