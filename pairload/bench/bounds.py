"""The references a run is read against, measured in the same run: pinned host->device bandwidth, one core's decode
and crop-copy rates, the disk's cold sequential rate (each as pairs/s), and the two primitives the measurements
share with them: waiting for the device, and evicting files from the page cache."""

from __future__ import annotations

import os
import time

import numpy as np
import torch

from ..errors import ShardError


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def evict(files) -> None:
    """Drop the files' pages from the page cache (posix_fadvise DONTNEED; no root needed). Pages that a live
    process has mapped stay: close the loaders that map them first."""
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


COLD_RESIDENT_MAX = 0.02  # a read is cold when at most this share of the files' bytes is in the page cache


def resident_fraction(files) -> float:
    """The share of the files' bytes in the page cache now (mincore on a mapping, which reads nothing); 1.0 where
    the system cannot tell (no mincore): then nothing can be shown to be cold."""
    import ctypes
    import mmap

    try:
        mincore = ctypes.CDLL(None, use_errno=True).mincore
    except (OSError, AttributeError):
        return 1.0
    total = cached = 0
    for path in files:
        size = os.path.getsize(path)
        if not size:
            continue
        pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        vec = (ctypes.c_ubyte * pages)()
        mapped = np.memmap(path, dtype=np.uint8, mode="r")
        try:
            if mincore(ctypes.c_void_p(mapped.ctypes.data), ctypes.c_size_t(size), vec) != 0:
                return 1.0
        finally:
            del mapped
        total += pages
        cached += int((np.frombuffer(vec, np.uint8) & 1).sum())  # the low bit: resident
    return cached / total if total else 0.0


def _read_rate(files, seconds: float, streams: int) -> tuple[int, float]:
    """(bytes, seconds) of reading the files with `streams` threads at once, each its share of the files from start
    to end in 8 MB reads, until they are read or `seconds` have passed."""
    import threading

    deadline = time.perf_counter() + seconds
    counts = [0] * streams

    def read(k: int) -> None:
        buf = bytearray(8 << 20)
        for path in files[k::streams]:
            with open(path, "rb", buffering=0) as fh:
                while time.perf_counter() < deadline and (got := fh.readinto(buf)):
                    counts[k] += got
            if time.perf_counter() >= deadline:
                return

    t0 = time.perf_counter()
    threads = [threading.Thread(target=read, args=(k,), name=f"pairload-disk-{k}") for k in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts), time.perf_counter() - t0


def disk_bound(files, pair_bytes: int, seconds: float = 3.0, streams: int = 4) -> dict:
    """The disk's cold read bandwidth over the shard files as a pairs/s bound (`pair_bytes`: one stored pair): the
    better of one sequential stream and `streams` at once (a loader's workers read several shards at a time, and
    many disks serve that faster), each read after an eviction; with the share of the files still cached once
    evicted (`resident_before`: above COLD_RESIDENT_MAX, no read here is cold)."""
    files = list(files)
    evict(files)
    resident = resident_fraction(files)
    parallel = max(2, streams)
    read: dict[int, tuple[int, float]] = {}  # streams -> (bytes, seconds)
    for n in (1, parallel):
        evict(files)
        read[n] = _read_rate(files, seconds, n)
    evict(files)
    rate = {n: got / dt for n, (got, dt) in read.items()}  # bytes/s
    best = max(rate, key=rate.get)
    return {"gb_per_s": rate[best] / 1e9, "pairs_per_s": rate[best] / pair_bytes, "bytes_read": read[best][0],
            "streams": best, "sequential_gb_per_s": rate[1] / 1e9, "parallel_gb_per_s": rate[parallel] / 1e9,
            "parallel_streams": parallel, "resident_before": round(resident, 4)}


def h2d_bound(device: torch.device, pair_bytes: int, size: int = 256 * 2**20) -> dict:
    """Pinned host→device bandwidth (or host memcpy bandwidth on a CPU device) as a pairs/s bound."""
    src = torch.empty(size, dtype=torch.uint8, pin_memory=device.type == "cuda")
    src.fill_(1)
    dst = torch.empty(size, dtype=torch.uint8, device=device)
    for _ in range(2):
        dst.copy_(src, non_blocking=True)
    sync(device)
    reps = 10
    t0 = time.perf_counter()
    for _ in range(reps):
        dst.copy_(src, non_blocking=True)
    sync(device)
    gbps = size * reps / (time.perf_counter() - t0) / 1e9
    return {"kind": "pinned host->device" if device.type == "cuda" else "host memcpy", "gb_per_s": gbps,
            "pairs_per_s": gbps * 1e9 / pair_bytes}


def decode_rate(raw: str | None, split: str, seconds: float = 2.0) -> dict | None:
    """Single-core cv2 decode rate of the raw images (images/s and pairs/s for one core and for all)."""
    if raw is None:
        return None
    import cv2

    from ..folders.discover import find_pairs
    from ..folders.filetypes import is_camera_raw

    pairs = find_pairs(raw).splits().get(split, [])[:64]
    if not pairs:
        return None
    files = [p.low for p in pairs] + [p.high for p in pairs]
    if any(is_camera_raw(f) for f in files):
        return None  # LibRaw, not OpenCV, decodes these: the libraw-per-access row measures that
    threads = cv2.getNumThreads()
    cv2.setNumThreads(1)  # one core's rate; the process's own setting is restored below
    try:
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            cv2.imread(str(files[n % len(files)]), cv2.IMREAD_COLOR)
            n += 1
        rate = n / (time.perf_counter() - t0)
    finally:
        cv2.setNumThreads(threads)
    cores = os.cpu_count() or 1
    return {"images_per_s_per_core": rate, "pairs_per_s_per_core": rate / 2, "cores": cores,
            "pairs_per_s_all_cores": rate / 2 * cores, "format": files[0].suffix.lstrip(".")}


def stored_bound(ds, device: torch.device, seconds: float = 1.0, crop: int | None = None) -> dict:
    """What a pair costs as stored: bytes per pair, and, for a split stored encoded (`pack --store encoded`), how fast
    its members decode on one CPU core, by the readers' own decode (`imageformats`, as the workers decode), each
    format that has members among the first 64 samples: JPEG (`cpu_images_per_s_per_core`) and tiles
    (`tiles_cpu_images_per_s_per_core`); on a CUDA device, its JPEG members (`gpu_images_per_s`: nvImageCodec in
    batches of 64, as the decode path does; None without it or without JPEG members) and its tiled members
    (`tiles_gpu_images_per_s`: nvCOMP and the untiling kernel, 64 a call, the tiles a `crop`-pixel window at each
    image's centre touches, as the decode path decodes a crop's; every tile without `crop`)."""
    encoded = ds.index.encoding.per_member
    out = {"bytes_per_pair": sum(ds.shard_bytes) / max(1, len(ds)), "store": "encoded" if encoded else "decoded"}
    if not encoded:
        return out
    from ..format import imageformats

    found = _sampled_members(ds)
    for fmt, key in ((imageformats.JPEG, "cpu_images_per_s_per_core"),
                     (imageformats.TILES, "tiles_cpu_images_per_s_per_core")):
        if found.get(fmt.name):
            out[key] = _cpu_decode_rate(fmt, found[fmt.name], seconds)
    jpegs = [data for data, *_ in found.get(imageformats.JPEG.name, [])]
    out["gpu_images_per_s"] = _gpu_decode_rate(jpegs, device, seconds) if device.type == "cuda" and jpegs else None
    tiled = found.get(imageformats.TILES.name, [])
    out["tiles_gpu_images_per_s"] = (_gpu_tiles_rate(tiled, device, seconds, crop) if device.type == "cuda" and tiled
                                     else None)
    return out


def _sampled_members(ds, samples: int = 64) -> dict[str, list[tuple]]:
    """The distinct stored members of the first `samples` samples by format name: (bytes, member type, h, w) each (a
    targets-only sample's one member taken as its target)."""
    from ..format import imageformats

    rows = ds.stored_members(np.arange(min(samples, len(ds))))
    m, seen, out = ds.members, set(), {}
    for j in range(len(rows.shard)):
        h, w = (int(v) for v in ds.index.hw[j])
        for k in (1, 0):
            shard, start, n = int(rows.shard[j]), int(rows.offset[j, k]), int(rows.length[j, k])
            if (shard, start) in seen:
                continue
            seen.add((shard, start))
            s = m.scale if k else 1
            out.setdefault(imageformats.BY_CODE[int(rows.format[j, k])].name, []).append(
                (ds.shard_map(shard)[start:start + n], m.side(k), h * s, w * s))
    return out


def _cpu_decode_rate(fmt, members: list[tuple], seconds: float) -> float:
    """Images/s one core decodes `members` at ((bytes, member type, h, w) each) by `fmt`'s decode."""
    import cv2

    threads = cv2.getNumThreads()
    cv2.setNumThreads(1)  # one core's rate; the process's own setting is restored below
    try:
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            fmt.decode(*members[n % len(members)])
            n += 1
        return n / (time.perf_counter() - t0)
    finally:
        cv2.setNumThreads(threads)


def _gpu_decode_rate(data: list, device: torch.device, seconds: float) -> float | None:
    from ..cut.memory.decoders import decoder_missing, gpu_decoders

    if decoder_missing():
        return None
    decoders = gpu_decoders(device)
    if not decoders:
        return None
    batch = (data * (64 // len(data) + 1))[:64]
    stream = torch.cuda.current_stream(device).cuda_stream
    decoders.decode(batch, stream)
    sync(device)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        decoders.decode(batch, stream)
        n += len(batch)
    sync(device)
    return n / (time.perf_counter() - t0)


def _gpu_tiles_rate(members: list[tuple], device: torch.device, seconds: float, crop: int | None) -> float | None:
    """Images/s the GPU decodes tiled `members` ((bytes, member type, h, w) each) at, 64 a call, staged and decoded as
    the decode path does (each tile's CRC-32 checked at its first staging only); None without nvCOMP's library."""
    from ..cut.memory.nvcomp import nvcomp_missing

    if nvcomp_missing():
        return None
    from ..cut.memory.tiles import TileDecoder, plan_of
    from ..format.tiles import read_tiled

    parsed = []
    for data, member, h, w in (members * (64 // len(members) + 1))[:64]:
        t = read_tiled(data, member, h, w, check_crc=False)
        ch, cw = (h, w) if crop is None else (min(crop, h), min(crop, w))
        parsed.append((data, t, t.touched((h - ch) // 2, (w - cw) // 2, ch, cw)))
    plan, table = plan_of(parsed)
    sources = [data for data, _, _ in parsed]

    def bad(m: int, what: str) -> Exception:
        return ShardError(f"a tiled member sampled for the decode bound {what}")

    decoder = TileDecoder(device)
    try:
        with torch.cuda.device(device):
            decoder.submit(decoder.stage(plan, sources, bad, table))
            sync(device)
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                decoder.submit(decoder.stage(plan, sources, bad, table))
                n += len(parsed)
            sync(device)
            return n / (time.perf_counter() - t0)
    finally:
        decoder.close()


def copy_rate(shards: str, split: str, crop: int, seconds: float = 1.5) -> dict:
    """Single-core rate of copying crop pairs (of the split's member types; the target's at its scale) out of the
    memory-mapped shards."""
    from ..read.shards import ShardDataset

    ds = ShardDataset(shards, split)
    m = ds.members
    s = m.scale
    rng = np.random.default_rng(0)
    out_low = np.empty((crop, crop, m.low.channels), m.low.np_dtype)
    out_high = np.empty((s * crop, s * crop, m.high.channels), m.high.np_dtype)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        i = int(rng.integers(len(ds)))
        low, high = ds.arrays(i)
        y = int(rng.integers(low.shape[0] - crop + 1))
        x = int(rng.integers(low.shape[1] - crop + 1))
        out_low[:] = low[y:y + crop, x:x + crop]
        out_high[:] = high[s * y:s * (y + crop), s * x:s * (x + crop)]
        n += 1
    return {"pairs_per_s_per_core": n / (time.perf_counter() - t0)}
