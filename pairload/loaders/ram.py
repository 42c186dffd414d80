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
import queue
import signal
import time
import weakref
from collections import deque
from multiprocessing import get_context, shared_memory

import numpy as np
import torch

from .. import errors
from ..assemble import FAILED, READY, fill, out_hw, slot_view, worker_main
from ..batch import PairBatch, make_batch
from ..errors import ConfigError, LoaderError
from ..plan import HFLIP, TRANSPOSE, VFLIP, BatchPlan
from ..shards import ShardDataset
from .base import LoaderOptions, PlannedLoader


def _death(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


class _Workers:
    """Worker processes, their queues and the shared ring; torn down by `close()` or when garbage collected.

    Every wait on a worker has a timeout and checks that all workers are alive, so a dead worker becomes an error
    within about a second instead of a hang."""

    POLL_S = 0.5

    def __init__(self, ds: ShardDataset, loader: "RamLoader", depth: int, slot_bytes: int, pin: bool):
        self.depth, self.slot_bytes = depth, slot_bytes
        self.ds = ds
        self.shm = shared_memory.SharedMemory(create=True, size=depth * slot_bytes)
        self.ring = np.ndarray((depth, slot_bytes), dtype=np.uint8, buffer=self.shm.buf)
        self.tensor = torch.from_numpy(self.ring)
        self.pinned = False
        if pin:
            err = torch.cuda.cudart().cudaHostRegister(self.tensor.data_ptr(), depth * slot_bytes, 0)
            self.pinned = int(err) == 0  # otherwise copies still work, synchronously
        ctx = get_context("spawn")  # never fork a process that may hold CUDA or threads
        self.tasks, self.results = ctx.Queue(), ctx.Queue()
        self.ready: set[int] = set()
        self._checked = time.monotonic()
        self.procs = [ctx.Process(target=worker_main, daemon=True, name=f"pairload-ram-{k}",
                                  args=(str(ds.root), ds.split, loader.cfg, not loader._cuda, self.shm.name, depth,
                                        slot_bytes, self.tasks, self.results, os.getpid()))
                      for k in range(loader.opts.num_workers)]
        self._finalizer = weakref.finalize(self, _Workers._teardown, self.procs, self.tasks, self.shm, self.tensor,
                                           self.pinned)
        for p in self.procs:
            p.start()

    @staticmethod
    def _teardown(procs, tasks, shm, tensor, pinned) -> None:
        for p in procs:
            if p.is_alive():
                try:
                    tasks.put(None)
                except (OSError, ValueError):
                    pass
        for p in procs:
            if p.pid is not None:
                p.join(timeout=5)
                if p.is_alive():
                    p.terminate()
                    p.join(timeout=1)
        if pinned:
            torch.cuda.cudart().cudaHostUnregister(tensor.data_ptr())
        del tensor
        try:
            shm.close()
        except BufferError:  # a delivered CPU batch may still view the ring; the name is removed all the same
            pass
        try:
            shm.unlink()
        except FileNotFoundError:
            pass

    def close(self) -> None:
        self._finalizer()

    def get(self):
        """The next result from any worker; raises LoaderError naming a worker that died (checked at least every
        POLL_S seconds: a batch lost with a dead worker would otherwise be waited for forever)."""
        while True:
            now = time.monotonic()
            if now - self._checked > self.POLL_S:
                self._checked = now
                self.check_alive()
            try:
                return self.results.get(timeout=self.POLL_S)
            except queue.Empty:
                pass

    def check_alive(self) -> None:
        dead = [p for p in self.procs if p.exitcode is not None]
        if not dead:
            return
        p = dead[0]
        what = f"RAM loader worker {p.name} (pid {p.pid}) {_death(p.exitcode)}"
        if p.exitcode == -signal.SIGBUS:
            changed = [str(f) for f, size in zip(self.ds.files, self.ds.shard_bytes) if _size(f) != size]
            hint = (f"; {', '.join(changed)} changed size while the loader read it" if changed else
                    "; a shard was truncated or replaced while the loader read it") + ": repack, then restart"
        elif p.pid not in self.ready and p.exitcode == 1:
            hint = (" before it started (its error is printed above). If your script makes the loader at module "
                    "level, put that code under `if __name__ == \"__main__\":`: workers are started with the spawn "
                    "method and import your script again")
        elif p.exitcode == -signal.SIGKILL:
            hint = " (often the out-of-memory killer: see `dmesg`); restart the job, with fewer num_workers if so"
        else:
            hint = "; restart the job"
        raise LoaderError(what + hint)


def _size(path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


class RamLoader(PlannedLoader):
    def __init__(self, source: str | os.PathLike | ShardDataset, opts: LoaderOptions, *, resident: bool = False,
                 prefetch: int = 4):
        self.ds = source if isinstance(source, ShardDataset) else ShardDataset(source, opts.split)
        super().__init__(self.ds.keys, self.ds.sizes, self.ds.split, opts)
        if prefetch < 1:
            raise ConfigError(f"prefetch={prefetch}: expected at least 1 batch")
        self.prefetch = prefetch
        self.resident = resident
        self._cuda = self.device.type == "cuda"
        self._stream = torch.cuda.Stream(self.device) if self._cuda and not resident else None
        self._store = self._upload() if resident else None
        self._workers: _Workers | None = None
        self._pending: deque = deque()  # (run, batch, slot) submitted to workers, in delivery order; run: (epoch, consumed)
        self._free: deque = deque()
        self._copying: deque = deque()  # (slot, event): slots whose host→device copy may still be running
        self._done: dict[int, object] = {}
        self._plans: dict[tuple, list[BatchPlan]] = {}

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

    def _slot_bytes(self) -> int:
        if self.cfg.crop is not None:
            return 2 * self.cfg.batch_size * self.cfg.crop * self.cfg.crop * 3
        return 2 * self.cfg.batch_size * int((self.hw[:, 0] * self.hw[:, 1]).max()) * 3

    # ------------------------------------------------------------------ worker path

    def _ensure_workers(self) -> _Workers:
        if self._workers is None:
            depth = self.opts.num_workers + self.prefetch + 2  # every worker busy, `prefetch` ready, 2 in copy
            self._workers = _Workers(self.ds, self, depth, self._slot_bytes(), pin=self._cuda)
            self._free = deque(range(depth))
            self._pending.clear()
            self._copying.clear()
            self._done.clear()
        return self._workers

    def _reclaim(self, block: bool = False) -> None:
        """Return slots whose device copy has finished to the free list."""
        while self._copying and (block or self._copying[0][1] is None or self._copying[0][1].query()):
            slot, ev = self._copying.popleft()
            if ev is not None:
                ev.synchronize()
            self._free.append(slot)

    def _submit(self, run: tuple, b: int) -> tuple[tuple, int]:
        """Queue tasks until the ring is full, continuing into the following epoch; returns the next (run, b)."""
        w = self._workers
        self._reclaim()
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
            w.tasks.put((slot, run[0], run[1], b))
            self._pending.append((run, b, slot))
            b += 1
        return run, b

    def _wait(self, slot: int) -> None:
        while slot not in self._done:
            got, err = self._workers.get()
            if got == READY:
                self._workers.ready.add(err)
                continue
            if got == FAILED:
                raise self._error(err)
            self._done[got] = err
        err = self._done.pop(slot)
        if err is not None:
            raise self._error(err)

    @staticmethod
    def _error(err) -> Exception:
        kind, message = err
        cls = getattr(errors, kind, None)
        return cls(message) if isinstance(cls, type) and issubclass(cls, errors.PairloadError) else RuntimeError(message)

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
            if self._cuda:
                batch, ready, copied = self._to_device(host, bp)
                self._copying.append((slot, copied))
            else:
                # the worker already applied the flips (apply_codes): no extra pass over the batch on the CPU
                batch, ready = make_batch(host.clone(), None, self._keys(bp), self._padded(bp)), None
                self._free.append(slot)
            nxt = self._submit(*nxt)
            yield batch, ready

    # ------------------------------------------------------------------ in-process path

    def _inline_batches(self, plans: list[BatchPlan]):
        for bp in plans:
            h, w = out_hw(self.cfg, self.hw, bp)
            host = torch.empty((2, len(bp), h, w, 3), dtype=torch.uint8, pin_memory=self._cuda)
            fill(self.ds, host.numpy(), bp, apply_codes=not self._cuda)
            if self._cuda:
                batch, ready, _ = self._to_device(host, bp)
                yield batch, ready
            else:
                yield make_batch(host, None, self._keys(bp), self._padded(bp)), None

    # ------------------------------------------------------------------ shared

    def _keys(self, bp: BatchPlan) -> list[str]:
        return [self.keys[i] for i in bp.index.tolist()]

    def _code(self, bp: BatchPlan) -> torch.Tensor | None:
        return torch.from_numpy(bp.code) if self.cfg.augment else None

    def _padded(self, bp: BatchPlan) -> torch.Tensor:
        return torch.from_numpy(bp.padded.copy())

    def _to_device(self, host: torch.Tensor, bp: BatchPlan):
        """Copy and augment on the side stream; returns the batch, its ready event and the copy-done event."""
        with torch.cuda.stream(self._stream):
            pixels = host.to(self.device, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(self._stream)
            code = self._code(bp)
            batch = make_batch(pixels, None if code is None else code.to(self.device, non_blocking=True),
                               self._keys(bp), self._padded(bp).to(self.device, non_blocking=True))
            ready = torch.cuda.Event()
            ready.record(self._stream)
        return batch, ready, copied

    def _handover(self, batch: PairBatch, ready) -> PairBatch:
        if ready is not None:
            stream = torch.cuda.current_stream(self.device)
            stream.wait_event(ready)
            for t in (batch.low, batch.high, batch.padded):
                t.record_stream(stream)
        return batch

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
            prev = next(gen, None)
            for cur in gen:  # one batch ahead: its copy overlaps the caller's work on the previous one
                yield self._handover(*prev)
                prev = cur
        except LoaderError:
            self.close()  # the other workers stop too; the next iteration starts fresh ones
            raise
        if prev is not None:
            yield self._handover(*prev)

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

