"""Loaders under a memory limit smaller than their split (a cgroup `memory.max`, as SLURM's `--mem` or a container
sets it), on the GPU host: each loader runs whole epochs (`--epochs`, one by default) from a cold page cache in a
child process placed in a new cgroup before it starts Python; the row says whether it finished, the first epoch's
pairs/s against the disk's, its first batch, its rate after the first batch (`steady_pairs_per_s`: the workers'
start-up left out), every epoch's own pairs/s (a split bigger than the limit is read from disk in each; `epochs`:
each one's first batch, its pairs/s in each quarter after it, the disk's GB/s over it, the loader's seconds in each
timed stage (`loader.hooks`), the CPU seconds (user, system) of the loading process's threads by name
(`thread_cpu_s`) and the cgroup's memory.stat: bytes at its end, refaults and major faults during it), its cut path
and warnings, the bytes the disk read meanwhile (`read_bytes`: above the split's size times the epochs, pages were
read twice) and the cgroup's peak. A child that delivers nothing for STALL_S is stopped and reported as stalled. A
tree may carry `diag_knobs.py` switches: `.@nobg` is this checkout with its decode calls in the loading thread.

    python benchmarks/memory_limit.py SHARDS OUT.json --limit-gb 2 --loaders ram,wds
        [--trees .,.devwheels/prev,.@nobg] [--epochs 2] [--degrade lowlight]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

STALL_S = 60.0

CHILD = r"""
import json, os, sys, time, warnings
t0 = time.perf_counter()
import torch, pairload
sys.path.insert(0, os.environ["DIAG_BENCH"])
from memory_limit import disk_read_bytes
if os.environ.get("DIAG_KNOBS"):
    import diag_knobs
    diag_knobs.apply(os.environ["DIAG_KNOBS"])
shards, kind, stall, epochs, degrade = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[5]), sys.argv[6]
dev = torch.device(sys.argv[4])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    loader = pairload.make_loader(kind, shards, batch_size=32, crop=256, num_workers=2, device=dev,
                                  degrade=degrade or None)
built = time.perf_counter() - t0
n, first, last = 0, None, time.perf_counter()
import threading, os
def watchdog():
    while True:
        time.sleep(1.0)
        if time.perf_counter() - last > stall:
            print(json.dumps({"status": "stalled", "pairs": n, "built_s": built, "path": loader.path}), flush=True)
            os._exit(3)
threading.Thread(target=watchdog, daemon=True).start()
first_shard = str(loader.ds.files[0])
t1 = time.perf_counter()
per_epoch, detail = [], []
from pairload.hooks import StageTotals
from pairload.hostmemory import host_memory
limited = host_memory().limit  # this process's cgroup folder, as the loaders find it
def cgroup_stat():
    if not limited:
        return {}
    return {k: int(v) for k, v in (row.split() for row in open(os.path.join(limited, "memory.stat")))}
def thread_cpu():
    # CPU seconds (user, system) of this process's threads, summed per name ("pairload-stage_2": "pairload-stage")
    out, tick = {}, os.sysconf("SC_CLK_TCK")
    for t in threading.enumerate():
        try:
            f = open(f"/proc/self/task/{t.native_id}/stat").read().rsplit(")", 1)[1].split()
        except (OSError, TypeError):
            continue
        name = "main" if t is threading.main_thread() else t.name.split("_")[0]
        u, k = out.get(name, (0.0, 0.0))
        out[name] = (u + int(f[11]) / tick, k + int(f[12]) / tick)
    return out
for epoch in range(epochs):
    loader.set_epoch(epoch)
    c0 = thread_cpu()
    totals = StageTotals()
    remove = loader.hooks.add(totals)
    e0, m, s0, times, st0 = time.perf_counter(), 0, disk_read_bytes(first_shard), [], cgroup_stat()
    for batch in loader:
        if dev.type == "cuda":
            torch.cuda.synchronize()
        n += len(batch)
        m += len(batch)
        last = time.perf_counter()
        times.append((last, len(batch)))
        if first is None:
            first = last - t0
            first_n = len(batch)
    e1 = time.perf_counter()
    remove()
    per_epoch.append(m / (e1 - e0))
    st1 = cgroup_stat()
    q = [e0 + (times[0][0] - e0) + k * (e1 - times[0][0]) / 4 for k in range(5)]
    detail.append({"first_batch_s": times[0][0] - e0,  # and the epoch's rate after its first batch (the loader's
                   # start, in the first epoch: a fixed cost that a split of a few seconds an epoch weighs heavily)
                   "after_first_batch_pairs_per_s": (m - times[0][1]) / max(1e-9, e1 - times[0][0]),
                   "quarters_pairs_per_s": [
        sum(c for t, c in times[1:] if q[k] < t <= q[k + 1]) / (q[k + 1] - q[k]) for k in range(4)],
        "disk_gb_per_s": None if s0 is None else (disk_read_bytes(first_shard) - s0) / (e1 - e0) / 1e9,
        "stage_s": {k: round(v, 3) for k, v in totals.seconds.items()},
        "thread_cpu_s": {k: [round(u - c0.get(k, (0, 0))[0], 2), round(v - c0.get(k, (0, 0))[1], 2)]
                         for k, (u, v) in thread_cpu().items()},
        "cgroup": {k: st1[k] - st0.get(k, 0) if k.startswith(("workingset", "pg")) else st1[k] for k in (
            "anon", "file", "shmem", "file_mapped", "workingset_refault_file", "pgmajfault",
            "rss", "cache", "mapped_file", "workingset_refault") if k in st1}})
    if epoch == 0:
        dt, n1 = time.perf_counter() - t1, n
after = n1 - first_n
print(json.dumps({"status": "ok", "pairs": n, "pairs_per_s": n1 / dt, "built_s": built, "first_batch_s": first,
                  "steady_pairs_per_s": after / max(1e-9, t1 + dt - t0 - first), "epochs_pairs_per_s": per_epoch,
                  "epochs": detail,
                  "path": loader.path, "warnings": [str(w.message)[:300] for w in caught]}), flush=True)
"""


def cgroup(name: str, limit: int) -> tuple[Path, str]:
    """A new cgroup limited to `limit` bytes: (folder, the file holding its peak)."""
    v2 = Path("/sys/fs/cgroup")
    if (v2 / "cgroup.controllers").exists() and "memory" in (v2 / "cgroup.controllers").read_text():
        try:
            (v2 / "cgroup.subtree_control").write_text("+memory")
        except OSError:
            pass
        folder = v2 / name
        folder.mkdir(exist_ok=True)
        (folder / "memory.max").write_text(str(limit))
        (folder / "memory.swap.max").write_text("0") if (folder / "memory.swap.max").exists() else None
        return folder, "memory.peak"
    folder = Path("/sys/fs/cgroup/memory") / name
    folder.mkdir(exist_ok=True)
    (folder / "memory.limit_in_bytes").write_text(str(limit))
    return folder, "memory.max_usage_in_bytes"


def disk_read_bytes(path: str) -> int | None:
    """Bytes read so far from the block device holding `path` (its /sys/dev/block stat; None where unknown)."""
    st = os.stat(path)
    try:
        fields = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/stat").read_text().split()
    except OSError:
        return None
    return int(fields[2]) * 512


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("shards")
    ap.add_argument("out")
    ap.add_argument("--limit-gb", type=float, required=True)
    ap.add_argument("--loaders", default="ram,wds")
    ap.add_argument("--trees", default=".")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--epochs", type=int, default=1, help="epochs each loader reads (each row: the first epoch's "
                    "rates from construction, and every epoch's own pairs/s; a split bigger than the limit is read "
                    "from disk in every epoch)")
    ap.add_argument("--degrade", default="", help="the loaders' degrade= (a targets-only pack needs one)")
    ap.add_argument("--bound-seconds", type=float, default=3.0,
                    help="how long each read of the disk's bound lasts (at most the split read once: a disk that "
                         "spends a budget gives less over a whole epoch than in its first seconds)")
    ap.add_argument("--adjacent", action="store_true", help="measure the disk's bound again before each row and "
                    "after the last (`disk_before`, `disk_after`; `epochs_of_adjacent`: each epoch against the mean "
                    "of the bounds on either side of its row, `after_first_batch_of_adjacent` each epoch after its "
                    "first batch): a virtual disk's bound drifts over a call")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from pairload.bench.bounds import disk_bound, evict
    from pairload.read.shards import ShardDataset

    ds = ShardDataset(args.shards, "train")
    files = [str(f) for f in ds.files]
    evict(files)
    pair_bytes = sum(ds.shard_bytes) // max(1, len(ds))
    # once, before the rows (--adjacent: also the first row's bound before it)
    disk = disk_bound(files, pair_bytes, args.bound_seconds)
    split_bytes = sum(os.path.getsize(f) for f in files)
    report = {"date": time.strftime("%Y-%m-%d"), "split_bytes": split_bytes, "limit_bytes": int(args.limit_gb * 2**30),
              "pairs": len(ds), "disk": disk, "rows": []}
    try:
        import torch

        report["device"] = torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001
        report["device"] = "?"
    for tree_knobs in args.trees.split(","):
        tree, _, knobs = tree_knobs.partition("@")
        for kind in args.loaders.split(","):
            if args.adjacent:
                if report["rows"]:
                    report["rows"][-1]["disk_after"] = before = disk_bound(files, pair_bytes, args.bound_seconds)
                else:
                    before = disk
            evict(files)
            folder, peak_file = cgroup(f"pairload-{kind}-{int(time.time())}", report["limit_bytes"])
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(tree).resolve()), "/tmp/site"]),
                       DIAG_KNOBS=knobs, DIAG_BENCH=str(Path(__file__).resolve().parent))
            cmd = ["sh", "-c", f'echo $$ > {folder}/cgroup.procs && exec "$0" -P -c "$1" "$2" "$3" "$4" "$5" "$6" "$7"',
                   sys.executable, CHILD, args.shards, kind, str(STALL_S), args.device, str(args.epochs),
                   args.degrade]
            t0 = time.perf_counter()
            read0 = disk_read_bytes(files[0])
            # from the tree: its workers (`python -m pairload.workers`) import the pairload of their working folder
            proc = subprocess.run(cmd, env=env, cwd=Path(tree).resolve(), capture_output=True, text=True, timeout=1800)
            wall = time.perf_counter() - t0
            read1 = disk_read_bytes(files[0])
            try:
                row = json.loads(proc.stdout.strip().splitlines()[-1])
            except (IndexError, ValueError):
                row = {"status": f"failed (rc {proc.returncode})", "stderr": proc.stderr[-800:]}
            row.update(tree=tree, knobs=knobs, loader=kind, wall_s=wall, rc=proc.returncode,
                       read_bytes=None if read0 is None or read1 is None else read1 - read0,
                       peak_bytes=int((folder / peak_file).read_text()) if (folder / peak_file).exists() else None)
            if row.get("pairs_per_s"):
                row["of_disk"] = row["pairs_per_s"] / disk["pairs_per_s"]
                row["steady_of_disk"] = row["steady_pairs_per_s"] / disk["pairs_per_s"]
                row["epochs_of_disk"] = [r / disk["pairs_per_s"] for r in row.get("epochs_pairs_per_s", [])]
            if args.adjacent:
                row["disk_before"] = before
            report["rows"].append(row)
            print(json.dumps(row)[:600], flush=True)
            try:
                folder.rmdir()
            except OSError:
                pass
    if args.adjacent and report["rows"]:
        report["rows"][-1]["disk_after"] = disk_bound(files, pair_bytes, args.bound_seconds)
    for row in report["rows"] if args.adjacent else ():
        bound = (row["disk_before"]["pairs_per_s"] + row["disk_after"]["pairs_per_s"]) / 2
        row["epochs_of_adjacent"] = [r / bound for r in row.get("epochs_pairs_per_s", [])]
        row["after_first_batch_of_adjacent"] = [e["after_first_batch_pairs_per_s"] / bound
                                                for e in row.get("epochs", [])]
    Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
