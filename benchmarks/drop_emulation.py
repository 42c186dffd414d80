"""How a split read from disk under a memory limit lets go of the pages it has used, without a GPU: an emulation of the
decode path's host side. Per call of 2 batches of 32 samples in an epoch's random order, 4 threads copy the members'
bytes from the shard maps (as a decode call's staging does) while a `ReadAhead` thread asks up to 512 MB ahead; then
the call's pages are let go of by one of:

- `inline`: `ShardDataset.dontneed` on the loop's thread (madvise DONTNEED, then fadvise DONTNEED), as main does;
- `thread`: the same in a thread of its own;
- `batchN` (e.g. `batch4`): the same in a thread, every N calls (their ranges merged);
- `pageout`: madvise(MADV_PAGEOUT) in a thread (the pages reclaimed at once);
- `pread`: the members staged with `os.preadv` instead of through the maps (never mapped), then fadvise DONTNEED
  alone in a thread; `preadnone`: so staged, nothing dropped (left to the cgroup's reclaim);
- `cold`: madvise(MADV_COLD) only (the pages deactivated, left to reclaim);
- `unmap`: madvise(MADV_DONTNEED) only (unmapped, left in the page cache);
- `none`: nothing;
- `stream`, `streamwn`: a streamed epoch, as a by-shard deal (`wds`) reads one: the next shuffle buffer's shards
  read whole in file order (`os.pread`, or WILLNEED) while one buffer is staged, each buffer dropped whole once done;
- `direct`: the members read with O_DIRECT by 16 threads, calls up to 192 MB ahead, into buffers of their own
  (nothing enters the page cache);
- `realstream`, `realahead`: the decode path's own classes over a `wds` run of the split (its plan: shuffle buffers
  of shards, batch 32, crop 256): `realstream` reads it through `read.streamed.ShardStream` and drops each shard
  whole after its last batch (`Drops.span`), as the decode path does now; `realahead` through `ReadAhead` (WILLNEED
  a window ahead) with each call's members dropped (`Drops.drop`), as it did before.

`--costs`: instead, what one fadvise DONTNEED of a member-sized range (700 KB) costs by how its pages came in: read
with `pread` in file order or in a random order, asked for with WILLNEED in file order or in a random order (as the
decode path's reader does), or not resident; and the share of those pages that are parts of large folios.

Each mode runs one cold epoch in a child process placed in a new cgroup limited to `--limit-mb`; the row gives its
pairs/s, the disk's reads over the split's size (above 1: pages read twice), the seconds the loop spent letting go and
the cgroup's peak. Run as root (a cgroup is made):

    python benchmarks/drop_emulation.py SHARDS --limit-mb 715 [--modes inline,thread,cold,unmap,none] [--rounds 2]
    python benchmarks/drop_emulation.py SHARDS --costs
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

MADV_COLD, MADV_PAGEOUT = 20, 21  # linux/mman.h, not in Python's mmap module everywhere


def split_reads(ds):
    """A function giving what the disk has read since this call, over the split's size (None where unknown)."""
    from memory_limit import disk_read_bytes

    first = str(ds.files[0])
    s0 = disk_read_bytes(first)
    return lambda: None if s0 is None else (disk_read_bytes(first) - s0) / sum(ds.shard_bytes)


def epoch(shards: str, mode: str, seed: int) -> dict:
    from pairload.read.ahead import ReadAhead, batches_within, merged
    from pairload.read.shards import ShardDataset

    libc = ctypes.CDLL(None, use_errno=True)
    ds = ShardDataset(shards, "train")
    page = mmap.PAGESIZE
    base = [np.frombuffer(ds.shard_map(i), np.uint8).ctypes.data for i in range(len(ds.files))]
    stagers, dropper = ThreadPoolExecutor(4), ThreadPoolExecutor(1)
    out = np.empty(128 << 20, np.uint8)
    order = np.random.default_rng(seed).permutation(len(ds))
    batches = np.array_split(order, max(1, len(ds) // 32))
    reader = ReadAhead(ds, batches_within(ds, 32, 512 << 20))
    reader.add(order, np.array([len(b) for b in batches]))

    def whole_pages(samples):
        """(shard, start, end) of the whole pages inside these samples' members, merged."""
        shard, start, end = ds.spans(samples)
        _, numbers, starts, ends = merged(shard, -(-start // page) * page, end // page * page)
        return [(sh, a, b) for sh, a, b in zip(numbers.tolist(), starts.tolist(), ends.tolist()) if b > a]

    def advise(samples, advice: int) -> None:
        for sh, a, b in whole_pages(samples):
            libc.madvise(ctypes.c_void_p(base[sh] + a), ctypes.c_size_t(b - a), advice)

    fds = [os.open(str(f), os.O_RDONLY) for f in ds.files]
    view, held = memoryview(out), []

    def fadvise_dontneed(samples) -> None:
        for sh, a, b in whole_pages(samples):
            os.posix_fadvise(fds[sh], a, b - a, os.POSIX_FADV_DONTNEED)

    read_over_split, t0, letting_go = split_reads(ds), time.perf_counter(), 0.0
    for k in range(0, len(batches), 2):
        reader.cutting(k)
        call = np.concatenate(batches[k:k + 2])
        shard, start, end = ds.spans(call)

        def copy(rows, shard=shard, start=start, end=end) -> None:
            at = 0
            for i in rows.tolist():
                n = int(end[i] - start[i])
                if mode.startswith("pread"):  # read(2) into the staging buffer: the pages are never mapped
                    os.preadv(fds[int(shard[i])], [view[at:at + n]], int(start[i]))
                else:
                    out[at:at + n] = ds.shard_map(int(shard[i]))[start[i]:end[i]]
                at += n

        list(stagers.map(copy, np.array_split(np.arange(len(shard)), 4)))
        t = time.perf_counter()
        if mode == "inline":
            ds.dontneed(call)
        elif mode == "thread":
            dropper.submit(ds.dontneed, call)
        elif mode == "pread":  # nothing mapped: fadvise alone, in a thread
            dropper.submit(fadvise_dontneed, call)
        elif mode.startswith("batch"):  # the thread's drops every N calls (batchN), their ranges merged
            held.append(call)
            if len(held) == int(mode[5:]):
                dropper.submit(ds.dontneed, np.concatenate(held))
                held.clear()
        elif mode == "cold":
            advise(call, MADV_COLD)
        elif mode == "unmap":
            advise(call, mmap.MADV_DONTNEED)
        elif mode == "pageout":  # reclaimed at once by the kernel (pages this process alone maps), in a thread
            dropper.submit(advise, call, MADV_PAGEOUT)
        letting_go += time.perf_counter() - t
    if held:
        dropper.submit(ds.dontneed, np.concatenate(held))
    dropper.shutdown(wait=True)
    dt = time.perf_counter() - t0
    reader.close()
    for fd in fds:
        os.close(fd)
    return {"mode": mode, "pairs_per_s": len(order) / dt, "read_over_split": read_over_split(),
            "letting_go_s": letting_go}


def direct_epoch(shards: str, seed: int, threads: int = 16, ahead: int = 192 << 20) -> dict:
    """The same epoch read with O_DIRECT instead (`direct` mode): `threads` threads read each call's member ranges
    (whole pages around each) into a buffer of its own, calls up to `ahead` bytes ahead of the one staged; staging
    copies from those buffers; nothing enters the page cache, so nothing is dropped."""
    from collections import deque

    from pairload.read.ahead import merged
    from pairload.read.shards import ShardDataset

    ds = ShardDataset(shards, "train")
    page = mmap.PAGESIZE
    fds = [os.open(str(f), os.O_RDONLY | os.O_DIRECT) for f in ds.files]
    readers, stagers = ThreadPoolExecutor(threads), ThreadPoolExecutor(4)
    out = np.empty(64 << 20, np.uint8)
    order = np.random.default_rng(seed).permutation(len(ds))
    batches = np.array_split(order, max(1, len(ds) // 32))
    calls = [np.concatenate(batches[k:k + 2]) for k in range(0, len(batches), 2)]

    def start_call(call) -> tuple:
        shard, start, end = ds.spans(call)
        _, numbers, lo, hi = merged(shard, start // page * page, -(-end // page) * page)
        at = np.concatenate([[0], np.cumsum(hi - lo)])
        buf = mmap.mmap(-1, max(page, int(at[-1])))
        view = memoryview(buf)
        reads = [readers.submit(os.preadv, fds[sh], [view[int(p):int(q)]], int(a))
                 for sh, a, p, q in zip(numbers.tolist(), lo.tolist(), at[:-1].tolist(), at[1:].tolist())]
        return buf, view, reads, int(at[-1])

    read_over_split, t0 = split_reads(ds), time.perf_counter()
    flight: deque = deque()
    queued, in_flight = 0, 0
    for k in range(len(calls)):
        while queued < len(calls) and (queued <= k or in_flight < ahead):
            flight.append(start_call(calls[queued]))
            in_flight += flight[-1][3]
            queued += 1
        buf, view, reads, nbytes = flight.popleft()
        for r in reads:
            r.result()
        def copy(at, view=view, nbytes=nbytes) -> None:  # staging: the call's bytes copied on (1 MB a piece)
            for a in at.tolist():
                n = min(1 << 20, nbytes - a)
                out[(a % (60 << 20)):(a % (60 << 20)) + n] = np.frombuffer(view[a:a + n], np.uint8)

        list(stagers.map(copy, np.array_split(np.arange(0, nbytes, 1 << 20), 4)))
        in_flight -= nbytes
        view.release()
        buf.close()
    dt = time.perf_counter() - t0
    for fd in fds:
        os.close(fd)
    return {"mode": "direct", "pairs_per_s": len(order) / dt, "read_over_split": read_over_split(),
            "letting_go_s": 0.0}


def stage(ds, stagers, out: np.ndarray, samples) -> None:
    """A decode call's staging: these samples' members copied from the shard maps into `out` by the `stagers` (4
    threads, a quarter of the members each)."""
    shard, start, end = ds.spans(samples)

    def copy(rows) -> None:
        at = 0
        for i in rows.tolist():
            n = int(end[i] - start[i])
            out[at:at + n] = ds.shard_map(int(shard[i]))[start[i]:end[i]]
            at += n

    list(stagers.map(copy, np.array_split(np.arange(len(shard)), 4)))


def stream_epoch(shards: str, seed: int, how: str, buffer: int = 2) -> dict:
    """A streamed epoch (`stream` and `streamwn` modes), as a by-shard deal reads one: the shards in a random order,
    the samples of `buffer` consecutive shards shuffled together; while one buffer's calls are staged (4 threads
    copying from the maps, 2 batches of 32 a call), the next buffer's shards are read whole, in file order, one
    thread a shard (`stream`: `os.pread` of 8 MB pieces into a scratch buffer, the kernel's sequential read-ahead;
    `streamwn`: WILLNEED of 8 MB pieces); once a buffer's last call is staged, its shards are dropped whole (unmapped,
    then one fadvise DONTNEED a shard) by a thread of its own."""
    from pairload import willneed
    from pairload.read.shards import ShardDataset

    ds = ShardDataset(shards, "train")
    n = len(ds)
    shard_of = ds.spans(np.arange(n))[0][:n]
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(ds.files))
    groups = [order[k:k + buffer] for k in range(0, len(order), buffer)]
    fds = [os.open(str(f), os.O_RDONLY) for f in ds.files]
    readers, stagers, dropper = ThreadPoolExecutor(2 * buffer), ThreadPoolExecutor(4), ThreadPoolExecutor(1)
    out = np.empty(128 << 20, np.uint8)
    piece = 8 << 20

    def read_whole(sh: int) -> None:
        size, scratch = os.path.getsize(ds.files[sh]), bytearray(piece)
        for a in range(0, size, piece):
            if how == "stream":
                os.preadv(fds[sh], [scratch], a)
            else:
                willneed.file_range(fds[sh], a, min(piece, size - a))

    libc = ctypes.CDLL(None, use_errno=True)

    def drop_whole(shs) -> None:
        for sh in shs:
            view = ds.shard_map(sh)
            libc.madvise(ctypes.c_void_p(view.ctypes.data), ctypes.c_size_t(len(view) // mmap.PAGESIZE * mmap.PAGESIZE),
                         mmap.MADV_DONTNEED)
            os.posix_fadvise(fds[sh], 0, 0, os.POSIX_FADV_DONTNEED)

    read_over_split, t0 = split_reads(ds), time.perf_counter()
    reading = {int(sh): readers.submit(read_whole, int(sh)) for sh in groups[0]}
    for g, group in enumerate(groups):
        for sh in groups[g + 1] if g + 1 < len(groups) else ():
            reading[int(sh)] = readers.submit(read_whole, int(sh))
        for sh in group:
            reading.pop(int(sh)).result()
        samples = rng.permutation(np.flatnonzero(np.isin(shard_of, group)))
        for k in range(0, len(samples), 64):
            stage(ds, stagers, out, samples[k:k + 64])
        dropper.submit(drop_whole, [int(sh) for sh in group])
    dropper.shutdown(wait=True)
    dt = time.perf_counter() - t0
    for fd in fds:
        os.close(fd)
    return {"mode": how, "pairs_per_s": n / dt, "read_over_split": read_over_split(), "letting_go_s": 0.0}


def real_epoch(shards: str, mode: str, seed: int, buffer: int | None = None) -> dict:
    """`realstream` and `realahead` (see the module): calls of 2 batches of the run, staged by 4 threads from the
    maps, each call's pages let go of by the way the mode names once staged; `buffer`: the run's shuffle buffer
    (None: `wds`'s default, the pairs whose pixels fill 1 GiB)."""
    from pairload import make_loader
    from pairload.hostmemory import host_memory
    from pairload.read.ahead import ReadAhead, batches_within
    from pairload.read.drops import Drops
    from pairload.read.shards import ShardDataset
    from pairload.read.streamed import MOST, ShardStream

    ds = ShardDataset(shards, "train")
    run = make_loader("wds", shards, batch_size=32, crop=256, seed=seed, shuffle_buffer=buffer).plan_for(0)
    drops, stagers, out = Drops(ds), ThreadPoolExecutor(4), np.empty(128 << 20, np.uint8)
    read_over_split, t0 = split_reads(ds), time.perf_counter()
    if mode == "realstream":
        reader = ShardStream.of(ds, run, min(MOST, host_memory().available // 2))
        if reader is None:
            raise SystemExit("this run gets no ShardStream (its shuffle buffers' shards exceed the memory at hand)")
    else:
        reader = ReadAhead(ds, batches_within(ds, 32, 512 << 20))
        reader.reset(run)
    for b in range(0, len(run), 2):
        reader.follow(b)
        end = min(b + 2, len(run))
        call = np.concatenate([run[k].index for k in range(b, end)])
        stage(ds, stagers, out, call)
        if mode == "realstream":
            for span in reader.done(end - 1):
                drops.span(*span)
        else:
            drops.drop(call)
    drops.close()
    dt = time.perf_counter() - t0
    reader.close()
    return {"mode": mode, "pairs_per_s": len(run.all_index()) / dt, "read_over_split": read_over_split(),
            "letting_go_s": 0.0}


def costs(shards: str, ranges: int = 200, nbytes: int = 700 << 10) -> dict:
    """Microseconds of one fadvise DONTNEED of an nbytes range of the first shard, by how its pages came in: read
    with `pread` in file order or in a random order, asked for with WILLNEED in file order or in a random order (as
    the reader does), or not resident."""
    import random

    from pairload import willneed
    from pairload.read.shards import ShardDataset

    path = str(ShardDataset(shards, "train").files[0])
    fd = os.open(path, os.O_RDONLY)
    in_order = list(range(0, os.path.getsize(path) - nbytes, nbytes))[:ranges]
    shuffled = random.Random(0).sample(in_order, len(in_order))
    ways = {"read with pread, in file order": (in_order, lambda o: os.pread(fd, nbytes, o)),
            "read with pread, in a random order": (shuffled, lambda o: os.pread(fd, nbytes, o)),
            "asked for with WILLNEED, in file order": (in_order, lambda o: willneed.file_range(fd, o, nbytes)),
            "asked for with WILLNEED, in a random order": (shuffled, lambda o: willneed.file_range(fd, o, nbytes)),
            "not resident": (in_order, lambda o: None)}
    out, large = {}, {}
    try:
        for way, (offsets, bring) in ways.items():
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            for o in offsets:
                bring(o)
            time.sleep(1.0)  # the reads done
            if way != "not resident":  # (mapping a range's pages reads those not resident)
                large[way] = large_folio_share(fd, offsets[:8], nbytes)
            t = time.perf_counter()
            for o in offsets:
                os.posix_fadvise(fd, o, nbytes, os.POSIX_FADV_DONTNEED)
            out[way] = (time.perf_counter() - t) / len(offsets) * 1e6
    finally:
        os.close(fd)
    return {"us_per_range": out, "large_folio_share": large, "range_bytes": nbytes, "ranges": len(in_order),
            "cores": os.cpu_count()}


def large_folio_share(fd: int, offsets: list, nbytes: int) -> float | None:
    """The share of these ranges' resident pages that are parts of large folios (compound pages in
    /proc/kpageflags, read through a map of each range); None where that cannot be read (not root)."""
    import struct

    page, large, resident = mmap.PAGESIZE, 0, 0
    try:
        with open("/proc/self/pagemap", "rb") as pagemap, open("/proc/kpageflags", "rb") as flags:
            for o in offsets:
                start = o // page * page
                with mmap.mmap(fd, nbytes, access=mmap.ACCESS_READ, offset=start) as mm:
                    view = np.frombuffer(mm, np.uint8)
                    int(view[::page].sum())  # mapped, page by page
                    first = view.ctypes.data // page
                    for p in range(nbytes // page):
                        pagemap.seek((first + p) * 8)
                        entry = struct.unpack("Q", pagemap.read(8))[0]
                        if entry >> 63 & 1:
                            flags.seek((entry & ((1 << 55) - 1)) * 8)
                            bits = struct.unpack("Q", flags.read(8))[0]
                            resident += 1
                            large += bool(bits >> 15 & 1 or bits >> 16 & 1)  # compound head or tail
                    del view
    except OSError:
        return None
    return large / max(1, resident)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("shards")
    ap.add_argument("--limit-mb", type=int, default=0)
    ap.add_argument("--modes", default="inline,thread,cold,unmap,none,direct")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--costs", action="store_true", help="what dropping a range costs by how its pages came in")
    ap.add_argument("--buffer", type=int, default=None, help="the real modes' shuffle buffer (pairs)")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    here = Path(__file__).resolve().parent
    sys.path[:0] = [str(here.parent), str(here)]  # pairload, and `memory_limit`'s helpers
    if args.costs:
        print(json.dumps(costs(args.shards)), flush=True)
        return
    if args.child:
        mode, seed = args.child.split(":")
        run = (direct_epoch(args.shards, int(seed)) if mode == "direct" else
               stream_epoch(args.shards, int(seed), mode) if mode.startswith("stream") else
               real_epoch(args.shards, mode, int(seed), args.buffer) if mode.startswith("real") else
               epoch(args.shards, mode, int(seed)))
        print(json.dumps(run), flush=True)
        return
    from memory_limit import cgroup

    from pairload.bench.bounds import evict
    from pairload.read.shards import ShardDataset

    files = [str(f) for f in ShardDataset(args.shards, "train").files]
    for r in range(args.rounds):
        for mode in args.modes.split(","):
            evict(files)
            folder, peak = cgroup(f"pairload-drops-{mode}-{int(time.time())}", args.limit_mb << 20)
            cmd = ["sh", "-c", f'echo $$ > {folder}/cgroup.procs && exec "$0" "$@"', sys.executable, __file__,
                   args.shards, "--limit-mb", str(args.limit_mb), "--child", f"{mode}:{r}",
                   *(["--buffer", str(args.buffer)] if args.buffer else [])]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
            try:
                row = json.loads(proc.stdout.strip().splitlines()[-1])
            except (IndexError, ValueError):
                row = {"mode": mode, "status": f"failed (rc {proc.returncode})", "stderr": proc.stderr[-400:]}
            row.update(round=r, peak_mb=int((folder / peak).read_text()) >> 20 if (folder / peak).exists() else None)
            print(json.dumps(row), flush=True)
            try:
                folder.rmdir()
            except OSError:
                pass


if __name__ == "__main__":
    main()
