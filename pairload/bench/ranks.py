"""`--ranks N`: one entry measured on N concurrent rank processes (spawned), each with its own loader on its own
GPU and its share of the cores, timed together; the row is the node's total with the per-rank spread."""

from __future__ import annotations

import os
import queue
from dataclasses import asdict

import torch

from .config import BenchConfig
from .entries import Skip, build_loader
from .measure import measure
from .result import Result, failed
from .sampling import PeakMemory


def _rank_main(name: str, cfg: BenchConfig, rank: int, workers: int, barrier, results) -> None:
    """One rank (a spawned process): its own loader on its own GPU; it reports its workers' pids once they are up,
    then its measurement."""
    device = cfg.resolved_device()
    if device.type == "cuda":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
    loader = None
    try:
        loader = build_loader(name, cfg, device, workers, rank=rank, world_size=cfg.ranks)
        loader.start_workers()
        results.put(("pids", rank, loader.worker_pids()))
        barrier.wait(timeout=600)  # every rank's workers are up: the timed windows overlap
        base_free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else None
        results.put(("result", rank, asdict(measure(name, loader, cfg, device, None, base_free))))
    except Skip as why:
        barrier.abort()
        results.put(("result", rank, asdict(Result(loader=name, status="skipped", reason=str(why)))))
    except BaseException as exc:  # noqa: BLE001 - reported by the parent
        barrier.abort()
        results.put(("result", rank, asdict(failed(name, exc))))
    finally:
        if loader is not None:
            loader.close()


def measure_ranks(name: str, cfg: BenchConfig, workers: int) -> Result:
    """`cfg.ranks` concurrent ranks of one entry, each with `workers` CPU workers: the node's total rate (sum of
    the ranks' medians), the per-rank spread, and the node's peak memory (this process, the ranks and the workers
    they report)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(cfg.ranks), ctx.Queue()
    procs = [ctx.Process(target=_rank_main, args=(name, cfg, r, workers, barrier, results), name=f"bench-rank{r}")
             for r in range(cfg.ranks)]
    reported: dict[int, list[int]] = {}

    def pids() -> list[int]:
        return [os.getpid(), *(p.pid for p in procs if p.pid), *(pid for w in list(reported.values()) for pid in w)]

    with PeakMemory(pids) as mem:
        for p in procs:
            p.start()
        got = {}
        while len(got) < cfg.ranks:
            try:
                what, rank, payload = results.get(timeout=5)
            except queue.Empty:  # check that no rank died without a word
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    for p in procs:
                        p.kill()
                    return Result(loader=name, status="failed", ranks=cfg.ranks,
                                  reason=f"rank process {dead[0].name} exited with {dead[0].exitcode}")
                continue
            if what == "pids":
                reported[rank] = payload
            else:
                got[rank] = payload
        for p in procs:
            p.join(timeout=30)
    bad = [r for r in got.values() if r["status"] != "ok"]
    if bad:
        return Result(loader=name, status=bad[0]["status"], reason=bad[0]["reason"], ranks=cfg.ranks)
    per = [got[r]["pairs_per_s"] for r in range(cfg.ranks)]
    res = Result(loader=name, ranks=cfg.ranks, per_rank=per, repeats=per)
    res.summarise(cfg.pair_bytes(), mem.peak, node_total=True)  # the node's rate; min/max are the per-rank spread
    res.cpu_cores_used = sum(got[r]["cpu_cores_used"] for r in range(cfg.ranks))
    for column in ("device_mem_mb", "device_reserved_mb", "device_allocated_mb"):  # the rank that took the most
        setattr(res, column, max(got[r][column] for r in range(cfg.ranks)))
    res.path = "; ".join(sorted({got[r]["path"] for r in range(cfg.ranks)}))
    res.reason = f"{cfg.ranks} ranks x {workers} workers; per rank {min(per):,.0f}-{max(per):,.0f}"
    return res
