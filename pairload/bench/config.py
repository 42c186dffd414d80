"""What one `bench-loaders` run measures (`BenchConfig`): the entries, the sizes, the timing windows and the modes
(cold, consumer, ranks), validated once, with the messages naming the CLI's flags."""

from __future__ import annotations

import functools

import os
from dataclasses import dataclass

import torch

from ..errors import ConfigError
from .rows import BENCH_ENTRIES as ALL



@functools.lru_cache(maxsize=8)
def split_members(shards: str, split: str):
    """The members of a benchmarked split, from its manifest (read once)."""
    from ..format.members import members_of
    from ..read.info import read_manifest_at

    doc = read_manifest_at(shards)
    return members_of(doc["splits"].get(split, {}), shards, split)


@dataclass(frozen=True, kw_only=True)
class BenchConfig:
    shards: str
    raw: str | None = None
    split: str = "train"
    loaders: tuple[str, ...] = ALL
    crop: int = 256
    batch_size: int = 32
    workers: int = 0  # 0: all cores but one
    seconds: float = 6.0
    repeats: int = 3
    device: str = "auto"
    consumer: str = "none"  # or "unet": each batch feeds a training step of the reference model
    cold: bool = False  # also measure `ram`, `wds` and `dali-external` with the shards evicted before each repeat
    ranks: int = 1  # >1: that many concurrent ranks, each with its own loader (and GPU), splitting the node's cores
    members: object = None  # the split's `Members` where no manifest says them (the raw bench's baselines)

    def pair_bytes(self) -> int:
        """Bytes of one delivered pair of crops (the input's and its target's, of the split's member types)."""
        members = self.members if self.members is not None else split_members(self.shards, self.split)
        return members.pair_bytes(self.crop, self.crop)

    def __post_init__(self) -> None:
        unknown = [n for n in self.loaders if n not in ALL]
        if unknown:
            raise ConfigError(f"--loaders {','.join(unknown)}: unknown; choose from {', '.join(ALL)}")
        if self.ranks < 1:
            raise ConfigError(f"--ranks {self.ranks}: expected 1 or more")
        if self.ranks > 1 and (self.cold or self.consumer != "none"):
            raise ConfigError("--ranks measures warm loaders alone: leave out --cold and --consumer")
        if self.ranks > 1 and torch.cuda.is_available() and self.device in ("auto", "cuda") and \
                self.ranks > torch.cuda.device_count():
            raise ConfigError(f"--ranks {self.ranks} but this machine has {torch.cuda.device_count()} GPUs; every rank "
                              "needs its own (or pass --device cpu)")
        if self.consumer not in ("none", "unet"):
            raise ConfigError(f"--consumer {self.consumer!r}: expected none or unet")
        if self.repeats < 1 or self.seconds <= 0:
            raise ConfigError("--seconds must be positive and repeats at least 1")

    def resolved_device(self) -> torch.device:
        from ..devices import resolve_device

        return resolve_device(self.device)

    def resolved_workers(self) -> int:
        return self.workers or max(1, (os.cpu_count() or 2) - 1)
