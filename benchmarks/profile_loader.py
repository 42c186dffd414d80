"""Where the loading thread's time goes per batch, for a loader kind on a CUDA device (the zero-copy and resident
paths run on one core: their rate is this thread's): cProfile over N warm batches, the top functions by their own
time and by cumulative time, and the rate without the profiler.

    python benchmarks/profile_loader.py SHARDS [--kind ram] [--batches 3000] [--resident] [--out F.txt]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

import torch

from pairload import make_loader


def batches(loader, n: int) -> int:
    got, epoch = 0, 0
    while got < n:
        loader.set_epoch(epoch)
        for _batch in loader:
            got += 1
            if got == n:
                break
        epoch += 1
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shards")
    ap.add_argument("--kind", default="ram")
    ap.add_argument("--batches", type=int, default=3000)
    ap.add_argument("--resident", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args()
    extra = {"resident": True} if args.resident else {}
    loader = make_loader(args.kind, args.shards, batch_size=32, crop=256, device="cuda", **extra)
    batches(loader, max(len(loader), 200))  # warm: registered, compiled
    torch.cuda.synchronize()
    t = time.perf_counter()
    n = batches(loader, args.batches)
    torch.cuda.synchronize()
    rate = n * 32 / (time.perf_counter() - t)
    prof = cProfile.Profile()
    prof.enable()
    batches(loader, args.batches)
    torch.cuda.synchronize()
    prof.disable()
    text = io.StringIO()
    text.write(f"{args.kind}{' resident' if args.resident else ''}: {rate:,.0f} pairs/s unprofiled, "
               f"{1e6 * 32 / rate:.0f} us per batch; path {getattr(loader, 'path', '?')}\n")
    stats = pstats.Stats(prof, stream=text)
    stats.sort_stats("tottime").print_stats(28)
    stats.sort_stats("cumulative").print_stats(28)
    loader.close()
    print(text.getvalue())
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text.getvalue())


if __name__ == "__main__":
    main()
