#!/usr/bin/env python3
"""How each cost of pairload grows with the number of pairs (issue #33): synth, pack in 1 and P parts, verify, the
index's bytes per pair, the loader's start-up and private memory on 1..R ranks, each a measured child process.

    python benchmarks/bench_scale.py --sizes 10000,100000,1000000 --parts 1,4 --ranks 1,4 --image 16x16 \\
        --work DIR --out result.json [--plot result.png] [--steps synth,pack,verify,index,loader]

DIR/raw-N is reused when complete, so a million pairs are made once. The report is written after every step, and a
later command with the same --out adds to it (a run cut by a time limit keeps what it measured; run the rest with
--steps or --sizes). Peak memory per child: its main process and the largest of its workers (VmHWM, sampled every
50 ms) and the exact peak over the whole tree (wait4's rusage). The logic is `pairload.bench.scale`.
"""

from __future__ import annotations

import sys

from pairload.bench.scale import main

if __name__ == "__main__":
    sys.exit(main())
