#!/usr/bin/env python3
"""Raw vs zstd members (`pairload pack --compress zstd`): size, pack time, decode rate and loader throughput, and
the network bandwidth at which compression breaks even.

    python benchmarks/bench_compression.py RAW_DIR WORKDIR [--levels 1,3,9] [--loader-level 3] [--out F.json]

RAW_DIR: pairs as `pairload make-pairs` writes them (e.g. `pairload make-pairs RAW --pairs 300 --size 600x400`).
Packs the split once raw and once per level (a first untimed pack of each puts the raw images in the page cache,
then --pack-rounds timed rounds with the variants interleaved), then measures on the `train` split:
  * decode: one process decoding every pair through `ShardDataset.arrays` (both images), first pass (headers and
    CRC-32 checked) and later passes (decode only), in pairs per CPU-second (= per core); raw: the same views;
  * loaders: `ram` and `wds` with num_workers 0 and 2 at crop 256, batch 32 on CPU, warm (shards in the page
    cache, a --seconds window) and cold (shards evicted with posix_fadvise(DONTNEED), then one epoch; no root
    needed), with `pairload.bench.measure`'s own measure/measure_cold; raw and zstd alternate for --rounds rounds
    and the median is reported (on a shared machine both see the same background load).
Break-even: a loader fed over a network of bandwidth B delivers B / bytes-per-pair pairs/s; decoding delivers at
most (per-core decode rate × cores). zstd wins while B < decode-bound × raw bytes per pair.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import time
import zlib
from datetime import date
from pathlib import Path

import torch

from pairload.bench.config import BenchConfig
from pairload.bench.entries import build_loader
from pairload.bench.measure import measure, measure_cold
from pairload.format import schema
from pairload.pack.writer import PackOptions, pack
from pairload.read.shards import ShardDataset

SPLIT = "train"


def machine() -> dict:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    import zstandard

    return {"nproc": os.cpu_count(), "cpu_model": model, "date": date.today().isoformat(),
            "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "python": platform.python_version(), "zstandard": zstandard.__version__, "torch": torch.__version__,
            "kernel": platform.release()}


def _cpu() -> float:
    """CPU seconds of this process and its waited-for children (a pack's pool is joined when it returns)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def pack_once(raw: Path, out: Path, compress: str | None, level: int, workers: int) -> dict:
    opts = PackOptions(workers=workers, compress=compress, compress_level=level, overwrite=True)
    c0, t0 = _cpu(), time.perf_counter()
    report = pack(raw, out, opts)
    return {"seconds": time.perf_counter() - t0, "cpu_seconds": _cpu() - c0, "pairs": report.pairs,
            "phases": {k: round(v, 2) for k, v in report.phases.items()}}


def packs(raw: Path, folders: dict[str, Path], workers: int, rounds: int) -> list[dict]:
    """Every variant packed once to warm the page cache, then `rounds` timed rounds, variants interleaved."""
    variants = {label: ("zstd", int(label.split("-")[1])) if "-" in label else (None, 3) for label in folders}
    for label, (compress, level) in variants.items():
        pack_once(raw, folders[label], compress, level, workers)
    runs: dict[str, list[dict]] = {label: [] for label in folders}
    for _ in range(rounds):
        for label, (compress, level) in variants.items():
            runs[label].append(pack_once(raw, folders[label], compress, level, workers))
    out = []
    for label, (compress, level) in variants.items():
        ds = ShardDataset(folders[label], SPLIT)
        stored = sum(ds.shard_bytes)
        seconds = statistics.median(r["seconds"] for r in runs[label])
        pairs = runs[label][0]["pairs"]  # every split (train and test)
        out.append({"label": label, "compress": compress, "level": level if compress else None,
                    "pack_workers": workers, "pack_seconds_median": round(seconds, 2),
                    "pack_seconds_runs": [round(r["seconds"], 2) for r in runs[label]],
                    "pack_cpu_seconds_per_pair": round(statistics.median(r["cpu_seconds"] for r in runs[label]) / pairs,
                                                       4),
                    "pack_pairs_per_s": round(pairs / seconds, 1), "phases_last_run": runs[label][-1]["phases"],
                    "train_pairs": len(ds), "train_bytes": stored, "bytes_per_pair": round(stored / len(ds)),
                    "pixel_bytes_per_pair": ds.nbytes // len(ds)})
    return out


def decode_rate(shards: Path, passes: int = 3) -> dict:
    """One process reading every pair's two whole images through `arrays`: the first pass (headers and CRC-32
    checked), then `passes` more (decode only), as pairs per CPU-second (the per-core rate; wall time on a shared
    machine counts other processes' time too) and per wall-second."""
    ds = ShardDataset(shards, SPLIT)

    def one_pass() -> tuple[float, float]:
        c0, t0 = time.process_time(), time.perf_counter()
        for i in range(len(ds)):
            low, high = ds.arrays(i)
            low[0, 0, 0], high[-1, -1, -1]  # noqa: B018 - touch both (raw views are lazy)
        return len(ds) / (time.process_time() - c0), len(ds) / (time.perf_counter() - t0)

    first = one_pass()
    later = [one_pass() for _ in range(passes)]
    cpu = statistics.median(r[0] for r in later)
    out = {"first_pass_pairs_per_cpu_s": round(first[0], 1), "pairs_per_cpu_s": round(cpu, 1),
           "pairs_per_wall_s": round(statistics.median(r[1] for r in later), 1),
           "passes_pairs_per_cpu_s": [round(r[0], 1) for r in later]}
    if ds.index.compression:
        out["first_decode_crc_extra_frac"] = round(cpu / first[0] - 1, 3)
    return out


def crc_and_decode_mb_per_s(shards: Path) -> dict:
    """CRC-32 of decoded pixels against zstd decoding of the same images, in MB of pixels per CPU-second."""
    from pairload.format import codec

    ds = ShardDataset(shards, SPLIT)
    idx = ds.index
    frames, sizes = [], []
    for i in range(0, len(ds), 5):
        mm = ds.shard_map(int(idx.shard[i]))
        h, w = idx.hw[i].tolist()
        frames.append(bytes(mm[int(idx.low[i]):int(idx.low[i]) + int(idx.low_bytes[i])]))
        sizes.append(len(schema.npy_header(h, w)) + h * w * 3)
    c0 = time.process_time()
    files = [codec.decompress(f, n) for f, n in zip(frames, sizes)]
    dec = time.process_time() - c0
    c0 = time.process_time()
    for f in files:
        zlib.crc32(f)
    crc = time.process_time() - c0
    total = sum(sizes)
    return {"zstd_decode_mb_per_cpu_s": round(total / dec / 1e6), "crc32_mb_per_cpu_s": round(total / crc / 1e6)}


def loaders(folders: dict[str, Path], seconds: float, rounds: int) -> list[dict]:
    """ram and wds, num_workers 0 and 2, warm and cold; raw and zstd interleaved round by round (the machine may be
    shared: an A/B alternated in time sees the same background)."""
    device = torch.device("cpu")
    rows = []
    for name in ("ram", "wds"):
        for workers in (0, 2):
            for cache in ("warm", "cold"):
                runs: dict[str, list[float]] = {label: [] for label in folders}
                cores: dict[str, list[float]] = {label: [] for label in folders}
                for _ in range(rounds):
                    for label, folder in folders.items():
                        rate, used = _loader_once(name, folder, workers, cache, seconds, device)
                        runs[label].append(rate)
                        cores[label].append(used)
                for label in folders:
                    row = {"shards": label, "loader": name, "num_workers": workers, "cache": cache,
                           "pairs_per_s": round(statistics.median(runs[label]), 1),
                           "runs": [round(r, 1) for r in runs[label]]}
                    if cache == "warm":
                        row["cpu_cores_used"] = round(statistics.median(cores[label]), 2)
                    rows.append(row)
                    print(f"  {label} {name} workers={workers} {cache}: {row['pairs_per_s']:,.0f} pairs/s "
                          f"{row['runs']}", flush=True)
    return rows


def _loader_once(name: str, folder: Path, workers: int, cache: str, seconds: float, device) -> tuple[float, float]:
    cfg = BenchConfig(shards=str(folder), split=SPLIT, loaders=(name,), crop=256, batch_size=32, workers=workers,
                      seconds=seconds, repeats=1, device="cpu")
    files = ShardDataset(folder, SPLIT).files
    if cache == "cold":
        res = measure_cold(name, cfg, device, workers, files)  # evicted, then one epoch
        return res.pairs_per_s, 0.0
    for path in files:  # every shard in the page cache
        with open(path, "rb") as fh:
            while fh.read(1 << 24):
                pass
    loader = build_loader(name, cfg, device, workers)
    try:
        res = measure(name, loader, cfg, device, None, None)
    finally:
        loader.close()
        del loader
    return res.pairs_per_s, res.cpu_cores_used


def break_even(raw: dict, z: dict, decode_per_core: float, cores: int) -> dict:
    """Network bandwidth below which zstd shards deliver more pairs/s than raw ones when `cores` cores decode.

    Over a link of B bytes/s a loader gets B / bytes-per-pair pairs/s; a zstd pack's loader also stops at the
    decode bound D = per-core decode rate × cores. zstd wins while min(B / z, D) > B / r, that is while
    B < D × r (r, z: raw and zstd bytes per pair); below D × z it is bandwidth-bound too and gains the whole ratio."""
    decode_bound = decode_per_core * cores
    b_star = decode_bound * raw["bytes_per_pair"]
    b_full = decode_bound * z["bytes_per_pair"]
    return {"cores": cores, "decode_bound_pairs_per_s": round(decode_bound),
            "break_even_gbit_per_s": round(b_star * 8 / 1e9, 2),
            "full_ratio_below_gbit_per_s": round(b_full * 8 / 1e9, 2)}


def summarise(doc: dict, zlabel: str) -> None:
    """Add the break-even bandwidths (decode alone, and the whole zstd loader per CPU-second) and the conclusion."""
    raw = next(p for p in doc["packs"] if p["label"] == "raw")
    z = next(p for p in doc["packs"] if p["label"] == zlabel)
    per_core = doc["decode"][zlabel]["pairs_per_cpu_s"]
    warm = {(r["shards"], r["loader"], r["num_workers"]): r for r in doc["loaders"] if r["cache"] == "warm"}
    loader_rate = {label: round(warm[(label, "ram", 0)]["pairs_per_s"] / warm[(label, "ram", 0)]["cpu_cores_used"])
                   for label in ("raw", zlabel)}  # pairs per CPU-second of the whole ram loader, one process
    cores = sorted({1, doc["machine"]["nproc"], 16, 64})
    doc["break_even"] = {
        "level": z["level"], "ratio": z["ratio_raw_over_compressed"], "raw_bytes_per_pair": raw["bytes_per_pair"],
        "zstd_bytes_per_pair": z["bytes_per_pair"], "decode_pairs_per_s_per_core": per_core,
        "per_cores": [break_even(raw, z, per_core, c) for c in cores],
        "loader_pairs_per_cpu_s_ram_0_workers": loader_rate,
        "per_cores_whole_loader": [break_even(raw, z, loader_rate[zlabel], c) for c in cores],
        "method": "bandwidth-bound pairs/s = B / bytes per pair (whole shards travel: tar headers included); "
                  "decode-bound pairs/s = pairs per CPU-second × cores. zstd gives more pairs/s while "
                  "B < decode-bound × raw bytes per pair (break_even), and the whole ratio while B < decode-bound × "
                  "zstd bytes per pair. per_cores_whole_loader uses the zstd ram loader's own pairs per CPU-second "
                  "(decode + crop + batch) instead of decode alone.",
    }
    one = break_even(raw, z, per_core, 1)
    whole = break_even(raw, z, loader_rate[zlabel], 1)
    sixteen = break_even(raw, z, per_core, 16)
    doc["conclusion"] = (
        f"zstd level {z['level']} stores these {doc['data']['size']} pairs {z['ratio_raw_over_compressed']:.2f}x "
        f"smaller ({raw['bytes_per_pair'] / 1e6:.2f} -> {z['bytes_per_pair'] / 1e6:.2f} MB per pair) and a core "
        f"decodes {per_core:.0f} pairs/s ({1e3 / per_core:.1f} ms of CPU per pair, every epoch). Over a network, "
        f"zstd shards deliver more pairs/s than raw ones while the bandwidth is below about "
        f"{one['break_even_gbit_per_s']:.1f} Gbit/s per core given to decoding ({whole['break_even_gbit_per_s']:.1f} "
        f"Gbit/s per core counting the whole loader), e.g. {sixteen['break_even_gbit_per_s']:.0f}"
        f" Gbit/s for 16 cores; the gain is at most the ratio ({z['ratio_raw_over_compressed']:.2f}x). Read from the "
        f"page cache or a local disk, raw is {loader_rate['raw'] / loader_rate[zlabel]:.1f}x cheaper per pair "
        f"(ram loader, pairs per CPU-second), so raw stays the default: use --compress zstd for shards read from a "
        f"bucket or over HTTP when the link (or storage) is the limit and cores are spare.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("raw", type=Path)
    ap.add_argument("workdir", type=Path)
    ap.add_argument("--levels", default="1,3,9")
    ap.add_argument("--loader-level", type=int, default=3)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="pack processes")
    ap.add_argument("--pack-rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=3.0, help="one warm loader window")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved raw/zstd rounds per loader setting")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    levels = [int(v) for v in args.levels.split(",")]
    args.workdir.mkdir(parents=True, exist_ok=True)
    doc = {"machine": machine() | {"loadavg_at_start": os.getloadavg()}, "data": {"raw": str(args.raw), "split": SPLIT}}
    folders = {"raw": args.workdir / "raw"} | {f"zstd-{lv}": args.workdir / f"zstd-{lv}" for lv in levels}
    doc["packs"] = packs(args.raw, folders, args.workers, args.pack_rounds)
    raw = doc["packs"][0]
    for p in doc["packs"][1:]:
        p["ratio_raw_over_compressed"] = round(raw["train_bytes"] / p["train_bytes"], 3)
    h, w = ShardDataset(folders["raw"], SPLIT).sizes[0].tolist()
    doc["data"].update(train_pairs=raw["train_pairs"], size=f"{w}x{h}")
    print(json.dumps(doc["packs"], indent=1), flush=True)
    doc["decode"] = {label: decode_rate(folder) for label, folder in folders.items()}
    for label in folders:
        if label != "raw":
            doc["decode"][label] |= crc_and_decode_mb_per_s(folders[label])
    print(json.dumps(doc["decode"], indent=1), flush=True)
    zlabel = f"zstd-{args.loader_level}"
    doc["loaders"] = loaders({"raw": folders["raw"], zlabel: folders[zlabel]}, args.seconds, args.rounds)
    doc["machine"]["loadavg_at_end"] = os.getloadavg()
    summarise(doc, zlabel)
    text = json.dumps(doc, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
