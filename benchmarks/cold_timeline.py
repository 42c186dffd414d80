#!/usr/bin/env python3
"""Where a JPEG split's loader spends its construction and first batches, from a cold page cache, on the GPU host:
`ram` with `degrade="lowlight"`, crop 256, batch 32, in a child held to the first CORES cores, the pack evicted first,
with the `timeline` knob (`diag_knobs.py`): the loader's and its decode processes' events in wall-clock order,
relative to the child's start, then the first BATCHES batches' times. Each tree (name=folder[+knob…]) in turn, ROUNDS
rounds; everything to OUT/cold-timeline.json as it is measured.

    python benchmarks/cold_timeline.py WORK OUT --photos 8000 --cores 2,16 --trees new=.,prev=.devwheels/prev
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = r"""
import json, sys, time
t_start = time.time()
sys.path.insert(0, sys.argv[3])
import diag_knobs
diag_knobs.mark("loader process: interpreter up")
import torch, pairload
from pairload.bench.bounds import evict
from pairload.read.shards import ShardDataset
evict(ShardDataset(sys.argv[1], "train").files)
diag_knobs.mark("loader process: torch, pairload imported; pack evicted")
diag_knobs.apply(sys.argv[2])
dev = torch.device("cuda:0")
diag_knobs.mark("make_loader begin")
loader = pairload.make_loader("ram", sys.argv[1], batch_size=32, crop=256, seed=0, device=dev, degrade="lowlight")
diag_knobs.mark("make_loader end")
batches = int(sys.argv[4])
for k, b in enumerate(loader):
    torch.cuda.synchronize()
    if k in (0, 1, 3, 7) or k + 1 == batches:
        diag_knobs.mark(f"batch {k} on the device")
    if k + 1 == batches:
        break
print(json.dumps({"t_start": t_start, "path": loader.path}))
"""


def child(tree: Path, shards: Path, cores: int, knobs: str, batches: int, log: Path) -> dict:
    log.unlink(missing_ok=True)
    env = dict(os.environ, DIAG_TIMELINE=str(log),
               PYTHONPATH=os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(["taskset", "-c", f"0-{cores - 1}", sys.executable, "-c", CHILD, str(shards),
                           "+".join(filter(None, ["timeline", knobs])), str(HERE), str(batches)],
                          capture_output=True, text=True, timeout=600, cwd=tree, env=env)
    try:
        out = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"error": proc.stderr[-2000:]}
    events = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    loader_pid = min((e["pid"] for e in events), default=0, key=lambda p: next(e["t"] for e in events
                                                                              if e["pid"] == p))
    names = {loader_pid: "loader"}
    for e in sorted(events, key=lambda e: e["t"]):
        names.setdefault(e["pid"], f"decode {len(names)}")
    out["events"] = [(round(e["t"] - out["t_start"], 4), names[e["pid"]], e["what"])
                     for e in sorted(events, key=lambda e: e["t"])]
    return out


def main() -> None:
    sys.path.insert(0, str(HERE))
    from encoded_cold import make

    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("out")
    ap.add_argument("--photos", type=int, default=8000)
    ap.add_argument("--trees", default="new=.")
    ap.add_argument("--cores", default="2")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batches", type=int, default=64)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    shards = make(Path(args.work), args.photos, 0, os.cpu_count() or 1, "real")["encoded"]
    trees = dict(item.split("=", 1) for item in args.trees.split(","))
    import torch

    report = {"date": time.strftime("%Y-%m-%d"), "device": torch.cuda.get_device_name(0), "photos": args.photos,
              "runs": []}
    for r in range(args.rounds):
        for c in (int(v) for v in args.cores.split(",")):
            for name, spec in trees.items():
                folder, _, knobs = spec.partition("+")
                got = child(Path(folder).resolve(), shards, c, knobs, args.batches, out / "events.jsonl")
                got.update(tree=name, cores=c, round=r)
                report["runs"].append(got)
                print(f"== {name} cores={c} round={r}")
                seen: dict = {}
                for t, who, what in got.get("events", []):
                    seen[who, what] = seen.get((who, what), 0) + 1
                    if seen[who, what] <= 3:  # a kernel's or a decode call's first three
                        print(f"{t:8.3f}  {who:9s} {what}")
                print(got.get("error", ""), flush=True)
                (out / "cold-timeline.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
