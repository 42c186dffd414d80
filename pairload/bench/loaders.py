"""`pairload bench-loaders`: the runner (`run_bench`). Every requested entry measured on the same data, next to the
references, into one JSON-able report; `config`, `entries`, `measure`, `ranks`, `bounds`, `consumer` and `chart`
hold the parts. `BenchConfig`, `plot` and `evict` stay importable from here for the CLI, the demo and the tests."""

from __future__ import annotations

import gc
import os
import platform
import statistics
import time
from dataclasses import asdict
from typing import Callable

import torch

from ..errors import ConfigError, MissingDependencyError, PairloadError
from .bounds import copy_rate, decode_rate, disk_bound, evict, h2d_bound, stored_bound, sync
from .chart import plot
from .config import BenchConfig
from .consumer import consumer_rate, make_consumer
from .entries import Skip, build_loader, check_available, cold_entries
from .measure import measure, measure_cold
from .ranks import measure_ranks
from .result import Result, failed

__all__ = ["BenchConfig", "Result", "device_name", "evict", "plot", "run_bench"]


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.processor() or platform.machine()})"


def _warm(name: str, cfg: BenchConfig, device: torch.device, workers: int, consumer: Callable | None) -> Result:
    """One entry, warm: on `cfg.ranks` concurrent ranks, or here with its loader closed afterwards (its workers
    stop mapping the shards: a cold run needs them unmapped to evict)."""
    check_available(name)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        sync(device)
    if cfg.ranks > 1:
        return measure_ranks(name, cfg, workers if cfg.workers else max(1, (os.cpu_count() or 2) // cfg.ranks - 1))
    base_free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else None
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)  # the row's peaks are its own loader's (and consumer's)
    loader = build_loader(name, cfg, device, workers)
    try:
        return measure(name, loader, cfg, device, consumer, base_free)
    finally:
        loader.close()
        del loader
        gc.collect()  # a loader kept by a reference cycle keeps its shard maps, and a cold run could not evict them


def run_bench(cfg: BenchConfig, on_result: Callable[[Result], None] | None = None) -> dict:
    """Run every requested entry; returns the JSON-able report."""
    from ..plan import PlanConfig, check_split
    from ..read.shards import ShardDataset

    ds = ShardDataset(cfg.shards, cfg.split)  # a crop larger than the images, a batch of 0: one clear error first
    check_split(PlanConfig(batch_size=cfg.batch_size, crop=cfg.crop), ds.keys, ds.sizes, cfg.split)
    device = cfg.resolved_device()
    workers = cfg.resolved_workers()
    pair_bytes = cfg.pair_bytes()
    if cfg.consumer == "unet" and not ds.members.default:
        raise ConfigError(f"--consumer unet: split {cfg.split!r} holds {ds.members.describe()}; the consumer step is "
                          "the RGB reference model's: leave --consumer out for this split")
    limits = {"h2d": h2d_bound(device, pair_bytes), "decode": decode_rate(cfg.raw, cfg.split),
              "copy": copy_rate(cfg.shards, cfg.split, cfg.crop), "stored": stored_bound(ds, device, crop=cfg.crop)}
    if cfg.cold:
        limits["disk"] = disk_bound(ds.files, sum(ds.shard_bytes) // len(ds),  # bytes stored per pair
                                    streams=min(8, max(2, workers)))
    consumer = make_consumer(device, cfg.crop) if cfg.consumer == "unet" else None
    results = []

    def record(res: Result) -> None:
        results.append(res)
        if on_result:
            on_result(res)

    for name in cfg.loaders:
        try:
            record(_warm(name, cfg, device, workers, consumer))
        except Skip as why:
            record(Result(loader=name, status="skipped", reason=str(why)))
        except (PairloadError, MissingDependencyError, RuntimeError, OSError) as exc:
            record(failed(name, exc))
    for name in cold_entries(cfg.loaders) if cfg.cold else ():
        try:
            res = measure_cold(name, cfg, device, workers, ds.files)
            if res.status == "ok":
                res.reason = (f"{res.pairs_per_s / limits['disk']['pairs_per_s']:.2f} of the disk bound, first batch "
                              f"{statistics.median(res.first_batch_s):.2f} s"
                              + (f" ({len(res.invalid)} repeats not cold)" if res.invalid else ""))
        except (PairloadError, RuntimeError, OSError) as exc:
            res = failed(name, exc, cold=True)
        record(res)
    if consumer is not None and device.type == "cuda":
        limits["train_step_pairs_per_s"] = consumer_rate(consumer, device, cfg.batch_size, cfg.crop)
    return {
        "device": device_name(device),
        "cpu_count": os.cpu_count(),
        "host": platform.node(),
        "date": time.strftime("%Y-%m-%d"),
        "torch": torch.__version__,
        "config": {**asdict(cfg), "loaders": list(cfg.loaders), "workers": workers, "device": str(device)},
        "limits": limits,
        "results": [asdict(r) for r in results],
    }
