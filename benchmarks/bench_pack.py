#!/usr/bin/env python3
"""Pack throughput against its bound: cores × the single-core decode rate of the same images.

    python benchmarks/bench_pack.py RAW_DIR SHARDS_DIR [--workers N] [--out results.json]

The single-core rate decodes every raw image of the first 200 pairs once with cv2 in this process (files
already in the page cache, as they are for the pack that follows, which is run twice: the first run warms
the cache, the second is timed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import time
from pathlib import Path

import cv2

from pairload.raw.discover import find_pairs
from pairload.pack.writer import PackOptions, pack


def device_name() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return f"{torch.cuda.get_device_name(0)} host"
    except ImportError:
        pass
    return platform.node()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("raw", type=Path)
    ap.add_argument("shards", type=Path)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    pairs = find_pairs(args.raw).pairs
    cv2.setNumThreads(1)
    files = [f for p in pairs[:200] for f in (p.low, p.high)]
    for f in files:
        f.read_bytes()
    t0 = time.perf_counter()
    for f in files:
        cv2.imread(str(f), cv2.IMREAD_UNCHANGED)
    single = len(files) / (time.perf_counter() - t0) / 2  # pairs/s on one core
    cores = args.workers or os.cpu_count()
    runs = []
    for _ in range(2):
        shutil.rmtree(args.shards, ignore_errors=True)
        report = pack(args.raw, args.shards, PackOptions(workers=args.workers))
        runs.append(report.pairs / report.seconds)
    t0 = time.perf_counter()
    with open(args.shards / "disk-probe.bin", "wb") as fh:
        block = os.urandom(1 << 24)
        for _ in range(64):
            fh.write(block)
        fh.flush()
        os.fsync(fh.fileno())
    disk = 64 * len(block) / (time.perf_counter() - t0) / 1e6
    os.unlink(args.shards / "disk-probe.bin")
    doc = {
        "benchmark": "pack", "device": device_name(), "cpu_count": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
        "pairs": len(pairs), "workers": cores, "image_format": files[0].suffix.lstrip("."),
        "single_core_decode_pairs_per_s": single, "bound_pairs_per_s": single * cores,
        "pack_pairs_per_s": runs[-1], "pack_pairs_per_s_cold": runs[0], "ratio_to_bound": runs[-1] / (single * cores),
        "phases_s": report.phases, "decode_phase_pairs_per_s": report.pairs / report.phases["decode"],
        "decode_phase_ratio_to_bound": report.pairs / report.phases["decode"] / (single * cores),
        "shard_bytes": sum(s["bytes"] for s in report.splits.values()), "disk_write_fsync_mb_per_s": disk,
        "output_dir": str(args.shards),
    }
    print(json.dumps(doc, indent=2))
    if args.out:
        args.out.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
