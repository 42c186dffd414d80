"""When the zero-copy kernel's launches are made and when the device runs them, for `dali-external` or `ram` (GPU
machine; DALI for dali-external): each launch timed by CUDA events on its stream, next to the loading thread's clock.
Prints the mean kernel time, the device's idle time between kernels, and a dozen launches (ms from the start).

    python benchmarks/kernel_timeline.py SHARDS [dali-external|ram]
"""

import sys
import time

import numpy as np
import torch

import pairload.loaders.zerocopy as zerocopy
from pairload import make_loader
from pairload.bench.measure import pairs_over

launches = []  # (loading thread's time, start event, end event)
_cut = zerocopy.cut


def timed_cut(source, plan, start, layout, scale=1, out=None):
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t = time.perf_counter()
    begin.record()
    block = _cut(source, plan, start, layout, scale, out)
    end.record()
    launches.append((t, begin, end))
    return block


def main() -> None:
    zerocopy.cut = timed_cut
    kind = sys.argv[2] if len(sys.argv) > 2 else "dali-external"
    loader = make_loader(kind, sys.argv[1], batch_size=32, crop=256, device="cuda")

    pairs_over(loader, range(3))
    torch.cuda.synchronize()
    launches.clear()
    base = torch.cuda.Event(enable_timing=True)
    base.record()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    pairs_over(loader, range(3, 13))
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    rows = [(t - t0, base.elapsed_time(b) / 1e3, base.elapsed_time(e) / 1e3) for t, b, e in launches][5:-5]
    kernel = np.mean([g1 - g0 for _, g0, g1 in rows])
    idle = np.array([rows[i + 1][1] - rows[i][2] for i in range(len(rows) - 1)])
    print(f"{kind}: {wall * 1e3:.0f} ms, {len(rows)} launches; kernel {kernel * 1e6:.0f} us; device idle between "
          f"kernels {idle.sum() * 1e3:.1f} ms in all (mean {idle.mean() * 1e6:.0f} us, longest {idle.max() * 1e6:.0f})")
    for t, g0, g1 in rows[10:22]:
        print(f"  launched {t * 1e3:8.2f}  ran {g0 * 1e3:8.2f} - {g1 * 1e3:8.2f}")
    loader.close()


if __name__ == "__main__":
    main()
