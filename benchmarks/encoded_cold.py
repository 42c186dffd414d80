"""A targets-only pack of JPEG photos kept byte for byte (`pack --targets-only --store encoded`) read from a cold page
cache, on the GPU host: `ram` with `degrade="lowlight"`, crop 256, batch 32, one epoch from the loader's construction,
each run in a child process held to CORES cores, for each code tree in turn (interleaved rounds); against the same
photos packed decoded, read cold the same way, and the disk's bound in the encoded pack's bytes. Each row: pairs/s from
construction, the first batch's time, the rate after it; `--profile`: where a cold start spends its time (cProfile of
the first tree after the rounds, OUT/profile-cold.txt). Every result goes to OUT/encoded-cold.json as soon as it is measured.

    python benchmarks/encoded_cold.py WORK OUT --photos 40000 --decoded 8000 --trees new=.,prev=.devwheels/prev
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from decode_rate import photo

CHILD = r"""
import json, sys, time
t_start = time.perf_counter()
import torch, pairload
from pairload.bench.bounds import evict
from pairload.read.shards import ShardDataset
shards, degrade, profile = sys.argv[1], sys.argv[2] or None, sys.argv[3]
evict(ShardDataset(shards, "train").files)
imported = time.perf_counter() - t_start
dev = torch.device("cuda:0")
if profile:
    import cProfile
    prof = cProfile.Profile()
    prof.enable()
t0 = time.perf_counter()
loader = pairload.make_loader("ram", shards, batch_size=32, crop=256, seed=0, device=dev, degrade=degrade)
built = time.perf_counter() - t0
n, first, n_first = 0, None, 0
for b in loader:
    n += len(b)
    if first is None:
        torch.cuda.synchronize(); first = time.perf_counter() - t0; n_first = n
torch.cuda.synchronize()
total = time.perf_counter() - t0
if profile:
    prof.disable()
    import pstats
    with open(profile, "w") as f:
        pstats.Stats(prof, stream=f).sort_stats("cumulative").print_stats(60)
print(json.dumps({"pairs_per_s": n / total, "pairs": n, "seconds": total, "path": loader.path,
                  "import_s": imported, "construct_s": built, "first_batch_s": first,
                  "after_first_pairs_per_s": (n - n_first) / max(1e-9, total - first)}))
"""


def make(work: Path, photos: int, decoded: int, workers: int) -> dict[str, Path]:
    raw, sub = work / "photos", work / "photos-decoded"
    raw.mkdir(parents=True, exist_ok=True)
    if len(os.listdir(raw)) < photos:
        with ProcessPoolExecutor() as ex:
            list(ex.map(photo, [(i, str(raw), False) for i in range(photos)], chunksize=64))
    if not sub.exists():
        sub.mkdir()
        for i in range(decoded):
            os.link(raw / f"{i:06d}.jpg", sub / f"{i:06d}.jpg")
    out = {}
    for name, src, extra in (("encoded", raw, ["--store", "encoded"]), ("decoded", sub, [])):
        dest = work / name
        if not (dest / "manifest.json").exists():
            subprocess.run([sys.executable, "-m", "pairload.cli", "pack", str(src), str(dest), "--targets-only",
                            "--workers", str(workers), *extra], check=True, capture_output=True)
        out[name] = dest
    return out


def child(tree: Path, shards: Path, cores: str, profile: str = "") -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(["taskset", "-c", cores, sys.executable, "-c", CHILD, str(shards), "lowlight", profile],
                          capture_output=True, text=True, timeout=900, cwd=tree, env=env)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"error": proc.stderr[-2000:]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("out")
    ap.add_argument("--photos", type=int, default=40000)
    ap.add_argument("--decoded", type=int, default=8000, help="photos of the decoded pack (a subset)")
    ap.add_argument("--trees", default="new=.", help="name=folder,… of the code trees compared")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    import torch

    from pairload.bench.bounds import disk_bound
    from pairload.read.shards import ShardDataset

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    packs = make(Path(args.work), args.photos, args.decoded, os.cpu_count() or 1)
    trees = dict(item.split("=", 1) for item in args.trees.split(","))
    trees = {name: Path(folder).resolve() for name, folder in trees.items()}
    report = {"date": time.strftime("%Y-%m-%d"), "device": torch.cuda.get_device_name(0), "cores": args.cores,
              "photos": args.photos, "made_s": time.perf_counter() - t, "rows": []}
    sizes = {}
    for name, shards in packs.items():
        ds = ShardDataset(shards, "train")
        sizes[name] = {"pairs": len(ds), "bytes_per_pair": sum(ds.shard_bytes) / len(ds)}
    report["packs"] = sizes
    disk = disk_bound(ShardDataset(packs["encoded"], "train").files, 1)
    report["disk"] = disk
    for name in sizes:
        sizes[name]["disk_pairs_per_s"] = disk["gb_per_s"] * 1e9 / sizes[name]["bytes_per_pair"]
    path = out / "encoded-cold.json"

    def record(row: dict) -> None:
        if "pairs_per_s" in row:
            row["of_disk"] = row["pairs_per_s"] / sizes[row["pack"]]["disk_pairs_per_s"]
        report["rows"].append(row)
        print(json.dumps(row)[:500], flush=True)
        path.write_text(json.dumps(report, indent=1))

    cores = ",".join(str(c) for c in range(args.cores))
    first = next(iter(trees.values()))
    for r in range(args.rounds):
        for name, tree in trees.items():
            record(dict(child(tree, packs["encoded"], cores), pack="encoded", tree=name, round=r))
    if args.profile:  # after the rounds: the libraries' files cached, Triton's kernels built, as a user's second run
        record(dict(child(first, packs["encoded"], cores, str(out / "profile-cold.txt")), pack="encoded",
                    tree="profiled"))
    record(dict(child(first, packs["decoded"], cores), pack="decoded", tree=next(iter(trees)), round=0))


if __name__ == "__main__":
    main()
