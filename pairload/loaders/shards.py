"""The loader over packed shards (`ShardLoader`; the kinds `ram` and `wds`): planned batches cut by one cutter
(`pairload.cut.paths.choose`), then the one device stage (`pairload.cut.handover.DeviceStage`), one batch ahead of
the caller. The two kinds differ in their deal (`pairload.plan.deals`) and in what that implies here:

- `ram` (the strided deal) caches the whole split: the shards are memory-mapped read-only, so every worker and
  every rank on a node reads the one copy held in the page cache; a remote split is made local whole first. On a
  CUDA device the kernel cuts the crops straight from the registered page cache (or, `resident=True`, from a copy
  in device memory).
- `wds` (the by-shard deal, `byshard`) streams: each rank reads its own block of the epoch's shard order a shuffle
  buffer of shards at a time, so splits larger than memory or on shared storage train at the disk's speed.
"""

from __future__ import annotations

import os
import time
import warnings

from ..cut import Cutter, Request, choose
from ..cut.handover import DeviceStage
from ..errors import ConfigError
from ..plan import Run, Shards, get_deal
from ..read.shards import ShardDataset
from .base import LoaderOptions, PlannedLoader, RemoteOptions, expected_after
from .byshard import pinned_buffer, shuffle_buffer_of

# the deals this loader executes, and the kind each is (`pairload.kinds`); whether a deal caches the split or
# streams it is the deal's (`Deal.streams`)
DEAL_KINDS = {"strided": "ram", "by_shard": "wds"}
# batches of one shape the GPU kernel cuts per launch: from the page cache the kernel waits on PCIe and a few are
# plenty; a resident split is cut fast enough that the launches' Python would show. An encoded split: at most a
# decode call's batches (`Memory.together`); 1 until measured against one a launch (`benchmarks/diag_knobs.py group`)
KERNEL_GROUP = {"zero-copy": 4, "resident": 16, "decode": 1}
ROOM_CHECK_S = 10.0  # how often the memory a limit leaves the page cache is looked at (from the first batch on)


class ShardLoader(PlannedLoader):
    """Planned batches of packed shards, dealt by `deal` ("strided": the `ram` kind; "by_shard": `wds`), cut by one
    cutter (`pairload.cut.paths`: the GPU kernel from the page cache or a resident copy, or `num_workers` worker
    processes, or this process with none) and handed to the caller's stream one batch ahead. `timeout`: seconds to
    wait for a batch from the workers before a `LoaderError` names the stopped or stuck ones.

    `zero_copy`, `resident`, `pin_budget` choose the cut path (`pairload.cut.paths.choose`). by_shard:
    `shuffle_buffer` samples (whole shards) are shuffled together and remote shards are fetched ahead of use; on a
    CUDA device the kernel cuts them from the page cache, a shuffle buffer of shards registered at a time."""

    def __init__(self, source: str | os.PathLike | ShardDataset | dict, opts: LoaderOptions, *,
                 deal: str = "strided", prefetch: int = 4, timeout: float = 300.0, zero_copy: bool | None = None,
                 resident: bool = False, pin_budget: int | None = None, shuffle_buffer: int | None = None,
                 cache_dir: str | os.PathLike | None = None, cache_limit: int | None = None,
                 storage_options: dict | None = None):
        if deal not in DEAL_KINDS:
            raise ConfigError(f"deal={deal!r}: the loaders over shards deal 'strided' (ram) or 'by_shard' (wds)")
        if prefetch < 1:
            raise ConfigError(f"prefetch={prefetch}: expected at least 1 batch")
        self.DEAL = deal
        self.kind = DEAL_KINDS[deal]
        self.streams = get_deal(deal).streams
        remote = RemoteOptions(cache_dir, cache_limit, storage_options, kind=self.kind)
        self.ds = remote.open(source, opts.split, whole=not self.streams, plan=opts.plan)
        shards = pinned = None
        if self.streams:
            if resident:
                raise ConfigError("resident=True: the by-shard deal (wds) streams the split a shuffle buffer at a "
                                  "time; the ram loader keeps it whole")
            self.shuffle_buffer = shuffle_buffer_of(self.ds, opts, shuffle_buffer, cache_limit)
            shards = Shards(self.ds.shard_samples, self.shuffle_buffer)
            pinned = pinned_buffer(self.ds, self.shuffle_buffer, pin_budget)
        elif shuffle_buffer is not None:
            raise ConfigError("shuffle_buffer: the strided deal (ram) shuffles the whole split; it is an option of "
                              "the by-shard deal (wds)")
        super().__init__(self.ds.keys, self.ds.sizes, self.ds.split, opts, self.ds.groups, shards,
                         key_hash=self.ds.key_hash, sequences=self.ds.sequences if opts.plan.clips else None,
                         bounds=self.ds.size_bounds)
        self.sensor_rows = self.ds.sensor
        self.prefetch = prefetch
        self._room_at = 0.0  # when to look next at the memory a limit leaves the page cache (None: it was named)
        self.resident = resident
        choice = choose(Request(ds=self.ds, cfg=self.cfg, plan_for=self.plan_for, device=self.device, who=self.kind,
                                zero_copy=zero_copy, resident=resident, pin_budget=pin_budget,
                                streaming=pinned is not None, need=pinned and pinned.need,
                                ahead=pinned and pinned.ahead, num_workers=opts.num_workers, prefetch=prefetch,
                                timeout=timeout, hooks=self.hooks))
        self.cutter: Cutter = choice.cutter
        # after the cut path: a split stored encoded starts its decode processes there, before this process's CUDA
        # context (the stage's stream) is made
        self._stage = DeviceStage(self.device, self.hooks)
        self.path_note = choice.why  # why the GPU does not cut the crops ('' if it does, or on a CPU device)
        if not self.streams:
            _warn_if_larger_than_memory(self.ds)
        elif len(self) == 0:
            raise ConfigError(f"split {opts.split!r}: with {self.cfg.world_size} ranks no rank fills one batch of "
                              f"{self.cfg.batch_size}; lower batch_size or use last_batch='pad' or 'partial'")

    def _deal_name(self) -> str:
        return f"by_shard, shuffle buffer {self.shuffle_buffer}" if self.streams else self.DEAL

    @property
    def skipped(self) -> int:
        """Samples of the current epoch that this rank leaves out ('drop': every rank gets as many whole batches;
        the samples left out change with the epoch)."""
        total = self.cfg.epoch_length(self.samples)
        delivered = sum(bp.items - int(bp.padded[::bp.frames].sum()) for bp in self.plan())
        left, ws, r = max(0, total - delivered * self.cfg.world_size), self.cfg.world_size, self.cfg.rank
        return (r + 1) * left // ws - r * left // ws

    @property
    def zero_copy(self) -> bool:
        """True when the device cuts the crops itself (from the page cache, or from its resident copy)."""
        return self.cutter.on_device

    @property
    def path(self) -> str:
        """How batches are cut: "zero-copy", "resident", "decode" (an encoded split on the GPU) or "workers"
        (`pairload.cut.paths.PATHS`)."""
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

    def _batches(self, epoch: int, plans: Run, consumed: tuple):
        rows = self._rows_on(plans)
        # the degrade stage runs in the cutter where the cut path placed it there, else on the device after the cut
        run = None if self.cutter.degrades else self._degrade_run(plans)
        options = {}
        if self.cutter.path in KERNEL_GROUP:  # a device cut: batches per launch, and the epoch expected next
            options = {"group": KERNEL_GROUP[self.cutter.path], "after": expected_after(self, (epoch, consumed))}
        cuts = self.cutter.cuts((epoch, consumed), plans, self._stage.reclaim, **options)
        batches = self._stage.one_ahead(cuts, rows, run, augment=self.cfg.augment)  # batch k+1 is cut while k is used
        # what the job's processes leave the page cache, from the first batch on (the loader's own run by then; the
        # training's memory grows), every ROOM_CHECK_S, until it is found too little and named once
        for batch in batches if self._room_at is not None else ():
            now = time.monotonic()
            if now >= self._room_at:
                self._room_at = None if _warn_if_no_room(self.ds, self.cfg.batch_size) else now + ROOM_CHECK_S
            yield batch
            if self._room_at is None:
                break
        yield from batches


def _warn_if_no_room(ds: ShardDataset, batch_size: int) -> bool:
    """Warn where a memory limit leaves the page cache too little room for the loader's reads (a few batches of the
    split's stored bytes in flight): everything read is pushed out again at once, and the loader crawls. True: it
    warned."""
    from ..hostmemory import room_note

    note = room_note(4 * batch_size * sum(ds.shard_bytes) // max(1, len(ds)))
    if note:
        warnings.warn(note, stacklevel=4)
    return note is not None


def _warn_if_larger_than_memory(ds: ShardDataset) -> None:
    from ..hostmemory import cache_room, host_memory, outgrows_cache

    mem = host_memory()
    room = cache_room(mem)
    size = sum(ds.shard_bytes)  # what the page cache holds of it: its shards' files (the manifest's sizes)
    if outgrows_cache(size, mem):
        where = f" under the memory limit in {mem.limit}" if mem.limit else ""
        warnings.warn(f"split {ds.split!r} is {size / 1e9:.1f} GB, more than the memory that could cache it "
                      f"({room / 1e9:.1f} GB{where}): every epoch of the ram loader will read from disk at random; "
                      "the wds loader reads each rank's shards a shuffle buffer at a time", stacklevel=4)
