#!/usr/bin/env python3
"""Decoded vs encoded packs of JPEG photos (`pairload pack --store encoded`) on the CPU: bytes, pack time, the
per-core decode rate through `ShardDataset.arrays`, and the `ram` loader (crop 256, batch 32, warm) over a
targets-only pack with `degrade="lowlight"` and over JPEG pairs (FiveK-style exports) without, on this machine's
cores.

    python benchmarks/bench_encoded_store.py WORKDIR [--photos 300] [--quality 90] [--seconds 6] [--out F.json]

The photos are `pairload make-pairs`' targets (random scaled crops of scikit-image's bundled photographs, 600x400)
saved as JPEG at --quality, the pairs its (input, target) pairs saved alike; both packs hold the same files. The
two packs alternate in every loader round (a shared machine sees the same background load for both); medians are
reported.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import cv2

from pairload import make_loader
from pairload.format.imageformats import decoder
from pairload.pack.writer import PackOptions, pack
from pairload.read.shards import ShardDataset, info


def photos(work: Path, n: int, quality: int) -> tuple[Path, Path]:
    """`n` 600x400 photographs as JPEG files, and `n` JPEG pairs (made once)."""
    out, pairs = work / "photos", work / "pairs"
    if out.is_dir() and len(list(out.glob("*.jpg"))) == n:
        return out, pairs
    made = work / "made"
    subprocess.run([sys.executable, "-m", "pairload.cli", "make-pairs", str(made), "--pairs", str(n), "--test", "0",
                    "--size", "600x400"], check=True, capture_output=True)
    for side in ("low", "high"):
        (pairs / side).mkdir(parents=True, exist_ok=True)
        for png in sorted((made / "train" / side).glob("*.png")):
            image = cv2.imread(str(png))
            assert cv2.imwrite(str(pairs / side / f"{png.stem}.jpg"), image, [cv2.IMWRITE_JPEG_QUALITY, quality])
    shutil.copytree(pairs / "high", out)
    return out, pairs


def pack_both(src: Path, work: Path, targets_only: bool) -> dict:
    rows = {}
    for store in ("decoded", "encoded"):
        t0 = time.perf_counter()
        folder = work / (store if targets_only else f"pairs-{store}")
        report = pack(src, folder, PackOptions(targets_only=targets_only, store=store, overwrite=True))
        found = info(folder)["train"]
        rows[store] = {"pack_seconds": round(time.perf_counter() - t0, 2), "photos": report.pairs,
                       "bytes": found["bytes"], "bytes_per_photo": round(found["bytes"] / report.pairs),
                       "pixel_bytes_per_photo": found["pixel_bytes"] // report.pairs,
                       **({"formats": found["formats"]} if "formats" in found else {})}
    rows["ratio_decoded_over_encoded"] = round(rows["decoded"]["bytes"] / rows["encoded"]["bytes"], 2)
    return rows


def decode_rate(folder: Path, passes: int = 3) -> dict:
    """Every photo read whole through `arrays` in one process: first pass (CRC-32 checked) and later passes, in
    photos per CPU-second (the per-core rate), and ms of CPU per photo."""
    ds = ShardDataset(folder, "train")

    def one() -> float:
        c0 = time.process_time()
        for i in range(len(ds)):
            low, high = ds.arrays(i)
            high[0, 0, 0], high[-1, -1, -1]  # noqa: B018 - touch (views of the page cache are lazy)
        return len(ds) / (time.process_time() - c0)

    first, later = one(), [one() for _ in range(passes)]
    rate = statistics.median(later)
    return {"first_pass_per_cpu_s": round(first, 1), "per_cpu_s": round(rate, 1), "ms_per_photo": round(1e3 / rate, 3),
            "passes": [round(r, 1) for r in later]}


def loader_rate(folder: Path, workers: int, seconds: float, degrade: str | None) -> tuple[float, float]:
    """Warm pairs/s of `ram` at crop 256, batch 32 on the CPU over about `seconds`, and the CPU cores the process
    and its workers used meanwhile."""
    with make_loader("ram", folder, batch_size=32, crop=256, seed=0, num_workers=workers, degrade=degrade,
                     device="cpu") as loader:
        loader.set_epoch(0)
        for _ in loader:  # one untimed epoch: workers started, shards in the page cache
            pass
        pairs, epoch, t0, c0 = 0, 1, time.perf_counter(), _cpu(loader)
        while time.perf_counter() - t0 < seconds:
            loader.set_epoch(epoch)
            for batch in loader:
                pairs += len(batch.keys)
            epoch += 1
        wall = time.perf_counter() - t0
        return pairs / wall, (_cpu(loader) - c0) / wall


def _cpu(loader) -> float:
    import psutil

    procs = [psutil.Process()] + [psutil.Process(p) for p in loader.worker_pids()]
    return sum(sum(p.cpu_times()[:2]) for p in procs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workdir", type=Path)
    ap.add_argument("--photos", type=int, default=300)
    ap.add_argument("--quality", type=int, default=90)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    doc = {"machine": {"nproc": os.cpu_count(), "cpu_model": model, "date": date.today().isoformat(),
                       "python": platform.python_version(), "jpeg_decoder": decoder(),
                       "loadavg_at_start": os.getloadavg()},
           "data": {"photos": args.photos, "size": "600x400", "jpeg_quality": args.quality,
                    "what": "pairload make-pairs targets (scikit-image's photographs, random scaled crops) as JPEG"}}
    src, pairs = photos(args.workdir, args.photos, args.quality)
    doc["packs"] = {"targets": pack_both(src, args.workdir, True), "pairs": pack_both(pairs, args.workdir, False)}
    doc["decode"] = {store: decode_rate(args.workdir / store) for store in ("decoded", "encoded")}
    rows = []
    for what, degrade, prefix in (("targets", "lowlight", ""), ("pairs", None, "pairs-")):
        for workers in (0, 2):
            runs: dict[str, list[tuple[float, float]]] = {"decoded": [], "encoded": []}
            for _ in range(args.rounds):
                for store in runs:
                    runs[store].append(loader_rate(args.workdir / f"{prefix}{store}", workers, args.seconds, degrade))
            for store, got in runs.items():
                rows.append({"pack": what, "store": store, "loader": "ram", "degrade": degrade,
                             "num_workers": workers, "pairs_per_s": round(statistics.median(r[0] for r in got), 1),
                             "cpu_cores_used": round(statistics.median(r[1] for r in got), 2),
                             "runs": [round(r[0], 1) for r in got]})
                print(json.dumps(rows[-1]), flush=True)
    doc["loaders"] = rows
    doc["machine"]["loadavg_at_end"] = os.getloadavg()
    text = json.dumps(doc, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
