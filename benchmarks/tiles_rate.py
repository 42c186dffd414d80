#!/usr/bin/env python3
"""The GPU decode rate of lossless `tiles` members (`pairload.cut.memory.tiles.TileDecoder`: nvCOMP's batched zstd
and the untile kernel), images per second, for real photographs (scikit-image's, low-light inputs made from them)
at 600x400 and 3840x2160: whole images, and only the tiles a 256-pixel crop touches (what the decode path decodes
for `crop=256`); bit-exactness checked against the stored pixels. Each call decodes `--images` images, as the
decode path's AHEAD batches do.

    python benchmarks/tiles_rate.py [--images 256] [--out result.json]

Needs a CUDA GPU, Triton and nvCOMP's library (nvidia-libnvcomp-cu12/-cu13).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))

from lossless_probe import big, photos  # noqa: E402

from pairload.cut.memory.tiles import TileDecoder  # noqa: E402
from pairload.format.members import Member  # noqa: E402
from pairload.format.tiles import encode_tiles, read_tiled  # noqa: E402


def rate(decoder, members, images: int, crop: int | None, repeat: int) -> dict:
    rng = np.random.default_rng(0)
    chosen = [members[k % len(members)] for k in range(images)]
    calls = []
    decoded_pixels = 0
    for data, t in chosen:
        if crop is None:
            wanted = np.arange(len(t.modes))
        else:
            y, x = int(rng.integers(0, t.h - crop + 1)), int(rng.integers(0, t.w - crop + 1))
            wanted = t.touched(y, x, crop, crop)
        decoded_pixels += sum(t.tile_box(i)[2] * t.tile_box(i)[3] for i in wanted)
        calls.append((data, t, wanted))
    names = lambda m, what: ValueError(f"{m} {what}")  # noqa: E731
    decoder.decode(calls, names)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        decoder.decode(calls, names)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    decoder.check()
    h, w = chosen[0][1].h, chosen[0][1].w
    return {"images_per_s": round(images / best), "pairs_per_s": round(images / 2 / best),
            "decoded_pixels_per_image": round(decoded_pixels / images),
            "of_the_image": round(decoded_pixels / images / (h * w), 3)}


def exact(decoder, members) -> bool:
    calls = [(d, t, np.arange(len(t.modes))) for d, t in members[:8]]
    addresses, images, _ = decoder.decode(calls, lambda m, what: ValueError(f"{m} {what}"))
    host = images.cpu().numpy()
    ok = True
    for (data, t, _), address in zip(calls, addresses):
        start = int(address) - images.data_ptr()
        got = host[start:start + t.h * t.w * t.channels].reshape(t.h, t.w, t.channels)
        ok &= bool(np.array_equal(got, _pixels(data, t)))
    return ok


def _pixels(data, t):
    from pairload.format.tiles import decode_tiles

    return decode_tiles(data, Member(), t.h, t.w)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--out")
    args = ap.parse_args()
    decoder = TileDecoder(torch.device("cuda"))
    doc = {"device": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d"), "images_per_call": args.images}
    small = photos(18)
    for name, pairs in (("600x400", small), ("3840x2160", big(small[:6], 2160, 3840))):
        t0 = time.perf_counter()
        members = []
        raw = stored = 0
        for pair in pairs:
            for img in pair:
                data = np.frombuffer(encode_tiles(img), np.uint8)
                members.append((data, read_tiled(data, Member(), *img.shape[:2])))
                raw += img.nbytes
                stored += len(data)
        doc[name] = {"ratio": round(raw / stored, 3),
                     "cpu_encode_ms_per_image": round((time.perf_counter() - t0) / len(members) * 1e3, 1),
                     "bit_exact": exact(decoder, members),
                     "whole": rate(decoder, members, args.images, None, args.repeat),
                     "crop256": rate(decoder, members, args.images, 256, args.repeat)}
        print(json.dumps(doc, indent=1), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
