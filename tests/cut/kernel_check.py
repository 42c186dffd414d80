"""Run as a script (a subprocess of test_kernel.py): cut windows of every orientation from host memory with the GPU
kernel (on a CUDA device, or on the CPU under Triton's interpreter with TRITON_INTERPRET=1) for several member types
and compare each with the numpy reference (`pairload.dihedral.orient`). Prints one line per member type."""

from __future__ import annotations

import sys

import numpy as np
import torch

from pairload.dihedral import CODES, orient
from pairload.format.members import DEFAULT, Member, Members
from pairload.cut import kernel


class Source:
    def __init__(self, low, high, width):
        self.low, self.high, self.width = low, high, width


def check(members: Members, device: torch.device, n: int = 3, H: int = 12, W: int = 16, h: int = 6, w: int = 6) -> int:
    rng = np.random.default_rng(0)
    s = members.scale
    imgs = [(rng.integers(0, 1 << 16, (H, W, members.low.channels)).astype(members.low.np_dtype),
             rng.integers(0, 1 << 16, (H * s, W * s, members.high.channels)).astype(members.high.np_dtype))
            for _ in range(n)]
    # every image at an odd offset of one buffer, as pixels lie after a .npy header in a shard
    flat, offsets, pos = [], [], 3
    for pair in imgs:
        for arr in pair:
            offsets.append(pos)
            flat.append(np.zeros(pos - sum(len(f) for f in flat), np.uint8))
            flat.append(arr.view(np.uint8).ravel())
            pos += arr.nbytes + 5
    buf = torch.from_numpy(np.concatenate(flat + [np.zeros(64, np.uint8)])).to(device)
    addr = buf.data_ptr() + torch.tensor(offsets, dtype=torch.int64)
    src = Source(addr[0::2].contiguous().to(device), addr[1::2].contiguous().to(device),
                 torch.full((n,), W, dtype=torch.int64, device=device))
    ys, xs = rng.integers(0, H - h + 1, n), rng.integers(0, W - w + 1, n)
    bad = 0
    for code in CODES:
        plan = torch.tensor(np.stack([np.arange(n), ys, xs, np.full(n, code)]), dtype=torch.int64, device=device)
        layout = members.batch(n, h, w)
        low, high = layout.views(kernel.cut(src, plan, 0, kernel.Launch.of(layout, s)).cpu().numpy().reshape(-1))
        for j, (lo, hi) in enumerate(imgs):
            y, x = ys[j], xs[j]
            bad += not np.array_equal(low[j], orient(lo[y:y + h, x:x + w], code))
            bad += not np.array_equal(high[j], orient(hi[y * s:(y + h) * s, x * s:(x + w) * s], code))
    print(f"{members.describe()}: {bad} wrong windows", flush=True)
    return bad


if __name__ == "__main__":
    device = torch.device(sys.argv[1])
    kinds = [DEFAULT, Members(Member("uint16", 4), Member("uint16", 3), 2), Members(Member("uint8", 1),
                                                                                   Member("uint16", 3), 1)]
    sys.exit(1 if sum(check(m, device) for m in kinds) else 0)
