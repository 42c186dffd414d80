#!/usr/bin/env python3
"""SID-sized camera raw: pairload's loaders over a packed SID-style tree against the two ways users load SID today
(LibRaw per access; np.load of pre-converted arrays), next to the host→device bound, and the sizes on disk.

    python benchmarks/bench_raw.py WORKDIR [--pairs 16] [--crop 512] [--batch 8] [--seconds 4] [--out F.json]

Writes WORKDIR/tree (SID-named DNGs, 4256×2848 Bayer, Sony's levels; `benchlib.rawdata.write_sid_tree`),
WORKDIR/npy (the converted copy: 2128×1424×4 packed inputs and 4256×2848×3 developed targets, as .npy) and
WORKDIR/shards (`pairload pack`, the target developed by LibRaw), timing each, then measures every row of
`benchlib.rawbench.RAW_LOADERS` warm (crop in input pixels; the target's crop is twice that). The report is
rewritten after each row, so a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib, also under `python -P` or from elsewhere


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workdir", type=Path)
    ap.add_argument("--pairs", type=int, default=16)
    ap.add_argument("--crop", type=int, default=512)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--loaders", default="")
    ap.add_argument("--out", type=Path, default=Path("raw-bench.json"))
    args = ap.parse_args()

    from benchlib.rawbench import RAW_LOADERS, run_raw_bench
    from benchlib.rawdata import write_arrays, write_sid_tree
    from pairload.pack.writer import PackOptions, pack

    tree, npy, shards = args.workdir / "tree", args.workdir / "npy", args.workdir / "shards"
    prep: dict = {}
    t = time.perf_counter()
    if not (tree / "long").is_dir():
        write_sid_tree(tree, args.pairs)
    prep["write_tree_s"] = time.perf_counter() - t
    t = time.perf_counter()
    if not (npy / "index.json").is_file():
        write_arrays(tree, npy)
    prep["convert_arrays_s"] = time.perf_counter() - t
    t = time.perf_counter()
    report = pack(tree, shards, PackOptions(workers=args.workers or os.cpu_count(), overwrite=True))
    prep["pack_s"] = time.perf_counter() - t
    prep["pack_phases_s"] = report.phases
    prep["pack_workers"] = report.workers
    prep["bytes"] = {"raw_files": folder_bytes(tree), "npy_arrays": folder_bytes(npy), "shards": folder_bytes(shards)}
    prep["pairs"] = report.pairs

    loaders = tuple(args.loaders.split(",")) if args.loaders else tuple(RAW_LOADERS)
    rows: list = []

    def save(res=None) -> None:
        if res is not None:
            rows.append(res)
            print(f"{res.loader:14s} {res.status:8s} {res.pairs_per_s:10.1f} pairs/s  {res.cpu_cores_used:5.2f} cores  "
                  f"{res.path or ''} {res.reason or ''}", flush=True)
        doc = {"prep": prep, "partial": [r.loader for r in rows]}
        args.out.write_text(json.dumps(doc, indent=1, default=str))

    save()
    out = run_raw_bench(tree, loaders, shards=shards, arrays=npy, crop=args.crop, batch=args.batch,
                        seconds=args.seconds, repeats=args.repeats, workers=args.workers, on_result=save)
    out["prep"] = prep
    args.out.write_text(json.dumps(out, indent=1, default=str))
    h2d = out["limits"]["h2d"]
    print(f"h2d bound {h2d['pairs_per_s']:.0f} pairs/s ({h2d['gb_per_s']:.1f} GB/s); prep {json.dumps(prep)}")


if __name__ == "__main__":
    main()
