"""The one loader over packed shards: planned batches cut by one cutter (`cutters`), then the one device stage
(`device.DeviceStage`), one batch ahead of the caller. The kinds `ram` and `wds` are this loader with another deal
(`pairload.kinds`): strided over the whole split (`ram.py` says what that implies), or by shard (`wds.py`)."""

from __future__ import annotations

import os


from ..errors import ConfigError
from ..plan import BatchPlan, Shards
from ..read.shards import ShardDataset
from .base import LoaderOptions, PlannedLoader, RemoteOptions
from .device import DeviceStage
from .cutters import Cutter, choose
from .ram import warn_if_larger_than_memory
from .wds import by_shard_window, pinned_window


class HostLoader(PlannedLoader):
    """Planned batches of packed shards, dealt by `deal` ("strided": the `ram` kind; "by_shard": `wds`), cut by one
    cutter (`cutters.choose`: the GPU kernel from the page cache or a resident copy, or `num_workers` worker
    processes, or this process with none) and handed to the caller's stream one batch ahead. `timeout`: seconds to
    wait for a batch from the workers before a `LoaderError` names the stopped or stuck ones.

    strided: the whole split is cached (a remote one made local whole); `zero_copy`, `resident`, `pin_budget` choose
    the cutter (`cutters.choose`). by_shard: `shuffle_buffer` samples (whole shards) are shuffled together and
    remote shards are fetched ahead of use; on a CUDA device the kernel cuts them from the page cache, a window of
    shards registered at a time (`zero_copy`, `pin_budget` as for strided), else the workers."""

    def __init__(self, source: str | os.PathLike | ShardDataset | dict, opts: LoaderOptions, *,
                 deal: str = "strided", prefetch: int = 4, timeout: float = 300.0, zero_copy: bool | None = None,
                 resident: bool = False, pin_budget: int | None = None, shuffle_buffer: int | None = None,
                 cache_dir: str | os.PathLike | None = None, cache_limit: int | None = None,
                 storage_options: dict | None = None):
        if deal not in HOST_DEALS:
            raise ConfigError(f"deal={deal!r}: the loaders over shards deal 'strided' (ram) or 'by_shard' (wds)")
        if prefetch < 1:
            raise ConfigError(f"prefetch={prefetch}: expected at least 1 batch")
        self.DEAL = deal
        kind = "ram" if deal == "strided" else "wds"
        remote = RemoteOptions(cache_dir, cache_limit, storage_options, kind=kind)
        self.ds = remote.open(source, opts.split, whole=deal == "strided")
        shards = None
        window = None
        if deal == "by_shard":
            if resident:
                raise ConfigError("resident=True: the by-shard deal (wds) streams the split a window at a time; the "
                                  "ram loader keeps it whole")
            self.shuffle_buffer = by_shard_window(self.ds, opts, shuffle_buffer, cache_limit)
            shards = Shards(self.ds.shard_samples, self.shuffle_buffer)
            window = pinned_window(self.ds, self.shuffle_buffer, pin_budget)
        elif shuffle_buffer is not None:
            raise ConfigError("shuffle_buffer: the strided deal (ram) shuffles the whole split; it is an option of "
                              "the by-shard deal (wds)")
        super().__init__(self.ds.keys, self.ds.sizes, self.ds.split, opts, self.ds.groups, shards,
                         key_hash=self.ds.key_hash)
        self.sensor_rows = self.ds.sensor
        self.prefetch = prefetch
        self.resident = resident
        self._stage = DeviceStage(self.device)
        # on a CPU device the host side applies the flips while copying (nearly free there, a full pass later)
        choice = choose(self.ds, self.cfg, self.plan_for, self.device, zero_copy=zero_copy, resident=resident,
                        pin_budget=pin_budget, num_workers=opts.num_workers, prefetch=prefetch, timeout=timeout,
                        name=f"pairload-{kind}", who=kind, apply_codes=self.device.type != "cuda",
                        streaming=window is not None, need=window and window.need, ahead=window and window.ahead)
        self.cutter: Cutter = choice.cutter
        self.path_note = choice.why  # why the GPU does not cut the crops ('' if it does, or on a CPU device)
        if deal == "strided":
            warn_if_larger_than_memory(self.ds)
        elif len(self) == 0:
            raise ConfigError(f"split {opts.split!r}: with {self.cfg.world_size} ranks no rank fills one batch of "
                              f"{self.cfg.batch_size}; lower batch_size or use last_batch='pad' or 'partial'")

    def _deal_name(self) -> str:
        return f"by_shard, shuffle buffer {self.shuffle_buffer}" if self.DEAL == "by_shard" else self.DEAL

    @property
    def skipped(self) -> int:
        """Samples of the current epoch that this rank leaves out ('drop': every rank gets as many whole batches;
        the samples left out change with the epoch)."""
        total = self.cfg.epoch_length(self.samples)
        delivered = sum(len(bp) - int(bp.padded.sum()) for bp in self.plan())
        left, ws, r = max(0, total - delivered * self.cfg.world_size), self.cfg.world_size, self.cfg.rank
        return (r + 1) * left // ws - r * left // ws

    @property
    def zero_copy(self) -> bool:
        """True when the device cuts the crops itself (from the page cache, or from its resident copy)."""
        return self.cutter.path in ("zero-copy", "resident")

    @property
    def path(self) -> str:
        """How batches are cut: "workers", "zero-copy", "resident" or "gather" (a resident split without the kernel)."""
        return self.cutter.path

    def start_workers(self) -> None:
        """Start the worker processes now and wait until they are ready (no shard data is read), so that the first
        batch does not also pay for process start-up. Iterating starts them anyway."""
        self.cutter.start()

    def worker_pids(self) -> list[int]:
        return self.cutter.worker_pids()

    def close(self) -> None:
        """Stop the worker processes and free the shared ring (also done when the loader is garbage collected);
        pinned pages and device memory go back (iterating again registers them again)."""
        self.cutter.close()
        self._stage.clear()
        self.ds.close_remote()

    def _batches(self, epoch: int, plans: list[BatchPlan], consumed: tuple):
        padded = self._padded_on(plans) if self.cutter.on_device else self._padded
        sensor = self._sensor_on(plans)
        keys = self._keys_on(plans)
        group = {"group": KERNEL_GROUP[self.cutter.path]} if self.cutter.path in KERNEL_GROUP else {}
        produced = (self._stage.put(cut, keys(cut.plan), padded(cut.plan), self._source(cut.plan),
                                    augment=self.cfg.augment, sensor=sensor(cut.plan))
                    for cut in self.cutter.cuts((epoch, consumed), plans, self._stage.reclaim, **group))
        yield from self._stage.one_ahead(produced)  # batch k+1 is copied while the caller works on batch k


HOST_DEALS = ("strided", "by_shard")
# batches of one shape the GPU kernel cuts per launch (a launch costs 20-40 us of Python): from the page cache the
# kernel waits on PCIe and 4 are plenty; a resident split is cut at 0.7M+ pairs a second, where the launches would
# cost a third of the time (16 batches of 256x256 crops are a 200 MB block)
KERNEL_GROUP = {"zero-copy": 4, "resident": 16}
