"""The baselines users run today, measured next to pairload's loaders: map-style Datasets that read and crop the
image files per item (`NaivePilPairs`, `Cv2DiskPairs`) behind a torch DataLoader, wrapped (`TorchBaseline`) so that
the benchmark drives them through the same surface as a pairload loader."""

from __future__ import annotations

import multiprocessing
import random
from functools import partial
from typing import NamedTuple

import numpy as np
import psutil
import torch
from torch.utils.data import DataLoader, Dataset

from ..forking import start_method
from ..hooks import Hooks


class Pairs(NamedTuple):
    """A baseline's batch: (low, high) on the device, read as `batch.low`/`batch.high` like a `PairBatch`."""

    low: torch.Tensor
    high: torch.Tensor


class FolderPairs(Dataset):
    """A map-style Dataset over discovered pairs that reads files per item, as hand-written Datasets do."""

    def __init__(self, pairs, crop: int):
        self.pairs, self.crop = pairs, crop

    def __len__(self) -> int:
        return len(self.pairs)

    def window(self, height: int, width: int) -> tuple[int, int]:
        return random.randint(0, height - self.crop), random.randint(0, width - self.crop)


class NaivePilPairs(FolderPairs):
    """The reference blog's Dataset: PIL opens both files per item, float conversion on the CPU, paired crop."""

    def __getitem__(self, i: int):
        from PIL import Image

        p = self.pairs[i]
        low = torch.from_numpy(np.asarray(Image.open(p.low).convert("RGB"), dtype=np.float32) / 255.0).permute(2, 0, 1)
        high = torch.from_numpy(np.asarray(Image.open(p.high).convert("RGB"), dtype=np.float32) / 255.0)
        high = high.permute(2, 0, 1)
        y, x = self.window(low.shape[1], low.shape[2])
        return low[:, y:y + self.crop, x:x + self.crop], high[:, y:y + self.crop, x:x + self.crop]


class Cv2DiskPairs(FolderPairs):
    """A BasicSR-style paired dataset: cv2.imread of both files, paired random crop and flips on the CPU, uint8."""

    def __getitem__(self, i: int):
        import cv2

        p = self.pairs[i]
        low, high = cv2.imread(str(p.low), cv2.IMREAD_COLOR), cv2.imread(str(p.high), cv2.IMREAD_COLOR)
        y, x = self.window(low.shape[0], low.shape[1])
        low, high = low[y:y + self.crop, x:x + self.crop], high[y:y + self.crop, x:x + self.crop]
        if random.random() < 0.5:
            low, high = low[:, ::-1], high[:, ::-1]

        def to(a):
            return torch.from_numpy(np.ascontiguousarray(a[..., ::-1])).permute(2, 0, 1)

        return to(low), to(high)


def _worker_init(pids, worker_id: int) -> None:
    import os

    import cv2

    cv2.setNumThreads(1)
    pids[worker_id] = os.getpid()  # torch lists no worker pids publicly: each worker writes its own


class TorchBaseline:
    """Wraps a baseline DataLoader so that it yields `Pairs` on the device and offers what the benchmark uses of a
    pairload loader: `set_epoch`, `start_workers`, `worker_pids`, `hooks` (no stages), `close`."""

    def __init__(self, dataset: Dataset, *, batch_size: int, device: torch.device, workers: int, pin: bool):
        self.device, self.hooks = device, Hooks()
        # workers start the dataset's way (its `start_method`), else by fork where that is safe (`forking`)
        context = multiprocessing.get_context(getattr(dataset, "start_method", None) or start_method())
        self._pids = context.Array("i", max(1, workers))  # a lock made for forking cannot go to a spawned worker
        self._make = partial(DataLoader, dataset, batch_size=batch_size, shuffle=True, num_workers=workers,
                             multiprocessing_context=context if workers else None,
                             drop_last=True, pin_memory=pin and device.type == "cuda", persistent_workers=workers > 0,
                             worker_init_fn=partial(_worker_init, self._pids) if workers else None,
                             prefetch_factor=4 if workers else None)
        self._loader: DataLoader | None = None

    @property
    def loader(self) -> DataLoader:
        if self._loader is None:
            self._loader = self._make()
        return self._loader

    def set_epoch(self, epoch: int) -> None:
        pass

    def start_workers(self) -> None:
        """Nothing to do: the DataLoader starts its workers with the first iteration."""

    def worker_pids(self) -> list[int]:
        return [pid for pid in self._pids[:] if pid and psutil.pid_exists(pid)]

    def close(self) -> None:
        """Drop the DataLoader: its persistent workers end with its iterator (the next iteration makes a new one)."""
        self._loader = None
        self._pids[:] = [0] * len(self._pids)

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        for low, high in self.loader:
            yield Pairs(low.to(self.device, non_blocking=True), high.to(self.device, non_blocking=True))
