"""The RAM-cached loader: crops copied straight out of memory-mapped shards, pinned async copies to the device.

Sharing: the shards are memory-mapped read-only, so every thread, worker and rank on a node reads the one
copy of the split held in the page cache; no process holds a private copy. Assembly: `num_workers` threads
each build whole batches (numpy copies release the GIL) into a ring of pinned buffers; the copy to the
device and the flips/rotations run on a side CUDA stream and are handed to the caller's stream one batch
ahead. `resident=True` instead uploads the split to device memory once and crops there with one gather.
"""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from ..batch import PairBatch, make_batch
from ..errors import ConfigError
from ..plan import BatchPlan
from ..shards import ShardDataset
from .base import LoaderOptions, PlannedLoader


class RamLoader(PlannedLoader):
    def __init__(self, source: str | os.PathLike | ShardDataset, opts: LoaderOptions, *, resident: bool = False,
                 prefetch: int = 2):
        self.ds = source if isinstance(source, ShardDataset) else ShardDataset(source, opts.split)
        super().__init__(self.ds.keys, self.ds.sizes, self.ds.split, opts)
        if prefetch < 1:
            raise ConfigError(f"prefetch={prefetch}: expected at least 1 batch")
        self.prefetch = prefetch
        self.resident = resident
        self._cuda = self.device.type == "cuda"
        self._stream = torch.cuda.Stream(self.device) if self._cuda and not resident else None
        self._store = self._upload() if resident else None

    # ------------------------------------------------------------------ host path

    def fill(self, dst: np.ndarray, bp: BatchPlan) -> None:
        """Copy the planned windows of batch `bp` into dst, a (2, N, H, W, 3) uint8 array."""
        h, w = dst.shape[2:4]
        for j, (i, y, x) in enumerate(zip(bp.index.tolist(), bp.y.tolist(), bp.x.tolist())):
            low, high = self.ds.arrays(i)
            dst[0, j] = low[y:y + h, x:x + w]
            dst[1, j] = high[y:y + h, x:x + w]

    def _host_batches(self, plans: list[BatchPlan]):
        """Yields (host tensor, plan, slot) in order; slots recycle pinned buffers once their copy has finished."""
        depth = self.opts.num_workers + self.prefetch if self.opts.num_workers else 1
        ring: list[torch.Tensor | None] = [None] * depth
        self._events: list[torch.cuda.Event | None] = [None] * depth

        def task(slot: int, bp: BatchPlan) -> torch.Tensor:
            h, w = self.out_hw(bp)
            shape = (2, len(bp), h, w, 3)
            if self._cuda:
                ev = self._events[slot]
                if ev is not None:
                    ev.synchronize()  # the previous copy out of this pinned buffer is done
                buf = ring[slot]
                if buf is None or buf.shape[1] < len(bp) or buf.shape[2:4] != (h, w):
                    buf = ring[slot] = torch.empty((2, self.cfg.batch_size, h, w, 3), dtype=torch.uint8, pin_memory=True)
                out = buf[:, : len(bp)]
            else:
                out = torch.empty(shape, dtype=torch.uint8)  # the caller keeps it: never reused
            self.fill(out.numpy(), bp)
            return out

        if not self.opts.num_workers:
            for b, bp in enumerate(plans):
                yield task(0, bp), bp, 0
            return
        pool = ThreadPoolExecutor(self.opts.num_workers, thread_name_prefix="pairload-ram")
        try:
            pending = deque(pool.submit(task, b % depth, bp) for b, bp in enumerate(plans[:depth]))
            for b, bp in enumerate(plans):
                yield pending.popleft().result(), bp, b % depth
                nxt = b + depth
                if nxt < len(plans):  # the consumer has issued this slot's copy (and recorded its event) by now
                    pending.append(pool.submit(task, nxt % depth, plans[nxt]))
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _device_batches(self, plans: list[BatchPlan]):
        for host, bp, slot in self._host_batches(plans):
            keys = [self.keys[i] for i in bp.index.tolist()]
            padded = torch.from_numpy(bp.padded.copy())
            code = torch.from_numpy(bp.code) if self.cfg.augment else None
            if not self._cuda:
                yield make_batch(host, code, keys, padded), None
                continue
            with torch.cuda.stream(self._stream):
                pixels = host.to(self.device, non_blocking=True)
                ev = torch.cuda.Event()
                ev.record(self._stream)
                self._events[slot] = ev
                batch = make_batch(pixels, None if code is None else code.to(self.device, non_blocking=True), keys,
                                   padded.to(self.device, non_blocking=True))
                ready = torch.cuda.Event()
                ready.record(self._stream)
            yield batch, ready

    def _handover(self, batch: PairBatch, ready) -> PairBatch:
        if ready is not None:
            stream = torch.cuda.current_stream(self.device)
            stream.wait_event(ready)
            for t in (batch.low, batch.high, batch.padded):
                t.record_stream(stream)
        return batch

    def __iter__(self):
        plans = self.plan()
        if self._store is not None:
            yield from self._resident_batches(plans)
            return
        gen = self._device_batches(plans)
        prev = next(gen, None)
        for cur in gen:  # one batch ahead: its copy overlaps the caller's work on the previous one
            yield self._handover(*prev)
            prev = cur
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

    @property
    def resident_bytes(self) -> int:
        return 0 if self._store is None else self._store["pixels"].numel()

    def _resident_batches(self, plans: list[BatchPlan]):
        dev = self.device
        s = self._store
        for bp in plans:
            h, w = self.out_hw(bp)
            idx = torch.from_numpy(bp.index).to(dev, non_blocking=True)
            y = torch.from_numpy(bp.y).to(dev, non_blocking=True)
            x = torch.from_numpy(bp.x).to(dev, non_blocking=True)
            rows = y[:, None] + torch.arange(h, device=dev)
            cols = x[:, None] + torch.arange(w, device=dev)
            flat = s["base"][idx][:, None, None] + rows[:, :, None] * s["width"][idx][:, None, None] + cols[:, None, :]
            pixels = s["pixels"][flat].view(len(bp), h, w, 2, 3).permute(3, 0, 1, 2, 4)
            code = torch.from_numpy(bp.code).to(dev, non_blocking=True) if self.cfg.augment else None
            yield make_batch(pixels, code, [self.keys[i] for i in bp.index.tolist()],
                             torch.from_numpy(bp.padded.copy()).to(dev, non_blocking=True))
