#!/usr/bin/env python3
"""How each cost of pairload grows with the number of pairs (issue #33): synth, pack in 1 and P parts, verify, the
index's bytes per pair, the loader's start-up and private memory on 1..R ranks, each a measured child process.

    python benchmarks/bench_scale.py --sizes 10000,100000,1000000 --parts 1,4 --ranks 1,4 --image 16x16 \\
        --work DIR --out result.json [--plot result.png] [--steps synth,pack,verify,index,loader]

DIR/raw-N is reused when complete, so a million pairs are made once. The report is written after every step, and a
later command with the same --out adds to it (a run cut by a time limit keeps what it measured; run the rest with
--steps or --sizes). Peak memory per child: its main process and the largest of its workers (VmHWM, sampled every
50 ms) and the exact peak over the whole tree (wait4's rusage). The logic is `benchlib.scale`.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib, also under `python -P` or from elsewhere

from benchlib.scale import STEPS, ScaleConfig, run  # noqa: E402
from pairload.errors import ConfigError  # noqa: E402
from pairload.pack.options import parse_wxh  # noqa: E402


def ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated whole numbers, e.g. 1,4") from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=ints, required=True, help="Pairs per run, e.g. 10000,100000,1000000.")
    ap.add_argument("--work", type=Path, required=True, help="Folder for raw-N/ and shards-N-pP/.")
    ap.add_argument("--parts", type=ints, default=(1,), help="Pack in 1 and in P parts at once (default 1).")
    ap.add_argument("--ranks", type=ints, default=(1,), help="Loader ranks on this node (default 1).")
    ap.add_argument("--image", default="16x16", help="Pair size WxH (default 16x16).")
    ap.add_argument("--steps", default=",".join(STEPS), help=f"Steps to run (default {','.join(STEPS)}).")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                    help="Processes for synth and pack; a pack in P parts gives each workers/P (default: all cores).")
    ap.add_argument("--shard-size", help="Passed to every pack (default: pairload's).")
    ap.add_argument("--loader", default="ram", help="Loader kind of the loader step (default ram).")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--timeout", type=float, default=3600.0, help="Seconds a step's children may run.")
    ap.add_argument("--out", type=Path, help="The report (JSON); one of this machine and config is added to.")
    ap.add_argument("--fresh", action="store_true", help="Start a new report even if --out holds one.")
    ap.add_argument("--plot", type=Path, help="A PNG of how each cost grows with N (needs matplotlib).")
    args = ap.parse_args(argv)
    try:
        cfg = ScaleConfig(sizes=args.sizes, work=args.work, parts=args.parts, ranks=args.ranks,
                          image=parse_wxh(args.image), steps=tuple(s.strip() for s in args.steps.split(",")),
                          workers=args.workers, shard_size=args.shard_size, loader=args.loader,
                          batch_size=args.batch_size, timeout=args.timeout, out=args.out, plot=args.plot,
                          fresh=args.fresh)
        run(cfg)
    except ConfigError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
