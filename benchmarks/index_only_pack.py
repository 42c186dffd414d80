#!/usr/bin/env python3
"""A pack of N samples made without N images, for measuring the planner and the index at scale (#57): the training
split of a small real pack (SRC) repeated by its index alone. Every one of the N rows has a key of its own and its
planner hash, and points at sample i % K of SRC's shards (linked, not copied), so every loader runs end to end on it;
only `pairload verify` tells it apart (each shard's tar holds K samples, its index says more). Then, unless
--no-measure: `make_loader` and the first batch, timed, with the process's private memory (psutil's USS) once pairload
and torch are imported and after the first batch, in a fresh process per loader kind (one worker).

    python benchmarks/index_only_pack.py SRC OUT --samples 10000000 [--split train] [--kinds ram,wds] [--out F]

SRC: a pack made by `pairload pack` with one split of a few samples (binary index, plain members). The index is
built in memory (about 80 bytes a sample): 10^7 samples take under a gigabyte.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from pairload.format import binindex, encoding, schema
from pairload.format.atomic import write_json_atomic
from pairload.format.columns import ColumnFile, write_columns

MEASURE = """
import json, sys, time
import psutil
from pairload import make_loader
import torch  # noqa: F401 - the loaders' imports, done: the baseline is a process ready to make a loader
proc = psutil.Process()
before = proc.memory_full_info().uss
t0 = time.perf_counter()
loader = make_loader(sys.argv[2], sys.argv[1], batch_size=32, crop=16, seed=0, num_workers=1)
t1 = time.perf_counter()
batch = next(iter(loader))
t2 = time.perf_counter()
after = proc.memory_full_info().uss
print(json.dumps({"kind": sys.argv[2], "make_loader_s": round(t1 - t0, 3), "first_batch_s": round(t2 - t1, 3),
                  "uss_mb_imported": round(before / 2**20, 1), "uss_mb_after_first_batch": round(after / 2**20, 1),
                  "uss_mb_grown": round((after - before) / 2**20, 1)}))
"""


def build(src: Path, out: Path, n: int, split: str) -> dict:
    doc = schema.read_manifest(src)
    entry = doc["splits"][split]
    if not isinstance(entry.get(binindex.FIELD), dict) or len(entry["shards"]) != 1:
        sys.exit(f"{src}: split {split!r} needs a binary index and one shard (pack a few samples with the defaults)")
    stored = encoding.of_entry(entry, str(src), split)
    if stored.sized:
        sys.exit(f"{src}: split {split!r} is not plain (pack it without --store encoded or --compress)")
    f = ColumnFile(src / entry[binindex.FIELD]["file"], str(src))
    k = int(entry["samples"])
    take = np.arange(n, dtype=np.int64) % k
    columns = {name: np.asarray(f.columns[name])[take] for name, _, _ in binindex.COMMON
               if name not in (binindex.KEY_END, binindex.KEY_HASH)}
    columns[binindex.SHARD] = np.zeros(n, dtype=np.int32)
    keys = [f"{i:010d}" for i in range(n)]
    out.mkdir(parents=True, exist_ok=True)
    shard = entry["shards"][0]
    link = out / shard["file"]
    if not link.exists():
        os.link(src / shard["file"], link)
    new = dict(entry, samples=n, shards=[dict(shard, samples=n)])
    new.pop("folders", None)
    name = binindex.index_name(split)
    sha, size = write_columns(out / name, binindex.index_columns(keys, columns, new, False, False))
    new[binindex.FIELD] = {"file": name, "bytes": size, "sha256": sha}
    write_json_atomic(out / schema.MANIFEST, dict(doc, splits={split: new}))
    return {"samples": n, "index_bytes": size, "bytes_per_sample": round(size / n, 1)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--samples", type=int, required=True)
    ap.add_argument("--split", default="train")
    ap.add_argument("--kinds", default="ram,wds", help="loader kinds to time (comma-separated)")
    ap.add_argument("--no-measure", action="store_true")
    ap.add_argument("--out", dest="report", type=Path, help="write the JSON report here too")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    report = {"date": time.strftime("%Y-%m-%d"), "cpu_count": os.cpu_count(),
              **build(args.src, args.out, args.samples, args.split)}
    report["build_s"] = round(time.perf_counter() - t0, 1)
    if not args.no_measure:
        report["loaders"] = []
        for kind in args.kinds.split(","):
            res = subprocess.run([sys.executable, "-c", MEASURE, str(args.out), kind], capture_output=True, text=True)
            if res.returncode:
                report["loaders"].append({"kind": kind, "error": res.stderr.strip().splitlines()[-1]})
            else:
                report["loaders"].append(json.loads(res.stdout.strip().splitlines()[-1]))
    print(json.dumps(report, indent=2))
    if args.report:
        write_json_atomic(args.report, report)
    return report


if __name__ == "__main__":
    main()
