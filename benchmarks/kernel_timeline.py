"""Where the loading thread's time goes for `dali-external` or `ram` on a GPU (DALI for dali-external): the seconds
each stage takes per batch, as the loader's timing hooks report them (`pairload.hooks`: plan, wait, launch,
handover, and DALI's schedule_run, outputs, convert), next to the wall time per batch.

    python benchmarks/kernel_timeline.py SHARDS [dali-external|ram]
"""

import sys
import time

import torch

from pairload import make_loader
from pairload.bench.measure import pairs_over
from pairload.hooks import StageTotals


def main() -> None:
    kind = sys.argv[2] if len(sys.argv) > 2 else "dali-external"
    loader = make_loader(kind, sys.argv[1], batch_size=32, crop=256, device="cuda")
    pairs_over(loader, range(3))
    torch.cuda.synchronize()
    totals = StageTotals()
    remove = loader.hooks.add(totals)
    t0 = time.perf_counter()
    pairs = pairs_over(loader, range(3, 13))
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    remove()
    batches = pairs / 32
    print(f"{kind}: {pairs / wall:,.0f} pairs/s, {wall / batches * 1e6:.0f} us per batch of 32")
    for stage, seconds in sorted(totals.seconds.items(), key=lambda kv: -kv[1]):
        print(f"  {stage:14s} {seconds / batches * 1e6:8.1f} us per batch ({totals.calls[stage]} calls)")
    loader.close()


if __name__ == "__main__":
    main()
