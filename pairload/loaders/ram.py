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

import numpy as np
import torch

from ..batch import make_batch
from ..errors import ConfigError
from ..plan import HFLIP, TRANSPOSE, VFLIP, BatchPlan
from ..read.shards import ShardDataset, open_shards
from .base import LoaderOptions, PlannedLoader
from .device import DeviceStage
from .windows import HostWindows


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
        self.ds = open_shards(source, opts.split)
        super().__init__(self.ds.keys, self.ds.sizes, self.ds.split, opts, self.ds.groups)
        if prefetch < 1:
            raise ConfigError(f"prefetch={prefetch}: expected at least 1 batch")
        self.prefetch = prefetch
        self.resident = resident
        _warn_if_larger_than_memory(self.ds)
        self._cuda = self.device.type == "cuda"
        self._stage = DeviceStage(self.device)
        self._store = self._upload() if resident else None
        # on a CPU device the host side applies the flips while copying (nearly free there, a full pass later)
        self._host = HostWindows(self.ds, self.cfg, super().plan_for, num_workers=opts.num_workers, prefetch=prefetch,
                                 pin=self._cuda, apply_codes=not self._cuda, name="pairload-ram")

    def start_workers(self) -> None:
        """Start the worker processes now and wait until they are ready (no shard data is read), so that the first
        batch does not also pay for process start-up. Iterating starts them anyway."""
        if self._store is None:
            self._host.start()

    def close(self) -> None:
        """Stop the worker processes and free the shared ring (also done when the loader is garbage collected)."""
        self._host.close()
        self._stage.clear()

    # ------------------------------------------------------------------ shared

    def _code(self, bp: BatchPlan) -> torch.Tensor | None:
        return torch.from_numpy(bp.code) if self.cfg.augment else None

    def plan_for(self, epoch: int, consumed: tuple = ()) -> list[BatchPlan]:
        return self._host.plans((epoch, consumed))

    def _batches(self, epoch: int, plans: list[BatchPlan], consumed: tuple):
        if self._store is not None:
            yield from self._resident_batches(plans)
            return
        produced = (self._stage.put(torch.from_numpy(host), self._code(bp), self._keys(bp), self._padded(bp), release,
                                    self._source(bp))
                    for bp, (host, release) in zip(plans, self._host.batches((epoch, consumed), plans,
                                                                              self._stage.reclaim)))
        yield from self._stage.one_ahead(produced)  # batch k+1 is copied while the caller works on batch k

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
            h, w = bp.out_hw(self.hw)
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
            yield make_batch(pixels, None, self._keys(bp), pad_all[sl], self._source(bp))

