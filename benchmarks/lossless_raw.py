#!/usr/bin/env python3
"""RAW/train/{low,high}/NNNNN.png: N low-light pairs of real photographs (`lossless_probe.photos`: scikit-image's,
600x400, inputs a tenth of the light with sensor noise), for the lossless benchmarks on the GPU host
(`device_lossless.sh`, `device_lossless_ab.sh`); with HxW, 16 of them enlarged to that size with a sensor's grain
(`lossless_probe.big`), repeated, written by every core.

    python3 benchmarks/lossless_raw.py RAW N [HxW]
"""

import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import cv2

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lossless_probe import big, photos  # noqa: E402 - beside this script

_PAIRS: list = []


def _write(args) -> None:
    root, i = args
    low, high = _PAIRS[i % len(_PAIRS)]
    params = [cv2.IMWRITE_PNG_COMPRESSION, 1]
    cv2.imwrite(str(root / "train" / "low" / f"{i:05d}.png"), low[..., ::-1], params)
    cv2.imwrite(str(root / "train" / "high" / f"{i:05d}.png"), high[..., ::-1], params)


def main() -> None:
    root, n = Path(sys.argv[1]), int(sys.argv[2])
    if len(sys.argv) > 3:
        h, w = (int(v) for v in sys.argv[3].split("x"))
        _PAIRS.extend(big(photos(16), h, w))
    else:
        _PAIRS.extend(photos(64))
    for side in ("low", "high"):
        (root / "train" / side).mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(os.cpu_count() or 1) as pool:  # forked: each worker has the pairs
        list(pool.map(_write, [(root, i) for i in range(n)], chunksize=8))


if __name__ == "__main__":
    main()
