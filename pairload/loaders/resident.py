"""The `gather` cutter (`make_loader("ram", ..., resident=True)` where the GPU kernel cannot run, e.g. on a CPU
device): the split copied once into device memory, each side as one (pixels, pixel bytes) table, and each batch cut
by one gather per side whose source indices already hold the crop and the orientation (`pairload.dihedral`)."""

from __future__ import annotations

import numpy as np
import torch

from ..batch import TORCH_DTYPES
from ..dihedral import HFLIP, TRANSPOSE, VFLIP
from ..errors import ConfigError
from ..plan import BatchPlan
from .cut import Cut


def check_room(ds, need: int, device: torch.device) -> None:
    """Refuse a resident split of `need` bytes that would take more than 80% of the device's free memory."""
    if device.type != "cuda":
        return
    free, total = torch.cuda.mem_get_info(device)
    if need > 0.8 * free:
        raise ConfigError(f"split {ds.split!r} needs {need / 1e9:.2f} GB of device memory to be resident but "
                          f"only {free / 1e9:.2f} GB of {total / 1e9:.2f} GB are free; use resident=False")


class DeviceStore:
    path = "gather"
    on_device = True

    def __init__(self, ds, device: torch.device):
        self.ds, self.device, self.members = ds, device, ds.members
        self.hw = np.asarray(ds.sizes, dtype=np.int64)
        self.sides = self._upload(ds, self.hw, device)

    def _upload(self, ds, hw: np.ndarray, device: torch.device):
        """Per side: (table, first pixel of each sample, each sample's width), on the device."""
        m = self.members
        area = hw[:, 0] * hw[:, 1]
        check_room(ds, int(area.sum()) * m.bytes_per_input_pixel, device)
        sides = []
        for k, member in enumerate((m.low, m.high)):
            s = m.scale if k else 1
            sizes = area * s * s
            base = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
            table = torch.empty((int(sizes.sum()), member.pixel_bytes), dtype=torch.uint8, device=device)
            for i in range(len(hw)):
                pixels = np.array(ds.arrays(i)[k], order="C").view(np.uint8)  # writable: torch warns otherwise
                pixels = pixels.reshape(-1, member.pixel_bytes)
                table[base[i]:base[i] + len(pixels)].copy_(torch.from_numpy(pixels))
            sides.append((table, torch.from_numpy(base).to(device), torch.from_numpy(hw[:, 1] * s).to(device)))
        return sides

    def start(self) -> None:
        """Nothing to start: no worker processes."""

    def worker_pids(self) -> list[int]:
        return []

    def close(self) -> None:
        """The copy stays for the loader's life (iterating again uses it)."""

    def cuts(self, run: tuple, plans: list[BatchPlan], reclaim=None, *, augment: bool = True):
        """One gather per side and batch: each output pixel's source index already includes crop and orientation."""
        dev = self.device
        if not plans:
            return
        # the whole run's plan goes to the device in one copy per field
        cat = lambda f: torch.from_numpy(np.concatenate([getattr(bp, f) for bp in plans])).to(dev)  # noqa: E731
        idx_all, y_all, x_all = cat("index"), cat("y"), cat("x")
        code_all = cat("code") if augment else torch.zeros_like(idx_all)
        start = 0
        for bp in plans:
            n = len(bp)
            sl = slice(start, start + n)
            start += n
            h, w = bp.out_hw(self.hw)
            layout = self.members.batch(n, h, w)
            out = []
            for k, (table, base, width) in enumerate(self.sides):
                s = self.members.scale if k else 1
                member = layout.high if k else layout.low
                pixels = self._gather(table, base, width, idx_all[sl], y_all[sl] * s, x_all[sl] * s, code_all[sl],
                                      h * s, w * s)
                out.append(pixels.view(n, h * s, w * s, -1).view(TORCH_DTYPES[member.dtype]).view(n, h * s, w * s,
                                                                                             member.channels))
            yield Cut(bp, layout, None, True, sides=tuple(out))

    @staticmethod
    def _gather(table, base, width, idx, y, x, code, h: int, w: int) -> torch.Tensor:
        dev = table.device
        ar_h, ar_w = torch.arange(h, device=dev), torch.arange(w, device=dev)
        # output (i, j) <- hflip: j' = w-1-j; vflip: i' = h-1-i; transpose: source (j', i') else (i', j')
        ii = torch.where((code & VFLIP)[:, None] != 0, h - 1 - ar_h, ar_h)  # (n, h)
        jj = torch.where((code & HFLIP)[:, None] != 0, w - 1 - ar_w, ar_w)  # (n, w)
        t = ((code & TRANSPOSE) != 0)[:, None, None]
        rows = torch.where(t, jj[:, None, :], ii[:, :, None])  # (n, h, w)
        cols = torch.where(t, ii[:, :, None], jj[:, None, :])
        wd = width[idx][:, None, None]
        flat = base[idx][:, None, None] + (y[:, None, None] + rows) * wd + x[:, None, None] + cols
        return table[flat]

