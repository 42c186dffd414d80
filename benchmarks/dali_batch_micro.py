"""How DALI's cost per iteration grows with the batch (GPU machine with DALI): a GPU `external_source` (no_copy,
batch=True) fed one constant device block of K x 32 crop pairs, straight to the outputs, run and converted to torch
as `dali-external` does. Prints pairs/s per K: if DALI's cost is per iteration, K batches per iteration divide it.

    python benchmarks/dali_batch_micro.py [--crop 256] [--seconds 3] [--out F.json]
"""

from __future__ import annotations

import argparse
import json
import time

import nvidia.dali.fn as fn
import torch
from nvidia.dali import pipeline_def
from nvidia.dali.tensors import TensorListGPU
from torch.utils.dlpack import to_dlpack

from pairload.loaders.dali.convert import to_torch


def rate(k: int, crop: int, seconds: float, prefetch: int = 4) -> dict:
    n = 32 * k
    block = torch.randint(0, 255, (2, n, crop, crop, 3), dtype=torch.uint8, device="cuda")

    def feed():
        while True:
            yield [TensorListGPU(to_dlpack(block[0])), TensorListGPU(to_dlpack(block[1]))]

    @pipeline_def(batch_size=n, num_threads=4, device_id=0, prefetch_queue_depth=prefetch, seed=0)
    def pipe():
        low, high = fn.external_source(source=feed(), num_outputs=2, batch=True, device="gpu", no_copy=True,
                                       parallel=False)
        return low, high

    p = pipe()
    p.build()
    dev = torch.device("cuda", 0)
    for _ in range(10):
        p.schedule_run()
        p.outputs()
    torch.cuda.synchronize()
    count, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        p.schedule_run()
        low, high = (to_torch(t, dev, True) for t in p.outputs())
        count += 1
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    del p
    return {"batches_per_iteration": k, "pairs_per_s": count * n / dt, "us_per_iteration": dt / count * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--crop", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--out")
    a = ap.parse_args()
    rows = []
    for k in (1, 2, 4, 8):
        row = rate(k, a.crop, a.seconds)
        rows.append(row)
        print(f"{k} batches of 32 an iteration: {row['pairs_per_s']:,.0f} pairs/s, {row['us_per_iteration']:.0f} us "
              "an iteration", flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"), "crop": a.crop,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
