"""The SID-sized raw benchmark (`run_raw_bench`): each loader of `RAW_LOADERS` timed on one SID-style tree with the
bench's own warm measurement (pairs/s, CPU cores, peak memory), next to the host→device bound for raw crop pairs:
pairload's loaders over the tree's pack, and the two ways users load SID today (LibRaw per access, np.load of
converted arrays)."""

from __future__ import annotations

import os
import platform
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import torch

from pairload.bench.baselines import TorchBaseline
from pairload.bench.bounds import h2d_bound, sync
from pairload.bench.config import BenchConfig
from pairload.bench.entries import Skip
from pairload.bench.loaders import device_name
from pairload.bench.measure import measure
from pairload.bench.result import Result, failed
from pairload.errors import ConfigError, PairloadError
from pairload.format.members import Member, Members

from .rawbaselines import LibRawPairs, NpyPairs, RawTorchBaseline
from .rawdata import ARRAYS_INDEX, sid_pairs


SID_MEMBERS = Members(Member("uint16", 4), Member("uint16", 3), scale=2)  # what every row delivers


def raw_pair_bytes(crop: int) -> int:
    """Bytes of one delivered pair: a crop×crop×4 uint16 input and its 2crop×2crop×3 uint16 target."""
    return SID_MEMBERS.pair_bytes(crop, crop)


def _libraw(root: Path, arrays: Path, cfg: BenchConfig, device: torch.device, workers: int) -> TorchBaseline:
    return RawTorchBaseline(LibRawPairs(sid_pairs(root), cfg.crop), batch_size=cfg.batch_size, device=device,
                            workers=workers, pin=True)


def _npy(root: Path, arrays: Path, cfg: BenchConfig, device: torch.device, workers: int) -> TorchBaseline:
    if not (arrays / ARRAYS_INDEX).is_file():
        raise Skip(f"no converted arrays in {arrays} (write them with benchlib.rawdata.write_arrays)")
    return RawTorchBaseline(NpyPairs(arrays, cfg.crop), batch_size=cfg.batch_size, device=device, workers=workers,
                            pin=True)


def _pairload(kind: str, **options) -> Callable:
    def build(root: Path, arrays: Path, cfg: BenchConfig, device: torch.device, workers: int):
        from pairload.loaders import make_loader

        if not (Path(cfg.shards) / "manifest.json").is_file():
            raise Skip(f"no pack in {cfg.shards} (pairload pack {root} {cfg.shards})")
        return make_loader(kind, cfg.shards, crop=cfg.crop, batch_size=cfg.batch_size, device=str(device),
                           num_workers=workers, **options)
    return build


# name -> (tree root, arrays folder, config, device, workers) -> a loader yielding batches with .low/.high
RAW_LOADERS: dict[str, Callable] = {
    "ram": _pairload("ram"),  # on a GPU: the zero-copy kernel
    "ram-workers": _pairload("ram", zero_copy=False),
    "ram-resident": _pairload("ram", resident=True),
    "wds": _pairload("wds"),
    "dali-external": _pairload("dali-external"),
    "libraw": _libraw,
    "npy": _npy,
}


def run_raw_bench(root: str | os.PathLike, loaders=tuple(RAW_LOADERS), *, shards: str | os.PathLike | None = None,
                  crop: int = 512, batch: int = 8,
                  seconds: float = 6.0, repeats: int = 3, device: str = "auto", workers: int = 0,
                  arrays: str | os.PathLike | None = None, on_result: Callable[[Result], None] | None = None) -> dict:
    """Time each of `loaders` warm on the SID-style tree `root` (`arrays`: its converted copy, default `root/npy`)
    with `crop` input pixels and `batch` pairs a batch for `seconds` in `repeats` windows, on `workers` worker
    processes (0: all cores but one); `shards`: the tree's pack (default `root/shards`), read by pairload's rows.
    Returns the JSON-able report (rows as `Result`s)."""
    unknown = [name for name in loaders if name not in RAW_LOADERS]
    if unknown:
        raise ConfigError(f"loaders {', '.join(unknown)}: unknown; choose from {', '.join(RAW_LOADERS)}")
    root = Path(root)
    arrays = Path(arrays) if arrays is not None else root / "npy"
    # the bench's config carries the timing and sizes measure() reads; it has no raw loaders to list
    shards = Path(shards) if shards is not None else root / "shards"
    cfg = BenchConfig(shards=os.fspath(shards), raw=os.fspath(root), loaders=(), crop=crop, batch_size=batch,
                      members=SID_MEMBERS,
                      workers=workers, seconds=seconds, repeats=repeats, device=device)
    dev, n_workers = cfg.resolved_device(), cfg.resolved_workers()
    results = []
    for name in loaders:
        try:
            res = _warm(name, root, arrays, cfg, dev, n_workers)
        except Skip as why:
            res = Result(loader=name, status="skipped", reason=str(why))
        except (PairloadError, RuntimeError, OSError) as exc:
            res = failed(name, exc)
        results.append(res)
        if on_result:
            on_result(res)
    return {
        "device": device_name(dev),
        "cpu_count": os.cpu_count(),
        "host": platform.node(),
        "date": time.strftime("%Y-%m-%d"),
        "torch": torch.__version__,
        "config": {"root": os.fspath(root), "arrays": os.fspath(arrays), "shards": os.fspath(shards),
                   "loaders": list(loaders), "crop": crop,
                   "batch": batch, "seconds": seconds, "repeats": repeats, "workers": n_workers, "device": str(dev)},
        "limits": {"h2d": h2d_bound(dev, raw_pair_bytes(crop))},
        "results": [asdict(r) for r in results],
    }


def _warm(name: str, root: Path, arrays: Path, cfg: BenchConfig, device: torch.device, workers: int) -> Result:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        sync(device)
    base_free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else None
    loader = RAW_LOADERS[name](root, arrays, cfg, device, workers)
    try:
        res = measure(name, loader, cfg, device, None, base_free)
    finally:
        loader.close()
    return res
