"""Encoded packs on the GPU host: photo-like 600x400 JPEGs (q90) packed targets-only and as pairs, `--store encoded`
and `--store decoded`; for each, pairs/s of the `ram` loader at crop 256, batch 32 (targets-only with
`degrade="lowlight"`), warm (a time window after a warm-up epoch) and cold (the shards evicted, one epoch from the
loader's construction), with the process held to CPU_CORES cores; bytes per pair stored; the disk bound.

    python benchmarks/decode_rate.py WORK OUT.json [--photos 4000] [--cores 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import cv2
import numpy as np

CHILD = r"""
import json, sys, time
import torch, pairload
from pairload.bench.bounds import evict
shards, mode, degrade, seconds = sys.argv[1], sys.argv[2], sys.argv[3] or None, float(sys.argv[4])
dev = torch.device("cuda:0")
opts = dict(batch_size=32, crop=256, seed=0, device=dev, degrade=degrade)
if mode == "cold":
    from pairload.read.shards import ShardDataset
    evict(ShardDataset(shards, "train").files)
t0 = time.perf_counter()
loader = pairload.make_loader("ram", shards, **opts)
n, first = 0, None
if mode == "cold":
    for b in loader:
        n += len(b)
        if first is None:
            torch.cuda.synchronize(); first = time.perf_counter() - t0
    torch.cuda.synchronize()
    rate = n / (time.perf_counter() - t0)
else:
    for b in loader:  # a warm-up epoch
        pass
    torch.cuda.synchronize()
    epoch, t1 = 1, time.perf_counter()
    while time.perf_counter() - t1 < seconds:
        loader.set_epoch(epoch); epoch += 1
        for b in loader:
            n += len(b)
    torch.cuda.synchronize()
    rate = n / (time.perf_counter() - t1)
print(json.dumps({"pairs_per_s": rate, "pairs": n, "path": loader.path, "first_batch_s": first,
                  "reserved_mb": torch.cuda.max_memory_reserved(dev) / 2**20}))
"""


def _photo(args) -> None:
    i, folder, pairs = args
    rng = np.random.default_rng(i)
    base = cv2.resize(rng.integers(0, 256, (25, 37, 3), dtype=np.uint8), (600, 400), interpolation=cv2.INTER_CUBIC)
    img = np.clip(base + rng.normal(0, 10, base.shape), 0, 255).astype(np.uint8)
    if pairs:
        cv2.imwrite(f"{folder}/high/{i:06d}.jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])
        cv2.imwrite(f"{folder}/low/{i:06d}.jpg", img // 6, [cv2.IMWRITE_JPEG_QUALITY, 90])
    else:
        cv2.imwrite(f"{folder}/{i:06d}.jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])


def make(work: Path, n: int) -> dict[str, Path]:
    photos, pairs = work / "photos", work / "pairs"
    for f in (photos, pairs / "low", pairs / "high"):
        f.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor() as ex:
        list(ex.map(_photo, [(i, str(photos), False) for i in range(n)], chunksize=64))
        list(ex.map(_photo, [(i, str(pairs), True) for i in range(n // 2)], chunksize=64))
    out = {}
    for name, raw, extra in (("targets-encoded", photos, ["--targets-only", "--store", "encoded"]),
                             ("targets-decoded", photos, ["--targets-only"]),
                             ("pairs-encoded", pairs, ["--store", "encoded"]),
                             ("pairs-decoded", pairs, [])):
        dest = work / name
        if not (dest / "manifest.json").exists():
            subprocess.run([sys.executable, "-P", "-m", "pairload.cli", "pack", str(raw), str(dest), "--workers", "0",
                            *extra], check=True, capture_output=True)
        out[name] = dest
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("out")
    ap.add_argument("--photos", type=int, default=4000)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=4.0)
    args = ap.parse_args()
    import torch

    from pairload.bench.bounds import disk_bound, evict
    from pairload.read.shards import ShardDataset

    packs = make(Path(args.work), args.photos)
    report = {"date": time.strftime("%Y-%m-%d"), "device": torch.cuda.get_device_name(0), "cores": args.cores,
              "photos": args.photos, "rows": []}
    files = ShardDataset(packs["targets-decoded"], "train").files
    evict(files)
    report["disk"] = disk_bound(files, 1)  # bytes/s (pairs_per_s with 1-byte pairs)
    cores = ",".join(str(c) for c in range(args.cores))
    for name, shards in packs.items():
        ds = ShardDataset(shards, "train")
        per_pair = sum(ds.shard_bytes) / len(ds)
        degrade = "lowlight" if name.startswith("targets") else ""
        for mode in ("warm", "cold"):
            proc = subprocess.run(["taskset", "-c", cores, sys.executable, "-P", "-c", CHILD, str(shards), mode,
                                   degrade, str(args.seconds)], capture_output=True, text=True, timeout=600)
            try:
                row = json.loads(proc.stdout.strip().splitlines()[-1])
            except (IndexError, ValueError):
                row = {"error": proc.stderr[-1500:]}
            row.update(pack=name, mode=mode, bytes_per_pair=per_pair,
                       disk_pairs_per_s=report["disk"]["gb_per_s"] * 1e9 / per_pair)
            if "pairs_per_s" in row:
                row["of_disk"] = row["pairs_per_s"] / row["disk_pairs_per_s"]
            report["rows"].append(row)
            print(json.dumps(row)[:400], flush=True)
    Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
