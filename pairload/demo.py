"""`pairload demo`: the whole main job on the embedded default dataset, small enough for a laptop.

make-pairs (scikit-image's bundled photographs) → pack → verify (and one pair's input degraded from its target, as
`degrade=` does) → bench-loaders (briefly) → one short training run, then a summary of where everything is. Uses
the GPU when there is one (larger sizes), else the CPU.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class DemoSizes:
    pairs: int
    test: int
    size: tuple[int, int]
    crop: int
    batch: int
    width: int
    seconds: float


CPU = DemoSizes(pairs=48, test=8, size=(160, 120), crop=64, batch=8, width=8, seconds=1.0)
GPU = DemoSizes(pairs=256, test=16, size=(600, 400), crop=256, batch=32, width=32, seconds=3.0)


def sizes_note(sizes: DemoSizes) -> str:
    """What the demo's loader chart can and cannot say at its sizes."""
    if sizes.crop >= 256 and sizes.batch >= 32:
        return "demo sizes; docs/benchmarks.md has the full-length runs"
    return (f"toy sizes (crop {sizes.crop}, batch {sizes.batch}, {sizes.size[0]}x{sizes.size[1]}, "
            f"{sizes.seconds:.0f} s per loader): per-batch costs dominate, so kinds rank differently than at crop 256 "
            "and batch 32 (see docs/benchmarks.md)")


def degraded(shards: Path, crop: int) -> str:
    """What `degrade="lowlight"` does to one pair: the parameters its input was degraded with, on the CPU."""
    from .loaders import make_loader

    with make_loader("ram", shards, batch_size=1, crop=crop, seed=0, degrade="lowlight") as loader:
        batch = next(iter(loader))
    params = " ".join(f"{name}={float(v[0]):.3g}" for name, v in batch.degradation.items())
    return (f"degrade: make_loader(..., degrade='lowlight') made the input of pair {batch.keys[0]} from its target "
            f"with {params}")


def run_demo(workdir: str | Path = "pairload-demo", *, device: str = "auto",
             log: Callable[[str], None] = print) -> dict:
    from .bench.loaders import BenchConfig, plot, run_bench
    from .pack.writer import PackOptions, pack
    from .format.schema import write_json_atomic
    from .read.shards import verify
    from .makepairs import MakePairsOptions, make_pairs
    from .recipes.config import TrainConfig
    from .recipes.train import run
    from .distributed import dist_info

    info = dist_info(device, env={})  # an unusable --device is refused before any work is done
    dev = str(info.device) if info.device.type == "cpu" else "cuda"
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    sizes = GPU if dev.startswith("cuda") else CPU
    t0 = time.perf_counter()
    raw, shards = work / "raw", work / "shards"
    log(f"1/5 make-pairs: {sizes.pairs} train + {sizes.test} test low-light pairs of {sizes.size[0]}x{sizes.size[1]} "
        f"from scikit-image's photographs -> {raw}")
    make_pairs(raw, MakePairsOptions(pairs=sizes.pairs, test=sizes.test, size=sizes.size, seed=0, workers=2))
    log(f"2/5 pack -> {shards}")
    report = pack(raw, shards, PackOptions(shard_size=max(1, sizes.pairs // 4) * 2 * sizes.size[0] * sizes.size[1] * 3
                                           + 64 * 1024))
    log(f"    {report.pairs} pairs in {sum(s['shards'] for s in report.splits.values())} shards "
        f"({report.pairs / max(report.seconds, 1e-9):,.0f} pairs/s)")
    log("3/5 verify")
    checked = verify(shards)
    log(f"    ok: {checked.samples} samples in {checked.shards} shards")
    log(f"    {degraded(shards, sizes.crop)}")
    log(f"4/5 bench-loaders ({sizes.seconds:.0f} s per loader, device {dev})")
    bench = run_bench(BenchConfig(shards=str(shards), raw=str(raw), crop=sizes.crop, batch_size=sizes.batch,
                                  workers=2, seconds=sizes.seconds, repeats=2, device=dev))
    write_json_atomic(work / "bench.json", bench)
    plot(bench, work / "bench.png", note=sizes_note(sizes))
    for r in bench["results"]:
        log(f"    {r['loader']:>14}: " + (f"{r['pairs_per_s']:,.0f} pairs/s" if r["status"] == "ok"
                                         else f"{r['status']} ({r['reason']})"))
    log("5/5 train one short epoch of the reference model")
    cfg = TrainConfig(shards=str(shards), out=str(work / "run"), epochs=1, batch_size=sizes.batch, crop=sizes.crop,
                      width=sizes.width, workers=2, device=dev, warmup_steps=2, lr=2e-3,
                      amp="bf16" if dev.startswith("cuda") else "none", overwrite=True)
    history = run(cfg, info, log=lambda m: log("    " + m))
    summary = {
        "seconds": round(time.perf_counter() - t0, 1),
        "device": bench["device"],
        "raw": str(raw), "shards": str(shards), "bench_json": str(work / "bench.json"),
        "bench_png": str(work / "bench.png"), "run": str(work / "run"), "metrics": history[-1] if history else None,
    }
    write_json_atomic(work / "demo.json", summary)
    log(f"done in {summary['seconds']} s. Raw pairs: {raw}  shards: {shards}  loader benchmark: {work / 'bench.png'} "
        f"(and bench.json)  training run: {work / 'run'} (metrics.jsonl, checkpoints, validation images)")
    log("next: `pairload bench-loaders` on your own shards, or "
        f"`torchrun --nproc_per_node=N -m pairload.train --shards {shards} --out RUN_DIR`")
    return json.loads(json.dumps(summary))
