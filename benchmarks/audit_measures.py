"""What `pairload pack` adds per pair by measuring it (`pairload.audit.measures.pair_facts`: exact hashes,
fingerprints, shift, luma), against decoding the pair's two PNGs, on 600x400 photographs (scikit-image's) with a
darkened, noisy input; and how long the audit's comparison of an evaluation split against a training split takes
on random facts (the fingerprint search, the choice of candidates and their fine comparison).

    python benchmarks/audit_measures.py [--pairs 60] [--test 2000 --train 18000] [--out results/audit.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import cv2
import numpy as np


def photos(n: int) -> list[np.ndarray]:
    import skimage.data as data

    names = ("astronaut", "coffee", "chelsea", "rocket", "stereo_motorcycle", "hubble_deep_field", "camera")
    out = []
    for name in names:
        img = getattr(data, name)()
        img = img[0] if isinstance(img, tuple) else img  # stereo_motorcycle: (left, right, disparity)
        img = np.repeat(img[..., None], 3, 2) if img.ndim == 2 else img[..., :3]
        out.append(np.ascontiguousarray(cv2.resize(img, (600, 400), interpolation=cv2.INTER_AREA)))
    return [out[i % len(out)] for i in range(n)]


def best_of(f, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


def measure_cost(n: int) -> dict:
    from pairload.audit.measures import pair_facts

    rng = np.random.default_rng(0)
    highs = photos(n)
    lows = [np.clip(h * 0.1 + rng.normal(0, 2, h.shape), 0, 255).astype(np.uint8) for h in highs]
    pngs = [(cv2.imencode(".png", lo)[1], cv2.imencode(".png", hi)[1]) for lo, hi in zip(lows, highs)]
    decode = best_of(lambda: [(cv2.imdecode(a, -1), cv2.imdecode(b, -1)) for a, b in pngs]) / n
    facts = best_of(lambda: [pair_facts(lo, hi) for lo, hi in zip(lows, highs)]) / n
    return {"pairs": n, "png_pair_decode_ms": round(decode * 1e3, 3), "pair_facts_ms": round(facts * 1e3, 3),
            "added": round(facts / decode, 3)}


POOL = 64  # stored images per split of the audit's benchmark


def audit_cost(test: int, train: int) -> dict:
    from pairload.audit.run import AuditedSplit, matches
    from pairload.format.facts import FactsColumns

    class Noise:  # a split whose images are random pixels, stored (as a pack's are, in the page cache): a pool of
        # POOL images of 600x400 per split, distinct between the splits, so that no image of one is another's
        targets_only, sensor = False, None

        def __init__(self, n: int, seed: int, split: str):
            self.n, self.seed, self.split, self.keys = n, seed, split, [str(i) for i in range(n)]
            rng = np.random.default_rng(seed)
            self.pool = [rng.integers(0, 256, (400, 600, 3), dtype=np.uint8) for _ in range(POOL)]

        def __len__(self) -> int:
            return self.n

        def arrays(self, i: int):
            return self.pool[i % POOL], self.pool[(i + 1) % POOL]

    def split(n: int, seed: int, name: str) -> AuditedSplit:
        rng = np.random.default_rng(seed)
        f = FactsColumns.empty(n)
        for column in (f.low_fp, f.high_fp, f.low_exact, f.high_exact):
            column[:] = rng.integers(0, 2 ** 64, n, dtype=np.uint64, endpoint=False)
        return AuditedSplit("pack", name, Noise(n, seed, name), f, "index", name == "train")

    q, t = split(test, 1, "test"), split(train, 2, "train")
    start = time.perf_counter()
    found = matches(q, t)
    return {"test": test, "train": train, "images_compared": 2 * test * 2 * train, "cores": os.cpu_count(),
            "seconds": round(time.perf_counter() - start, 2), "matches": len(found)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=60)
    ap.add_argument("--test", type=int, default=2000)
    ap.add_argument("--train", type=int, default=18000)
    ap.add_argument("--out")
    ap.add_argument("--audit-only", action="store_true", help="leave out the measures' cost")
    args = ap.parse_args()
    doc = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
           "date": time.strftime("%Y-%m-%d"), "opencv_threads": cv2.getNumThreads(),
           "measures": None if args.audit_only else measure_cost(args.pairs),
           "audit": audit_cost(args.test, args.train)}
    print(json.dumps(doc, indent=1))
    if args.out:
        from pairload.format.atomic import write_json_atomic

        write_json_atomic(args.out, doc)


if __name__ == "__main__":
    main()
