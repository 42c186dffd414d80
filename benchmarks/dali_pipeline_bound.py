"""What a DALI pipeline costs per iteration, next to what pairload's zero-copy cut costs (results:
benchmarks/results/dali-zerocopy-probe-h100-2026-11-23.json).

1. A GPU `fn.external_source` fed a constant device batch (no cutting at all), with the outputs converted to torch
   as `dali-external` does (`feed_ndarray`), through `copy_to_external`, or not at all; `no_copy` off and on.
2. The Python cost of `zerocopy.KernelCuts.cuts` per batch and of one kernel launch.

Usage (GPU machine with DALI): python benchmarks/dali_pipeline_bound.py SHARDS
"""

import ctypes
import sys
import time

import torch
import nvidia.dali.fn as fn
from nvidia.dali import pipeline_def
from nvidia.dali.plugin.pytorch import feed_ndarray

from pairload.loaders import zerocopy
from pairload.plan import PlanConfig, key_hashes, plan_epoch
from pairload.read.shards import open_shards

dev = torch.device("cuda", 0)
x = torch.randint(0, 255, (2, 32, 256, 256, 3), dtype=torch.uint8, device=dev)
stream = torch.cuda.Stream(dev)

for mode in ("copy", "nocopy"):
    @pipeline_def(batch_size=32, num_threads=4, device_id=0, prefetch_queue_depth=4)
    def pipe():
        lo, hi = fn.external_source(source=lambda: [x[0], x[1]], num_outputs=2, batch=True, device="gpu",
                                    cuda_stream=stream, no_copy=mode == "nocopy")  # noqa: B023 - built before `mode` changes
        return lo, hi

    p = pipe()
    p.build()
    for conv in ("feed", "list_copy", "none"):
        for _ in range(20):
            p.run()
        torch.cuda.synchronize()
        t0, n = time.perf_counter(), 300
        for _ in range(n):
            outs = p.run()
            if conv == "feed":
                for tl in outs:
                    d = tl.as_tensor()
                    o = torch.empty(tuple(d.shape()), dtype=torch.uint8, device=dev)
                    feed_ndarray(d, o, cuda_stream=torch.cuda.current_stream(dev))
            elif conv == "list_copy":
                cs = ctypes.c_void_p(torch.cuda.current_stream(dev).cuda_stream)
                for tl in outs:
                    o = torch.empty((32, 256, 256, 3), dtype=torch.uint8, device=dev)
                    tl.as_tensor().copy_to_external(ctypes.c_void_p(o.data_ptr()), cs, non_blocking=True)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        print(mode, conv, f"{n * 32 / dt:,.0f} pairs/s ({dt / n * 1e6:.0f} us/iteration)", flush=True)

ds = open_shards(sys.argv[1])
windows = zerocopy.KernelCuts(zerocopy.Registration(ds, dev), dev)
plans = plan_epoch(PlanConfig(batch_size=32, crop=256, seed=0), key_hashes(ds.keys), ds.sizes, 0)
for _ in range(3):
    torch.cuda.synchronize()
    t0, n = time.perf_counter(), 0
    for _ in windows.cuts((0, ()), plans, events=False):
        n += 1
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    print(f"cuts(): {(t1 - t0) / n * 1e6:.0f} us/batch of Python, {n * 32 / (t2 - t0):,.0f} pairs/s with the GPU")
plan = torch.zeros((4, 32), dtype=torch.int64, device=dev)
t0 = time.perf_counter()
for _ in range(500):
    zerocopy.cut(windows.memory, plan, 0, ds.members.batch(32, 256, 256), out=x)
print(f"launch {(time.perf_counter() - t0) / 500 * 1e6:.0f} us each")
