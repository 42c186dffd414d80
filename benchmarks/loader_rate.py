"""A loader's warm rate on a CUDA device without a consumer, and how much of each batch its planning takes: 1.5 s
of warm-up, then six windows of 0.5 s (max and median pairs/s), the loading thread's microseconds per batch and
those spent in `plan_for` (the epoch's plan). Crop 64 leaves the GPU idle: the rate is then the loading thread's.

    python benchmarks/loader_rate.py SHARDS CROP [KIND] [resident]
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch

from pairload import make_loader
from pairload.bench.measure import endless


def main() -> None:
    shards, crop = sys.argv[1], int(sys.argv[2])
    kind = sys.argv[3] if len(sys.argv) > 3 else "ram"
    extra = {"resident": True} if len(sys.argv) > 4 and sys.argv[4] == "resident" else {}
    loader = make_loader(kind, shards, batch_size=32, crop=crop, device="cuda", **extra)
    planning = [0.0]
    plan_for = loader.plan_for

    def timed_plan(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return plan_for(*args, **kwargs)
        finally:
            planning[0] += time.perf_counter() - t0

    loader.plan_for = timed_plan

    batches = endless(loader)
    t = time.perf_counter()
    while time.perf_counter() - t < 1.5:
        next(batches)
    torch.cuda.synchronize()
    rates, planning[0], count, start = [], 0.0, 0, time.perf_counter()
    for _ in range(6):
        n, t = 0, time.perf_counter()
        while time.perf_counter() - t < 0.5:
            n += next(batches).low.shape[0]
            count += 1
        torch.cuda.synchronize()
        rates.append(n / (time.perf_counter() - t))
    print(json.dumps({"crop": crop, "kind": kind, **extra, "max": round(max(rates)),
                      "median": round(statistics.median(rates)),
                      "us/batch": round(1e6 * (time.perf_counter() - start) / count, 1),
                      "plan us/batch": round(1e6 * planning[0] / count, 1)}))


if __name__ == "__main__":
    main()
