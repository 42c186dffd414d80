#!/usr/bin/env python3
"""Whether a disk gives over tens of seconds what it gives in a few: files of random bytes written to FOLDER, then
read cold (each piece dropped from the page cache once read) in phases, each reported second by second (GB/s):
4 sequential streams, 16 threads reading random 368 KB pieces (a 600x400 tiled member), then the 4 streams again.
`bench.bounds.disk_bound` reads for 3 s; a disk that spends a budget (a cloud volume's burst credits) reads less after.

    python benchmarks/disk_sustained.py /tmp/disk-probe OUT.json [--gb 8] [--seconds 25]
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path

import numpy as np

PIECE = 8 << 20  # a sequential stream's read
MEMBER = 368 << 10  # a random read: a 600x400 tiled member


def write(folder: Path, gb: float, files: int = 4) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    out = []
    for f in range(files):
        path = folder / f"probe-{f}.bin"
        with open(path, "wb") as fh:
            for _ in range(int(gb * 1024 / files / 64)):
                fh.write(rng.integers(0, 256, 64 << 20, dtype=np.uint8).tobytes())
            fh.flush()
            os.fsync(fh.fileno())
        out.append(path)
    return out


def phase(files: list[Path], seconds: float, threads: int, random: bool) -> list[float]:
    """GB read each second by `threads` threads for `seconds`, each piece dropped from the page cache once read."""
    sizes = [p.stat().st_size for p in files]
    fds = [os.open(p, os.O_RDONLY) for p in files]
    for fd in fds:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    buckets = np.zeros(int(seconds) + 2)
    t0 = time.perf_counter()
    lock = threading.Lock()

    def run(k: int) -> None:
        rng = np.random.default_rng(k)
        f, at = k % len(fds), 0
        while time.perf_counter() - t0 < seconds:
            size = MEMBER if random else PIECE
            if random:
                f = int(rng.integers(len(fds)))
                at = int(rng.integers(0, sizes[f] - size)) // 4096 * 4096
            elif at + size > sizes[f]:
                f, at = (f + 1) % len(fds), 0
            got = len(os.pread(fds[f], size, at))
            os.posix_fadvise(fds[f], at, size, os.POSIX_FADV_DONTNEED)
            at += size
            with lock:
                buckets[int(time.perf_counter() - t0)] += got

    workers = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for fd in fds:
        os.close(fd)
    return [round(float(b) / 1e9, 3) for b in buckets[:int(seconds)]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--gb", type=float, default=8.0)
    ap.add_argument("--seconds", type=float, default=25.0)
    args = ap.parse_args()
    t0 = time.perf_counter()
    files = write(args.folder, args.gb)
    report = {"date": time.strftime("%Y-%m-%d"), "gb": args.gb, "written_s": round(time.perf_counter() - t0, 1)}
    for name, threads, random in (("sequential, 4 streams", 4, False), ("random 368 KB, 16 threads", 16, True),
                                  ("sequential again, 4 streams", 4, False)):
        report[name] = per_second = phase(files, args.seconds, threads, random)
        print(f"{name}: mean {np.mean(per_second):.2f} GB/s, first 3 s {np.mean(per_second[:3]):.2f}, last 10 s "
              f"{np.mean(per_second[-10:]):.2f}; per second {per_second}", flush=True)
    args.out.write_text(json.dumps(report, indent=1))
    for p in files:
        p.unlink()


if __name__ == "__main__":
    main()
