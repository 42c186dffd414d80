"""A/B of raw-physics kernel files on the GPU host: GPU time (CUDA graph) of batch 32, crop 256, interleaved rounds,
and each file's outputs compared with the first file's. Two kinds of targets: `bench` (benchmarks/synth_kernels.py's
uniform values, 0 to 42 electrons) and `photo` (smooth scenes, 0 to 60 electrons). A file may define
`bench_launch(high, low, levels, table, keys, codes, apply, h, w, maxnreg)`; otherwise its `raw_kernel` is launched
in the tile shape of its `SHAPE`. Run from the repository root:

    OUT=/tmp python benchmarks/raw_kernel_ab.py old=OLD_KERNELS.py new=NEW_KERNELS.py
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time

import numpy as np
import torch
import triton

sys.path.insert(0, os.getcwd())
sys.path.insert(0, "tests/degrade")
from degrade_cases import keys, levels, table  # noqa: E402

DEV = torch.device("cuda")


def load(name: str, path: str):
    """A kernels file as a module of its own (its relative imports made absolute)."""
    text = open(path).read().replace("from .models.rawphysics", "from pairload.degrade.models.rawphysics")
    copy = f"/tmp/ab_{name}.py"
    with open(copy, "w") as f:
        f.write(text.replace("from .rng", "from pairload.degrade.rng"))
    spec = importlib.util.spec_from_file_location(f"ab_{name}", copy)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def targets(kind: str, batch: int, crop: int) -> torch.Tensor:
    g = torch.Generator(device="cpu").manual_seed(0)
    if kind == "bench":
        high = torch.randint(0, 16000, (batch, crop, crop, 4), generator=g, dtype=torch.int32)
    else:  # a low-frequency pattern per sample and channel, 0..60 electrons above black at ratio·K = 375
        y = torch.linspace(0, 1, crop).view(1, crop, 1, 1)
        x = torch.linspace(0, 1, crop).view(1, 1, crop, 1)
        phase = torch.rand(batch, 1, 1, 4, generator=g) * 6.28
        e = 30 * (1 + torch.sin(7 * x + phase) * torch.cos(5 * y + 2 * phase))
        high = (512 + e * torch.tensor([0.5, 1, 1, 0.6]).view(1, 1, 1, 4) * 375).round().clamp(0, 16383)
    return high.to(torch.int32).to(torch.int16).to(DEV)


def rate(mod, kind: str, crop: int = 256, batch: int = 32, iters: int = 400, maxnreg: int = 96):
    """(pairs/s of GPU time, the compiled kernel, the outputs)."""
    high = targets(kind, batch, crop)
    low = torch.empty_like(high)
    tab = torch.from_numpy(table("raw-physics", batch)).to(DEV)
    key = torch.from_numpy(keys(batch).view(np.int64)).to(DEV)
    code = torch.from_numpy((np.arange(batch) % 4).astype(np.int32)).to(DEV)
    apply = torch.ones(batch, dtype=torch.int32, device=DEV)
    lv = torch.from_numpy(levels(batch)).to(DEV)

    def run():
        if hasattr(mod, "bench_launch"):
            return mod.bench_launch(high, low, lv, tab, key, code, apply, crop, crop, maxnreg)
        pixels, warps = mod.SHAPE["raw_kernel"]
        bw = min(256, crop)
        br = max(1, pixels // bw)
        grid = (batch, -(-crop // br), -(-crop // bw))
        return mod.raw_kernel[grid](high, low, lv, tab, key, code, apply, crop, crop, C=4, TS=tab.shape[1],
                                    GAUSSIAN=False, BR=br, BW=bw, ROUNDS=10, num_warps=warps, maxnreg=maxnreg)

    kernel = run()
    torch.cuda.synchronize()
    for _ in range(10):
        run()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(20):
            run()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters // 20):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return batch * iters / (start.elapsed_time(end) / 1000), kernel, low.clone()


def main() -> None:
    mods = {name: load(name, path) for name, path in (a.split("=") for a in sys.argv[1:])}
    res = {"device": torch.cuda.get_device_name(), "triton": triton.__version__, "torch": torch.__version__,
           "date": time.strftime("%Y-%m-%d %H:%M")}
    print(res, flush=True)
    kinds = os.environ.get("KINDS", "bench,photo").split(",")
    first = next(iter(mods))
    reference = {kind: rate(mods[first], kind, iters=20)[2] for kind in kinds}
    for name, mod in mods.items():
        for kind in kinds:
            _, kernel, low = rate(mod, kind, iters=20)
            d = (low.int() & 0xFFFF) - (reference[kind].int() & 0xFFFF)
            res[f"{name} {kind} differing"] = float((d != 0).float().mean())
            print(name, kind, "regs", getattr(kernel, "n_regs", None), "spills", getattr(kernel, "n_spills", None),
                  "max diff", int(d.abs().max()), "differing", float((d != 0).float().mean()), flush=True)
    for rep in range(int(os.environ.get("REPS", 3))):
        for name, mod in mods.items():
            for kind in kinds:
                res[f"{name} {kind} r{rep}"] = round(rate(mod, kind)[0])
                print(rep, name, kind, res[f"{name} {kind} r{rep}"], flush=True)
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "raw_kernel_ab.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
