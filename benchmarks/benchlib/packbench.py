"""`benchmarks/bench_pack.py`: pack's throughput against its bounds, measured in one run on one machine: the decode
bound (W processes decoding as pack's workers do, nothing written), the output disk's write bound (W processes
writing and fsyncing as many bytes as the pack's shards), the pack itself, and each per-pair cost of the pack
(probe, decode, CRC-32, pwrite, shard hash, fsync, the pool's round trip) timed in one process. No torch, no GPU."""

from __future__ import annotations

import hashlib
import mmap
import multiprocessing as mp
import os
import platform
import resource
import shutil
import sys
import time
from pathlib import Path

from pairload import makepairs
from pairload.forking import start_method
from pairload.format.crc import crc32
from pairload.pack import PackOptions, pack
from pairload.pack.jobs import Job, JobResult, start_pool
from pairload.folders.decode import decode, probe, probe_image, silence_cv2
from pairload.folders.discover import Pair, find_pairs

MB = 1e6


# ------------------------------------------------------------------------------------------------------ the run

def run(work: Path, pairs: int, workers: int, *, raw: Path | None = None, size: tuple[int, int] = (600, 400),
        sample: int = 200, repeat: int = 1, keep: bool = False, pack_workers: int | None = None, log=print) -> dict:
    """Every measurement, as one JSON-ready dict. `work` holds the synthetic pairs (unless `raw` names a folder to
    pack instead) and the output folder; `sample` pairs are timed one by one for the breakdown. With `repeat` > 1
    the bounds and the pack are measured that many times, interleaved, and the fastest of each is analysed (on a
    busy machine the fastest is the least disturbed); every run is kept under `runs`. `pack_workers`: the pack's
    workers, where not `workers` (the bounds always use `workers` processes)."""
    work.mkdir(parents=True, exist_ok=True)
    out = work / "shards"
    shutil.rmtree(out, ignore_errors=True)
    raw = raw or make_pairs(work / "raw", pairs, size, workers, log)
    found = find_pairs(raw).pairs  # once to warm the folders' metadata, once timed
    t0 = time.perf_counter()
    found = find_pairs(raw).pairs
    find_s = time.perf_counter() - t0
    warm_page_cache(found)
    report = {"benchmark": "pack", "facts": facts(work, workers), "raw": str(raw), "pairs": len(found),
              "workers": workers, "pack_workers": pack_workers or workers, "find_pairs_s": find_s}
    headers = [(probe(p.low), probe(p.high)) for p in found]
    runs: dict[str, list] = {"decode_bound": [], "pack": [], "write_bound": []}
    for k in range(repeat):
        log(f"run {k + 1}/{repeat}: {len(found)} pairs in {raw}, {workers} processes; decode bound")
        runs["decode_bound"].append(decode_bound(found, headers, workers))
        log(f"decode bound {runs['decode_bound'][-1]['pairs_per_s']:.0f} pairs/s; pack")
        shutil.rmtree(out, ignore_errors=True)
        runs["pack"].append(pack_once(raw, out, pack_workers or workers))
        log(f"pack {runs['pack'][-1]['pairs_per_s']:.0f} pairs/s; write bound")
        shard_bytes = runs["pack"][-1]["shard_bytes"]
        if not (keep and k == repeat - 1):
            shutil.rmtree(out, ignore_errors=True)
        out.mkdir(exist_ok=True)
        runs["write_bound"].append(write_bound(out, shard_bytes, shard_bytes // max(1, len(found)),
                                               PackOptions().shard_size, workers))
        log(f"write bound {runs['write_bound'][-1]['mb_per_s']:.0f} MB/s")
    for key, measured in runs.items():
        report[key] = min(measured, key=lambda m: m["seconds"])
    if repeat > 1:
        report["runs"] = runs
    log(f"breakdown over {min(sample, len(found))} pairs")
    report["breakdown"] = breakdown(found[:sample], out, workers)
    report["analysis"] = analyse(report)
    if not keep:
        shutil.rmtree(out, ignore_errors=True)
    return report


def make_pairs(raw: Path, pairs: int, size: tuple[int, int], workers: int, log=print) -> Path:
    """`pairs` synthetic PNG pairs of `size` (W, H) under `raw`, made by `pairload make-pairs` unless a complete run
    with the same count and size is already there."""
    import json

    try:
        doc = json.loads((raw / "synth.json").read_text(encoding="utf-8"))
        if doc.get("complete") and len(doc["pairs"]) == pairs and tuple(doc["size"]) == tuple(size):
            return raw
    except (OSError, ValueError, KeyError, TypeError):
        pass
    log(f"making {pairs} synthetic {size[0]}x{size[1]} pairs in {raw}")
    t0 = time.perf_counter()
    makepairs.make_pairs(raw, makepairs.MakePairsOptions(pairs=pairs, test=0, size=size, workers=workers))
    log(f"made in {time.perf_counter() - t0:.1f} s")
    return raw


def warm_page_cache(pairs: list[Pair]) -> None:
    """Read every file once, so that each measurement finds them cached as the one before did."""
    for p in pairs:
        for path in (p.low, p.high):
            with open(path, "rb") as fh:
                while fh.read(1 << 22):
                    pass


def facts(work: Path, workers: int) -> dict:
    """The machine: cores (and this process's CPU affinity), memory, the output folder's filesystem, versions."""
    import cv2
    import numpy as np
    import PIL

    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": platform.node(), "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_model": _cpu_model(), "memory_gb": _memory_gb(), "output_filesystem": _filesystem(work),
        "python": sys.version.split()[0], "numpy": np.__version__, "opencv": cv2.__version__,
        "pillow": PIL.__version__, "pool_start_method": start_method(), "workers": workers,
        "crc32": crc32.__module__ or "zlib",
    }


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _memory_gb() -> float | None:
    try:
        kb = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0])
        return round(kb / 1024**2, 1)
    except (OSError, IndexError, ValueError):
        return None


def _filesystem(path: Path) -> str | None:
    """The type of the filesystem `path` lies on (ext4, xfs, tmpfs…), from /proc/mounts."""
    try:
        mounts = [line.split() for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return None
    target = str(path.resolve())
    best = max((m for m in mounts if len(m) > 2 and (target == m[1] or target.startswith(m[1].rstrip("/") + "/"))),
               key=lambda m: len(m[1]), default=None)
    return best[2] if best else None


# ------------------------------------------------------------------------------------------------- the bounds

def _init_worker() -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    silence_cv2()  # as pack's workers: one OpenCV thread each


def _noop(_) -> None:
    return None


def _decode_share(share: list[tuple[Path, Path, object, object]]) -> int:
    for low, high, hl, hh in share:
        decode(low, to_8bit=False, expect=hl)
        decode(high, to_8bit=False, expect=hh)
    return len(share)


def decode_bound(pairs: list[Pair], headers: list, workers: int) -> dict:
    """W processes, each decoding its share of the pairs (`decode.decode` on both files, with their probed headers,
    as pack's workers call it), nothing written: the rate no pack on these cores can beat."""
    items = [(p.low, p.high, hl, hh) for p, (hl, hh) in zip(pairs, headers)]
    shares = [items[i::workers] for i in range(workers)]
    with mp.get_context(start_method()).Pool(workers, initializer=_init_worker) as pool:
        pool.map(_noop, range(workers), chunksize=1)  # workers started and imported before the clock starts
        t0 = time.perf_counter()
        done = sum(pool.map(_decode_share, shares, chunksize=1))
        seconds = time.perf_counter() - t0
    return {"seconds": seconds, "pairs_per_s": done / seconds,
            "ms_per_pair_per_process": seconds * workers / done * 1e3}


def _write_share(task: tuple[str, list[int], int]) -> int:
    """Write files of the given sizes in `folder` as pack writes shards (created at their size, filled by pwrite of
    one image at a time, fsynced); returns the bytes written."""
    folder, sizes, block = task
    data = memoryview(os.urandom(block))  # random bytes: a compressing filesystem gains nothing
    written = 0
    for k, size in enumerate(sizes):
        path = os.path.join(folder, f"write-bound-{os.getpid()}-{k}.bin")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, size)
            off = 0
            while off < size:
                off += os.pwrite(fd, data[:min(block, size - off)], off)
            os.fsync(fd)
        finally:
            os.close(fd)
        written += size
    return written


def write_bound(folder: Path, total: int, pair_bytes: int, shard_size: int, workers: int) -> dict:
    """W processes writing `total` bytes between them into shard-sized files in `folder`, one image's bytes per
    pwrite, each file fsynced: the rate the output disk takes pack's bytes at. The files are removed after."""
    sizes = [shard_size] * (total // shard_size) + ([total % shard_size] if total % shard_size else [])
    tasks = [(str(folder), sizes[i::workers], max(1, pair_bytes // 2)) for i in range(workers)]
    with mp.get_context(start_method()).Pool(workers) as pool:
        pool.map(_noop, range(workers), chunksize=1)
        t0 = time.perf_counter()
        written = sum(pool.map(_write_share, tasks, chunksize=1))
        seconds = time.perf_counter() - t0
    for path in folder.glob("write-bound-*.bin"):
        path.unlink()
    return {"seconds": seconds, "bytes": written, "mb_per_s": written / MB / seconds,
            "pairs_per_s": written / max(1, pair_bytes) / seconds}


def pack_once(raw: Path, out: Path, workers: int) -> dict:
    """`pairload.pack.pack` with W workers: wall time, pairs/s, the report's phases (and the rest of the wall time,
    `other`: what no phase covers, such as creating the partial shards), the CPU seconds of this process (the pack's
    parent) and of its workers, what it wrote."""
    self0, kids0 = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    report = pack(raw, out, PackOptions(workers=workers, overwrite=True))
    seconds = time.perf_counter() - t0
    phases = dict(report.phases)
    phases["other"] = seconds - sum(phases.values())
    return {"seconds": seconds, "pairs_per_s": report.pairs / seconds, "phases_s": phases,
            "cpu_parent_s": _cpu(resource.RUSAGE_SELF) - self0,
            "cpu_workers_s": _cpu(resource.RUSAGE_CHILDREN) - kids0,  # workers are joined by the time pack returns
            "shard_bytes": sum(s["bytes"] for s in report.splits.values()),
            "shards": sum(s["shards"] for s in report.splits.values())}


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


# ---------------------------------------------------------------------------------------------- the breakdown

def _echo(job: Job) -> JobResult:
    return JobResult(job.index, (), 0, 0)


def breakdown(pairs: list[Pair], folder: Path, workers: int) -> dict:
    """Each per-pair cost of the pack, timed with perf_counter in this process over `pairs`: the header probe (and
    Pillow's, which it replaced), the decode of both files, their CRC-32s, their pwrite into a shard-like file, then
    that file's sha256 read-back and fsync (as `shardhash.ShardHasher` does) per pair; the pool's start and its round
    trip per job (a Job out, a JobResult back, through W workers). One process alone: what W processes writing into the
    page cache at once cost more shows in the pack's decode phase against the decode bound (`analysis.lost_s`)."""
    silence_cv2()
    costs = dict.fromkeys(("probe", "probe_pillow", "decode", "crc32", "pwrite", "hash", "fsync"), 0.0)
    if pairs:  # the first calls import Pillow and OpenCV's codecs: not a per-pair cost
        probe_image(pairs[0].low)
        decode(pairs[0].low, to_8bit=False)
    path = folder / "breakdown.bin"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        off = 0
        for p in pairs:
            t0 = time.perf_counter()
            hl, hh = probe(p.low), probe(p.high)
            t1 = time.perf_counter()
            if off == 0:  # pack creates each shard at its final size, then fills it
                itemsize = 2 if hl.dtype == "uint16" else 1
                os.ftruncate(fd, len(pairs) * 2 * hl.height * hl.width * hl.channels * itemsize)
            probe_image(p.low), probe_image(p.high)
            t2 = time.perf_counter()
            low, _ = decode(p.low, to_8bit=False, expect=hl)
            high, _ = decode(p.high, to_8bit=False, expect=hh)
            t3 = time.perf_counter()
            crc32(low), crc32(high)
            t4 = time.perf_counter()
            for arr in (low, high):
                view = memoryview(arr).cast("B")
                os.pwrite(fd, view, off)
                off += len(view)
            t5 = time.perf_counter()
            for key, a, b in (("probe", t0, t1), ("probe_pillow", t1, t2), ("decode", t2, t3), ("crc32", t3, t4),
                              ("pwrite", t4, t5)):
                costs[key] += b - a
        t0 = time.perf_counter()
        digest = hashlib.sha256()
        with mmap.mmap(fd, os.fstat(fd).st_size, prot=mmap.PROT_READ) as mm:  # as ShardHasher reads it: no copy
            view = memoryview(mm)
            digest.update(view)
            view.release()
        t1 = time.perf_counter()
        os.fsync(fd)
        costs["hash"], costs["fsync"] = t1 - t0, time.perf_counter() - t1
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    n = max(1, len(pairs))
    return {"pairs": len(pairs), "ms_per_pair": {k: v / n * 1e3 for k, v in costs.items()},
            "pool": _pool_costs(pairs, folder, workers)}


def _pool_costs(pairs: list[Pair], folder: Path, workers: int) -> dict:
    """The pool's start (as pack starts it) and its round trip per job: Jobs like pack's out, JobResults back."""
    t0 = time.perf_counter()
    pool = start_pool(workers)
    try:
        pool.map(_noop, range(workers), chunksize=1)
        start = time.perf_counter() - t0
        jobs = [Job(i, p.low, p.high, (400, 600), (400, 600), (400, 600), False, file=str(folder / "x.tar.partial"),
                    low_off=0, high_off=720_000) for i, p in enumerate(pairs * max(1, 2000 // max(1, len(pairs))))]
        t0 = time.perf_counter()
        for _ in pool.imap_unordered(_echo, jobs, chunksize=2):
            pass
        roundtrip = (time.perf_counter() - t0) / max(1, len(jobs))
    finally:
        pool.terminate()
        pool.join()
    return {"start_method": start_method(), "start_s": start, "roundtrip_ms_per_job": roundtrip * 1e3}


# ------------------------------------------------------------------------------------------------ the analysis

def analyse(report: dict) -> dict:
    """Where the pack stands against its bounds. `lost_s`: the pack's wall time beyond what the decode bound
    allows for its pairs, phase by phase (`find`: from the start to the pairs found, the pool's start included;
    `probe`: the headers; `plan`: the shards' boundaries; `decode`: the decode phase's excess over the bound;
    `finish`: the workers joined, the shards renamed, the manifest; `other`: the rest). `predicted_ratio`: what
    the per-pair work in the workers (probe, decode, CRC-32, pwrite, hash) allows at best, with nothing else in the
    way."""
    bound, packed = report["decode_bound"]["pairs_per_s"], report["pack"]["pairs_per_s"]
    ms = report["breakdown"]["ms_per_pair"]
    work = {k: ms[k] for k in ("probe", "decode", "crc32", "pwrite", "hash")}  # CPU work per pair, in some worker
    per_pair = sum(work.values())
    ideal_s = report["pairs"] / bound
    phases = dict(report["pack"]["phases_s"])
    if "decode" in phases:
        phases["decode"] -= ideal_s
    return {
        "pack_over_decode_bound": packed / bound,
        "pack_over_write_bound": packed / report["write_bound"]["pairs_per_s"],
        "ideal_s": ideal_s,
        "lost_s": {"total": report["pack"]["seconds"] - ideal_s, **phases},
        "predicted_ratio": ms["decode"] / per_pair,
        "work_shares": {k: v / per_pair for k, v in work.items()},
        "find_pairs_ms_per_pair": report["find_pairs_s"] / report["pairs"] * 1e3,
        "pool_start_s": report["breakdown"]["pool"]["start_s"],
        "pillow_probe_would_add_s": report["pairs"] * (ms["probe_pillow"] - ms["probe"]) / 1e3 / report["workers"],
    }
