"""Clips of frames on a CUDA device: the `ram` loader's zero-copy path delivering clips of T frames (crop, batch of
clips) against the pinned host→device copy of the same bytes (the bound), and against a torch Dataset that reads
each clip's frames as the video codebases do (SDSD's and FastLLVE's loaders: one .npy file per frame and side, one
random window and flip for the clip, DataLoader workers, pinned memory), interleaved.

    python benchmarks/clip_rate.py WORK OUT.json [--frames 5] [--crop 256] [--batch 8] [--workers 8]

WORK gets a video set in SDSD's .npy layout (WORK/raw/train/{input,GT}/pairNN/NNNN.npy, 400×600 frames) and its
pack (`pairload pack WORK/raw WORK/shards --sequences`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

SEQUENCES, FRAMES, H, W = 32, 60, 400, 600


def make_set(work: Path) -> Path:
    raw = work / "raw"
    if (raw / "done").exists():
        return raw
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
    for s in range(SEQUENCES):
        for side, shift in (("input", 0), ("GT", 97)):
            folder = raw / "train" / side / f"pair{s:02d}"
            folder.mkdir(parents=True, exist_ok=True)
            for f in range(FRAMES):
                np.save(folder / f"{f:04d}.npy", np.roll(base, s * 7 + f + shift, axis=1))
    (raw / "done").touch()
    return raw


def pack(raw: Path, shards: Path) -> None:
    if (shards / "manifest.json").exists():
        return
    subprocess.run([sys.executable, "-m", "pairload.cli", "pack", str(raw), str(shards), "--sequences", "--workers",
                    "0"], check=True)


class FrameClips(torch.utils.data.Dataset):
    """What a video codebase's Dataset does: a clip's T frames read from their .npy files per side, one random window
    and one random flip for all of them, as uint8 (T, H, W, C) tensors."""

    def __init__(self, raw: Path, frames: int, crop: int, items: int):
        self.low = sorted((raw / "train" / "input").iterdir())
        self.frames, self.crop, self.items = frames, crop, items

    def __len__(self) -> int:
        return self.items

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        seq = self.low[int(rng.integers(len(self.low)))]
        start = int(rng.integers(FRAMES - self.frames + 1))
        y, x = int(rng.integers(H - self.crop + 1)), int(rng.integers(W - self.crop + 1))
        flip = bool(rng.integers(2))
        sides = []
        for folder in (seq, seq.parent.parent / "GT" / seq.name):
            clip = np.stack([np.load(folder / f"{f:04d}.npy")[y:y + self.crop, x:x + self.crop]
                             for f in range(start, start + self.frames)])
            sides.append(torch.from_numpy(np.ascontiguousarray(clip[:, :, ::-1] if flip else clip)))
        return sides[0], sides[1]


def rate(batches, seconds: float, clips_per_batch: int) -> float:
    t = time.perf_counter()
    while time.perf_counter() - t < 1.0:
        low, high = next(batches)
    torch.cuda.synchronize()
    n, t = 0, time.perf_counter()
    while time.perf_counter() - t < seconds:
        low, high = next(batches)
        n += low.shape[0]
    torch.cuda.synchronize()
    return n / (time.perf_counter() - t)


def pairload_batches(shards: Path, a):
    from pairload import make_loader

    loader = make_loader("ram", shards, batch_size=a.batch, crop=a.crop, clips=a.frames, device="cuda")
    assert loader.zero_copy, loader.path_note
    epoch = 0
    while True:
        loader.set_epoch(epoch)
        for b in loader:
            yield b.low, b.high
        epoch += 1


def pair_batches(shards: Path, a):
    """The same frames delivered as single pairs, batch_size × T of them per batch (the loader's own bound)."""
    from pairload import make_loader

    loader = make_loader("ram", shards, batch_size=a.batch * a.frames, crop=a.crop, device="cuda")
    epoch = 0
    while True:
        loader.set_epoch(epoch)
        for b in loader:
            yield b.low.unflatten(0, (a.batch, a.frames)), b.high
        epoch += 1


def dataset_batches(raw: Path, a):
    data = FrameClips(raw, a.frames, a.crop, 10**7)
    dl = torch.utils.data.DataLoader(data, batch_size=a.batch, shuffle=True, num_workers=a.workers, pin_memory=True,
                                     persistent_workers=True, prefetch_factor=4, drop_last=True)
    for low, high in dl:
        yield low.cuda(non_blocking=True), high.cuda(non_blocking=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("work", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--frames", type=int, default=5)
    p.add_argument("--crop", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--seconds", type=float, default=5.0)
    a = p.parse_args()
    raw = make_set(a.work)
    shards = a.work / "shards"
    t0 = time.perf_counter()
    pack(raw, shards)
    packed_s = time.perf_counter() - t0
    from pairload.bench.bounds import h2d_bound

    clip_bytes = 2 * a.frames * a.crop * a.crop * 3
    result = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"), "cores": os.cpu_count(),
              "frames": a.frames, "crop": a.crop, "batch": a.batch, "workers": a.workers, "clip_bytes": clip_bytes,
              "set": f"{SEQUENCES} sequences × {FRAMES} frames of {W}x{H} .npy per side", "pack_s": round(packed_s, 1),
              "runs": []}
    makers = {"pairload ram (zero-copy)": lambda: pairload_batches(shards, a),
              "pairload ram, the frames as pairs": lambda: pair_batches(shards, a),
              f"torch Dataset, {a.workers} workers": lambda: dataset_batches(raw, a)}
    gens = {name: make() for name, make in makers.items()}
    for round_ in range(3):
        bound = h2d_bound(torch.device("cuda"), clip_bytes)
        row = {"round": round_, "bound clips/s": round(bound["pairs_per_s"]), "bound GB/s": round(bound["gb_per_s"], 2)}
        for name, batches in gens.items():
            r = rate(batches, a.seconds, a.batch)
            row[name] = round(r)
            row[f"{name} / bound"] = round(r / bound["pairs_per_s"], 3)
            print(round_, name, f"{r:,.0f} clips/s", f"{r / bound['pairs_per_s']:.3f} of the bound", flush=True)
        result["runs"].append(row)
    a.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    for batches in gens.values():
        batches.close()
    os._exit(0)  # the DataLoader's persistent workers


if __name__ == "__main__":
    main()
