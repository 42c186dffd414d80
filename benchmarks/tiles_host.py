#!/usr/bin/env python3
"""The host's part of the GPU decode of lossless `tiles` members, timed on a CPU: `DecodedMemory.prepare` (each
member found, its tables read at its first use, the call's tiles planned and their bytes staged, CRC-32s checked the
first time) for calls of `--pairs` pairs (AHEAD_TILES batches of 32), each sample with one random crop window, as the
`ram` loader's decode path makes them. What a GPU machine would give is stood in for: Triton's decorator (no kernel
is launched), nvCOMP's library (never called), pinned memory (one plain buffer, reused); nothing is decoded.

    python benchmarks/tiles_host.py SHARDS [--pairs 256] [--crop 256] [--epochs 4] [--out result.json]

SHARDS: a split packed `--store encoded` (lossless tiles), e.g. benchmarks/device_lossless.sh's 1,024 PNG pairs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import types
from pathlib import Path

import numpy as np
import torch


def cpu_stand_ins() -> None:
    """Make `pairload.cut.memory.tiles` importable and its host part runnable without a GPU."""
    triton = types.ModuleType("triton")
    triton.jit = lambda fn: fn
    language = types.ModuleType("triton.language")
    language.constexpr = int
    triton.language = language
    sys.modules.setdefault("triton", triton)
    sys.modules.setdefault("triton.language", language)
    from pairload.cut.memory import nvcomp

    nvcomp.library = lambda: None
    from pairload.cut.memory import tiles

    class Unpinned(types.ModuleType):
        """torch, its pinned buffers one reused buffer: pinned memory comes from a caching allocator, whose blocks
        are mapped once (a fresh buffer per call would fault every page it is written to, at a sixth of a copy's
        speed)."""

        kept = torch.empty(0, dtype=torch.uint8)

        def __getattr__(self, name):
            return getattr(torch, name)

        def empty(self, n, *, pin_memory: bool = False, **kwargs):
            if not pin_memory:
                return torch.empty(n, **kwargs)
            if self.kept.numel() < n:
                self.kept = torch.ones(n, dtype=torch.uint8)
            return self.kept[:n]

    tiles.torch = Unpinned("torch")


def calls(ds, pairs: int, crop: int, epochs: int, seed: int = 0):
    """(epoch, sorted samples, their windows) of each call, a permutation an epoch."""
    rng = np.random.default_rng(seed)
    sizes = np.asarray(ds.sizes, dtype=np.int64)
    for epoch in range(epochs):
        order = rng.permutation(len(sizes))
        for at in range(0, len(order) - pairs + 1, pairs):
            samples = np.sort(order[at:at + pairs])
            h, w = sizes[samples, 0], sizes[samples, 1]
            y = (rng.random(len(samples)) * (h - crop + 1)).astype(np.int64)
            x = (rng.random(len(samples)) * (w - crop + 1)).astype(np.int64)
            yield epoch, samples, np.stack([y, x, y + crop, x + crop], axis=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shards")
    ap.add_argument("--pairs", type=int, default=256)
    ap.add_argument("--crop", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--profile", action="store_true", help="print cProfile's top functions of the last epochs")
    ap.add_argument("--out")
    args = ap.parse_args()
    cpu_stand_ins()
    from pairload import open_shards
    from pairload.cut.memory.decoded import DecodedMemory

    ds = open_shards(args.shards)
    memory = DecodedMemory(ds, torch.device("cpu"))
    for number in range(len(ds.files)):  # the page cache's pages mapped once, as a long run has them
        int(ds.shard_map(number)[::4096].sum())
    per_epoch: dict[int, list[float]] = {}
    staged = []
    profile = None
    for epoch, samples, windows in calls(ds, args.pairs, args.crop, args.epochs):
        if args.profile and epoch == 1 and profile is None:
            import cProfile

            profile = cProfile.Profile()
            profile.enable()
        t0 = time.perf_counter()
        out = memory.prepare(samples, windows)
        per_epoch.setdefault(epoch, []).append(time.perf_counter() - t0)
        staged.append(out.staged.host.numel())
    if profile is not None:
        import pstats

        profile.disable()
        pstats.Stats(profile).sort_stats("cumulative").print_stats(18)
    doc = {"what": "DecodedMemory.prepare per call, CPU stand-ins for the GPU's parts",
           "date": time.strftime("%Y-%m-%d"), "cpu_count": os.cpu_count(), "shards": str(Path(args.shards)),
           "samples": len(ds.sizes), "pairs_per_call": args.pairs, "crop": args.crop,
           "staged_mb_per_call": round(float(np.mean(staged)) / 1e6, 1),
           "ms_per_call": {f"epoch {e}": {"median": round(float(np.median(t)) * 1e3, 2),
                                          "min": round(float(np.min(t)) * 1e3, 2), "calls": len(t)}
                           for e, t in per_epoch.items()}}
    print(json.dumps(doc, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1))
    memory.close()


if __name__ == "__main__":
    main()
