"""The device-resident split (`make_loader("ram", ..., resident=True)`): the split uploaded to device memory once,
each batch cut by one gather whose source indices already hold the crop and the flips/transposes."""

from __future__ import annotations

import numpy as np
import torch

from ..batch import make_batch
from ..errors import ConfigError
from ..plan import HFLIP, TRANSPOSE, VFLIP, BatchPlan


class DeviceStore:
    """A split as one (pixels, 6) uint8 tensor on the device: low RGB then high RGB of each pixel."""

    def __init__(self, ds, hw: np.ndarray, device: torch.device):
        self.device, self.hw = device, hw
        self.pixels, self.base, self.width = self._upload(ds, hw, device)

    @staticmethod
    def _upload(ds, hw: np.ndarray, device: torch.device):
        cuda = device.type == "cuda"
        sizes = hw[:, 0] * hw[:, 1]
        need = int(sizes.sum()) * 6
        if cuda:
            free, total = torch.cuda.mem_get_info(device)
            if need > 0.8 * free:
                raise ConfigError(f"split {ds.split!r} needs {need / 1e9:.2f} GB of device memory to be resident but "
                                  f"only {free / 1e9:.2f} GB of {total / 1e9:.2f} GB are free; use resident=False")
        base = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        store = torch.empty((int(sizes.sum()), 6), dtype=torch.uint8, device=device)
        chunk = torch.empty((int(sizes.max()), 6), dtype=torch.uint8, pin_memory=cuda)
        for i in range(len(hw)):
            low, high = ds.arrays(i)
            n = int(sizes[i])
            c = chunk[:n].numpy()
            c[:, :3] = low.reshape(n, 3)
            c[:, 3:] = high.reshape(n, 3)
            store[base[i]:base[i] + n].copy_(chunk[:n])  # synchronous: the staging buffer is reused next
        return store, torch.from_numpy(base).to(device), torch.from_numpy(hw[:, 1].copy()).to(device)

    def batches(self, plans: list[BatchPlan], augment: bool, keys, source):
        """One gather per batch: each output pixel's source index already includes crop, transpose and flips.
        `keys(bp)`, `source(bp)`: the rows' keys and source names."""
        dev = self.device
        if not plans:
            return
        # the whole epoch's plan goes to the device in one copy per field
        cat = lambda f: torch.from_numpy(np.concatenate([getattr(bp, f) for bp in plans])).to(dev)  # noqa: E731
        idx_all, y_all, x_all = cat("index"), cat("y"), cat("x")
        code_all = cat("code") if augment else torch.zeros_like(idx_all)
        pad_all = cat("padded")
        start = 0
        for bp in plans:
            n = len(bp)
            sl = slice(start, start + n)
            start += n
            h, w = bp.out_hw(self.hw)
            idx, code = idx_all[sl], code_all[sl]
            ar_h, ar_w = torch.arange(h, device=dev), torch.arange(w, device=dev)
            # output (i, j) <- hflip: j' = w-1-j; vflip: i' = h-1-i; transpose: source (j', i') else (i', j')
            ii = torch.where((code & VFLIP)[:, None] != 0, h - 1 - ar_h, ar_h)  # (n, h)
            jj = torch.where((code & HFLIP)[:, None] != 0, w - 1 - ar_w, ar_w)  # (n, w)
            t = ((code & TRANSPOSE) != 0)[:, None, None]
            rows = torch.where(t, jj[:, None, :], ii[:, :, None])  # (n, h, w)
            cols = torch.where(t, ii[:, :, None], jj[:, None, :])
            width = self.width[idx][:, None, None]
            flat = self.base[idx][:, None, None] + (y_all[sl][:, None, None] + rows) * width + x_all[sl][:, None, None] + cols
            pixels = self.pixels[flat].view(n, h, w, 2, 3).permute(3, 0, 1, 2, 4)
            yield make_batch(pixels, None, keys(bp), pad_all[sl], source(bp))
