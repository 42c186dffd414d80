#!/usr/bin/env python3
"""Pack throughput against its bounds, in one run (`benchlib.packbench`): the decode bound (W processes
decoding as pack's workers do), the output disk's write bound (W processes writing and fsyncing the shards' bytes),
the pack with W workers, and its per-pair costs timed in one process (probe, decode, CRC-32, pwrite, hash, fsync,
the pool). Synthetic 600x400 PNG pairs are made with `pairload make-pairs` (reused when WORK already holds them).

    python benchmarks/bench_pack.py --pairs 2000 --workers 16 --out x.json [--work DIR] [--raw RAW_DIR]

Needs no GPU; a few minutes on 16 cores for 2,000-10,000 pairs (most of it making the pairs, once). The output
folder (WORK/shards) is the disk measured: put WORK on the disk the real shards go to.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib, also under `python -P` or from elsewhere

from benchlib.packbench import run  # noqa: E402
from pairload.format.atomic import write_json_atomic  # noqa: E402
from pairload.pack.options import parse_wxh  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=2000, help="synthetic pairs to make and pack (default 2000)")
    ap.add_argument("--workers", type=int, default=os.cpu_count(), help="processes (default: all cores)")
    ap.add_argument("--pack-workers", type=int, help="the pack's workers, where not --workers (the bounds use "
                    "--workers processes)")
    ap.add_argument("--size", default="600x400", help="WIDTHxHEIGHT of the synthetic pairs (default 600x400)")
    ap.add_argument("--work", type=Path, help="folder for the pairs and the shards, kept for the next run (default: "
                    "a new temporary one, removed after)")
    ap.add_argument("--raw", type=Path, help="pack this raw folder instead of synthetic pairs")
    ap.add_argument("--sample", type=int, default=200, help="pairs timed one by one for the breakdown (default 200)")
    ap.add_argument("--repeat", type=int, default=1, help="measure the bounds and the pack this many times, "
                    "interleaved, and analyse the fastest of each (for a busy machine; default 1)")
    ap.add_argument("--keep", action="store_true", help="keep the shards the pack wrote (and a temporary WORK)")
    ap.add_argument("--out", type=Path, help="write the JSON report here too")
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-pack-"))
    try:
        report = run(work, args.pairs, args.workers, raw=args.raw, size=parse_wxh(args.size), sample=args.sample,
                     repeat=args.repeat, keep=args.keep, pack_workers=args.pack_workers,
                     log=lambda msg: print(msg, file=sys.stderr, flush=True))
    finally:
        if args.work is None and not args.keep:  # a folder of our own: the pairs go with it
            shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        write_json_atomic(args.out, report)
    return report


if __name__ == "__main__":
    main()
