"""Pixels loaded per pixel trained under a Restormer-like progressive schedule: the planner cutting each stage's
crops and batch against the usual approach of loading the largest crop and batch and sub-cropping on the GPU.

    python benchmarks/bench_schedule.py SHARDS [--device cuda] [--workers 15] [--steps 150] [--out F.json]

Restormer's progressive learning (its training config): 300k iterations in six stages, crop 128/160/192/256/320/384
with 8/5/4/2/1/1 pairs per GPU; its loader always delivers 8 crops of 384² and the loop keeps a random sub-batch
and sub-crop of them. Both approaches here run on the same `ram` loader and data, so only the schedule differs:

- `planned`: `make_loader("ram", schedule=…)`, each stage's crops and batch cut by the planner.
- `load-384-subcrop`: `make_loader("ram", batch_size=8, crop=384)`, then on the device a random sub-batch and a
  random sub-crop of the stage's size (what the Restormer loop does).

Each stage runs --steps steps (timed after one warm-up stage pass, with the device synchronised at the ends), and
the per-stage times are also weighted by Restormer's own iteration counts to give the whole run's loading time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

RESTORMER = [(92_000, 128, 8), (64_000, 160, 5), (48_000, 192, 4), (36_000, 256, 2), (36_000, 320, 1), (24_000, 384, 1)]
BIG_CROP, BIG_BATCH = 384, 8


def main() -> None:
    import torch

    from pairload import make_loader
    from pairload.bench.measure import endless
    from pairload.format.atomic import write_json_atomic

    ap = argparse.ArgumentParser()
    ap.add_argument("shards")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--steps", type=int, default=150, help="steps timed per stage")
    ap.add_argument("--out")
    args = ap.parse_args()
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    steps = args.steps
    # the six stages, each --steps long, twice over: the first pass warms the workers and the page cache
    schedule = [(i * steps, crop, batch) for i, (_, crop, batch) in enumerate(RESTORMER * 2)]
    rng = torch.Generator(device=dev).manual_seed(0)

    def planned():
        return make_loader("ram", args.shards, schedule=schedule, num_workers=args.workers, device=dev, seed=1)

    def baseline():
        return make_loader("ram", args.shards, batch_size=BIG_BATCH, crop=BIG_CROP, num_workers=args.workers,
                           device=dev, seed=1)

    def subcrop(batch, crop: int, keep: int):
        """Restormer's loop: a random sub-batch of `keep` and a random crop of `crop` inside the 384² crops."""
        idx = torch.randperm(batch.low.shape[0], generator=rng, device=dev)[:keep]
        y, x = (int(v) for v in torch.randint(0, BIG_CROP - crop + 1, (2,)))
        low = batch.low[idx, :, y:y + crop, x:x + crop].contiguous()
        high = batch.high[idx, :, y:y + crop, x:x + crop].contiguous()
        return low, high

    rows = []
    for name, factory in (("planned", planned), ("load-384-subcrop", baseline)):
        with factory() as loader:
            loader.start_workers()
            it = endless(loader)
            for rep in range(2):  # pass 0 warms up; pass 1 is timed
                for stage, (_, crop, keep) in enumerate(RESTORMER):
                    loaded = trained = 0
                    sync()
                    t0 = time.perf_counter()
                    for _ in range(steps):
                        batch = next(it)
                        if name == "planned":
                            low, high = batch.low, batch.high
                            assert low.shape[-1] == crop and low.shape[0] == keep, (low.shape, crop, keep)
                        else:
                            low, high = subcrop(batch, crop, keep)
                        loaded += batch.low.shape[0] * batch.low.shape[-1] * batch.low.shape[-2]
                        trained += low.shape[0] * low.shape[-1] * low.shape[-2]
                    sync()
                    dt = time.perf_counter() - t0
                    if rep:
                        rows.append({"approach": name, "stage": stage, "crop": crop, "batch": keep, "steps": steps,
                                     "pixels_loaded": loaded, "pixels_trained": trained,
                                     "loaded_per_trained": loaded / trained, "seconds": dt, "steps_per_s": steps / dt})
                        print(rows[-1], flush=True)

    summary = {}
    for name in ("planned", "load-384-subcrop"):
        mine = [r for r in rows if r["approach"] == name]
        loaded = sum(r["pixels_loaded"] / r["steps"] * iters for r, (iters, _, _) in zip(mine, RESTORMER))
        trained = sum(r["pixels_trained"] / r["steps"] * iters for r, (iters, _, _) in zip(mine, RESTORMER))
        hours = sum(iters / r["steps_per_s"] for r, (iters, _, _) in zip(mine, RESTORMER)) / 3600
        summary[name] = {"pixels_loaded_per_pixel_trained": loaded / trained,
                         "loading_hours_for_300k_iterations": hours}
    out = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or "cpu",
           "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__,
           "shards": args.shards, "workers": args.workers, "restormer_schedule": RESTORMER, "rows": rows,
           "summary": summary, "note": "loader alone (no model): time per step of delivering the stage's crops to "
                                       "the device; Restormer-weighted hours = sum over stages of its iterations / "
                                       "the measured steps per second"}
    print(json.dumps(summary, indent=1))
    if args.out:
        write_json_atomic(args.out, out)


if __name__ == "__main__":
    main()
