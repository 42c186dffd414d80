"""Which GPU work runs while `dali-external` (or `ram`) delivers batches (GPU machine with DALI): torch.profiler
(CUPTI) over some epochs, every kernel and copy in the process by total device time, with its count and mean, next
to the wall time.

    python benchmarks/dali_gpu_trace.py SHARDS [dali-external|ram]
"""

import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from pairload import make_loader
from pairload.bench.measure import pairs_over


def main() -> None:
    shards, kind = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "dali-external")
    loader = make_loader(kind, shards, batch_size=32, crop=256, device="cuda")

    pairs_over(loader, range(3))
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        n = pairs_over(loader, range(3, 13))
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    print(f"{kind}: {n / wall:,.0f} pairs/s over {wall * 1e3:.0f} ms")
    def device_us(e) -> float:
        return getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0.0)

    rows = sorted((e for e in prof.key_averages() if device_us(e) > 0), key=lambda e: -device_us(e))
    for e in rows[:15]:
        print(f"  {e.key[:70]:70s} {e.count:6d} x {device_us(e) / max(1, e.count):9.1f} us = "
              f"{device_us(e) / 1e3:8.1f} ms")
    loader.close()


if __name__ == "__main__":
    main()
