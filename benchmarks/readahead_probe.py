"""How fast a split's members can be read from a cold disk in a shuffled epoch's order, and what asking the kernel to
read them ahead (posix_fadvise WILLNEED) gives: the bound the decode path's reading under a memory limit works
against. Each variant evicts the split, then a consumer reads the members batch by batch (32 samples, both sides,
in a random order, as a loader's epoch does) with `os.pread`, for `--seconds`, while (in the `ahead` variants) one
or more threads ask for the batches up to `--window-mb` ahead, in pieces of a given size. Reported per variant: GB/s
the consumer got, the disk's requests (reads and mean KB a request, from /proc/diskstats) and the device's queue
limits (`read_ahead_kb`, `max_sectors_kb`, whose larger bounds what one WILLNEED reads). The `direct` variants read
with O_DIRECT from several threads, the page cache bypassed (nothing to drop afterwards).

    python benchmarks/readahead_probe.py SHARDS OUT.json [--seconds 4] [--window-mb 512]
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

BATCH = 32


def queue_limits(path: str) -> dict:
    """The block device's queue settings for the file's filesystem (its disk's, for a partition)."""
    st = os.stat(path)
    base = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    out = {"dev": f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"}
    for q in (base / "queue", base.parent / "queue"):
        if q.is_dir():
            for name in ("read_ahead_kb", "max_sectors_kb", "max_hw_sectors_kb", "scheduler", "nr_requests",
                         "rotational"):
                f = q / name
                if f.exists():
                    out[name] = f.read_text().strip()
            out["queue"] = str(q.resolve())
            break
    return out


def diskstats() -> dict[str, tuple[int, int]]:
    """Per device: (reads completed, sectors read)."""
    out = {}
    for line in Path("/proc/diskstats").read_text().splitlines():
        f = line.split()
        out[f[2]] = (int(f[3]), int(f[5]))
    return out


def ranges(ds, seed: int = 0):
    """Per batch of a random order: the (shard, start, end) ranges its samples read, merged where they touch."""
    from pairload.read.ahead import merged

    order = np.random.default_rng(seed).permutation(len(ds))
    batch = np.repeat(np.arange((len(order) + BATCH - 1) // BATCH), BATCH)[:len(order)]
    shard, start, end = ds.spans(order)
    g, s, a, b = merged(shard, start, end, np.tile(batch, 2))
    cut = np.flatnonzero(np.diff(g)) + 1
    return list(zip(np.split(s, cut), np.split(a, cut), np.split(b, cut)))


def run(files, batches, seconds: float, piece: int, threads: int, window: int, readers: int,
        direct: bool = False) -> dict:
    """Consume batches with `readers` threads preading them in order; `threads` advice threads (0: none) ask for
    the batches up to `window` bytes ahead in pieces of `piece` bytes. `direct`: the readers read with O_DIRECT
    (the page cache bypassed: whole pages around each range, into page-aligned buffers)."""
    fds = [os.open(f, os.O_RDONLY | (os.O_DIRECT if direct else 0)) for f in files]
    page = mmap.PAGESIZE
    buffers = threading.local()

    def pread(fd: int, n: int, at: int) -> int:
        if not direct:
            return len(os.pread(fd, n, at))
        a, b = at // page * page, -(-(at + n) // page) * page
        if getattr(buffers, "buf", None) is None or len(buffers.buf) < b - a:
            buffers.buf = mmap.mmap(-1, max(b - a, 16 << 20))
        got = os.preadv(fd, [memoryview(buffers.buf)[:b - a]], a)
        return min(n, max(0, got - (at - a)))
    sizes = [int((b - a).sum()) for _, a, b in batches]
    lock = threading.Condition()
    state = {"next": 0, "done": 0, "stop": False, "asked": 0, "got": 0}
    deadline = time.perf_counter() + seconds

    def consume() -> None:
        while time.perf_counter() < deadline:
            with lock:
                k = state["next"]
                if k >= len(batches):
                    return
                state["next"] += 1
            s, a, b = batches[k]
            got = 0
            for sh, x, y in zip(s.tolist(), a.tolist(), b.tolist()):
                got += pread(fds[sh], y - x, x)
            with lock:
                state["got"] += got
                state["done"] = max(state["done"], k)
                lock.notify_all()

    def advise(j: int) -> None:
        k = j
        while k < len(batches):
            with lock:
                while not state["stop"] and sum(sizes[state["done"]:k]) > window:
                    lock.wait(0.01)
                if state["stop"]:
                    return
            s, a, b = batches[k]
            for sh, x, y in zip(s.tolist(), a.tolist(), b.tolist()):
                for p in range(x, y, piece):
                    os.posix_fadvise(fds[sh], p, min(piece, y - p), os.POSIX_FADV_WILLNEED)
            k += threads

    before = diskstats()
    t0 = time.perf_counter()
    workers = [threading.Thread(target=advise, args=(j,)) for j in range(threads)]
    workers += [threading.Thread(target=consume) for _ in range(readers)]
    for t in workers[threads:] + workers[:threads]:
        t.start()
    for t in workers[threads:]:
        t.join()
    dt = time.perf_counter() - t0
    with lock:
        state["stop"] = True
        lock.notify_all()
    for t in workers[:threads]:
        t.join()
    after = diskstats()
    for fd in fds:
        os.close(fd)
    busy = max(after, key=lambda d: after[d][1] - before.get(d, (0, 0))[1])
    reads = after[busy][0] - before[busy][0]
    sectors = after[busy][1] - before[busy][1]
    return {"gb_per_s": state["got"] / dt / 1e9, "bytes": state["got"], "seconds": dt, "device": busy,
            "disk_reads": reads, "kb_per_request": sectors * 512 / 1024 / max(1, reads)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("shards")
    ap.add_argument("out")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--window-mb", type=int, default=512)
    ap.add_argument("--variants", default="pread:0:0:1,pread:0:0:8,ahead:128:1:1,ahead:128:4:1,ahead:128:1:2,"
                    "direct:0:0:8,direct:0:0:16,direct:0:0:32", help="name:piece KB:advice threads:readers, ... "
                    "(name `direct`: the readers read with O_DIRECT)")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from pairload.bench.bounds import disk_bound, evict
    from pairload.read.shards import ShardDataset

    ds = ShardDataset(args.shards, "train")
    files = [str(f) for f in ds.files]
    batches = ranges(ds)
    report = {"date": time.strftime("%Y-%m-%d"), "pairs": len(ds), "split_bytes": sum(ds.shard_bytes),
              "queue": queue_limits(files[0]), "window_bytes": args.window_mb << 20,
              "disk": disk_bound(files, sum(ds.shard_bytes) // max(1, len(ds))), "rows": []}
    print(json.dumps({k: report[k] for k in ("queue", "disk")}), flush=True)
    for r in range(args.rounds):
        for v in args.variants.split(","):
            name, piece, threads, readers = v.split(":")
            evict(files)
            row = run(files, batches, args.seconds, int(piece) << 10, int(threads), args.window_mb << 20,
                      int(readers), direct=name == "direct")
            row.update(variant=v, round=r)
            report["rows"].append(row)
            print(json.dumps(row), flush=True)
    Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
