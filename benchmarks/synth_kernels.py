"""Synthesis on a CUDA device: each model's kernel alone (pairs/s of batch 32, CUDA events over 200 launches after
20 of warm-up), and the `ram` loader with and without a degradation, interleaved, on a pack of SHARDS.

    python benchmarks/synth_kernels.py SHARDS OUT.json
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import torch

from pairload import make_loader
from pairload.bench.measure import endless
from pairload.degrade.launch import launch
from pairload.degrade.models import models

sys.path.insert(0, "tests/degrade")
from degrade_cases import keys, levels, table  # noqa: E402


def kernel_rate(model: str, crop: int, dtype: str, batch: int = 32, iters: int = 200, graph: bool = False) -> float:
    """Pairs/s of back-to-back launches on one stream (graph: replayed from a CUDA graph, the GPU's time alone)."""
    dev = torch.device("cuda")
    ch = 4 if model == "raw-physics" else 3
    tdt = torch.int16 if dtype == "uint16" else torch.uint8
    high = torch.randint(0, 16000 if dtype == "uint16" else 255, (batch, crop, crop, ch), dtype=torch.int32,
                         device=dev).to(tdt)
    if dtype == "uint16":
        high = high.view(torch.uint16)
    low = torch.empty_like(high)
    tab = torch.from_numpy(table(model, batch)).to(dev)
    key = torch.from_numpy(keys(batch).view(np.int64)).to(dev)
    m = models()[model]
    # the orientations the planner gives this model (raw-physics: no transpose)
    allowed = np.asarray(m.codes if m.codes is not None else range(8), dtype=np.int32)
    code = torch.from_numpy(allowed[np.arange(batch) % len(allowed)]).to(dev)
    apply = torch.ones(batch, dtype=torch.int32, device=dev)
    lv = torch.from_numpy(levels(batch)).to(dev)

    def run():
        launch(m, None, high, low, tab, key, code, apply, lv)

    for _ in range(20):
        run()
    if graph:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(20):
                run()
        step, iters = g.replay, iters // 20
        per = 20
    else:
        step, per = run, 1
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        step()
    end.record()
    torch.cuda.synchronize()
    return batch * per * iters / (start.elapsed_time(end) / 1000)


def loader_rate(shards: str, degrade, seconds: float = 4.0) -> float:
    loader = make_loader("ram", shards, batch_size=32, crop=256, device="cuda", degrade=degrade)
    batches = endless(loader)
    t = time.perf_counter()
    while time.perf_counter() - t < 1.0:
        next(batches)
    torch.cuda.synchronize()
    n, t = 0, time.perf_counter()
    while time.perf_counter() - t < seconds:
        n += len(next(batches))
    torch.cuda.synchronize()
    rate = n / (time.perf_counter() - t)
    loader.close()
    return rate


def main() -> None:
    shards, out = sys.argv[1], sys.argv[2]
    result = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"), "batch": 32, "kernels": {}}
    for model, crop, dtype in (("lowlight", 256, "uint8"), ("lowlight", 512, "uint8"), ("lowlight", 256, "uint16"),
                               ("unprocess", 256, "uint8"), ("unprocess", 512, "uint8"),
                               ("raw-physics", 256, "uint16"), ("raw-physics", 512, "uint16")):
        rate = kernel_rate(model, crop, dtype)
        alone = kernel_rate(model, crop, dtype, graph=True)
        result["kernels"][f"{model} {dtype} crop {crop}"] = round(rate)
        result["kernels"][f"{model} {dtype} crop {crop} (GPU time: CUDA graph)"] = round(alone)
        print(f"{model} {dtype} crop {crop}: {rate:,.0f} pairs/s launched, {alone:,.0f} GPU time", flush=True)
    import pairload.degrade.kernels as kernels
    import pairload.degrade.launch as launcher

    if len(sys.argv) > 3 and sys.argv[3] == "sweep":  # pixels and warps per program; the raw kernel's step
        chosen = dict(kernels.SHAPE)
        for pixels in (256, 512, 1024):
            for warps in (2, 4, 8):
                kernels.SHAPE["lowlight_kernel"] = (pixels, warps)
                rate = kernel_rate("lowlight", 256, "uint8", graph=True)
                result["kernels"][f"lowlight crop 256: {pixels} pixels, {warps} warps (GPU time)"] = round(rate)
                print(f"sweep lowlight {pixels} px {warps} warps: {rate:,.0f} pairs/s", flush=True)
        kernels.SHAPE.update(chosen)
        step = kernels.RAW_STEP, kernels.RAW_WARPS
        for kernels.RAW_STEP, kernels.RAW_WARPS in ((32, 1), (64, 1), (64, 2), (128, 4)):
            rate = kernel_rate("raw-physics", 256, "uint16", graph=True)
            name = f"raw-physics crop 256: rows {kernels.RAW_STEP} columns at a time, {kernels.RAW_WARPS} warps"
            result["kernels"][f"{name} (GPU time)"] = round(rate)
            print(f"sweep {name}: {rate:,.0f} pairs/s", flush=True)
        kernels.RAW_STEP, kernels.RAW_WARPS = step
    launcher.ROUNDS = 7  # what fewer Philox rounds would give (informational; the library uses rng.ROUNDS)
    for model, crop, dtype in (("lowlight", 256, "uint8"), ("raw-physics", 256, "uint16")):
        rate = kernel_rate(model, crop, dtype, graph=True)
        result["kernels"][f"{model} {dtype} crop {crop}, Philox 7 rounds (GPU time)"] = round(rate)
        print(f"{model} {dtype} crop {crop} Philox-7: {rate:,.0f} pairs/s", flush=True)
    launcher.ROUNDS = 10
    runs = {"ram": [], "ram + lowlight": [], "ram + unprocess": []}
    for _ in range(3):
        for name, degrade in (("ram", None), ("ram + lowlight", "lowlight"), ("ram + unprocess", "unprocess")):
            runs[name].append(round(loader_rate(shards, degrade)))
            print(name, runs[name][-1], flush=True)
    result["loader crop 256 (interleaved runs)"] = runs
    result["ratio lowlight / plain (median)"] = float(np.median(runs["ram + lowlight"]) / np.median(runs["ram"]))
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
