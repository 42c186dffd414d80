#!/usr/bin/env python3
"""What measuring every pair (`pairload.audit.measures.pair_facts`: hashes, fingerprints, shift, brightness) adds to
`pairload pack`'s time (#58; budget: 10 % on 600x400 pairs). Makes low-light pairs of real photographs
(scikit-image's, 600x400, the input darkened 7-20x with noise), then packs them with the measures and without them
(the workers' `scan_pair` and `facts_of`, or an older pairload's `pair_facts`, replaced by constants in the packing
process and its forked workers), alternately, each pack in a fresh process, and reports the fastest of each and the
overhead; the measures' CPU seconds timed inside the workers of each pack against that pack's other CPU seconds
(`in_pack_overhead`: the same ratio, free of the drift between packs on a shared machine); plus `pair_facts` alone on
one pair, in one thread. `--with-only`: only the packs with the measures. To compare two trees, run each with
`PYTHONSAFEPATH=1 PYTHONPATH=<tree>` (else `python -c` finds the current folder's pairload first).

    python benchmarks/bench_pack_measures.py --pairs 300 --workers 2 --repeat 3 [--ext .jpg] [--out x.json]

Needs scikit-image; no GPU. Run it on an idle machine: the packs are a few seconds each.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ONE_PACK = """
import json, resource, sys, time
import pairload.pack.jobs as jobs
from pairload.audit.measures import PairFacts
import multiprocessing
in_facts = multiprocessing.Value("d", 0.0)  # CPU seconds the forked workers spent measuring (shared memory)
# the measures: a pass over each pair's pixels as it is decoded, then a task's pairs together (an older pairload:
# pair_facts of each pair)
names = ("scan_pair", "facts_of") if hasattr(jobs, "scan_pair") else ("pair_facts",)
if sys.argv[1] == "without":
    none = PairFacts(0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.5)
    if len(names) == 2:
        from pairload.audit.measures import Scan
        jobs.scan_pair = lambda low, high, **crcs: Scan((0, 0), (), None, 0, (), (0.0, 0.0, 0.0, 0.5, 0.0))
        jobs.facts_of = lambda scans: [none] * len(scans)
    else:
        jobs.pair_facts = lambda low, high: none
else:
    def timed(measured):
        def run(*args, **kwargs):
            t = time.thread_time()
            try:
                return measured(*args, **kwargs)
            finally:
                with in_facts.get_lock():
                    in_facts.value += time.thread_time() - t
        return run

    for name in names:
        setattr(jobs, name, timed(getattr(jobs, name)))
from pairload.pack import PackOptions, pack
t0 = time.perf_counter()
pack(sys.argv[2], sys.argv[3], PackOptions(workers=int(sys.argv[4])))
used = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
print(json.dumps([time.perf_counter() - t0, sum(u.ru_utime + u.ru_stime for u in used), in_facts.value]))
"""


def make_pairs(root: Path, n: int, ext: str) -> None:
    import cv2
    import numpy as np
    from skimage import data

    photos = [getattr(data, k)() for k in ("astronaut", "coffee", "chelsea", "rocket", "cat", "immunohistochemistry")]
    rng = np.random.default_rng(0)
    for i in range(n):
        p = photos[i % len(photos)][..., :3]
        s = 1.0 + 0.4 * rng.random()
        big = cv2.resize(p, (int(640 * s) + 20, int(440 * s) + 20), interpolation=cv2.INTER_AREA)
        y, x = rng.integers(0, big.shape[0] - 400), rng.integers(0, big.shape[1] - 600)
        high = np.ascontiguousarray(big[y:y + 400, x:x + 600])
        low = np.clip(high * (0.05 + 0.1 * rng.random()) + rng.normal(0, 4, high.shape), 0, 255).astype(np.uint8)
        for side, img in (("low", low), ("high", high)):
            (root / side).mkdir(parents=True, exist_ok=True)
            cv2.imwrite(str(root / side / f"{i:05d}{ext}"), img[..., ::-1])


def one_pair_ms(root: Path, ext: str, repeat: int = 200) -> float:
    """`pair_facts` of the first pair, in one OpenCV thread: milliseconds per call."""
    import cv2

    from pairload.audit.measures import pair_facts

    cv2.setNumThreads(1)
    low = cv2.imread(str(root / "low" / f"00000{ext}"))[..., ::-1].copy()
    high = cv2.imread(str(root / "high" / f"00000{ext}"))[..., ::-1].copy()
    pair_facts(low, high)
    t0 = time.perf_counter()
    for _ in range(repeat):
        pair_facts(low, high)
    return (time.perf_counter() - t0) / repeat * 1e3


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=300)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--repeat", type=int, default=3, help="packs of each kind, alternating (the fastest counts)")
    ap.add_argument("--ext", default=".png", help=".png (LOL's) or .jpg")
    ap.add_argument("--with-only", action="store_true",
                    help="only packs with the measures (their in-pack share; no comparison of packs without them)")
    ap.add_argument("--work", type=Path, help="folder for the pairs, kept for the next run (default: a temporary one)")
    ap.add_argument("--out", type=Path, help="write the JSON report here too")
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-measures-"))
    raw = work / f"raw{args.ext}"
    if not raw.is_dir():
        make_pairs(raw, args.pairs, args.ext)
    seconds: dict[str, list[float]] = {"without": [], "with": []}
    cpu: dict[str, list[float]] = {"without": [], "with": []}
    share: list[float] = []  # per pack with the measures: their CPU seconds over the rest of its CPU seconds
    for _ in range(args.repeat):
        for mode in ["with"] if args.with_only else seconds:
            res = subprocess.run([sys.executable, "-c", ONE_PACK, mode, str(raw), str(work / f"shards{args.ext}"),
                                  str(args.workers)], capture_output=True, text=True)
            if res.returncode:
                sys.exit(f"the pack failed: {res.stderr.strip().splitlines()[-1]}")
            wall, used, facts = json.loads(res.stdout.strip().splitlines()[-1])
            seconds[mode].append(wall)
            cpu[mode].append(used)
            if mode == "with":
                share.append(facts / (used - facts))
            print(mode, f"{wall:.2f} s, {used:.2f} CPU s", file=sys.stderr, flush=True)
    best = {mode: min(v) for mode, v in seconds.items() if v}
    report = {"pairs": args.pairs, "size": "600x400", "ext": args.ext, "workers": args.workers,
              "cpu_count": os.cpu_count(), "date": time.strftime("%Y-%m-%d"), "seconds": seconds, "best": best,
              "overhead": round(best["with"] / best["without"] - 1, 4) if "without" in best else None,
              # CPU seconds of the packing process and its workers (less disturbed by other jobs than the wall)
              "cpu_seconds": cpu,
              "cpu_overhead": round(min(cpu["with"]) / min(cpu["without"]) - 1, 4) if cpu["without"] else None,
              # the measures' own CPU seconds, timed inside the workers of each pack, over that pack's other CPU
              # seconds: what they add, free of the drift between packs that the comparison above suffers from
              "in_pack_overhead": [round(v, 4) for v in share],
              "pair_facts_ms_one_thread": round(one_pair_ms(raw, args.ext), 3)}
    print(json.dumps(report, indent=2))
    if args.out:
        from pairload.format.atomic import write_json_atomic

        write_json_atomic(args.out, report)
    return report


if __name__ == "__main__":
    main()
