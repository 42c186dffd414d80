#!/usr/bin/env python3
"""A pack of N samples made without N images, for measuring the planner and the index at scale (#57): the training
split of a small real pack (SRC) repeated by its index alone. Every one of the N rows has a key of its own and its
planner hash, and points at sample i % K of SRC's shards (linked, not copied), so every loader runs end to end on it;
only `pairload verify` tells it apart (each shard's tar holds K samples, its index says more). Then, unless
--no-measure: `make_loader` and the first batch, timed, with the process's private memory (psutil's USS, which counts
the pages of the mapped index this process alone has touched, page cache it shares with nobody yet) and its
anonymous memory (what it allocated itself) once pairload and torch are imported and after the first batch, in a
fresh process per loader kind and mode (one worker): a plain start, a resume mid-epoch onto another world size, and
OUT mixed with SRC.

    python benchmarks/index_only_pack.py SRC OUT --samples 10000000 [--split train] [--kinds ram,wds]
        [--modes plain,resume,mixed,tenfold,degrade,clips,clips-resume,clips-mixed,clips-tenfold,clips-stride,...]
        [--sequence-frames F] [--sequence-form index|json] [--repeat R] [--measure-only] [--out F]

SRC: a pack made by `pairload pack` with one split of a few samples (binary index, plain members). The index is
built in memory (about 80 bytes a sample, keys hashed a million at a time): 10^8 samples take about 8 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from pairload.format import binindex, encoding, schema, sequences
from pairload.format.atomic import write_json_atomic
from pairload.format.columns import ColumnFile, write_columns

MEASURE = """
import json, sys, time
import psutil
from pairload import make_loader
import torch  # noqa: F401 - the loaders' imports, done: the baseline is a process ready to make a loader
shards, kind, mode, small = sys.argv[1:5]
label = mode
proc = psutil.Process()


def anonymous():
    with open("/proc/self/smaps_rollup") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("Anonymous:"))


before, anon_before = proc.memory_full_info().uss, anonymous()
common = dict(batch_size=32, crop=16, seed=0, num_workers=1)
if mode.startswith("clips"):  # clips of 5 frames of OUT's sequences (--sequence-frames), 8 clips a batch
    common.update(batch_size=8, clips=5)
    mode = mode.partition("-")[2]
    if mode.startswith("stride"):  # every other start: the units are summed per block of sequences, one pass
        common.update(clips="5,stride=2")
        mode = mode.partition("-")[2]
    mode = mode or "plain"
t0 = time.perf_counter()
if mode == "plain":
    loader = make_loader(kind, shards, **common)
elif mode == "mixed":  # the big split and a small pack, drawn 3:1 (clips: the big split twice, as two sources)
    other = shards if "clips" in common else small
    loader = make_loader(kind, {"big": shards, "small": other}, weights={"big": 3, "small": 1}, **common)
elif mode == "tenfold":  # the big split as ten sources of its own: ten times its samples in one mix
    loader = make_loader(kind, {f"part{k}": shards for k in range(10)}, **common)
elif mode == "degrade":  # OUT read as targets only, each input made by the low-light model
    loader = make_loader(kind, shards, degrade="lowlight", **common)
else:  # resume: a state saved by rank 0 of 2 in the middle of epoch 4, loaded by rank 1 of 3
    first = make_loader(kind, shards, rank=0, world_size=2, **common)
    state = first.state_dict()
    first.close()
    del first
    state.update(epoch=4, consumed=[[2, 100_000]])
    loader = make_loader(kind, shards, rank=1, world_size=3, **common)
    loader.load_state_dict(state)
t1 = time.perf_counter()
batch = next(iter(loader))
t2 = time.perf_counter()
after, anon_after = proc.memory_full_info().uss, anonymous()
print(json.dumps({"kind": kind, "mode": label, "make_loader_s": round(t1 - t0, 3), "first_batch_s": round(t2 - t1, 3),
                  "uss_mb_imported": round(before / 2**20, 1), "uss_mb_after_first_batch": round(after / 2**20, 1),
                  "uss_mb_grown": round((after - before) / 2**20, 1),
                  "anonymous_mb_grown": round((anon_after - anon_before) / 2**20, 1)}))
"""


KEY_DIGITS = 10
CHUNK = 1_000_000


def build(src: Path, out: Path, n: int, split: str, frames: int = 0, form: str = "index") -> dict:
    doc = schema.read_manifest(src)
    entry = doc["splits"][split]
    if not isinstance(entry.get(binindex.FIELD), dict) or len(entry["shards"]) != 1:
        sys.exit(f"{src}: split {split!r} needs a binary index and one shard (pack a few samples with the defaults)")
    stored = encoding.of_entry(entry, str(src), split)
    if stored.sized:
        sys.exit(f"{src}: split {split!r} is not plain (pack it without --store encoded or --compress)")
    f = ColumnFile(src / entry[binindex.FIELD]["file"], str(src))
    k = int(entry["samples"])
    take = np.arange(n, dtype=np.int64) % k
    columns = {name: np.asarray(f.columns[name])[take] for name, _, _ in binindex.COMMON
               if name not in (binindex.KEY_END, binindex.KEY_HASH)}
    del take
    columns[binindex.SHARD] = np.zeros(n, dtype=np.int32)
    # keys "0000000000", "0000000001", ...: their bytes made as digits, their hashes a million at a time
    blob = np.empty((n, KEY_DIGITS), dtype=np.uint8)
    hashes = np.empty(n, dtype=np.uint64)
    for lo in range(0, n, CHUNK):
        i = np.arange(lo, min(n, lo + CHUNK), dtype=np.int64)
        blob[lo:lo + len(i)] = (i[:, None] // 10 ** np.arange(KEY_DIGITS - 1, -1, -1) % 10 + 48).astype(np.uint8)
        hashes[lo:lo + len(i)] = binindex.key_hashes([f"{j:0{KEY_DIGITS}d}" for j in i.tolist()])
    columns[binindex.KEY_HASH] = hashes
    columns[binindex.KEY_END] = KEY_DIGITS * np.arange(1, n + 1, dtype=np.int64)
    out.mkdir(parents=True, exist_ok=True)
    shard = entry["shards"][0]
    link = out / shard["file"]
    if not link.exists():
        os.link(src / shard["file"], link)
    new = dict(entry, samples=n, shards=[dict(shard, samples=n)])
    new.pop("folders", None)
    table = {}
    if frames:  # sequences of `frames` frames each (the last one shorter), their numbering left as it is
        starts = np.arange(0, n, frames, dtype=np.int64)
        counts = np.minimum(frames, n - starts)
        names = np.char.add("v", np.char.zfill(np.arange(len(starts)).astype(str), 9))
        new[sequences.TARGET], new[sequences.GAPS] = "frame", "allow"
        if form == "json":  # as packs made before 2026-11-29 list it
            new[sequences.FIELD] = {"names": names.tolist(), "starts": starts.tolist(), "counts": counts.tolist()}
        else:  # columns of the index (`format.sequences.TABLE`), as `Sequences.index_columns` makes them
            new[sequences.FIELD] = {"table": sequences.TABLE, "count": len(starts),
                                    "frames": [int(counts.min()), int(counts.max())]}
            name_bytes = np.frombuffer(names.astype("S").tobytes(), np.uint8)  # 10 bytes a name
            table = {sequences.START: starts, sequences.NAME_BYTES: name_bytes,
                     sequences.NAME_END: 10 * np.arange(1, len(starts) + 1, dtype=np.int64)}
    name = binindex.index_name(split)
    arrays = {binindex.KEY_BYTES: blob.reshape(-1)}
    for col, dtype, shape in binindex.spec(new, False, False):  # `binindex.index_columns`, keys already encoded
        arrays[col] = np.ascontiguousarray(columns.pop(col).astype(dtype, copy=False).reshape((n, *shape)))
    arrays.update(table)
    sha, size = write_columns(out / name, arrays)
    new[binindex.FIELD] = {"file": name, "bytes": size, "sha256": sha}
    manifest = dict(doc, splits={split: new})
    write_json_atomic(out / schema.MANIFEST, manifest)
    schema.record_packed(out, manifest)  # as pack does: the first loader does not read the index it wrote
    return {"samples": n, "index_bytes": size, "bytes_per_sample": round(size / n, 1)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--samples", type=int, required=True)
    ap.add_argument("--split", default="train")
    ap.add_argument("--kinds", default="ram,wds", help="loader kinds to time (comma-separated)")
    ap.add_argument("--modes", default="plain,resume,mixed",
                    help="what to time: plain (make_loader and a first batch), resume (a state saved mid-epoch by "
                         "rank 0 of 2, loaded by rank 1 of 3), mixed (OUT and SRC mixed 3:1), tenfold (OUT as ten "
                         "sources of one mix: 10 N samples), degrade (OUT as targets, degrade='lowlight'), clips (of 5 "
                         "frames: needs --sequence-frames; clips-resume, clips-mixed (OUT twice, 3:1) and "
                         "clips-tenfold likewise; clips-stride and clips-stride-MODE: clips of 5 at stride 2)")
    ap.add_argument("--sequence-frames", type=int, default=0,
                    help="build OUT as sequences of this many frames each (a video split, for clips)")
    ap.add_argument("--repeat", type=int, default=1, help="time each loader kind and mode this many times (the "
                    "machine's other work makes one run noisy)")
    ap.add_argument("--sequence-form", choices=("index", "json"), default="index",
                    help="where OUT keeps its sequence table: columns of its index file (pairload since 2026-11-29) "
                         "or lists in its manifest (packs made before)")
    ap.add_argument("--no-measure", action="store_true")
    ap.add_argument("--measure-only", action="store_true", help="OUT was built before: time it only")
    ap.add_argument("--out", dest="report", type=Path, help="write the JSON report here too")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    report = {"date": time.strftime("%Y-%m-%d"), "cpu_count": os.cpu_count(), "samples": args.samples}
    if not args.measure_only:
        report.update(build(args.src, args.out, args.samples, args.split, args.sequence_frames, args.sequence_form))
        report["build_s"] = round(time.perf_counter() - t0, 1)
    if not args.no_measure:
        report["loaders"] = []
        for mode in args.modes.split(","):
            for kind in [k for k in args.kinds.split(",") for _ in range(args.repeat)]:
                res = subprocess.run([sys.executable, "-c", MEASURE, str(args.out), kind, mode, str(args.src)],
                                     capture_output=True, text=True)
                if res.returncode:
                    report["loaders"].append({"kind": kind, "mode": mode,
                                              "error": res.stderr.strip().splitlines()[-1]})
                else:
                    report["loaders"].append(json.loads(res.stdout.strip().splitlines()[-1]))
    print(json.dumps(report, indent=2))
    if args.report:
        write_json_atomic(args.report, report)
    return report


if __name__ == "__main__":
    main()
