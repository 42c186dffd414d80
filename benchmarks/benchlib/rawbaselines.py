"""The two ways users load SID today, as baselines for the raw benchmark: LibRaw per access (`LibRawPairs`) and
np.load of pre-converted arrays (`NpyPairs`), both cutting a random input crop and its 2× target window, behind a
torch DataLoader (`RawTorchBaseline`) that yields `RawPairs` with what normalising needs (`normalise`)."""

from __future__ import annotations

import json
import os
from functools import partial
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from torch.utils.data import RandomSampler

from pairload.bench.baselines import FolderPairs, TorchBaseline
from pairload.errors import ConfigError, ImageError, ShardError
from pairload.camera.files import develop, read_mosaic

from .rawdata import ARRAYS_INDEX, SidPair

DEVELOPED_MAX = 65535  # LibRaw's 16-bit output: the target's white


class RawPairs(NamedTuple):
    """A raw batch on the device: `low` N×4×h×w and `high` N×3×2h×2w, both torch.uint16 (sensor counts and
    developed 16-bit RGB), `ratio` N float32 (SID's amplification), `black` N×4 and `white` N int32 (the packed
    channels' levels). Read as `batch.low`/`batch.high` like a `PairBatch`."""

    low: torch.Tensor
    high: torch.Tensor
    ratio: torch.Tensor
    black: torch.Tensor
    white: torch.Tensor


def normalise(batch: RawPairs) -> tuple[torch.Tensor, torch.Tensor]:
    """SID's training input and target, float32 in [0, 1]: (low - black) / (white - black) × ratio, clipped at 1
    (what the long exposure would have recorded), and high / 65535."""
    black = batch.black.to(torch.float32)[:, :, None, None]
    span = batch.white.to(torch.float32)[:, None, None, None] - black
    low = (batch.low.to(torch.float32) - black) / span * batch.ratio[:, None, None, None]
    return low.clamp_(0, 1), batch.high.to(torch.float32) / DEVELOPED_MAX


class RawCrops(FolderPairs):
    """A map-style Dataset over `SidPair`s: each item a random `crop`×`crop` window of the packed input (input
    pixels) and the 2×-sized window of the target at the same place, with the pair's ratio and levels."""

    def item(self, packed: np.ndarray, rgb: np.ndarray, ratio: float, black, white: int, name: str):
        height, width = packed.shape[:2]
        if rgb.shape[0] < 2 * height or rgb.shape[1] < 2 * width:
            raise ImageError(f"{name}: target {rgb.shape[1]}×{rgb.shape[0]} is smaller than twice the packed input "
                             f"{width}×{height}; pair each short exposure with a long one of the same camera")
        if self.crop > min(height, width):
            raise ConfigError.for_value("crop", self.crop, f"expected at most {min(height, width)}, the packed input "
                                        f"{width}×{height} of {name} (crop counts packed input pixels)")
        y, x, c = *self.window(height, width), self.crop
        low = packed[y:y + c, x:x + c].transpose(2, 0, 1)
        high = rgb[2 * y:2 * (y + c), 2 * x:2 * (x + c)].transpose(2, 0, 1)
        return (torch.from_numpy(np.ascontiguousarray(low)), torch.from_numpy(np.ascontiguousarray(high)),
                torch.tensor(ratio, dtype=torch.float32), torch.tensor(black, dtype=torch.int32),
                torch.tensor(white, dtype=torch.int32))


class LibRawPairs(RawCrops):
    """SID's own loader, per access: LibRaw opens the short file and packs its mosaic, opens the long one and
    develops it, then the paired crop."""

    # LibRaw develops on an OpenMP pool, and a worker forked from a process that has used that pool (the bench's
    # own process after write_arrays, a notebook) waits forever on its dead threads: workers start fresh instead
    start_method = "spawn"

    def __getitem__(self, i: int):
        pair: SidPair = self.pairs[i]
        mosaic = read_mosaic(pair.short)
        return self.item(mosaic.packed, develop(pair.long), pair.ratio, mosaic.black, mosaic.white, pair.stem)


class NpyPairs(RawCrops):
    """The converted copy (`rawdata.write_arrays`): np.load of `low/<stem>.npy` and `high/<stem>.npy` per access,
    then the paired crop; the ratio and levels from its `index.json`."""

    def __init__(self, arrays: str | os.PathLike, crop: int):
        self.arrays = Path(arrays)
        try:
            index = json.loads((self.arrays / ARRAYS_INDEX).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ShardError(f"{self.arrays / ARRAYS_INDEX}: cannot read the arrays' index ({exc}); convert the tree "
                             "with benchlib.rawdata.write_arrays") from None
        super().__init__(sorted(index.items()), crop)

    def __getitem__(self, i: int):
        stem, info = self.pairs[i]
        low, high = (np.load(self.arrays / side / f"{stem}.npy") for side in ("low", "high"))
        return self.item(low, high, info["ratio"], info["black"], info["white"], stem)


class RawTorchBaseline(TorchBaseline):
    """`TorchBaseline` for raw crops: the same DataLoader, workers and bench surface, yielding `RawPairs`; workers
    started the dataset's way (its `start_method`, if it names one)."""

    def __init__(self, dataset: RawCrops, *, batch_size: int, device: torch.device, workers: int, pin: bool):
        super().__init__(dataset, batch_size=batch_size, device=device, workers=workers, pin=pin)
        # an epoch long enough to keep every worker busy: a benchmark tree holds a few dozen pairs where SID's has
        # 1,865, and an epoch of 2 batches would leave all but 2 workers idle and time their start-up instead
        draws = max(len(dataset), batch_size * max(1, workers) * 8)
        sampler = RandomSampler(dataset, replacement=True, num_samples=draws)
        self._make = partial(self._make, shuffle=False, sampler=sampler)

    def __iter__(self):
        for batch in self.loader:
            yield RawPairs(*(t.to(self.device, non_blocking=True) for t in batch))
