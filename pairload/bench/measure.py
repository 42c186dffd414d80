"""Timing one entry on one process: warm (`measure`: a warm-up, then `repeats` time windows over an endless run of
epochs) and cold (`measure_cold`: the shards evicted, then one whole epoch per repeat); the rows carry the
loader's CPU cores, peak host memory, device memory, data wait and its timed stages (`loader.hooks`)."""

from __future__ import annotations

import gc
import time
from typing import Callable

import torch

from ..hooks import StageTotals
from ..recipes.timing import DataWait
from .bounds import COLD_RESIDENT_MAX, evict, resident_fraction, sync
from .config import BenchConfig
from .entries import build_loader, cut_path
from .result import Result
from .sampling import PeakMemory, cpu_seconds, processes_of


def endless(loader):
    epoch = 0
    while True:
        loader.set_epoch(epoch)
        yield from loader
        epoch += 1


def pairs_over(loader, epochs) -> int:
    """Iterate `loader` over these epochs, from the start of each; the pairs it delivered."""
    n = 0
    for epoch in epochs:
        loader.set_epoch(epoch)
        for batch in loader:
            n += len(batch)
    return n


WARM_BATCHES_MAX = 2000  # the warm-up's first epoch, at most this many batches


def measure(name: str, loader, cfg: BenchConfig, device: torch.device, consumer: Callable | None,
            base_free: int | None) -> Result:
    res = Result(loader=name, path=cut_path(name, loader))
    it = endless(loader)
    per_window = cfg.seconds / cfg.repeats
    def pids():
        return processes_of(loader)

    stages = StageTotals()
    with PeakMemory(pids) as mem:
        warm_end = time.perf_counter() + max(0.5, 0.3 * per_window)
        # at least one whole epoch (the zero-copy path registers the split as its first epoch reads it) or two
        # batches, then until the warm-up time is over
        first = max(2, min(len(loader), WARM_BATCHES_MAX)) if hasattr(loader, "__len__") else 2
        for _ in range(first):
            batch = next(it)
            if consumer:
                consumer(batch.low, batch.high)
        while time.perf_counter() < warm_end:
            batch = next(it)
            if consumer:
                consumer(batch.low, batch.high)
        sync(device)
        cpu0, t_all = cpu_seconds(pids), time.perf_counter()
        meter = DataWait(device)
        stop_listening = loader.hooks.add(stages)  # the timed windows only
        try:
            for _ in range(cfg.repeats):
                n = 0
                t0 = time.perf_counter()
                while time.perf_counter() - t0 < per_window:
                    if consumer:  # the data wait is the consumer's: two CUDA events a batch, timed only with one
                        meter.before_next()
                        batch = next(it)
                        meter.got_batch()
                        consumer(batch.low, batch.high)
                        meter.step_done()
                    else:
                        batch = next(it)
                    n += batch.low.shape[0]
                sync(device)
                dt = time.perf_counter() - t0
                res.repeats.append(n / dt)
        finally:
            stop_listening()
        res.cpu_cores_used = (cpu_seconds(pids) - cpu0) / (time.perf_counter() - t_all)
    res.summarise(cfg.pair_bytes(), mem.peak)
    res.stage_seconds = dict(stages.seconds)
    if device.type == "cuda" and base_free is not None:
        res.device_mem_mb = (base_free - torch.cuda.mem_get_info(device)[0]) / 2**20
        res.device_reserved_mb = torch.cuda.max_memory_reserved(device) / 2**20
        res.device_allocated_mb = torch.cuda.max_memory_allocated(device) / 2**20
    if consumer:
        res.data_wait_frac = meter.fraction()
    return res


def measure_cold(name: str, cfg: BenchConfig, device: torch.device, workers: int, files) -> Result:
    """Each repeat: the shards evicted and checked to be out of the page cache (`resident_before`; a repeat that finds
    more than COLD_RESIDENT_MAX of them still cached is not timed but listed in `invalid`), then one whole epoch of a
    new loader, timed from its construction to its last batch: everything the loader does before its first batch
    (starting workers, mapping or registering the split) counts, as it does for a user. `first_batch_s`: from the
    construction to the first batch. Only the first pass over a split is cold, so a repeat is one epoch, not a time
    window. No repeat cold: the row's status is "invalid"."""
    res = Result(loader=name, cold=True)
    current: list = []  # the repeat's loader, for the memory sampler (none between repeats)
    with PeakMemory(lambda: processes_of(*current)) as mem:
        for r in range(cfg.repeats):
            evict(files)
            cached = resident_fraction(files)
            res.resident_before.append(round(cached, 4))
            if cached > COLD_RESIDENT_MAX:
                res.invalid.append(f"repeat {r + 1}: {cached:.0%} of the split still in the page cache after eviction")
                continue
            sync(device)
            t0, first, n = time.perf_counter(), None, 0
            loader = build_loader(name, cfg, device, workers)
            current.append(loader)
            res.path = cut_path(name, loader)
            try:
                loader.set_epoch(r)
                for batch in loader:
                    if first is None:
                        sync(device)
                        first = time.perf_counter() - t0
                    n += batch.low.shape[0]
                sync(device)
                res.repeats.append(n / (time.perf_counter() - t0))
                res.first_batch_s.append(round(first or 0.0, 4))
            finally:
                current.clear()
                loader.close()
                del loader
                gc.collect()  # a loader kept by a reference cycle (DALI's pipeline) keeps its shard maps: no eviction
    if not res.repeats:
        res.status = "invalid"
        res.reason = (f"not cold: every repeat found the split in the page cache after eviction ({res.invalid[0]}); "
                      "the shards are on a memory filesystem (tmpfs) or another process maps them")
        return res
    res.summarise(cfg.pair_bytes(), mem.peak)
    return res
