"""The RAM-cached loader: crops copied straight out of memory-mapped shards, async copies to the device.

Sharing: the shards are memory-mapped read-only, so every worker and every rank on a node reads the one copy
of the split held in the page cache; no process holds a private copy. The epoch is one permutation of the whole
split dealt strided to ranks (`pairload.plan.deals`), so the split should fit in memory (a warning says when it
cannot); `wds` reads each rank's own shards a window at a time instead.

Assembly (`host.HostLoader`): with `num_workers=0` the loading process copies the planned windows itself. With
workers, that many numpy-only processes (free of the GIL) copy batches into the slots of one shared-memory ring,
which is page-locked so the host→device copy is asynchronous; the copy and the flips/transposes run on a side
CUDA stream and are handed to the caller's stream one batch ahead. Workers keep running across epochs and start
on the next epoch's first batches while the current one ends.

Zero-copy (`zerocopy`, the default on a CUDA device): no workers at all. The shard maps are registered with the
device (their page-cache pages pinned, read-only) and one GPU kernel cuts every planned window of a batch, flips
and transposes applied, straight out of the page cache. It falls back to the workers, with a one-line warning
saying why, when it cannot run (a compressed split, no Triton, more shard bytes than `pin_budget`, a refused
registration); `zero_copy=False` asks for the workers, `zero_copy=True` refuses to fall back.

`resident=True` uploads the split to device memory once; on CUDA the same kernel cuts the batches there,
elsewhere one gather applies the crop and the flips/transposes together (`resident.DeviceStore`).
"""

from __future__ import annotations

import os

from ..plan import BatchPlan
from ..read.shards import ShardDataset
from .base import LoaderOptions, RemoteOptions
from .host import HostLoader
from .resident import DeviceStore
from . import zerocopy


def _warn_if_larger_than_memory(ds: ShardDataset) -> None:
    import warnings

    import psutil

    mem = psutil.virtual_memory()
    if ds.nbytes > 0.9 * (mem.available + getattr(mem, "cached", 0)):
        warnings.warn(f"split {ds.split!r} is {ds.nbytes / 1e9:.1f} GB, more than the memory that could cache it "
                      f"({(mem.available + getattr(mem, 'cached', 0)) / 1e9:.1f} GB): every epoch of the ram loader "
                      "will read from disk at random; the wds loader reads each rank's shards a window at a time",
                      stacklevel=4)


class RamLoader(HostLoader):
    NAME = "pairload-ram"

    def __init__(self, source: str | os.PathLike | ShardDataset, opts: LoaderOptions, *, resident: bool = False,
                 zero_copy: bool | None = None, pin_budget: int | None = None, prefetch: int = 4,
                 timeout: float = 300.0, cache_dir: str | os.PathLike | None = None, cache_limit: int | None = None,
                 storage_options: dict | None = None):
        """`zero_copy`: None (the GPU cuts the crops from the page cache when it can, else the workers, with a
        warning saying why), True (refuse to fall back), False (the workers). `pin_budget`: bytes of shard files
        the zero-copy path may pin (default: half of the memory available)."""
        super().__init__(source, opts, prefetch=prefetch, timeout=timeout,
                         remote=RemoteOptions(cache_dir, cache_limit, storage_options, kind="ram"))
        self.resident = resident
        _warn_if_larger_than_memory(self.ds)
        self._zero: zerocopy.DeviceWindows | None = None
        source, self.path_note = zerocopy.setup(self.ds, self.device, requested=zero_copy, budget=pin_budget,
                                                resident=resident)  # path_note: why the GPU does not cut ('' if it does)
        if source is not None:
            self._zero = zerocopy.DeviceWindows(source, self.device, self._stage)
        self._store = DeviceStore(self.ds, self.hw, self.device) if resident and self._zero is None else None

    @property
    def zero_copy(self) -> bool:
        """True when the device cuts the crops itself (from the page cache, or from its resident copy)."""
        return self._zero is not None

    def start_workers(self) -> None:
        if self._store is None and self._zero is None:
            super().start_workers()

    def close(self) -> None:
        super().close()
        if self._zero is not None:  # pinned pages and device memory go back; iterating again registers again
            self._zero.close()

    def _batches(self, epoch: int, plans: list[BatchPlan], consumed: tuple):
        if self._zero is not None:
            yield from self._zero.batches(plans, self.hw, self.cfg.augment, self._keys, self._padded_on(plans),
                                          self._source)
        elif self._store is not None:
            yield from self._store.batches(plans, self.cfg.augment, self._keys, self._source)
        else:
            yield from super()._batches(epoch, plans, consumed)
