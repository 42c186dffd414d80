#!/usr/bin/env python3
"""RAW/train/{low,high}/NNNNN.png: N low-light pairs of real photographs (`lossless_probe.photos`: scikit-image's,
600x400, inputs a tenth of the light with sensor noise), for the lossless benchmarks on the GPU host
(`device_lossless.sh`, `device_lossless_ab.sh`).

    python3 benchmarks/lossless_raw.py RAW N
"""

import sys
from pathlib import Path

import cv2

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lossless_probe import photos  # noqa: E402 - beside this script

root, n = Path(sys.argv[1]), int(sys.argv[2])
distinct = photos(64)
for side in ("low", "high"):
    (root / "train" / side).mkdir(parents=True, exist_ok=True)
for i in range(n):
    low, high = distinct[i % len(distinct)]
    cv2.imwrite(str(root / "train" / "low" / f"{i:05d}.png"), low[..., ::-1])
    cv2.imwrite(str(root / "train" / "high" / f"{i:05d}.png"), high[..., ::-1])
