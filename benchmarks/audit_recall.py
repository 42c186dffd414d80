#!/usr/bin/env python3
"""How often the audit finds one scene changed as datasets change it (recall), and takes distinct scenes for one
(false pairs), on real photographs (scikit-image's, via tests/audit/audit_photos.py): each 200x300 tile with detail
against its changed copy (a match: fingerprints within `RADIUS` bits and a likeness of `MIN_SIMILARITY` or more),
and every pair of distinct tiles of `--side` pixels. `--scale 1.5 --side 256` measures images from 256 pixels a side,
which the measures bring down by 4 at once (`measures._down`).

    python benchmarks/audit_recall.py [--seeds 3] [--side 64] [--scale 1.0] [--out result.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "audit"))

from audit_photos import darken, jpeg, resized, tiles  # noqa: E402

from pairload.audit.measures import hamming, perceptual_hash  # noqa: E402
from pairload.audit.run import MIN_SIMILARITY, RADIUS  # noqa: E402
from pairload.audit.search import near_pairs  # noqa: E402
from pairload.audit.similar import look, similarity  # noqa: E402


def random_crop(img: np.ndarray, rng, most: float = 0.05) -> np.ndarray:
    h, w = img.shape[:2]
    t, b, lf, r = (int(rng.uniform(0, most) * n) for n in (h, h, w, w))
    return np.ascontiguousarray(img[t:h - b, lf:w - r])


CHANGES = {
    "cropped up to 5% a side": lambda img, rng: random_crop(img, rng),
    "darkened, cropped, resized, JPEG": lambda img, rng: jpeg(resized(darken(random_crop(img, rng, 0.03),
                                                                            int(rng.integers(1 << 30))), 0.6)),
}


def found(a: np.ndarray, b: np.ndarray) -> bool:
    return int(hamming(perceptual_hash(a), perceptual_hash(b))) <= RADIUS and similarity(look(a), look(b)) >= \
        MIN_SIMILARITY


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--side", type=int, default=64)
    ap.add_argument("--scale", type=float, default=1.0, help="the 200x300 tiles enlarged by this factor (bicubic)")
    ap.add_argument("--out")
    args = ap.parse_args()
    scenes = [s if args.scale == 1 else cv2.resize(s, None, fx=args.scale, fy=args.scale, interpolation=cv2.INTER_CUBIC)
              for s in tiles(200, 300)]
    scenes = [s for s in scenes if look(s) is not None]
    doc = {"date": time.strftime("%Y-%m-%d"), "scenes": len(scenes), "size": list(scenes[0].shape[:2]), "recall": {}}
    for name, change in CHANGES.items():
        hits = [found(s, change(s, np.random.default_rng([seed, k]))) for seed in range(args.seeds)
                for k, s in enumerate(scenes)]
        doc["recall"][name] = round(float(np.mean(hits)), 4)
    small = tiles(args.side, args.side)
    fps = np.array([perceptual_hash(s) for s in small], dtype=np.uint64)
    near = near_pairs(fps, None, RADIUS)
    looks = [look(s) for s in small]
    alike = [similarity(looks[i], looks[j]) for i, j in zip(near.i, near.j)]
    doc["distinct"] = {"side": args.side, "scenes": len(small), "pairs": len(small) * (len(small) - 1) // 2,
                       "false": int(sum(a >= MIN_SIMILARITY for a in alike)),
                       "most_alike": round(float(max(alike, default=0.0)), 3)}
    print(json.dumps(doc, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
