"""The strided deal of the shard loader (`host.HostLoader`; the `ram` kind): crops copied straight out of
memory-mapped shards, async copies to the device.

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

from ..read.shards import ShardDataset


def warn_if_larger_than_memory(ds: ShardDataset) -> None:
    import warnings

    import psutil

    mem = psutil.virtual_memory()
    if ds.nbytes > 0.9 * (mem.available + getattr(mem, "cached", 0)):
        warnings.warn(f"split {ds.split!r} is {ds.nbytes / 1e9:.1f} GB, more than the memory that could cache it "
                      f"({(mem.available + getattr(mem, 'cached', 0)) / 1e9:.1f} GB): every epoch of the ram loader "
                      "will read from disk at random; the wds loader reads each rank's shards a window at a time",
                      stacklevel=4)
