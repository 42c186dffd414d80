"""Where the wds loader's time goes: one worker's stages in one process, then N processes reading in parallel.

    python benchmarks/profile_wds.py SHARDS [--procs 15] [--out F.json]

Stages, each over the same shards (warm page cache): raw sequential read of the files; webdataset's tar reading
and sample grouping as `tarfile_to_samples` does it, then with pairload's large read buffer; + the shuffle buffer; + the per-key crop; + writing batches into a ring slot (what a worker
does). Then the tar-reading stage in N processes at once (does it scale with cores, or is memory the limit?).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time

import numpy as np


def _stage(shards: str, upto: str, limit: int = 600) -> float:
    import webdataset as wds

    from pairload.loaders.base import LoaderOptions
    from pairload.loaders.wds import _Decode, _fill, _shard_error, _shared_targets, _tar_samples
    from pairload.read.shards import ShardDataset

    ds = ShardDataset(shards, "train")
    urls = [str(p) for p in ds.files] * max(1, -(-limit // len(ds)))  # enough shards for `limit` samples
    if upto == "read":
        t, n = time.perf_counter(), 0
        buf = bytearray(8 << 20)
        for u in urls[:len(ds.files)]:
            with open(u, "rb", buffering=0) as fh:
                while got := fh.readinto(buf):
                    n += got
        return n / (ds.nbytes / len(ds)) / (time.perf_counter() - t)
    opts = LoaderOptions.build(batch_size=32, crop=256)
    tar = _tar_samples if upto != "tar-default" else wds.tarfile_to_samples(handler=_shard_error)
    stages = [lambda: iter([{"url": u} for u in urls]), tar, _shared_targets]
    if upto in ("shuffle", "crop", "fill"):
        stages.append(wds.shuffle(256, initial=32, seed=0))
    if upto in ("crop", "fill"):
        stages.append(wds.map(_Decode()))
    it = iter(wds.DataPipeline(*stages))
    t, n = time.perf_counter(), 0
    if upto == "fill":
        slot = np.empty(2 * 32 * 256 * 256 * 3, np.uint8)
        while n < limit:
            got = _fill(it, slot, 0, 32, 32, 256, opts.plan, 0, False)[0]
            n += got
            if got < 32:
                break
    else:
        for _ in it:
            n += 1
            if n >= limit:
                break
    return n / (time.perf_counter() - t)


def _parallel(args) -> float:
    from pairload.loaders.wds import _keep_large_buffers

    _keep_large_buffers()  # as a wds worker does
    return _stage(*args)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("shards")
    ap.add_argument("--procs", type=int, default=15)
    ap.add_argument("--out")
    a = ap.parse_args()
    report = {"one_process_pairs_per_s": {}}
    for upto in ("read", "tar-default", "tar", "shuffle", "crop", "fill"):
        report["one_process_pairs_per_s"][upto] = round(_stage(a.shards, upto), 1)
        print(upto, report["one_process_pairs_per_s"][upto], flush=True)
    with mp.get_context("spawn").Pool(a.procs) as pool:
        rates = pool.map(_parallel, [(a.shards, "fill", 200)] * a.procs)
    report["parallel"] = {"procs": a.procs, "fill_pairs_per_s_each": [round(r, 1) for r in rates],
                          "fill_pairs_per_s_total": round(sum(rates), 1)}
    print(json.dumps(report["parallel"]))
    if a.out:
        from pairload.format.atomic import write_json_atomic

        write_json_atomic(a.out, report)


if __name__ == "__main__":
    main()
