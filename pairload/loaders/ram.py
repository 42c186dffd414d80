"""The RAM-cached loader: crops copied straight out of memory-mapped shards, async copies to the device.

Sharing: the shards are memory-mapped read-only, so every worker and every rank on a node reads the one copy
of the split held in the page cache; no process holds a private copy.

Assembly: with `num_workers=0` the loading process copies the planned windows itself. With workers, that
many numpy-only processes (free of the GIL) copy batches into the slots of one shared-memory ring, which is
page-locked so the host→device copy is asynchronous; the copy and the flips/transposes run on a side CUDA
stream and are handed to the caller's stream one batch ahead. Workers keep running across epochs and start
on the next epoch's first batches while the current one ends.

`resident=True` uploads the split to device memory once and cuts each batch with one gather that applies the
crop and the flips/transposes together.
"""

from __future__ import annotations

import os
from collections import deque

import numpy as np
import torch

from ..assemble import fill, out_hw, slot_bytes, slot_view, worker_main
from ..batch import make_batch
from ..errors import ConfigError, LoaderError
from ..plan import HFLIP, TRANSPOSE, VFLIP, BatchPlan
from ..shards import ShardDataset
from .base import LoaderOptions, PlannedLoader
from .device import DeviceStage
from .pool import WorkerPool, worker_error


def _warn_if_larger_than_memory(ds: ShardDataset) -> None:
    import warnings

    import psutil

    mem = psutil.virtual_memory()
    if ds.nbytes > 0.9 * (mem.available + getattr(mem, "cached", 0)):
        warnings.warn(f"split {ds.split!r} is {ds.nbytes / 1e9:.1f} GB, more than the memory that could cache it "
                      f"({(mem.available + getattr(mem, 'cached', 0)) / 1e9:.1f} GB): every epoch of the ram loader "
                      "will read from disk at random; the wds loader reads each shard once, sequentially",
                      stacklevel=3)


class RamLoader(PlannedLoader):
    def __init__(self, source: str | os.PathLike | ShardDataset, opts: LoaderOptions, *, resident: bool = False,
                 prefetch: int = 4):
        self.ds = source if isinstance(source, ShardDataset) else ShardDataset(source, opts.split)
        super().__init__(self.ds.keys, self.ds.sizes, self.ds.split, opts)
        if prefetch < 1:
            raise ConfigError(f"prefetch={prefetch}: expected at least 1 batch")
        self.prefetch = prefetch
        self.resident = resident
        _warn_if_larger_than_memory(self.ds)
        self._cuda = self.device.type == "cuda"
        self._stage = DeviceStage(self.device)
        self._store = self._upload() if resident else None
        self._workers: WorkerPool | None = None
        self._pending: deque = deque()  # (run, batch, slot) submitted to workers, in delivery order; run: (epoch, consumed)
        self._free: deque = deque()
        self._done: dict[int, object] = {}
        self._plans: dict[tuple, list[BatchPlan]] = {}

    def start_workers(self) -> None:
        """Start the worker processes now and wait until they are ready (no shard data is read), so that the first
        batch does not also pay for process start-up. Iterating starts them anyway."""
        if self.opts.num_workers and self._store is None:
            self._ensure_workers().wait_ready()

    def close(self) -> None:
        """Stop the worker processes and free the shared ring (also done when the loader is garbage collected)."""
        if self._workers is not None:
            self._workers.close()
            self._workers = None
        self._pending.clear()

    # ------------------------------------------------------------------ plans

    def _run_plans(self, run: tuple, plans: list[BatchPlan] | None = None) -> list[BatchPlan]:
        """The plans of one pass over an epoch, run = (epoch, consumed); the last two are kept."""
        if run not in self._plans:
            if len(self._plans) >= 2:
                self._plans.pop(next(iter(self._plans)))
            self._plans[run] = plans if plans is not None else super().plan_for(*run)
        return self._plans[run]

    # ------------------------------------------------------------------ worker path

    def _ensure_workers(self) -> WorkerPool:
        if self._workers is None:
            depth = self.opts.num_workers + self.prefetch + 2  # every worker busy, `prefetch` ready, 2 in copy
            ahead = 2 * self.opts.num_workers  # the others work on the next batches; read the ones after them
            self._workers = WorkerPool(worker_main, (str(self.ds.root), self.ds.split, self.cfg, not self._cuda, ahead),
                                       num_workers=self.opts.num_workers, depth=depth, slot_bytes=slot_bytes(self.cfg, self.hw),
                                       pin=self._cuda, name="pairload-ram", shared_tasks=True, files=self.ds.files,
                                       file_bytes=self.ds.shard_bytes)
            self._free = deque(range(depth))
            self._pending.clear()
            self._stage.clear()
            self._done.clear()
        return self._workers

    def _submit(self, run: tuple, b: int) -> tuple[tuple, int]:
        """Queue tasks until the ring is full, continuing into the following epoch; returns the next (run, b)."""
        w = self._workers
        self._stage.reclaim()
        skipped = 0
        while self._free:
            plans = self._run_plans(run)
            if b >= len(plans):
                run, b = (run[0] + 1, ()), 0
                skipped += 1
                if skipped > 2:  # empty epochs (the rest of a finished epoch): nothing to run ahead into
                    break
                continue
            slot = self._free.popleft()
            w.tasks[0].put((slot, run[0], run[1], b))
            self._pending.append((run, b, slot))
            b += 1
        return run, b

    def _wait(self, slot: int) -> None:
        while slot not in self._done:
            got, err = self._workers.get()
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

    def _worker_batches(self, run: tuple, plans: list[BatchPlan]):
        w = self._ensure_workers()
        if self._pending and self._pending[0][:2] != (run, 0):
            self._drain()
        nxt = (self._pending[-1][0], self._pending[-1][1] + 1) if self._pending else (run, 0)
        nxt = self._submit(*nxt)
        for b, bp in enumerate(plans):
            ep, bb, slot = self._pending.popleft()
            assert (ep, bb) == (run, b), "internal: ring out of order"
            self._wait(slot)
            h, w_ = out_hw(self.cfg, self.hw, bp)
            host = torch.from_numpy(slot_view(w.ring[slot], len(bp), h, w_))
            # on a CPU device the worker already applied the flips (apply_codes)
            yield self._stage.put(host, self._code(bp), self._keys(bp), self._padded(bp),
                                  release=lambda slot=slot: self._free.append(slot))
            nxt = self._submit(*nxt)

    # ------------------------------------------------------------------ in-process path

    def _inline_batches(self, plans: list[BatchPlan]):
        for bp in plans:
            h, w = out_hw(self.cfg, self.hw, bp)
            host = torch.empty((2, len(bp), h, w, 3), dtype=torch.uint8, pin_memory=self._cuda)
            fill(self.ds, host.numpy(), bp, apply_codes=not self._cuda)
            yield self._stage.put(host, self._code(bp), self._keys(bp), self._padded(bp))

    # ------------------------------------------------------------------ shared

    def _keys(self, bp: BatchPlan) -> list[str]:
        return [self.keys[i] for i in bp.index.tolist()]

    def _code(self, bp: BatchPlan) -> torch.Tensor | None:
        return torch.from_numpy(bp.code) if self.cfg.augment else None

    def _padded(self, bp: BatchPlan) -> torch.Tensor:
        return torch.from_numpy(bp.padded.copy())

    def plan_for(self, epoch: int, consumed: tuple = ()) -> list[BatchPlan]:
        run = (epoch, consumed)
        return self._plans[run] if run in self._plans else super().plan_for(epoch, consumed)

    def _batches(self, epoch: int, plans: list[BatchPlan], consumed: tuple):
        run = (epoch, consumed)
        self._run_plans(run, plans)
        if self._store is not None:
            yield from self._resident_batches(plans)
            return
        self.ds.check_files()  # a shard truncated or replaced between epochs is an error here, not a SIGBUS later
        gen = self._worker_batches(run, plans) if self.opts.num_workers else self._inline_batches(plans)
        try:
            yield from self._stage.one_ahead(gen)  # batch k+1 is copied while the caller works on batch k
        except LoaderError:
            self.close()  # the other workers stop too; the next iteration starts fresh ones
            raise

    # ------------------------------------------------------------------ device-resident path

    def _upload(self) -> dict:
        """The split as one (pixels, 6) uint8 tensor on the device: low RGB then high RGB of each pixel."""
        sizes = self.hw[:, 0] * self.hw[:, 1]
        need = int(sizes.sum()) * 6
        if self._cuda:
            free, total = torch.cuda.mem_get_info(self.device)
            if need > 0.8 * free:
                raise ConfigError(f"split {self.ds.split!r} needs {need / 1e9:.2f} GB of device memory to be resident but "
                                  f"only {free / 1e9:.2f} GB of {total / 1e9:.2f} GB are free; use resident=False")
        base = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        store = torch.empty((int(sizes.sum()), 6), dtype=torch.uint8, device=self.device)
        chunk = torch.empty((int(sizes.max()), 6), dtype=torch.uint8, pin_memory=self._cuda)
        for i in range(len(self.keys)):
            low, high = self.ds.arrays(i)
            n = int(sizes[i])
            c = chunk[:n].numpy()
            c[:, :3] = low.reshape(n, 3)
            c[:, 3:] = high.reshape(n, 3)
            store[base[i]:base[i] + n].copy_(chunk[:n])  # synchronous: the staging buffer is reused next
        return {"pixels": store, "base": torch.from_numpy(base).to(self.device),
                "width": torch.from_numpy(self.hw[:, 1].copy()).to(self.device)}

    def _resident_batches(self, plans: list[BatchPlan]):
        """One gather per batch: each output pixel's source index already includes crop, transpose and flips."""
        dev, s = self.device, self._store
        if not plans:
            return
        # the whole epoch's plan goes to the device in one copy per field
        cat = lambda f: torch.from_numpy(np.concatenate([getattr(bp, f) for bp in plans])).to(dev)  # noqa: E731
        idx_all, y_all, x_all = cat("index"), cat("y"), cat("x")
        code_all = cat("code") if self.cfg.augment else torch.zeros_like(idx_all)
        pad_all = cat("padded")
        start = 0
        for bp in plans:
            n = len(bp)
            sl = slice(start, start + n)
            start += n
            h, w = out_hw(self.cfg, self.hw, bp)
            idx, code = idx_all[sl], code_all[sl]
            ar_h, ar_w = torch.arange(h, device=dev), torch.arange(w, device=dev)
            # output (i, j) <- hflip: j' = w-1-j; vflip: i' = h-1-i; transpose: source (j', i') else (i', j')
            ii = torch.where((code & VFLIP)[:, None] != 0, h - 1 - ar_h, ar_h)  # (n, h)
            jj = torch.where((code & HFLIP)[:, None] != 0, w - 1 - ar_w, ar_w)  # (n, w)
            t = ((code & TRANSPOSE) != 0)[:, None, None]
            rows = torch.where(t, jj[:, None, :], ii[:, :, None])  # (n, h, w)
            cols = torch.where(t, ii[:, :, None], jj[:, None, :])
            width = s["width"][idx][:, None, None]
            flat = s["base"][idx][:, None, None] + (y_all[sl][:, None, None] + rows) * width + x_all[sl][:, None, None] + cols
            pixels = s["pixels"][flat].view(n, h, w, 2, 3).permute(3, 0, 1, 2, 4)
            yield make_batch(pixels, None, self._keys(bp), pad_all[sl])

