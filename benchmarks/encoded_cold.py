"""A targets-only pack of JPEG photos kept byte for byte (`pack --targets-only --store encoded`) read from a cold page
cache, on the GPU host: `ram` with `degrade="lowlight"`, crop 256, batch 32, one epoch from the loader's construction,
each run in a child process held to the first CORES cores (each count given in turn), for each code tree in turn
(interleaved rounds); against the same
photos packed decoded, read cold the same way, and the disk's bound in the encoded pack's bytes. Each row: pairs/s from
construction, the first batch's time, the rate after it; `--profile`: where a cold start spends its time (cProfile of
the first tree after the rounds, OUT/profile-cold.txt); then, the pack in the page cache, each tree's warm rate (a
4 s window). Every result goes to OUT/encoded-cold.json as soon as it is measured.

    python benchmarks/encoded_cold.py WORK OUT --photos 118000 --cores 2,16 --trees new=.,prev=.devwheels/prev
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import cv2
import numpy as np

_NOISE: list = []  # per process: a field of sensor-like noise, of which each photo takes a window of its own


REAL = ("coffee", "rocket", "stereo_motorcycle", "retina", "hubble_deep_field")  # scikit-image's photographs of
# 600x400 or more: windows of them at their own resolution are 28-85 KB at q90 (60 KB on average)
_REAL: list = []  # per process: those photographs, BGR


def photo(args) -> None:
    """decode_rate's photo-like 600x400 JPEG (q90; a smooth random scene and noise of sigma 10), its noise a window
    of a field made once per process: 10x cheaper to make, as many bytes. `real`: a 600x400 window of one of
    scikit-image's photographs (`REAL`), flipped or not, its exposure changed by up to 15% (no two files alike)."""
    i, folder, content = args
    rng = np.random.default_rng(i)
    if content == "real":
        if not _REAL:
            import skimage.data

            for name in REAL:
                img = getattr(skimage.data, name)()
                _REAL.append(np.ascontiguousarray((img[0] if isinstance(img, tuple) else img)[..., 2::-1]))
        src = _REAL[i % len(_REAL)]
        y, x = rng.integers(0, src.shape[0] - 399), rng.integers(0, src.shape[1] - 599)
        img = src[y:y + 400, x:x + 600][:, ::-1 if rng.integers(0, 2) else 1]
        img = np.clip(np.round(img * rng.uniform(0.85, 1.15)), 0, 255).astype(np.uint8)
        cv2.imwrite(f"{folder}/{i:06d}.jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])
        return
    if not _NOISE:
        _NOISE.append(np.round(np.random.default_rng(os.getpid()).normal(0, 10, (800, 1200, 3))).astype(np.int16))
    base = cv2.resize(rng.integers(0, 256, (25, 37, 3), dtype=np.uint8), (600, 400), interpolation=cv2.INTER_CUBIC)
    y, x = rng.integers(0, 400), rng.integers(0, 600)
    img = np.clip(base + _NOISE[0][y:y + 400, x:x + 600], 0, 255).astype(np.uint8)
    cv2.imwrite(f"{folder}/{i:06d}.jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])

CHILD = r"""
import json, sys, threading, time
t_start = time.perf_counter()
import psutil, torch, pairload
from pairload.bench.bounds import evict
from pairload.read.shards import ShardDataset
shards, degrade, profile, mode, knobs = sys.argv[1], sys.argv[2] or None, sys.argv[3], sys.argv[4], sys.argv[5]
if knobs:  # diagnostic switches (benchmarks/diag_knobs.py)
    sys.path.insert(0, sys.argv[6])
    import diag_knobs
    diag_knobs.apply(knobs)
if mode == "cold":
    evict(ShardDataset(shards, "train").files)
imported = time.perf_counter() - t_start
dev = torch.device("cuda:0")


def cpu_seconds() -> dict:  # CPU seconds (user + system) of this process's threads by name, and of each child
    me = psutil.Process()
    names = {t.native_id: t.name for t in threading.enumerate()}
    out = {}
    for t in me.threads():
        name = names.get(t.id, "other")
        out[name] = out.get(name, 0.0) + t.user_time + t.system_time
    for c in me.children(recursive=True):
        try:
            out[f"child {c.pid}"] = sum(c.cpu_times()[:2])
        except psutil.Error:
            pass
    return out


if profile:
    import cProfile
    prof = cProfile.Profile()
    prof.enable()
ticks0 = cpu_seconds()
t0 = time.perf_counter()
loader = pairload.make_loader("ram", shards, batch_size=32, crop=256, seed=0, device=dev, degrade=degrade)
built = time.perf_counter() - t0
n, first, n_first = 0, None, 0
if mode == "warm":  # the pack in the page cache: a window of WARM_S after 100 batches
    for k, b in enumerate(loader):
        if k == 100:
            torch.cuda.synchronize(); t0 = time.perf_counter(); first = 0.0
        elif k > 100:
            n += len(b)
            if time.perf_counter() - t0 > 4.0:
                break
elif mode == "epoch2":  # the pack in the page cache: the second epoch, whole (the first warms the loader)
    for b in loader:
        pass
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    ticks0 = cpu_seconds()
    first = 0.0
    for b in loader:
        n += len(b)
else:
    for b in loader:
        n += len(b)
        if first is None:
            torch.cuda.synchronize(); first = time.perf_counter() - t0; n_first = n
torch.cuda.synchronize()
total = time.perf_counter() - t0
ticks = {k: round((v - ticks0.get(k, 0.0)) / total, 3) for k, v in cpu_seconds().items()}
me = psutil.Process()
rss_mb = {"loader": me.memory_info().rss >> 20, **{f"child {c.pid}": c.memory_info().rss >> 20 for c in me.children()}}
if profile:
    prof.disable()
    import pstats
    with open(profile, "w") as f:
        pstats.Stats(prof, stream=f).sort_stats("cumulative").print_stats(60)
print(json.dumps({"pairs_per_s": n / total, "pairs": n, "seconds": total, "path": loader.path,
                  "import_s": imported, "construct_s": built, "first_batch_s": first,
                  "after_first_pairs_per_s": (n - n_first) / max(1e-9, total - first),
                  "cpu_of_wall": ticks, "rss_mb": rss_mb}))
"""


def make(work: Path, photos: int, decoded: int, workers: int, content: str = "synthetic") -> dict[str, Path]:
    raw, sub = work / "photos", work / "photos-decoded"
    raw.mkdir(parents=True, exist_ok=True)
    if len(os.listdir(raw)) < photos:
        with ProcessPoolExecutor() as ex:
            list(ex.map(photo, [(i, str(raw), content) for i in range(photos)], chunksize=256))
    if decoded and not sub.exists():
        sub.mkdir()
        for i in range(decoded):
            os.link(raw / f"{i:06d}.jpg", sub / f"{i:06d}.jpg")
    out = {}
    for name, src, extra in (("encoded", raw, ["--store", "encoded"]), ("decoded", sub, []))[:2 if decoded else 1]:
        dest = work / name
        if not (dest / "manifest.json").exists():
            subprocess.run([sys.executable, "-m", "pairload.cli", "pack", str(src), str(dest), "--targets-only",
                            "--workers", str(workers), *extra], check=True, capture_output=True)
        out[name] = dest
    return out


def child(tree: Path, shards: Path, cores: int, profile: str = "", mode: str = "cold", knobs: str = "",
          wrap: str = "", label: str = "") -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]))
    prefix = shlex.split(wrap.format(label=label)) if wrap else []  # e.g. a sampling profiler, not held to the cores
    proc = subprocess.run([*prefix, "taskset", "-c", f"0-{cores - 1}", sys.executable, "-c", CHILD, str(shards),
                           "lowlight", profile, mode, knobs, str(Path(__file__).resolve().parent)],
                          capture_output=True, text=True, timeout=900, cwd=tree, env=env)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"error": proc.stderr[-2000:]}


def random_reads(shards: Path, photos: int, threads: list[int]) -> dict:
    """Photos/s of the pack's members read in a shuffled order (as an epoch asks for them) from a cold page cache:
    `photos` of them by T threads at once (os.pread), for each T in `threads`; and "fadvise": one thread asking the
    kernel for each (posix_fadvise WILLNEED, as the loader's reader does) while one reads them in the same order."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from pairload import willneed
    from pairload.bench.bounds import evict
    from pairload.read.shards import ShardDataset

    ds = ShardDataset(shards, "train")
    order = np.random.default_rng(0).permutation(len(ds))[:photos]
    rows = ds.stored_members(order)
    shard, start, length = (v.tolist() for v in (rows.shard, rows.offset[:, 1], rows.length[:, 1]))
    fds = [os.open(f, os.O_RDONLY) for f in ds.files]
    n = len(order)

    def part(first: int, step: int) -> None:
        for x in range(first, n, step):
            os.pread(fds[shard[x]], length[x], start[x])

    out = {}
    try:
        for t in threads:
            evict(ds.files)
            t0 = time.perf_counter()
            with ThreadPoolExecutor(t) as ex:
                list(ex.map(part, range(t), [t] * t))
            out[f"pread x{t}"] = n / (time.perf_counter() - t0)
        evict(ds.files)
        t0 = time.perf_counter()
        asker = threading.Thread(target=lambda: [willneed.file_range(fds[shard[x]], start[x], length[x])
                                                 for x in range(n)])
        asker.start()
        part(0, 1)
        asker.join()
        out["fadvise x1 + pread x1"] = n / (time.perf_counter() - t0)
    finally:
        for fd in fds:
            os.close(fd)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("out")
    ap.add_argument("--photos", type=int, default=40000)
    ap.add_argument("--decoded", type=int, default=8000, help="photos of the decoded pack (a subset; 0: "
                    "none)")
    ap.add_argument("--trees", default="new=.", help="name=folder[+knob…],… of the code trees compared (knobs: "
                    "benchmarks/diag_knobs.py)")
    ap.add_argument("--modes", default="cold,warm", help="cold (from construction), warm (a 4 s window of the first "
                    "epoch), epoch2 (the second epoch, the pack in the page cache): a comma-separated list; "
                    "make: the packs only")
    ap.add_argument("--content", choices=("synthetic", "real"), default="synthetic", help="the photos: photo-like "
                    "noise (99 KB each) or windows of real photographs (60 KB on average); WORK holds one kind")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cores", default="2", help="CPU cores a child may use, a comma-separated list: each in turn")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--random-reads", default="", help="thread counts (e.g. 1,8,32): first measure the pack's members "
                    "read in a shuffled order from a cold page cache (`random_reads`)")
    ap.add_argument("--wrap", default="", help="a command the children run under, {label} its run's name (e.g. "
                    "'py-spy record -r 200 -f raw --threads --idle -o OUT/{label}.txt --'): warm and epoch2 runs")
    args = ap.parse_args()
    import torch

    from pairload.bench.bounds import disk_bound
    from pairload.read.shards import ShardDataset

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    packs = make(Path(args.work), args.photos, args.decoded, os.cpu_count() or 1, args.content)
    if args.modes == "make":  # the packs only
        return
    trees = dict(item.split("=", 1) for item in args.trees.split(","))
    knobs = {name: folder.partition("+")[2] for name, folder in trees.items()}
    trees = {name: Path(folder.partition("+")[0]).resolve() for name, folder in trees.items()}
    modes = args.modes.split(",")
    cores = [int(c) for c in args.cores.split(",")]
    report = {"date": time.strftime("%Y-%m-%d"), "device": torch.cuda.get_device_name(0), "cores": cores,
              "photos": args.photos, "content": args.content, "made_s": time.perf_counter() - t, "rows": []}
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
    if args.random_reads:
        report["random_reads"] = random_reads(packs["encoded"], 40000, [int(t) for t in args.random_reads.split(",")])
        print(json.dumps(report["random_reads"]), flush=True)
        path.write_text(json.dumps(report, indent=1))

    def record(row: dict) -> None:
        if "pairs_per_s" in row:
            row["of_disk"] = row["pairs_per_s"] / sizes[row["pack"]]["disk_pairs_per_s"]
        report["rows"].append(row)
        print(json.dumps(row)[:500], flush=True)
        path.write_text(json.dumps(report, indent=1))

    first = next(iter(trees.values()))
    for r in range(args.rounds if "cold" in modes else 0):
        for c in cores:
            for name, tree in trees.items():
                record(dict(child(tree, packs["encoded"], c, knobs=knobs[name], wrap=args.wrap,
                                  label=f"{name}-cold-{r}-{c}"), pack="encoded", tree=name, round=r, cores=c))
            if "decoded" in packs:  # in every round too: hosts differ, and the ratio is taken within one
                record(dict(child(first, packs["decoded"], c), pack="decoded", tree=next(iter(trees)), round=r,
                            cores=c))
    if args.profile:  # after the rounds: the libraries' files cached, Triton's kernels built, as a user's second run
        record(dict(child(first, packs["encoded"], cores[0], str(out / "profile-cold.txt")), pack="encoded",
                    tree="profiled", cores=cores[0]))
    subprocess.run(["cat", *map(str, ShardDataset(packs["encoded"], "train").files)], stdout=subprocess.DEVNULL)
    for r in range(args.rounds):  # warm: the pack read into the page cache first
        for mode in (m for m in modes if m != "cold"):
            for name, tree in trees.items():
                record(dict(child(tree, packs["encoded"], cores[0], mode=mode, knobs=knobs[name], wrap=args.wrap,
                                  label=f"{name}-{mode}-{r}"), pack="encoded",
                            tree=name, mode=mode, round=r, cores=cores[0]))


if __name__ == "__main__":
    main()
