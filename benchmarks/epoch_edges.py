"""Where the reference loop's time goes around its epochs, per rank: the loop run as `python -m pairload.train`
runs it, with its pieces timed from the outside (nothing in pairload is changed).

    torchrun --standalone --nproc_per_node=N benchmarks/epoch_edges.py --out edges-N.json -- \
        --shards S --loader ram --epochs 6 --batch-size 32 --crop 256 --amp bf16 --workers 6 --val-split none

For every epoch: the host's seconds in `train_one_epoch` before the first batch (the loader's start), in its steps,
in its end (the synchronisation, the all-reduces, the gather of the keys) and between epochs; on the GPU, from
CUDA events: the steps' span (first batch handed over → last step done), and the idle gap from the previous
epoch's last step to this epoch's first batch. Rank 0 writes the JSON, every rank's rows in it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("rest", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    argv = a.rest[1:] if a.rest[:1] == ["--"] else a.rest

    from pairload.recipes import loop, train

    rows: list[dict] = []
    meters: list = []
    clock: dict = {}

    class Meter(loop.DataWait):
        def __init__(self, device):
            super().__init__(device)
            meters.append(self)

        def got_batch(self):
            if not self.starts:
                clock["first_batch"] = time.perf_counter()  # (host time: the CUDA events give the GPU's)
            super().got_batch()

    def timed(name, fn):
        def wrapper(*args, **kw):
            t = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                clock[name] = clock.get(name, 0.0) + time.perf_counter() - t
        return wrapper

    loop.DataWait = Meter
    loop.gather_seen = timed("gather_s", loop.gather_seen)
    loop.all_reduce_sum = timed("all_reduce_s", loop.all_reduce_sum)
    loop.all_reduce_max = timed("all_reduce_s", loop.all_reduce_max)
    sync = torch.cuda.synchronize
    torch.cuda.synchronize = timed("sync_s", sync)
    one_epoch = train.train_one_epoch
    last_end = [None]

    def epoch(*args, **kw):
        for k in ("gather_s", "all_reduce_s", "sync_s"):
            clock[k] = 0.0
        t0 = time.perf_counter()
        between = None if last_end[0] is None else t0 - last_end[0]
        stats = one_epoch(*args, **kw)
        t1 = time.perf_counter()
        last_end[0] = t1
        m = meters[-1]
        prev = meters[-2] if len(meters) > 1 else None
        row = {"epoch": len(meters), "pairs_per_s": stats["pairs_per_s"], "steps": len(m.ends),
               "train_loss": stats["train_loss"], "data_wait_frac": stats["data_wait_frac"],
               "data_digest": stats["data_digest"],
               "host_total_s": t1 - t0, "host_between_epochs_s": between,
               "host_to_first_batch_s": clock.get("first_batch", t0) - t0,
               "sync_s": clock["sync_s"], "all_reduce_s": clock["all_reduce_s"], "gather_s": clock["gather_s"],
               "gpu_steps_span_s": m.starts[0].elapsed_time(m.ends[-1]) / 1e3 if m.cuda else None,
               "gpu_gap_before_s": prev.ends[-1].elapsed_time(m.starts[0]) / 1e3 if m.cuda and prev else None}
        rows.append(row)
        return stats

    train.train_one_epoch = epoch
    code = train.main(argv)
    rank = int(os.environ.get("RANK", "0"))  # the process group is gone once main() returns
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    doc = {"device": device, "date": time.strftime("%Y-%m-%d"), "argv": argv,
           "rank": rank, "epochs": rows}
    with open(f"{a.out}.rank{rank}", "w") as fh:
        json.dump(doc, fh, indent=1)
    print(json.dumps({"rank": rank, "epochs": [{k: (round(v, 4) if isinstance(v, float) else v)
                                                 for k, v in r.items()} for r in rows]}))
    sys.exit(code)


if __name__ == "__main__":
    main()
