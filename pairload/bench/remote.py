"""`pairload bench-loaders SHARDS --remote-rate 500MB`: a loader over shards served by HTTP, as users of a bucket
feel it, next to the network bound measured in the same run.

The shards are served from loopback by `httpserver.StaticServer`, throttled to `rate` bytes/s (one shared link).
Measured, in order: the network bound (every train shard downloaded by `streams` parallel plain fsspec reads,
no loader: bytes/s, and the pairs/s it allows); epoch 1 of the loader with an empty cache (time to the first
batch, pairs/s over the whole epoch, and that as a fraction of the bound); epoch 2 from the cache; and the same
loader over the local shards, for the spread a cached epoch should fall within.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class RemoteBenchConfig:
    shards: str
    rate: int  # bytes/s of the throttled link
    loader: str = "wds"
    split: str = "train"
    crop: int = 256
    batch_size: int = 32
    workers: int = 4
    device: str = "cpu"
    streams: int = 4  # parallel downloads for the bound (the cache's own concurrency)
    local_epochs: int = 3

    def __post_init__(self) -> None:
        if self.loader not in ("wds", "ram", "dali-external"):
            raise ConfigError(f"--loaders {self.loader}: the remote benchmark runs one of wds, ram, dali-external")
        if self.rate <= 0:
            raise ConfigError(f"--remote-rate {self.rate}: expected a positive number of bytes per second")


def _epoch(loader, epoch: int, sync) -> dict:
    loader.set_epoch(epoch)
    start = time.perf_counter()
    first, pairs = None, 0
    for batch in loader:
        pairs += len(batch.keys)
        if first is None:
            sync()
            first = time.perf_counter() - start
    sync()
    seconds = time.perf_counter() - start
    return {"pairs": pairs, "seconds": round(seconds, 3), "first_batch_s": round(first or 0.0, 3),
            "pairs_per_s": round(pairs / seconds, 1)}


def network_bound(url: str, files: list[str], streams: int) -> dict:
    """Every file downloaded once by plain parallel fsspec reads: the link's bytes/s as this client sees it."""
    import fsspec

    fs = fsspec.filesystem("http")

    def pull(name: str) -> int:
        total = 0
        with fs.open(f"{url}/{name}", "rb", block_size=0) as fh:
            while chunk := fh.read(8 << 20):
                total += len(chunk)
        return total

    start = time.perf_counter()
    with ThreadPoolExecutor(streams) as pool:
        nbytes = sum(pool.map(pull, files))
    seconds = time.perf_counter() - start
    return {"bytes": nbytes, "seconds": round(seconds, 3), "bytes_per_s": round(nbytes / seconds)}


def run_remote(cfg: RemoteBenchConfig) -> dict:
    import torch

    from ..loaders import make_loader
    from ..read.shards import ShardDataset
    from .httpserver import StaticServer

    ds = ShardDataset(cfg.shards, cfg.split)
    files = [p.name for p in ds.files]
    shard_bytes = sum(ds.shard_bytes)
    bytes_per_pair = shard_bytes / len(ds)
    device = torch.device(cfg.device)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    opts = dict(split=cfg.split, batch_size=cfg.batch_size, crop=cfg.crop, num_workers=cfg.workers,
                device=str(device), seed=0)
    cache = Path(tempfile.mkdtemp(prefix="pairload-bench-cache-"))
    try:
        with StaticServer(cfg.shards, rate=cfg.rate) as srv:
            bound = network_bound(srv.url, files, cfg.streams)
            bound["pairs_per_s"] = round(bound["bytes_per_s"] / bytes_per_pair, 1)
            before = len(srv.gets(".tar"))
            start = time.perf_counter()
            with make_loader(cfg.loader, srv.url, cache_dir=cache, **opts) as loader:
                made = time.perf_counter() - start
                cold = _epoch(loader, 0, sync)
                # time to the first batch from the loader's creation (ram and dali-external fetch the split first)
                cold["first_batch_s"] = round(made + cold["first_batch_s"], 3)
                cold["seconds"] = round(made + cold["seconds"], 3)
                cold["pairs_per_s"] = round(cold["pairs"] / cold["seconds"], 1)
                cold["of_bound"] = round(cold["pairs_per_s"] / bound["pairs_per_s"], 3)
                cached = _epoch(loader, 1, sync)
                gets = len(srv.gets(".tar")) - before
        with make_loader(cfg.loader, cfg.shards, **opts) as local_loader:
            local = [_epoch(local_loader, e, sync)["pairs_per_s"] for e in range(cfg.local_epochs)]
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return {
        "loader": cfg.loader, "split": cfg.split, "pairs": len(ds), "shards": len(files),
        "shard_bytes": shard_bytes, "bytes_per_pair": round(bytes_per_pair), "rate_limit_bytes_per_s": cfg.rate,
        "network_bound": bound, "cold_epoch": cold, "cached_epoch": cached, "shard_downloads": gets,
        "local_epochs_pairs_per_s": local,
        "cached_within_local_spread": cached["pairs_per_s"] >= min(local),
        "crop": cfg.crop, "batch_size": cfg.batch_size, "workers": cfg.workers, "device": str(device),
    }
