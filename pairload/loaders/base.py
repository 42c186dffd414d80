"""What every loader shares: validated options, the plan for an epoch, and epoch bookkeeping."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..errors import ConfigError
from ..plan import BatchPlan, PlanConfig, check_split, key_hashes, num_batches, plan_epoch


@dataclass(frozen=True, kw_only=True)
class LoaderOptions:
    split: str = "train"
    batch_size: int
    crop: int | None
    seed: int = 0
    rank: int = 0
    world_size: int = 1
    num_workers: int = 0
    device: str = "cpu"
    last_batch: str = "drop"
    augment: bool = True
    shuffle: bool = True

    def __post_init__(self) -> None:
        if self.num_workers < 0:
            raise ConfigError(f"num_workers={self.num_workers}: expected 0 or more")
        self.plan_config()  # validates the planner's fields
        dev = torch.device(self.device)
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ConfigError(f"device={self.device!r} but CUDA is not available here; use device='cpu'")

    def plan_config(self) -> PlanConfig:
        return PlanConfig(batch_size=self.batch_size, crop=self.crop, seed=self.seed, rank=self.rank,
                          world_size=self.world_size, last_batch=self.last_batch, augment=self.augment,
                          shuffle=self.shuffle)

    @property
    def torch_device(self) -> torch.device:
        dev = torch.device(self.device)
        if dev.type == "cuda" and dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        return dev


class PlannedLoader:
    """Base for loaders with random access: the planner decides each epoch's batches, subclasses execute them."""

    def __init__(self, keys, hw: np.ndarray, split: str, opts: LoaderOptions):
        self.opts = opts
        self.cfg = opts.plan_config()
        check_split(self.cfg, keys, hw, split)
        self.keys = tuple(keys)
        self.hw = np.asarray(hw, dtype=np.int64)
        self.key_hash = key_hashes(self.keys)
        self.device = opts.torch_device
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return num_batches(self.cfg, len(self.keys))

    def plan_for(self, epoch: int) -> list[BatchPlan]:
        """This rank's batches for `epoch` (backends that split ranks differently override this)."""
        return plan_epoch(self.cfg, self.key_hash, self.hw, epoch)

    def plan(self) -> list[BatchPlan]:
        return self.plan_for(self.epoch)
