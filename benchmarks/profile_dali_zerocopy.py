"""Where dali-external's zero-copy time goes, per batch (GPU machine with DALI):

    python benchmarks/profile_dali_zerocopy.py SHARDS OUT.json [--epochs 30] [--repeats 3] [--prefetch 4] [--profile]

`ram` and `dali-external` (zero-copy) in turn, over whole epochs after one warm-up epoch. Per dali-external batch:
the wall time of each stage the loader reports through its timing hooks (`loader.hooks`: build, feed — the cut and
the hand-over to external_source, inside schedule_run —, schedule_run, outputs, convert, drain), the first batch of
each epoch separately, and the CPU share of the busiest threads. `--profile`: one run under cProfile instead.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import time


def thread_cpu() -> dict:
    """CPU seconds (user + system) of each thread of this process so far, by thread id: (name, seconds)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                parts = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        out[tid] = (name, (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK"))
    return out


def variant(shards: str, name: str, epochs: int, prefetch: int, profile: bool = False) -> dict:
    import torch

    from pairload import make_loader
    from pairload.hooks import StageTotals

    loader = make_loader("dali-external", shards, batch_size=32, crop=256, device="cuda", num_workers=15,
                         **({"prefetch": prefetch} if prefetch != 4 else {}))
    assert loader.zero_copy, loader.path_note
    firsts, rest, n = [], [], 0
    prof = cProfile.Profile() if profile else None
    totals, remove = None, None
    for epoch in range(epochs + 1):
        if epoch == 1:  # the warm-up epoch (and the pipeline's build) is left out
            torch.cuda.synchronize()
            totals = StageTotals()
            remove = loader.hooks.add(totals)
            cpu0 = thread_cpu()
            t_start = time.perf_counter()
            if prof:
                prof.enable()
        loader.set_epoch(epoch)
        t = time.perf_counter()
        for b, batch in enumerate(loader):
            now = time.perf_counter()
            if epoch:
                (firsts if b == 0 else rest).append(now - t)
                n += batch.low.shape[0]
            t = now
    torch.cuda.synchronize()
    total = time.perf_counter() - t_start
    cpu1 = thread_cpu()
    busy = sorted(((cpu1[t][1] - cpu0.get(t, (0, 0))[1]) / total, cpu1[t][0]) for t in cpu1)[::-1][:8]
    if prof:
        prof.disable()
    remove()
    loader.close()
    nb = len(firsts) + len(rest)
    row = {"variant": name, "prefetch": prefetch, "pairs_per_s": round(n / total),
           "us_per_batch": round(total / nb * 1e6), "first_batch_of_epoch_us": round(sum(firsts) / len(firsts) * 1e6),
           "other_batches_us": round(sum(rest) / len(rest) * 1e6),
           "per_batch_us": {k: round(v / nb * 1e6) for k, v in sorted(totals.seconds.items())},
           "calls_per_batch": {k: round(v / nb, 3) for k, v in sorted(totals.calls.items())},
           "busiest_threads_cores": [(t, round(c, 2)) for c, t in busy]}
    if prof:
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(40)
        pstats.Stats(prof, stream=s).sort_stats("cumtime").print_stats(45)
        row["profile"] = s.getvalue().splitlines()
    print(json.dumps({k: v for k, v in row.items() if k != "profile"}), flush=True)
    return row


def ram(shards: str, epochs: int) -> dict:
    import torch

    from pairload import make_loader

    loader = make_loader("ram", shards, batch_size=32, crop=256, device="cuda", num_workers=8)
    n = 0
    for epoch in range(epochs + 1):
        if epoch == 1:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        loader.set_epoch(epoch)
        for batch in loader:
            n += batch.low.shape[0] if epoch else 0
    torch.cuda.synchronize()
    row = {"variant": "ram zero-copy", "pairs_per_s": round(n / (time.perf_counter() - t0))}
    loader.close()
    print(json.dumps(row), flush=True)
    return row


def parse(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shards", help="a shard folder (pairload pack)")
    ap.add_argument("out", help="the JSON file of results")
    ap.add_argument("--epochs", type=int, default=30, help="measured epochs per dali-external run")
    ap.add_argument("--repeats", type=int, default=3, help="ram / dali-external pairs, interleaved")
    ap.add_argument("--prefetch", type=int, default=4, help="dali-external's prefetch")
    ap.add_argument("--profile", action="store_true", help="one dali-external run under cProfile instead")
    return ap.parse_args(argv)


def main(argv=None) -> None:
    a = parse(argv)
    import torch

    from pairload.format.atomic import write_json_atomic

    rows = []
    if a.profile:
        row = variant(a.shards, "dali-external under cProfile", epochs=min(a.epochs, 20), prefetch=a.prefetch,
                      profile=True)
        print("\n".join(row["profile"]))
        rows.append(row)
    else:
        for rep in range(a.repeats):
            rows.append(ram(a.shards, epochs=8))
            rows.append(variant(a.shards, f"dali-external #{rep}", epochs=a.epochs, prefetch=a.prefetch))
    write_json_atomic(a.out, {"device": torch.cuda.get_device_name(0), "rows": rows})


if __name__ == "__main__":
    main()
