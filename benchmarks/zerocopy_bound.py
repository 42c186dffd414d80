"""What bounds the zero-copy and resident cuts on a CUDA device, measured on one split (no loader Python per batch):

- `h2d`: the pinned host->device copy bound (one large copy, the copy engine);
- `ceiling`: a kernel reading one large registered range with 16-byte loads (the SMs' zero-copy bound over PCIe);
- `cut gN`: `pairload.loaders.zerocopy.cut` over the page cache (registered whole) and over a device copy
  (`resident`), N batches per launch, GPU time only (CUDA events around the launches);
- `resident bytes gN wW`: the cut from the device copy with one byte load per byte (no words, no gather);
- `resident rows g16` / `resident tilesT wW g16`: the device copy cut by rows (the page cache's kernel) and by TxT tiles
  with W warps (`pairload.loaders.tiles`, what cuts a resident split of 8-bit RGB), checked equal;
- `rows of 768 B at S`: rows of a crop's length read at offset S of a 128-byte line (what partial lines cost);
- `dma gN`: the windows copied by the copy engine, one 2D copy per window and side (`cuMemcpy3DBatchAsync`), into a
  staging block (no orientation), with the CPU time of building and issuing the copies.

    python benchmarks/zerocopy_bound.py SHARDS [--crop 256] [--batch 32] [--resident-only] [--out F.json]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import time

import numpy as np
import torch
import triton
import triton.language as tl

from pairload import make_loader
from pairload.loaders import zerocopy
from pairload.loaders.kernel_plan import window as _window
from pairload.loaders.pins import Driver


@triton.jit
def ceiling_kernel(out_ptr, anchor, src_off, BLOCK: tl.constexpr):
    """Copy BLOCK int32 words per program from the registered range at anchor + src_off (in words)."""
    pid = tl.program_id(0)
    off = tl.multiple_of(src_off + pid * BLOCK, 4)
    w = tl.load(anchor + off + tl.arange(0, BLOCK))
    tl.store(out_ptr + pid * BLOCK + tl.arange(0, BLOCK), w)


@triton.jit
def bytes_kernel(out_ptr, low_addr, high_addr, width, plan, start, total, n, h, w, BLOCK: tl.constexpr):
    """`zerocopy.cut` for uint8 RGB pairs of one size with one byte load per byte (no words, no gather): what a
    resident copy (device memory, no PCIe requests) is cut at."""
    row = tl.program_id(0)
    side = tl.program_id(1)
    j = row // h
    r = row % h
    base, src_w, y, x, code = _window(plan, start, j, total, side, low_addr, high_addr, width)
    k = tl.arange(0, BLOCK)
    mask = k < w * 3
    px = tl.load((base + ((y + r) * src_w + x) * 3 + k).to(tl.pointer_type(tl.uint8)), mask=mask)
    c = k // 3
    hflip = (code & 1) != 0
    vflip = (code & 2) != 0
    transpose = (code & 4) != 0
    oi = tl.where(transpose, tl.where(vflip, h - 1 - c, c), tl.where(vflip, h - 1 - r, r))
    oj = tl.where(transpose, tl.where(hflip, w - 1 - r, r), tl.where(hflip, w - 1 - c, c))
    dst = out_ptr + tl.where(side == 0, 0, n.to(tl.int64) * h * w * 3) + ((j.to(tl.int64) * h + oi) * w + oj) * 3
    tl.store(dst + k % 3, px, mask=mask)


@triton.jit
def rows_kernel(out_ptr, anchor, src_off, PITCH_WORDS: tl.constexpr, SHIFT_WORDS: tl.constexpr,
                ROW_WORDS: tl.constexpr, WORDS: tl.constexpr):
    """Program p reads ROW_WORDS words at word PITCH_WORDS * p + SHIFT_WORDS of the registered range (rows as a
    crop's, at a chosen alignment) with 16-byte loads."""
    pid = tl.program_id(0)
    m = tl.arange(0, WORDS)
    off = tl.multiple_of(src_off + pid * PITCH_WORDS + SHIFT_WORDS, 4)
    w = tl.load(anchor + off + m, mask=m < ROW_WORDS)
    tl.store(out_ptr + pid * ROW_WORDS + m, w, mask=m < ROW_WORDS)


OP = np.dtype([("st", "<u4"), ("sp", "<u4"), ("sptr", "<u8"), ("srow", "<u8"), ("slay", "<u8"), ("sl", "<i8"),
               ("dt", "<u4"), ("dp", "<u4"), ("dptr", "<u8"), ("drow", "<u8"), ("dlay", "<u8"), ("dl", "<i8"),
               ("w", "<u8"), ("h", "<u8"), ("d", "<u8"), ("order", "<u4"), ("flags", "<u4")])
assert OP.itemsize == 112


def gpu_time(launch, count: int, repeats: int = 3) -> float:
    """Best seconds of GPU time for `launch(k)`, k in range(count), all queued then timed by events."""
    launch(0)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for k in range(count):
            launch(k)
        b.record()
        b.synchronize()
        best = min(best, a.elapsed_time(b) / 1e3)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("shards")
    ap.add_argument("--crop", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--out")
    ap.add_argument("--resident-only", action="store_true", help="only the resident copy's rows and tiles")
    a = ap.parse_args()
    dev = torch.device("cuda")
    n, h = a.batch, a.crop
    pair = 2 * h * h * 3
    results: dict = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"), "crop": h, "batch": n}

    def note(name, value, unit="pairs/s"):
        results[name] = value
        print(f"{name}: {value:,.0f} {unit}" if isinstance(value, float) else f"{name}: {value}", flush=True)

    # the h2d bound: one 403 MB pinned copy, best of 5
    host = torch.empty(1024 * pair, dtype=torch.uint8, pin_memory=True)
    devbuf = torch.empty_like(host, device=dev)
    t = gpu_time(lambda k: devbuf.copy_(host, non_blocking=True), 1, 5)
    note("h2d", 1024 / t)

    loader = make_loader("ram", a.shards, batch_size=n, crop=h, device="cuda", seed=0)
    loader.set_epoch(0)
    for _ in loader:  # registers the split (and settles it: one registration per shard)
        pass
    loader.set_epoch(1)
    for _ in loader:
        pass
    torch.cuda.synchronize()
    pins = loader.cutter.memory
    ds = loader.ds
    plans = [bp for e in range(8) for bp in loader.plan_for(e)]  # 8 epochs: room for 64 batches a launch
    nb = len(plans)
    plan = zerocopy.plan_tensor(plans, dev, True)
    members = ds.members
    copy = zerocopy.DeviceCopy(ds, dev)

    for name, source in () if a.resident_only else (("zero-copy", pins), ("resident", copy)):
        ref = zerocopy.cut(source, plan, 0, members.batch(n, h, h))
        for g in (1, 4, 16, 64):
            launch = zerocopy.Launch.of(members.batch(g * n, h, h))
            out = torch.empty(launch.out_shape, dtype=torch.uint8, device=dev)
            count = nb // g
            t = gpu_time(lambda k, g=g, out=out, launch=launch, source=source:
                         zerocopy.cut(source, plan, k * g * n, launch, out=out), count)
            note(f"{name} cut g{g}", count * g * n / t)
            # launch cost on the CPU (queued, not waited for)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for k in range(count):
                zerocopy.cut(source, plan, k * g * n, launch, out=out)
            cpu = (time.perf_counter() - t0) / count
            torch.cuda.synchronize()
            note(f"{name} launch g{g} us", cpu * 1e6, "us")
        assert torch.equal(ref, zerocopy.cut(source, plan, 0, members.batch(n, h, h)))

    # the resident copy cut by rows (the page cache's kernel) against by tiles (`pairload.loaders.tiles`: what a
    # device copy of 8-bit RGB is cut by), tile sizes and warps
    from pairload.loaders import tiles

    launch = zerocopy.Launch.of(members.batch(16 * n, h, h))
    rows_out = zerocopy.cut(copy, plan, 0, launch, tiled=False)
    t = gpu_time(lambda k: zerocopy.cut(copy, plan, k * 16 * n, launch, out=rows_out, tiled=False), nb // 16)
    note("resident rows g16", (nb // 16) * 16 * n / t)
    rows_ref = zerocopy.cut(copy, plan, 0, launch, tiled=False)
    for tile in (32, 64):
        for warps in (4, 8):
            tiles.TILE, tiles.WARPS = tile, warps
            out = zerocopy.cut(copy, plan, 0, launch, tiled=True)
            note(f"resident tiles{tile} w{warps} g16 equal", bool(torch.equal(out, rows_ref)))
            t = gpu_time(lambda k, out=out: zerocopy.cut(copy, plan, k * 16 * n, launch, out=out, tiled=True),
                         nb // 16)
            note(f"resident tiles{tile} w{warps} g16", (nb // 16) * 16 * n / t)
    tiles.TILE, tiles.WARPS = 64, 4
    if a.resident_only:
        return done(loader, results, a.out)

    anchor = torch.zeros(16, dtype=torch.int32, device=dev)  # the 16-byte aligned base the kernels address from

    # byte loads from device memory (the resident copy)
    ref = zerocopy.cut(copy, plan, 0, members.batch(n, h, h)).reshape(-1)
    for g in (4, 16):
        for warps in (2, 4):
            out = torch.empty(2 * g * n * h * h * 3, dtype=torch.uint8, device=dev)
            def go(k, g=g, out=out, warps=warps):
                bytes_kernel[(g * n * h, 2)](out, copy.low, copy.high, copy.width, plan, k * g * n, plan.shape[1],
                                             g * n, h, h, BLOCK=triton.next_power_of_2(h * 3), num_warps=warps)
            go(0)
            torch.cuda.synchronize()
            got = torch.cat([out[:n * h * h * 3], out[g * n * h * h * 3:(g * n + n) * h * h * 3]])
            note(f"resident bytes g{g} w{warps} equal", bool(torch.equal(got, ref)))
            note(f"resident bytes g{g} w{warps}", (nb // g) * g * n / gpu_time(go, nb // g))

    # the SMs' zero-copy ceiling: one shard read whole (registered), 16-byte loads
    shard0 = pins._maps.get(0)
    if shard0 is None:
        shard0 = pins._map(0)
    addr = Driver.device_pointer(shard0.ctypes.data) if not pins.host_pointers else shard0.ctypes.data
    span = (len(shard0) // (4 * 4096)) * 4 * 4096
    out = torch.empty(span, dtype=torch.uint8, device=dev)
    off = (addr - anchor.data_ptr())
    assert off % 16 == 0
    t = gpu_time(lambda k: ceiling_kernel[(span // (4 * 4096),)](out, anchor, off // 4, BLOCK=4096, num_warps=8), 8)
    note("ceiling", 8 * span / t / pair)
    for bw in (1024, 256):
        t = gpu_time(lambda k, bw=bw: ceiling_kernel[(span // (4 * bw),)](out, anchor, off // 4, BLOCK=bw,
                                                                         num_warps=2), 8)
        note(f"ceiling block{bw * 4}", 8 * span / t / pair)

    # 768-byte rows 2048 bytes apart, at offsets 0, 32, 64 and 112 in a 128-byte line: which granularity PCIe reads
    for shift in (0, 32, 64, 112):
        rows = span // 2048 - 1
        t = gpu_time(lambda k, shift=shift, rows=rows: rows_kernel[(rows,)](
            out, anchor, off // 4, PITCH_WORDS=512, SHIFT_WORDS=shift // 4, ROW_WORDS=192, WORDS=256, num_warps=2), 8)
        note(f"rows of 768 B at {shift}", 8 * rows * 768 / t / pair)

    # the copy engine: one 2D copy per window and side
    lib = Driver.lib()
    fn = getattr(lib, "cuMemcpy3DBatchAsync_v2", None)
    v2 = fn is not None
    if fn is None:
        fn = getattr(lib, "cuMemcpy3DBatchAsync", None)
    note("dma v2 symbol", v2)
    if fn is None:
        note("dma", "cuMemcpy3DBatchAsync missing")
    else:
        low_t, high_t, width_t = (t.cpu().numpy() for t in (pins.low, pins.high, pins.width))
        p = plan.cpu().numpy()
        flat = plan.clone()
        flat[3] = 0  # the windows unoriented, as the copies land
        expect = zerocopy.cut(pins, flat, 0, members.batch(n, h, h))
        for g in (1, 4, 16):
            stage = torch.empty(2 * g * n * h * h * 3, dtype=torch.uint8, device=dev)
            count = nb // g

            def ops_for(k, g=g, stage=stage):
                cols = p[:, k * g * n:(k + 1) * g * n]
                i, y, x = cols[0], cols[1], cols[2]
                ops = np.zeros(2 * g * n, dtype=OP)
                src_w = width_t[i] * 3
                begin = np.concatenate([low_t[i], high_t[i]]) + np.tile(y * src_w + x * 3, 2)
                ops["st"] = ops["dt"] = 1
                ops["sptr"] = begin
                ops["srow"] = np.tile(src_w, 2)
                ops["slay"] = ops["dlay"] = h
                ops["dptr"] = stage.data_ptr() + np.arange(2 * g * n, dtype=np.uint64) * (h * h * 3)
                ops["drow"] = h * 3
                ops["w"], ops["h"], ops["d"] = h * 3, h, 1
                ops["order"] = 1  # CU_MEMCPY_SRC_ACCESS_ORDER_STREAM
                return ops

            prepared = [ops_for(k) for k in range(count)]
            side = torch.cuda.Stream()
            torch.cuda.set_stream(side)
            stream = side.cuda_stream
            fail = ctypes.c_size_t(0)

            def issue(k, prepared=prepared, stream=stream, fail=fail):  # noqa: B023
                ops = prepared[k]
                if v2:
                    rc = fn(ctypes.c_size_t(len(ops)), ops.ctypes.data_as(ctypes.c_void_p), ctypes.c_ulonglong(0),
                            ctypes.c_void_p(stream))
                else:
                    rc = fn(ctypes.c_size_t(len(ops)), ops.ctypes.data_as(ctypes.c_void_p), ctypes.byref(fail),
                            ctypes.c_ulonglong(0), ctypes.c_void_p(stream))
                if rc:
                    raise RuntimeError(f"cuMemcpy3DBatchAsync: {rc} (fail index {fail.value})")
            try:
                issue(0)
                torch.cuda.synchronize()
                got = torch.stack([stage[:n * h * h * 3].view(n, h, h, 3),
                                   stage[g * n * h * h * 3:(g * n + n) * h * h * 3].view(n, h, h, 3)])
                note(f"dma g{g} first batch equal (unoriented)", bool(torch.equal(got, expect)))
                note(f"dma g{g}", count * g * n / gpu_time(issue, count))
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for k in range(count):
                    ops_for(k)
                note(f"dma g{g} build us", (time.perf_counter() - t0) / count * 1e6, "us")
                t0 = time.perf_counter()
                for k in range(count):
                    issue(k)
                note(f"dma g{g} issue us", (time.perf_counter() - t0) / count * 1e6, "us")
                torch.cuda.synchronize()
            except Exception as exc:  # noqa: BLE001 - report and go on
                note(f"dma g{g}", f"failed: {exc}")
                break
            finally:
                torch.cuda.set_stream(torch.cuda.default_stream())
    done(loader, results, a.out)


def done(loader, results: dict, out: str | None) -> None:
    loader.close()
    if out:
        with open(out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
