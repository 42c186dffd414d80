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

SRC: a pack made by `pairload pack` with one split of a few samples (binary index, plain members). The index (70
bytes a sample) is written a column at a time, each column made CHUNK rows at a time and the keys' hashes by two
worker processes, so the build holds a few hundred MB whatever N (254 MB peak RSS at 10^9), writing the same bytes
as building the index whole in memory did: 10^9 samples with --sequence-frames 100, a 70 GB index, took 13.6
minutes on a 2-core machine (`benchmarks/results/scale-1e9-2026-11-29/`); it needs that much free disk.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from itertools import islice
from pathlib import Path

import numpy as np

from pairload.format import binindex, encoding, schema, sequences
from pairload.format.atomic import write_json_atomic
from pairload.format.columns import ColumnFile, Pieces, write_columns

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
CHUNK = 5_000_000  # rows of a column made and written at a time (a few hundred MB at most)
HASH_CHUNK = 1_000_000  # keys a worker hashes at a time
HASH_WORKERS = 2
HASH_AHEAD = 4  # chunks of keys handed to the workers before their hashes are written


def _digits(lo: int, hi: int, width: int, prefix: bytes = b"") -> np.ndarray:
    """The numbers lo..hi-1 as `width` ASCII digits each after `prefix`, one row of uint8 a number, made a digit at a
    time (a column of rows of int64 at most, not rows × width)."""
    i = np.arange(lo, hi, dtype=np.int64)
    out = np.empty((len(i), len(prefix) + width), dtype=np.uint8)
    for d, c in enumerate(prefix):
        out[:, d] = c
    for d in range(width):
        out[:, len(prefix) + d] = i // 10 ** (width - 1 - d) % 10 + 48
    return out


def _key_hashes(lo: int, hi: int) -> bytes:
    """The planner hashes (`binindex.key_hashes`) of keys lo..hi-1, as little-endian uint64 bytes: the same blake2b of
    each key's bytes, sliced from one string of them instead of formatted and encoded one at a time (3x faster)."""
    data = _digits(lo, hi, KEY_DIGITS).tobytes()
    blake2b = hashlib.blake2b
    return b"".join([blake2b(data[j:j + KEY_DIGITS], digest_size=8).digest()
                     for j in range(0, len(data), KEY_DIGITS)])


def _hash_pieces(n: int):
    """The key-hash column in pieces, in key order, hashed by HASH_WORKERS processes a HASH_CHUNK at a time."""
    spans = iter([(lo, min(n, lo + HASH_CHUNK)) for lo in range(0, n, HASH_CHUNK)])
    with ProcessPoolExecutor(HASH_WORKERS) as pool:
        pending = deque(pool.submit(_key_hashes, *span) for span in islice(spans, HASH_AHEAD))
        first = True
        while pending:
            piece = np.frombuffer(pending.popleft().result(), dtype="<u8")
            for span in islice(spans, 1):
                pending.append(pool.submit(_key_hashes, *span))
            if first:  # the workers' hashes are `binindex.key_hashes`'
                assert piece[0] == binindex.key_hashes([f"{0:0{KEY_DIGITS}d}"])[0], "key hashes differ"
                first = False
            yield piece


def _chunked(n: int, make, chunk: int = CHUNK):
    """A generator function of the pieces make(lo, hi) of a column of n rows, `chunk` rows at a time."""
    return lambda: (make(lo, min(n, lo + chunk)) for lo in range(0, n, chunk))


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
    out.mkdir(parents=True, exist_ok=True)
    shard = entry["shards"][0]
    link = out / shard["file"]
    if not link.exists():
        os.link(src / shard["file"], link)
    new = dict(entry, samples=n, shards=[dict(shard, samples=n)])
    new.pop("folders", None)
    table = {}
    if frames:  # sequences of `frames` frames each (the last one shorter), their numbering left as it is
        count = -(-n // frames)
        new[sequences.TARGET], new[sequences.GAPS] = "frame", "allow"
        if form == "json":  # as packs made before 2026-11-29 list it
            starts = np.arange(0, n, frames, dtype=np.int64)
            counts = np.minimum(frames, n - starts)
            names = np.char.add("v", np.char.zfill(np.arange(len(starts)).astype(str), 9))
            new[sequences.FIELD] = {"names": names.tolist(), "starts": starts.tolist(), "counts": counts.tolist()}
        else:  # columns of the index (`format.sequences.TABLE`), as `Sequences.index_columns` makes them
            if count > 10 ** 9:
                sys.exit(f"{count} sequences: their names (v + 9 digits) would not all be 10 bytes")
            new[sequences.FIELD] = {"table": sequences.TABLE, "count": count,
                                    "frames": [n - (count - 1) * frames, min(frames, n)]}
            table = {sequences.START: Pieces("<i8", (count,), _chunked(
                         count, lambda lo, hi: frames * np.arange(lo, hi, dtype=np.int64))),
                     sequences.NAME_BYTES: Pieces("u1", (10 * count,), _chunked(
                         count, lambda lo, hi: _digits(lo, hi, 9, b"v").reshape(-1))),  # 10 bytes a name
                     sequences.NAME_END: Pieces("<i8", (count,), _chunked(
                         count, lambda lo, hi: 10 * np.arange(lo + 1, hi + 1, dtype=np.int64)))}
    # keys "0000000000", "0000000001", ...: their bytes made as digits, their hashes by worker processes; every other
    # column row i is SRC's row i % k: each made and written CHUNK rows at a time, never held whole
    made = {binindex.KEY_END: lambda lo, hi: KEY_DIGITS * np.arange(lo + 1, hi + 1, dtype=np.int64),
            binindex.SHARD: lambda lo, hi: np.zeros(hi - lo, dtype=np.int32)}
    arrays = {binindex.KEY_BYTES: Pieces("u1", (KEY_DIGITS * n,), _chunked(
        n, lambda lo, hi: _digits(lo, hi, KEY_DIGITS).reshape(-1)))}
    for col, dtype, shape in binindex.spec(new, False, False):  # `binindex.index_columns`, keys already encoded
        if col == binindex.KEY_HASH:
            pieces = partial(_hash_pieces, n)
        elif col in made:
            pieces = _chunked(n, made[col])
        elif col in f.columns:
            pieces = _chunked(n, partial(_repeated, np.asarray(f.columns[col]), k, dtype, shape))
        else:
            sys.exit(f"{src}: split {split!r}: its index has no column {col!r} to repeat")
        arrays[col] = Pieces(dtype, (n, *shape), pieces)
    arrays.update(table)
    name = binindex.index_name(split)
    sha, size = write_columns(out / name, arrays)
    new[binindex.FIELD] = {"file": name, "bytes": size, "sha256": sha}
    manifest = dict(doc, splits={split: new})
    write_json_atomic(out / schema.MANIFEST, manifest)
    schema.record_packed(out, manifest)  # as pack does: the first loader does not read the index it wrote
    return {"samples": n, "index_bytes": size, "bytes_per_sample": round(size / n, 1)}


def _repeated(column: np.ndarray, k: int, dtype, shape: tuple, lo: int, hi: int) -> np.ndarray:
    """Rows lo..hi-1 of SRC's `column` of k samples repeated (row i is its row i % k)."""
    rows = column[np.arange(lo, hi, dtype=np.int64) % k]
    return rows.astype(dtype, copy=False).reshape((hi - lo, *shape))


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
