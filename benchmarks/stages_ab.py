"""Loader rates of two source trees, interleaved on one machine: `ram`, `ram` + `lowlight` (a targets-only pack),
`ram` + `raw-physics` (packed camera raw targets), `wds` and `dali-external` at crop 256, batch 32, on a CUDA device.

    python benchmarks/stages_ab.py OUT.json PAIRS TARGETS RAWTARGETS NAME=TREE [NAME=TREE ...] [--rounds 3]

Each (round, tree) runs in a fresh process with TREE first on the path (a folder holding a `pairload` package, e.g.
the previous commit's `git archive`), measuring every loader in turn: 1 s of warm-up, then `--seconds` of batches
handed over without a synchronisation, the device synchronised at both ends. Trees alternate in order from one round
to the next (ABBA...), so drift on the machine falls on both."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

LOADERS = {  # name -> (pack argument, kind, options)
    "ram": ("pairs", "ram", {}),
    "ram + lowlight": ("targets", "ram", {"degrade": "lowlight"}),
    "ram + raw-physics": ("raw", "ram", {"degrade": "raw-physics", "repeats": 8}),  # 16 scenes: 8 passes an epoch
    "wds": ("pairs", "wds", {}),
    "dali-external": ("pairs", "dali-external", {"num_workers": 4}),
}


def measure(packs: dict, seconds: float, names: list[str], warmup: float = 1.0) -> dict:
    """pairs/s of each loader of LOADERS with the pairload on the path (run in a child process)."""
    import pairload
    from pairload import make_loader

    out = {"pairload": os.path.dirname(pairload.__file__)}
    for name in names:
        pack, kind, options = LOADERS[name]
        try:
            out[name] = _rate(make_loader(kind, packs[pack], batch_size=32, crop=256, device="cuda", **options),
                              seconds, warmup)
        except Exception as exc:  # noqa: BLE001 - a kind this machine lacks (DALI) is reported, not fatal
            out[name] = f"{type(exc).__name__}: {exc}"[:300]
    return out


def _rate(loader, seconds: float, warmup: float) -> int:
    import torch

    from pairload.bench.measure import endless  # the tree's own (8ae094f has it too)

    batches = endless(loader)
    t = time.perf_counter()
    while time.perf_counter() - t < warmup:
        next(batches)
    torch.cuda.synchronize()
    n, t = 0, time.perf_counter()
    while time.perf_counter() - t < seconds:
        n += len(next(batches))
    torch.cuda.synchronize()
    rate = round(n / (time.perf_counter() - t))
    loader.close()
    return rate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("pairs")
    ap.add_argument("targets")
    ap.add_argument("raw")
    ap.add_argument("trees", nargs="+")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--loaders", default=",".join(LOADERS), help="comma-separated names of LOADERS")
    ap.add_argument("--child", action="store_true")
    a = ap.parse_args()
    packs = {"pairs": a.pairs, "targets": a.targets, "raw": a.raw}
    if a.child:
        print(json.dumps(measure(packs, a.seconds, a.loaders.split(","), a.warmup)))
        return
    import torch

    trees = [t.split("=", 1) for t in a.trees]
    runs: dict = {name: [] for name, _ in trees}
    for r in range(a.rounds):
        for name, tree in (trees if r % 2 == 0 else trees[::-1]):
            path = os.pathsep.join([os.path.abspath(tree), os.environ.get("PYTHONPATH", "")])
            env = dict(os.environ, PYTHONPATH=path)
            got = subprocess.run([sys.executable, "-P", os.path.abspath(__file__), "x", *packs.values(), "x=x",
                                  "--child", "--seconds", str(a.seconds), "--warmup", str(a.warmup), "--loaders",
                                  a.loaders], env=env, capture_output=True, text=True)
            line = got.stdout.strip().splitlines()[-1] if got.stdout.strip() else ""
            result = json.loads(line) if line.startswith("{") else {"error": got.stderr[-2000:]}
            runs[name].append(result)
            print(name, r, result, flush=True)
    summary = {}
    for loader in a.loaders.split(","):
        row = {}
        for name, _ in trees:
            rates = sorted(v[loader] for v in runs[name] if isinstance(v.get(loader), int))
            if rates:
                row[name] = {"runs": rates, "median": rates[len(rates) // 2]}
        summary[loader] = row
    doc = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"), "crop": 256, "batch": 32,
           "seconds": a.seconds, "warmup": a.warmup, "trees": dict(trees), "summary": summary, "runs": runs}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
