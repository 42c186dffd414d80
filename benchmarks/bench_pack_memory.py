#!/usr/bin/env python3
"""Pack's peak memory per pair (issue #57, "a billion pairs"; target: 200 B or less between 10k and 100k pairs).

Makes N tiny distinct PNG pairs (RAW/train/low/NNNNNNN.png ↔ RAW/train/high/NNNNNNN.png, 16x16 by default), packs
each folder with `pairload.pack.pack` in a fresh process, and reports that process's peak RSS (`ru_maxrss` of
RUSAGE_SELF: the parent, which holds every per-pair structure) and the largest peak among its forked workers
(RUSAGE_CHILDREN), plus its peak right after the imports (the floor). Bytes per pair: the slope of the parent's
peak between the two sizes, (peak(N2) - peak(N1)) / (N2 - N1); the workers' peak should not grow with N.

    python benchmarks/bench_pack_memory.py --pairs 10000,100000 --workers 1 --work DIR [--out result.json]

DIR/raw-N is made once and reused (100k pairs take about a minute to write); DIR/shards-N is packed afresh. CPU
only; the packs of 100k tiny pairs take a minute or two on two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ONE_PACK = """
import json, resource, sys, time
import pairload.pack as pack_mod
from pairload.pack import PackOptions
floor = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
t = time.perf_counter()
options = PackOptions(workers=int(sys.argv[3]))
if len(sys.argv) > 4:
    options = PackOptions(workers=int(sys.argv[3]), shard_size=int(sys.argv[4]))
report = pack_mod.pack(sys.argv[1], sys.argv[2], options)
print(json.dumps({"seconds": round(time.perf_counter() - t, 3), "floor_rss_bytes": floor,
                  "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "peak_worker_rss_bytes": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024,
                  "phases": {k: round(v, 3) for k, v in report.phases.items()},
                  "samples": sum(s["samples"] for s in report.splits.values())}))
"""


def make_raw(raw: Path, n: int, size: tuple[int, int]) -> bool:
    """RAW/train/{low,high}/ with `n` distinct pairs of `size` (w, h), unless a complete one is there (a marker beside
    it, written last, says so). Returns whether it was made now."""
    import cv2
    import numpy as np

    marker = raw.with_suffix(".json")
    want = {"pairs": n, "size": list(size)}
    try:
        if json.loads(marker.read_text(encoding="utf-8")) == want:
            return False
    except (OSError, ValueError):
        pass
    shutil.rmtree(raw, ignore_errors=True)
    low_dir, high_dir = raw / "train" / "low", raw / "train" / "high"
    low_dir.mkdir(parents=True)
    high_dir.mkdir(parents=True)
    w, h = size
    base = np.random.default_rng(0).integers(64, 256, (h, w, 3), dtype=np.uint8)
    for i in range(n):
        high = base.copy()
        high[0, :4] = np.frombuffer(i.to_bytes(12, "little"), np.uint8).reshape(4, 3)  # distinct: no leaks refused
        low = high // 8  # a low-light input: darker than its target, aligned with it
        for folder, img in ((low_dir, low), (high_dir, high)):
            ok, data = cv2.imencode(".png", img)
            with open(folder / f"{i:07d}.png", "wb") as fh:
                fh.write(data.tobytes())
    from pairload.format.atomic import write_json_atomic

    write_json_atomic(marker, want)
    return True


def pack_once(raw: Path, out: Path, workers: int, shard_size: int | None = None) -> dict:
    shutil.rmtree(out, ignore_errors=True)  # an existing pack would be checked and replaced, not packed from scratch
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", ONE_PACK, str(raw), str(out), str(workers)]
                          + ([str(shard_size)] if shard_size else []), env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"pack of {raw} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def slope(rows: dict[int, dict], key: str) -> float | None:
    sizes = sorted(rows)
    if len(sizes) < 2:
        return None
    a, b = sizes[0], sizes[-1]
    return round((rows[b][key] - rows[a][key]) / (b - a), 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", default="10000,100000", help="Pairs per pack, comma-separated (default 10000,100000).")
    ap.add_argument("--work", type=Path, help="Folder for raw-N/ and shards-N/, reused (default: a temporary one).")
    ap.add_argument("--workers", type=int, default=1, help="Pack's decoding processes (default 1).")
    ap.add_argument("--image", default="16x16", help="Pair size WxH (default 16x16).")
    ap.add_argument("--repeat", type=int, default=1, help="Packs per size; the lowest peak is kept (default 1).")
    ap.add_argument("--shard-size", type=int, help="Pack's --shard-size in bytes (default: pack's own, 256 MB, which "
                    "holds ~90k of these tiny pairs; a shard's rows are spilled a block at a time whatever its size).")
    ap.add_argument("--out", type=Path, help="Also write the report (JSON) here, atomically.")
    args = ap.parse_args(argv)
    sizes = [int(v) for v in args.pairs.split(",") if v.strip()]
    w, h = (int(v) for v in args.image.lower().split("x"))
    work = args.work or Path(tempfile.mkdtemp(prefix="pack-memory-"))
    work.mkdir(parents=True, exist_ok=True)
    rows: dict[int, dict] = {}
    for n in sizes:
        raw = work / f"raw-{n}"
        t = time.perf_counter()
        made = make_raw(raw, n, (w, h))
        print(f"{n} pairs: {'made' if made else 'reused'} {raw} ({time.perf_counter() - t:.1f} s)", file=sys.stderr)
        runs = [pack_once(raw, work / f"shards-{n}", args.workers, args.shard_size) for _ in range(args.repeat)]
        rows[n] = dict(min(runs, key=lambda r: r["peak_rss_bytes"]), runs=len(runs),
                       every_peak_rss_bytes=[r["peak_rss_bytes"] for r in runs])  # the spread of the repeats
        print(f"{n} pairs: peak {rows[n]['peak_rss_bytes'] / 2**20:.1f} MiB (workers "
              f"{rows[n]['peak_worker_rss_bytes'] / 2**20:.1f} MiB), {rows[n]['seconds']} s", file=sys.stderr)
        shutil.rmtree(work / f"shards-{n}", ignore_errors=True)
    report = {"benchmark": "pack_memory", "config": {"pairs": sizes, "workers": args.workers, "image": f"{w}x{h}",
                                                    "shard_size": args.shard_size},
              "machine": {"cpu_count": os.cpu_count(), "machine": platform.machine(),
                          "python": platform.python_version(), "date": time.strftime("%Y-%m-%d")},
              "sizes": {str(n): r for n, r in rows.items()},
              "bytes_per_pair": slope(rows, "peak_rss_bytes"),  # (of the lowest peaks; the highest: below)
              "bytes_per_pair_highest": slope({n: {"p": max(r["every_peak_rss_bytes"])} for n, r in rows.items()}, "p"),
              "worker_bytes_per_pair": slope(rows, "peak_worker_rss_bytes")}
    print(json.dumps(report, indent=1))
    if args.out:
        from pairload.format.atomic import write_json_atomic

        write_json_atomic(args.out, report)
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
