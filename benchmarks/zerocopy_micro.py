"""Kernel variants of the zero-copy cut (pairload/loaders/zerocopy.py), timed on the registered shards of a split:
one program per window row per image vs both images per program, rows per program, warps. Prints pairs/s of each
(no loader, no Python per batch beyond the launch), next to the pinned host->device copy bound.
Usage: python benchmarks/zerocopy_micro.py SHARDS [--crop 256] [--batch 32]"""

import argparse
import json
import time

import numpy as np
import torch
import triton
import triton.language as tl

from pairload.loaders import zerocopy
from pairload.plan import PlanConfig, key_hashes, plan_epoch
from pairload.read.shards import open_shards


@triton.jit
def both(out_ptr, low_addr, high_addr, width, index, ys, xs, codes, n, h, w, BLOCK: tl.constexpr, ROWS: tl.constexpr):
    pid = tl.program_id(0)
    for rr in tl.static_range(ROWS):
        row = pid * ROWS + rr
        j = row // h
        r = row % h
        ok = j < n
        jj = tl.where(ok, j, 0)
        i = tl.load(index + jj)
        src_w = tl.load(width + i)
        y = tl.load(ys + jj)
        x = tl.load(xs + jj)
        code = tl.load(codes + jj)
        k = tl.arange(0, BLOCK)
        mask = (k < w * 3) & ok
        c = k // 3
        ch = k % 3
        off = ((y + r) * src_w + x) * 3 + k
        a = tl.load((tl.load(low_addr + i) + off).to(tl.pointer_type(tl.uint8)), mask=mask)
        b = tl.load((tl.load(high_addr + i) + off).to(tl.pointer_type(tl.uint8)), mask=mask)
        hflip = (code & 1) != 0
        vflip = (code & 2) != 0
        oi = tl.where((code & 4) != 0, tl.where(vflip, h - 1 - c, c), tl.where(vflip, h - 1 - r, r))
        oj = tl.where((code & 4) != 0, tl.where(hflip, w - 1 - r, r), tl.where(hflip, w - 1 - c, c))
        dst = (((jj.to(tl.int64) * h + oi) * w + oj) * 3 + ch)
        tl.store(out_ptr + dst, a, mask=mask)
        tl.store(out_ptr + n.to(tl.int64) * h * w * 3 + dst, b, mask=mask)


@triton.jit
def words8(out_ptr, low_addr, high_addr, width, index, ys, xs, codes, n, h, w, WB: tl.constexpr):
    """Aligned 8-byte loads covering the row, then the row's bytes picked out of them (tl.gather)."""
    row = tl.program_id(0)
    side = tl.program_id(1)
    j = row // h
    r = row % h
    i = tl.load(index + j)
    base = tl.where(side == 0, tl.load(low_addr + i), tl.load(high_addr + i))
    src_w = tl.load(width + i)
    y = tl.load(ys + j)
    x = tl.load(xs + j)
    code = tl.load(codes + j)
    start = base + ((y + r) * src_w + x) * 3
    al = start - (start % 8)
    s = (start - al).to(tl.int32)
    m = tl.arange(0, WB)
    wd = tl.load((al + 8 * m).to(tl.pointer_type(tl.int64)), mask=8 * m < w * 3 + s)
    b2 = (wd[:, None] >> (tl.arange(0, 8) * 8).to(tl.int64)[None, :]) & 0xFF
    stream = tl.reshape(b2, [8 * WB])
    k = tl.arange(0, 8 * WB)
    px = tl.gather(stream, tl.minimum(k + s, 8 * WB - 1), axis=0).to(tl.uint8)
    mask = k < w * 3
    c = k // 3
    ch = k % 3
    hflip = (code & 1) != 0
    vflip = (code & 2) != 0
    oi = tl.where((code & 4) != 0, tl.where(vflip, h - 1 - c, c), tl.where(vflip, h - 1 - r, r))
    oj = tl.where((code & 4) != 0, tl.where(hflip, w - 1 - r, r), tl.where(hflip, w - 1 - c, c))
    dst = out_ptr + (((side * n + j).to(tl.int64) * h + oi) * w + oj) * 3 + ch
    tl.store(dst, px, mask=mask)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("shards")
    ap.add_argument("--crop", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--out")
    a = ap.parse_args()
    dev = torch.device("cuda")
    ds = open_shards(a.shards)
    reg = zerocopy.Registration(ds, dev)
    cfg = PlanConfig(batch_size=a.batch, crop=a.crop, seed=0)
    plans = plan_epoch(cfg, key_hashes(ds.keys), ds.sizes, 0)
    def f(name):
        return torch.from_numpy(np.concatenate([getattr(bp, name) for bp in plans]).astype(np.int64)).to(dev)

    index, ys, xs, codes = f("index"), f("y"), f("x"), f("code")
    n, h = a.batch, a.crop
    nb = len(plans)
    out = torch.empty((2, n, h, h, 3), dtype=torch.uint8, device=dev)
    plan = zerocopy.plan_tensor(plans, dev, True)
    layout = ds.members.batch(n, h, h)
    ref = zerocopy.cut(reg, plan, 0, layout)
    results = {}

    def timeit(name, launch):
        launch(0)
        torch.cuda.synchronize()
        best = 0
        for _ in range(3):
            t0 = time.perf_counter()
            for b in range(nb):
                launch(b)
            torch.cuda.synchronize()
            best = max(best, nb * n / (time.perf_counter() - t0))
        results[name] = best
        print(f"{name}: {best:,.0f} pairs/s", flush=True)

    block = triton.next_power_of_2(h * 3)
    timeit("pairload.loaders.zerocopy.cut (4-byte words, 2 warps)",
           lambda b: zerocopy.cut(reg, plan, b * n, layout, out=out))
    wb = triton.next_power_of_2((h * 3 + 7) // 8 + 1)
    for warps in (1, 2, 4):
        def gw(b, warps=warps):
            words8[(n * h, 2)](out, reg.low, reg.high, reg.width, index[b*n:(b+1)*n], ys[b*n:(b+1)*n],
                               xs[b*n:(b+1)*n], codes[b*n:(b+1)*n], n, h, h, WB=wb, num_warps=warps)
        out.zero_()
        gw(0)
        torch.cuda.synchronize()
        assert torch.equal(out, ref), "8-byte variant differs"
        timeit(f"8-byte words warps={warps}", gw)
    for rows in (1,):
        for warps in (4,):
            def go(b, rows=rows, warps=warps):
                both[(triton.cdiv(n * h, rows),)](out, reg.low, reg.high, reg.width, index[b*n:(b+1)*n],
                                                  ys[b*n:(b+1)*n], xs[b*n:(b+1)*n], codes[b*n:(b+1)*n], n, h, h,
                                                  BLOCK=block, ROWS=rows, num_warps=warps)
            go(0)
            torch.cuda.synchronize()
            assert torch.equal(out, ref), "variant differs"
            timeit(f"byte loads, both images per program, warps={warps}", go)
    pinned = torch.empty(n * h * h * 6 * 8, dtype=torch.uint8, pin_memory=True)
    d = torch.empty_like(pinned, device=dev)
    d.copy_(pinned, non_blocking=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(50):
        d.copy_(pinned, non_blocking=True)
    torch.cuda.synchronize()
    results["h2d_pairs_per_s"] = 50 * pinned.numel() / (time.perf_counter() - t0) / (h * h * 6)
    print(f"pinned h2d bound: {results['h2d_pairs_per_s']:,.0f} pairs/s")
    if a.out:
        json.dump({"device": torch.cuda.get_device_name(), "results": results}, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
