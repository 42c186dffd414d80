#!/usr/bin/env python3
"""Host memory of several ranks reading one split: do they share one copy?

    python benchmarks/bench_memory.py SHARDS_DIR [--ranks 2] [--workers 4] [--loader ram] [--seconds 10]

Starts RANKS processes (like torchrun would), each with its own loader of WORKERS workers on its own GPU (or
the same GPU when there is one), runs them for SECONDS, and sums the proportional set size (PSS) of every rank
and of the workers its loader names (`loader.worker_pids()`): shared pages (the memory-mapped shards in the page
cache) are counted once in that sum.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import time

import psutil

from pairload.format.atomic import write_json_atomic


def _rank(shards: str, loader: str, rank: int, ranks: int, workers: int, seconds: float, q) -> None:
    import torch

    from pairload import make_loader

    device = f"cuda:{rank % torch.cuda.device_count()}" if torch.cuda.is_available() else "cpu"
    ld = make_loader(loader, shards, batch_size=32, crop=256, rank=rank, world_size=ranks, num_workers=workers,
                     device=device, last_batch="drop")
    n, epoch, t0 = 0, 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        ld.set_epoch(epoch)
        for b in ld:
            n += len(b)
            if time.perf_counter() - t0 > seconds:
                break
        epoch += 1
    if device != "cpu":
        torch.cuda.synchronize()
    rate = n / (time.perf_counter() - t0)
    q.put({"rank": rank, "pairs_per_s": rate, "pids": [os.getpid(), *ld.worker_pids()]})
    time.sleep(3)  # stay alive (workers included) while the parent measures


def _baseline(rank: int, q) -> None:
    """A rank without a loader: torch imported, CUDA context on its GPU. What every training process costs anyway."""
    import torch

    if torch.cuda.is_available():
        torch.zeros(1, device=f"cuda:{rank % torch.cuda.device_count()}")
    q.put({"rank": rank, "pids": [os.getpid()]})
    time.sleep(3)


def _pss(pids: list[int]) -> tuple[int, int]:
    """Summed PSS and USS of the processes the ranks reported (each rank and its loader's workers)."""
    pss = uss = 0
    for pid in pids:
        try:
            full = psutil.Process(pid).memory_full_info()
            pss += full.pss
            uss += full.uss
        except psutil.Error:
            pass
    return pss, uss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shards")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--loader", default="ram")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--out")
    args = ap.parse_args()
    from pairload import open_shards

    ds = open_shards(args.shards)
    split_bytes = sum(p.stat().st_size for p in ds.files)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    base = [ctx.Process(target=_baseline, args=(r, q)) for r in range(args.ranks)]
    for p in base:
        p.start()
    base_pss, _ = _pss([pid for _ in base for pid in q.get()["pids"]])
    for p in base:
        p.join()
    procs = [ctx.Process(target=_rank, args=(args.shards, args.loader, r, args.ranks, args.workers, args.seconds, q))
             for r in range(args.ranks)]
    for p in procs:
        p.start()
    rates = [q.get() for _ in procs]
    pss, uss = _pss([pid for r in rates for pid in r.pop("pids")])  # the report keeps rank and rate
    for p in procs:
        p.join()
    doc = {"benchmark": "memory", "loader": args.loader, "ranks": args.ranks, "workers_per_rank": args.workers,
           "date": time.strftime("%Y-%m-%d"), "cpu_count": os.cpu_count(), "split_bytes": split_bytes,
           "total_pss_bytes": pss, "total_private_bytes": uss, "pss_over_split": pss / split_bytes,
           "limit_bytes": 1.2 * split_bytes + 2**30, "within_limit": pss <= 1.2 * split_bytes + 2**30,
           "baseline_pss_bytes": base_pss, "loader_pss_bytes": pss - base_pss,
           "loader_within_limit": pss - base_pss <= 1.2 * split_bytes + 2**30,
           "note": "baseline: the same number of processes with torch imported and a CUDA context, no loader",
           "per_rank": sorted(rates, key=lambda r: r["rank"])}
    try:
        import torch

        doc["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    except ImportError:
        pass
    print(json.dumps(doc, indent=2))
    if args.out:
        write_json_atomic(args.out, doc)


if __name__ == "__main__":
    main()
