"""`pairload bench-loaders`: every loader and today's baselines on the same data, next to the hardware limits.

Each loader delivers batches into device memory for a warm-up and then `repeats` timed windows; we report the
median pairs/s and the spread, MB/s, CPU cores used, peak host memory and device memory. The references,
measured in the same run: the pinned host→device bandwidth as a pairs/s bound, the single-core decode rate
of the raw images, and the single-core crop-copy rate out of the shards.
"""

from __future__ import annotations

import contextlib
import os
import platform
import random
import statistics
import textwrap
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np
import psutil
import torch
from torch.utils.data import DataLoader, Dataset

from ..errors import ConfigError, MissingDependencyError, PairloadError
from ..kinds import BASELINES, BENCH_ENTRIES as ALL  # noqa: F401
from ..recipes.timing import DataWait


@dataclass(frozen=True, kw_only=True)
class BenchConfig:
    shards: str
    raw: str | None = None
    split: str = "train"
    loaders: tuple[str, ...] = ALL
    crop: int = 256
    batch_size: int = 32
    workers: int = 0  # 0: all cores but one
    seconds: float = 6.0
    repeats: int = 3
    device: str = "auto"
    consumer: str = "none"  # or "unet": each batch feeds a training step of the reference model
    cold: bool = False  # also measure `ram` and `wds` with the shards evicted from the page cache before each repeat
    ranks: int = 1  # >1: that many concurrent ranks, each with its own loader (and GPU), splitting the node's cores

    def __post_init__(self) -> None:
        unknown = [n for n in self.loaders if n not in ALL]
        if unknown:
            raise ConfigError(f"--loaders {','.join(unknown)}: unknown; choose from {', '.join(ALL)}")
        if self.ranks < 1:
            raise ConfigError(f"--ranks {self.ranks}: expected 1 or more")
        if self.ranks > 1 and (self.cold or self.consumer != "none"):
            raise ConfigError("--ranks measures warm loaders alone: leave out --cold and --consumer")
        if self.ranks > 1 and torch.cuda.is_available() and self.device in ("auto", "cuda") and \
                self.ranks > torch.cuda.device_count():
            raise ConfigError(f"--ranks {self.ranks} but this machine has {torch.cuda.device_count()} GPUs; every rank "
                              "needs its own (or pass --device cpu)")
        if self.consumer not in ("none", "unet"):
            raise ConfigError(f"--consumer {self.consumer!r}: expected none or unet")
        if self.repeats < 1 or self.seconds <= 0:
            raise ConfigError("--seconds must be positive and repeats at least 1")

    def resolved_device(self) -> torch.device:
        from ..devices import resolve_device

        return resolve_device(self.device)

    def resolved_workers(self) -> int:
        return self.workers or max(1, (os.cpu_count() or 2) - 1)


# ------------------------------------------------------------------ baselines users run today

class _FolderPairs(Dataset):
    """A map-style Dataset over discovered pairs that reads files per item, as hand-written Datasets do."""

    def __init__(self, pairs, crop: int):
        self.pairs, self.crop = pairs, crop

    def __len__(self) -> int:
        return len(self.pairs)

    def window(self, height: int, width: int) -> tuple[int, int]:
        return random.randint(0, height - self.crop), random.randint(0, width - self.crop)


class NaivePilPairs(_FolderPairs):
    """The reference blog's Dataset: PIL opens both files per item, float conversion on the CPU, paired crop."""

    def __getitem__(self, i: int):
        from PIL import Image

        p = self.pairs[i]
        low = torch.from_numpy(np.asarray(Image.open(p.low).convert("RGB"), dtype=np.float32) / 255.0).permute(2, 0, 1)
        high = torch.from_numpy(np.asarray(Image.open(p.high).convert("RGB"), dtype=np.float32) / 255.0).permute(2, 0, 1)
        y, x = self.window(low.shape[1], low.shape[2])
        return low[:, y:y + self.crop, x:x + self.crop], high[:, y:y + self.crop, x:x + self.crop]


class Cv2DiskPairs(_FolderPairs):
    """A BasicSR-style paired dataset: cv2.imread of both files, paired random crop and flips on the CPU, uint8."""

    def __getitem__(self, i: int):
        import cv2

        p = self.pairs[i]
        low, high = cv2.imread(str(p.low), cv2.IMREAD_COLOR), cv2.imread(str(p.high), cv2.IMREAD_COLOR)
        y, x = self.window(low.shape[0], low.shape[1])
        low, high = low[y:y + self.crop, x:x + self.crop], high[y:y + self.crop, x:x + self.crop]
        if random.random() < 0.5:
            low, high = low[:, ::-1], high[:, ::-1]
        to = lambda a: torch.from_numpy(np.ascontiguousarray(a[..., ::-1])).permute(2, 0, 1)  # noqa: E731
        return to(low), to(high)


def _worker_init(_: int) -> None:
    import cv2

    cv2.setNumThreads(1)


class _TorchBaseline:
    """Wraps a baseline DataLoader so that it yields (low, high) on the device like a pairload loader."""

    def __init__(self, dataset: Dataset, cfg: BenchConfig, device: torch.device, workers: int, pin: bool):
        self.device = device
        self.loader = DataLoader(dataset, batch_size=cfg.batch_size, shuffle=True, num_workers=workers,
                                 drop_last=True, pin_memory=pin and device.type == "cuda",
                                 persistent_workers=workers > 0, worker_init_fn=_worker_init if workers else None,
                                 prefetch_factor=4 if workers else None)

    def set_epoch(self, epoch: int) -> None:
        pass

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        for low, high in self.loader:
            yield low.to(self.device, non_blocking=True), high.to(self.device, non_blocking=True)


# ------------------------------------------------------------------ measurement

@dataclass
class Result:
    loader: str
    status: str = "ok"  # ok | skipped | failed
    reason: str = ""
    pairs_per_s: float = 0.0
    pairs_per_s_min: float = 0.0
    pairs_per_s_max: float = 0.0
    repeats: list[float] = field(default_factory=list)
    mb_per_s: float = 0.0
    cpu_cores_used: float = 0.0
    peak_host_rss_mb: float = 0.0
    device_mem_mb: float = 0.0
    data_wait_frac: float | None = None
    cold: bool = False
    ranks: int = 1
    per_rank: list[float] = field(default_factory=list)  # with ranks > 1: each rank's median; pairs_per_s is their sum
    path: str = ""  # ram: "zero-copy" (the GPU cuts the crops), "workers" (why, when zero-copy was given up)

    def summarise(self, crop: int, peak_rss: int, node_total: bool = False) -> None:
        """Median (or, for concurrent ranks, the node's sum) and spread of the repeats, MB/s of delivered crops,
        peak host memory."""
        self.pairs_per_s = sum(self.repeats) if node_total else statistics.median(self.repeats)
        self.pairs_per_s_min, self.pairs_per_s_max = min(self.repeats), max(self.repeats)
        self.mb_per_s = self.pairs_per_s * 2 * crop * crop * 3 / 1e6
        self.peak_host_rss_mb = peak_rss / 2**20


class _TreeSampler:
    """Peak resident memory of this process and its children, sampled in a thread."""

    def __init__(self, interval: float = 0.05):
        self.interval, self.peak, self._stop = interval, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def tree() -> list[psutil.Process]:
        me = psutil.Process()
        return [me, *me.children(recursive=True)]

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0
            for p in self.tree():
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _cpu_seconds() -> float:
    total = 0.0
    for p in _TreeSampler.tree():
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _endless(loader):
    epoch = 0
    while True:
        loader.set_epoch(epoch)
        for batch in loader:
            yield batch
        epoch += 1


def _pairs(batch) -> tuple[torch.Tensor, torch.Tensor]:
    return (batch.low, batch.high) if hasattr(batch, "low") else batch


def make_consumer(device: torch.device, crop: int) -> Callable:
    """A training step of the reference model (bf16 autocast on CUDA) that takes (low, high) uint8 or float."""
    from ..batch import Normalize
    from ..recipes.model import EnhanceUNet

    model = EnhanceUNet().to(device)
    norm = Normalize().to(device)
    if device.type == "cuda":
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    amp = (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) if device.type == "cuda" else contextlib.nullcontext

    def step(low: torch.Tensor, high: torch.Tensor) -> None:
        x = norm(low) if low.dtype == torch.uint8 else low
        y = norm(high) if high.dtype == torch.uint8 else high
        if device.type == "cuda":
            x = x.contiguous(memory_format=torch.channels_last)
        with amp():
            loss = (model(x) - y).abs().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def _path(loader) -> str:
    """How a ram loader cuts its crops: "zero-copy", or "workers" with the reason the GPU path was given up."""
    if not hasattr(loader, "zero_copy"):
        return ""
    if loader.zero_copy:
        return "zero-copy"
    return "workers" + (f" ({loader.path_note})" if loader.path_note else "")


def measure(name: str, loader, cfg: BenchConfig, device: torch.device, consumer: Callable | None,
            base_free: int | None) -> Result:
    res = Result(loader=name, path=_path(loader))
    it = _endless(loader)
    per_window = cfg.seconds / cfg.repeats
    with _TreeSampler() as mem:
        warm_end = time.perf_counter() + max(0.5, 0.3 * per_window)
        for _ in range(2):  # at least two batches, then until the warm-up time is over
            low, high = _pairs(next(it))
            if consumer:
                consumer(low, high)
        while time.perf_counter() < warm_end:
            low, high = _pairs(next(it))
            if consumer:
                consumer(low, high)
        _sync(device)
        cpu0, t_all = _cpu_seconds(), time.perf_counter()
        meter = DataWait(device)
        for _ in range(cfg.repeats):
            n = 0
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < per_window:
                meter.before_next()
                low, high = _pairs(next(it))
                meter.got_batch()
                n += low.shape[0]
                if consumer:
                    consumer(low, high)
                meter.step_done()
            _sync(device)
            dt = time.perf_counter() - t0
            res.repeats.append(n / dt)
        res.cpu_cores_used = (_cpu_seconds() - cpu0) / (time.perf_counter() - t_all)
    res.summarise(cfg.crop, mem.peak)
    if device.type == "cuda" and base_free is not None:
        res.device_mem_mb = (base_free - torch.cuda.mem_get_info(device)[0]) / 2**20
    if consumer:
        res.data_wait_frac = meter.fraction()
    return res


COLD_LOADERS = ("ram", "wds")


def evict(files) -> None:
    """Drop the files' pages from the page cache (posix_fadvise DONTNEED; no root needed). Pages that a live
    process has mapped stay: close the loaders that map them first."""
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def disk_bound(files, pair_bytes: int, seconds: float = 3.0) -> dict:
    """Sequential read bandwidth of the shard files, cold, as a pairs/s bound (`pair_bytes`: one stored pair)."""
    evict(files)
    buf = bytearray(8 << 20)
    n, t0 = 0, time.perf_counter()
    for path in files:
        with open(path, "rb", buffering=0) as fh:
            while (got := fh.readinto(buf)) and time.perf_counter() - t0 < seconds:
                n += got
        if time.perf_counter() - t0 >= seconds:
            break
    dt = time.perf_counter() - t0
    evict(files)
    return {"gb_per_s": n / dt / 1e9, "pairs_per_s": n / dt / pair_bytes, "bytes_read": n}


def measure_cold(name: str, cfg: BenchConfig, device: torch.device, workers: int, files) -> Result:
    """Each repeat: the shards evicted, a new loader (so no process maps them) whose workers are started first (they
    read no shard), then one whole epoch, timed from the moment it is asked for to its last batch: the rate at which
    it reads a split that is not in memory, the pipeline's fill included. Only the first pass over a split is cold,
    so a repeat is one epoch, not a time window."""
    res = Result(loader=name, cold=True)
    with _TreeSampler() as mem:
        for r in range(cfg.repeats):
            evict(files)
            loader = build_loader(name, cfg, device, workers)
            res.path = _path(loader)
            try:
                loader.start_workers()
                loader.set_epoch(r)
                _sync(device)
                n, t0 = 0, time.perf_counter()
                for batch in loader:
                    n += _pairs(batch)[0].shape[0]
                _sync(device)
                res.repeats.append(n / (time.perf_counter() - t0))
            finally:
                loader.close()
                del loader
    res.summarise(cfg.crop, mem.peak)
    return res


def build_loader(name: str, cfg: BenchConfig, device: torch.device, workers: int, rank: int = 0, world_size: int = 1):
    from ..raw.discover import find_pairs
    from ..loaders import make_loader

    common = dict(split=cfg.split, batch_size=cfg.batch_size, crop=cfg.crop, device=str(device), rank=rank,
                  world_size=world_size)
    if name in ("ram", "ram-workers", "ram-resident"):  # 8 workers already reach the host's copy bandwidth
        # "ram": as users get it (on a GPU the zero-copy path when it can run); "ram-workers": the worker path always
        return make_loader("ram", cfg.shards, num_workers=min(workers, 8), resident=name == "ram-resident",
                           zero_copy=False if name == "ram-workers" else None, **common)
    if name in ("wds", "dali-external"):
        return make_loader(name, cfg.shards, num_workers=workers, **common)
    if world_size > 1 and name in BASELINES:
        raise _Skip("a baseline has no rank share: measured with --ranks 1 only")
    if cfg.raw is None:
        raise _Skip("needs --raw RAW_DIR (the images the shards were packed from)")
    if name == "dali-file":
        return make_loader("dali-file", cfg.raw, num_workers=workers, **common)
    pairs = find_pairs(cfg.raw).splits().get(cfg.split)
    if not pairs:
        raise _Skip(f"{cfg.raw} has no split {cfg.split!r}")
    dataset = NaivePilPairs(pairs, cfg.crop) if name == "naive-pil" else Cv2DiskPairs(pairs, cfg.crop)
    return _TorchBaseline(dataset, cfg, device, workers, pin=name == "cv2-disk")


class _Skip(Exception):
    pass


def _rank_main(name: str, cfg: BenchConfig, rank: int, workers: int, barrier, results) -> None:
    """One rank of a --ranks run (a spawned process): its own loader on its own GPU, timed together with the others."""
    device = cfg.resolved_device()
    if device.type == "cuda":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
    loader = None
    try:
        loader = build_loader(name, cfg, device, workers, rank=rank, world_size=cfg.ranks)
        if hasattr(loader, "start_workers"):
            loader.start_workers()
        barrier.wait(timeout=600)  # every rank's workers are up: the timed windows overlap
        base_free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else None
        results.put((rank, asdict(measure(name, loader, cfg, device, None, base_free))))
    except _Skip as why:
        barrier.abort()
        results.put((rank, asdict(Result(loader=name, status="skipped", reason=str(why)))))
    except BaseException as exc:  # noqa: BLE001 - reported by the parent
        barrier.abort()
        results.put((rank, asdict(Result(loader=name, status="failed",
                                         reason=f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"))))
    finally:
        if loader is not None:
            loader.close()


def measure_ranks(name: str, cfg: BenchConfig, workers: int) -> Result:
    """`cfg.ranks` concurrent ranks of one loader kind, each with `workers` CPU workers: the node's total rate
    (sum of the ranks' medians), the per-rank spread, and the node's peak memory (all ranks and their workers)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(cfg.ranks), ctx.Queue()
    procs = [ctx.Process(target=_rank_main, args=(name, cfg, r, workers, barrier, results), name=f"bench-rank{r}")
             for r in range(cfg.ranks)]
    with _TreeSampler() as mem:
        for p in procs:
            p.start()
        got = {}
        while len(got) < cfg.ranks:
            try:
                rank, res = results.get(timeout=5)
                got[rank] = res
            except Exception:  # noqa: BLE001 - queue.Empty: check that no rank died without a word
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    for p in procs:
                        p.kill()
                    return Result(loader=name, status="failed", ranks=cfg.ranks,
                                  reason=f"rank process {dead[0].name} exited with {dead[0].exitcode}")
        for p in procs:
            p.join(timeout=30)
    bad = [r for r in got.values() if r["status"] != "ok"]
    if bad:
        return Result(loader=name, status=bad[0]["status"], reason=bad[0]["reason"], ranks=cfg.ranks)
    per = [got[r]["pairs_per_s"] for r in range(cfg.ranks)]
    res = Result(loader=name, ranks=cfg.ranks, per_rank=per, repeats=per)
    res.summarise(cfg.crop, mem.peak, node_total=True)  # the node's rate; min/max are the per-rank spread
    res.cpu_cores_used = sum(got[r]["cpu_cores_used"] for r in range(cfg.ranks))
    res.device_mem_mb = max(got[r]["device_mem_mb"] for r in range(cfg.ranks))
    res.path = "; ".join(sorted({got[r]["path"] for r in range(cfg.ranks)}))
    res.reason = f"{cfg.ranks} ranks x {workers} workers; per rank {min(per):,.0f}-{max(per):,.0f}"
    return res


# ------------------------------------------------------------------ references

def h2d_bound(device: torch.device, pair_bytes: int, size: int = 256 * 2**20) -> dict:
    """Pinned host→device bandwidth (or host memcpy bandwidth on a CPU device) as a pairs/s bound."""
    src = torch.empty(size, dtype=torch.uint8, pin_memory=device.type == "cuda")
    src.fill_(1)
    dst = torch.empty(size, dtype=torch.uint8, device=device)
    for _ in range(2):
        dst.copy_(src, non_blocking=True)
    _sync(device)
    reps = 10
    t0 = time.perf_counter()
    for _ in range(reps):
        dst.copy_(src, non_blocking=True)
    _sync(device)
    gbps = size * reps / (time.perf_counter() - t0) / 1e9
    return {"kind": "pinned host->device" if device.type == "cuda" else "host memcpy", "gb_per_s": gbps,
            "pairs_per_s": gbps * 1e9 / pair_bytes}


def decode_rate(raw: str | None, split: str, seconds: float = 2.0) -> dict | None:
    """Single-core cv2 decode rate of the raw images (images/s and pairs/s for one core and for all)."""
    if raw is None:
        return None
    import cv2

    from ..raw.discover import find_pairs

    pairs = find_pairs(raw).splits().get(split, [])[:64]
    if not pairs:
        return None
    files = [p.low for p in pairs] + [p.high for p in pairs]
    threads = cv2.getNumThreads()
    cv2.setNumThreads(1)  # one core's rate; the process's own setting is restored below
    try:
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            cv2.imread(str(files[n % len(files)]), cv2.IMREAD_COLOR)
            n += 1
        rate = n / (time.perf_counter() - t0)
    finally:
        cv2.setNumThreads(threads)
    cores = os.cpu_count() or 1
    return {"images_per_s_per_core": rate, "pairs_per_s_per_core": rate / 2, "cores": cores,
            "pairs_per_s_all_cores": rate / 2 * cores, "format": files[0].suffix.lstrip(".")}


def copy_rate(shards: str, split: str, crop: int, seconds: float = 1.5) -> dict:
    """Single-core rate of copying planned uint8 crop pairs out of the memory-mapped shards."""
    from ..read.shards import ShardDataset

    ds = ShardDataset(shards, split)
    rng = np.random.default_rng(0)
    out = np.empty((2, crop, crop, 3), np.uint8)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        i = int(rng.integers(len(ds)))
        low, high = ds.arrays(i)
        y = int(rng.integers(low.shape[0] - crop + 1))
        x = int(rng.integers(low.shape[1] - crop + 1))
        out[0] = low[y:y + crop, x:x + crop]
        out[1] = high[y:y + crop, x:x + crop]
        n += 1
    return {"pairs_per_s_per_core": n / (time.perf_counter() - t0)}


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.processor() or platform.machine()})"


def run_bench(cfg: BenchConfig, on_result: Callable[[Result], None] | None = None) -> dict:
    """Run every requested loader; returns the JSON-able report."""
    from ..plan import PlanConfig, check_split
    from ..read.shards import ShardDataset

    ds = ShardDataset(cfg.shards, cfg.split)  # a crop larger than the images, a batch of 0: one clear error first
    check_split(PlanConfig(batch_size=cfg.batch_size, crop=cfg.crop), ds.keys, ds.sizes, cfg.split)
    device = cfg.resolved_device()
    workers = cfg.resolved_workers()
    pair_bytes = 2 * cfg.crop * cfg.crop * 3
    limits = {"h2d": h2d_bound(device, pair_bytes), "decode": decode_rate(cfg.raw, cfg.split),
              "copy": copy_rate(cfg.shards, cfg.split, cfg.crop)}
    if cfg.cold:
        limits["disk"] = disk_bound(ds.files, sum(ds.shard_bytes) // len(ds))  # bytes stored per pair
    consumer = make_consumer(device, cfg.crop) if cfg.consumer == "unet" else None
    results = []
    for name in cfg.loaders:
        loader = None
        try:
            if name.startswith("dali"):
                try:
                    import nvidia.dali  # noqa: F401
                except ImportError:
                    raise _Skip("nvidia-dali is not installed (pip install 'pairload[dali]')") from None
            if device.type == "cuda":
                torch.cuda.empty_cache()
                _sync(device)
            if cfg.ranks > 1:
                res = measure_ranks(name, cfg, max(1, (os.cpu_count() or 2) // cfg.ranks - 1)
                                    if not cfg.workers else workers)
            else:
                base_free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else None
                loader = build_loader(name, cfg, device, workers)
                res = measure(name, loader, cfg, device, consumer, base_free)
        except _Skip as why:
            res = Result(loader=name, status="skipped", reason=str(why))
        except (PairloadError, MissingDependencyError, RuntimeError, OSError) as exc:
            res = Result(loader=name, status="failed", reason=f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
        finally:
            if loader is not None and hasattr(loader, "close"):
                loader.close()  # its workers stop mapping the shards (a cold run needs them unmapped to evict)
            del loader
        results.append(res)
        if on_result:
            on_result(res)
    for name in (n for n in cfg.loaders if cfg.cold and n in COLD_LOADERS):
        try:
            res = measure_cold(name, cfg, device, workers, ds.files)
            res.reason = f"{res.pairs_per_s / limits['disk']['pairs_per_s']:.2f} of the disk bound"
        except (PairloadError, RuntimeError, OSError) as exc:
            res = Result(loader=name, status="failed", reason=f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}",
                         cold=True)
        results.append(res)
        if on_result:
            on_result(res)
    if consumer is not None and device.type == "cuda":
        limits["train_step_pairs_per_s"] = _consumer_rate(consumer, device, cfg)
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


def _consumer_rate(consumer: Callable, device: torch.device, cfg: BenchConfig) -> float:
    """Training steps per second on one resident batch: what the GPU can absorb (no loading at all)."""
    low = torch.randint(0, 256, (cfg.batch_size, 3, cfg.crop, cfg.crop), dtype=torch.uint8, device=device)
    for _ in range(3):
        consumer(low, low)
    _sync(device)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 2.0:
        consumer(low, low)
        n += 1
    _sync(device)
    return n * cfg.batch_size / (time.perf_counter() - t0)


def plot(report: dict, path: str | os.PathLike, targets: dict[str, float] | None = None, note: str = "") -> None:
    """A log-scale bar chart of pairs/s per loader with the hardware bounds drawn as lines (and, if given, a
    target per loader drawn as a black diamond, and a `note` under the title saying what the sizes mean)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in report["results"] if r["status"] == "ok"]
    fig, ax = plt.subplots(figsize=(9, 0.6 * max(3, len(ok)) + 1.6))
    names = [r["loader"] + (" (cold)" if r.get("cold") else "") for r in ok]
    vals = [r["pairs_per_s"] for r in ok]
    errs = [[r["pairs_per_s"] - r["pairs_per_s_min"] for r in ok], [r["pairs_per_s_max"] - r["pairs_per_s"] for r in ok]]
    colors = ["#888888" if n in BASELINES else "#2a7ab9" for n in names]
    ax.barh(names, vals, xerr=errs, color=colors)
    for y, r in enumerate(ok):  # past the end of the error bar, not on it
        ax.text(max(r["pairs_per_s"], r["pairs_per_s_max"]) * 1.04, y, f"{r['pairs_per_s']:,.0f}", va="center",
                fontsize=8)
    lim = report["limits"]
    lines = [(lim["h2d"]["pairs_per_s"], lim["h2d"]["kind"] + " bound", "#d62728"),
             (lim["copy"]["pairs_per_s_per_core"], "one core copying crops", "#9467bd")]
    if lim.get("decode"):
        lines.append((lim["decode"]["pairs_per_s_all_cores"],
                      f"{lim['decode']['format']} decode, {lim['decode']['cores']} cores", "#ff7f0e"))
    if lim.get("disk"):
        lines.append((lim["disk"]["pairs_per_s"], "disk, sequential, cold", "#8c564b"))
    if lim.get("train_step_pairs_per_s"):
        lines.append((lim["train_step_pairs_per_s"], "reference U-Net training step", "#2ca02c"))
    for x, label, color in lines:
        ax.axvline(x, color=color, linestyle="--", linewidth=1, label=f"{label}: {x:,.0f}")
    marked = [(y, targets[n]) for y, n in enumerate(names) if targets and n in targets]
    if marked:
        ax.scatter([t for _, t in marked], [y for y, _ in marked], marker="D", color="black", zorder=3, s=18,
                   label="target")
    ax.set_xscale("log")
    ax.set_xlabel("pairs/s delivered into device memory (log scale)")
    c = report["config"]
    ax.set_title(f"{report['device']}, {report['cpu_count']} cores; crop {c['crop']}, batch {c['batch_size']}, "
                 f"{c['workers']} workers; {report['date']}" + ("\n" + "\n".join(textwrap.wrap(note, 110)) if note else ""),
                 fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, frameon=False)
    fig.tight_layout()
    from ..format.atomic import atomic_open

    with atomic_open(path, "wb", fsync=False) as fh:
        fig.savefig(fh, dpi=120, format="png")
    plt.close(fig)
