"""Where a streaming reader's time goes, per sample, on one core (warm page cache): the webdataset package's own
tar reading (`tarfile_to_samples`: every member copied into a bytes object, keys grouped) against reading the
planned crop windows at the offsets the manifest records (what pairload's workers do for every kind, `wds`
included).

    python benchmarks/profile_wds.py SHARDS [--crop 256] [--samples 600] [--out F.json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def _webdataset_tar(files: list[str], limit: int) -> float:
    import webdataset as wds

    t, n = time.perf_counter(), 0
    for _sample in wds.tarfile_to_samples()(iter([{"url": f} for f in files])):
        n += 1
        if n == limit:
            break
    return n / (time.perf_counter() - t)


def _webdataset_tar_and_crop(files: list[str], limit: int, crop: int) -> float:
    import webdataset as wds

    out = np.empty((2, crop, crop, 3), np.uint8)
    t, n = time.perf_counter(), 0
    for sample in wds.tarfile_to_samples()(iter([{"url": f} for f in files])):
        if "low.npy" not in sample:
            continue
        for j, m in enumerate(("low.npy", "high.npy")):
            a = np.load(__import__("io").BytesIO(sample[m]))
            out[j] = a[:crop, :crop]
        n += 1
        if n == limit:
            break
    return n / (time.perf_counter() - t)


def _offsets(shards: str, limit: int, crop: int) -> float:
    from pairload.read.shards import ShardDataset
    from pairload.workers.windows import fill

    ds = ShardDataset(shards, "train")
    n = min(limit, len(ds))
    dst = np.empty((2, 32, crop, crop, 3), np.uint8)
    idx = np.arange(n)
    t = time.perf_counter()
    for s in range(0, n - 31, 32):
        fill(ds, dst[0], dst[1], idx[s:s + 32], np.zeros(32, np.int64), np.zeros(32, np.int64))
    return (n - n % 32) / (time.perf_counter() - t)


def main() -> None:
    from pairload.read.shards import ShardDataset

    ap = argparse.ArgumentParser()
    ap.add_argument("shards")
    ap.add_argument("--crop", type=int, default=256)
    ap.add_argument("--samples", type=int, default=600)
    ap.add_argument("--out")
    a = ap.parse_args()
    files = [str(p) for p in ShardDataset(a.shards, "train").files]
    for f in files:  # warm the page cache
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass
    rows = {"webdataset_tar_samples_per_s": round(_webdataset_tar(files, a.samples)),
            "webdataset_tar_decode_crop_per_s": round(_webdataset_tar_and_crop(files, a.samples, a.crop)),
            "manifest_offsets_crop_per_s": round(_offsets(a.shards, a.samples, a.crop))}
    print(json.dumps(rows, indent=1))
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"what": "per-sample cost on one core, warm page cache", "crop": a.crop, **rows}, fh, indent=1)


if __name__ == "__main__":
    main()
