"""A cold epoch's timeline on a CUDA device: for each of 3 repeats, the split evicted from the page cache, then a new
loader of KIND (zero-copy) over it: when each batch arrives and how many bytes of the split are registered with the
device (every 10 ms), from the loader's construction. The first repeat of a process also compiles the kernel (and
builds DALI's pipeline).

    python benchmarks/cold_timeline.py SHARDS KIND OUT.json
"""

from __future__ import annotations

import gc
import json
import sys
import threading
import time
from pathlib import Path

import torch

from pairload import make_loader
from pairload.bench.bounds import evict, resident_fraction


def one_epoch(shards: str, kind: str, epoch: int, files: list[str]) -> dict:
    gc.collect()
    evict(files)
    before = resident_fraction(files)
    torch.cuda.synchronize()
    pinned: list = []
    stop = threading.Event()
    t0 = time.perf_counter()
    loader = make_loader(kind, shards, batch_size=32, crop=256, device="cuda")
    built = time.perf_counter() - t0
    memory = loader.cutter.memory

    def poll() -> None:
        while not stop.is_set():
            pinned.append((round(time.perf_counter() - t0, 4), int(getattr(memory, "pinned", 0))))
            time.sleep(0.01)

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    times = []
    loader.set_epoch(epoch)
    for _batch in loader:
        torch.cuda.synchronize()
        times.append(round(time.perf_counter() - t0, 4))
    stop.set()
    watcher.join()
    total = time.perf_counter() - t0
    loader.close()
    full = max((p for _, p in pinned), default=0)
    return {"kind": kind, "resident_before": before, "pairs_per_s": 32 * len(times) / total, "total_s": round(total, 3),
            "built": built, "first_batch_s": times[0], "batches": len(times),
            "all_pinned_at": next((t for t, p in pinned if p >= full), None), "batch_times": times,
            "pinned": pinned[::5]}


def main() -> None:
    shards, kind, out = sys.argv[1], sys.argv[2], sys.argv[3]
    files = sorted(str(p) for p in Path(shards).glob("*.tar"))
    runs = []
    for epoch in range(3):
        runs.append(one_epoch(shards, kind, epoch, files))
        print(kind, {k: v for k, v in runs[-1].items() if k not in ("batch_times", "pinned")}, flush=True)
        gc.collect()
    with open(out, "w") as f:
        json.dump(runs, f, indent=0)


if __name__ == "__main__":
    main()
