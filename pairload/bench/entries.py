"""The benchmark's entries as one table (entry name -> `make_loader` kind and options, or a baseline Dataset), and
building an entry's loader from it: adding an entry is one line of `ENTRIES` (and its name in `rows`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..errors import ConfigError
from ..kinds import KINDS, LOADER_KINDS, RAW
from .baselines import Cv2DiskPairs, FolderPairs, NaivePilPairs, TorchBaseline
from .config import BenchConfig

DALI = "nvidia.dali"


class Skip(Exception):
    """An entry that cannot run here (a missing input or package); the message is the row's reason."""


@dataclass(frozen=True)
class Entry:
    """One row: a `make_loader` `kind` with its `options`, or a `baseline` Dataset class (kind None) behind a torch
    DataLoader (`pin`: pinned host memory). `max_workers` caps --workers; `reads_raw`: a baseline's source is --raw
    (the image folder) rather than the shards (a kind's entry in `pairload.kinds` says so for a kind: `raw`);
    `cold`: also measured with --cold; `requires`: a module that must import."""

    kind: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    baseline: type[FolderPairs] | None = None
    pin: bool = False
    max_workers: int | None = None
    reads_raw: bool = False
    cold: bool = False
    requires: str | None = None

    def __post_init__(self) -> None:
        if (self.kind is None) == (self.baseline is None):
            raise ConfigError(f"bench entry {self}: expected either a make_loader kind or a baseline Dataset, not both "
                              "or neither; name one")
        if self.kind is not None and self.kind not in LOADER_KINDS:
            raise ConfigError(f"bench entry kind {self.kind!r}: expected one of {', '.join(LOADER_KINDS)}; fix the "
                              "entry or register the kind")
        if self.max_workers is not None and self.max_workers < 1:
            raise ConfigError(f"bench entry max_workers={self.max_workers}: expected at least 1; leave it None for "
                              "no cap")

    @property
    def raw(self) -> bool:
        """The source is --raw: a baseline's `reads_raw`, or its kind's entry says so (`Kind.reads`)."""
        return self.reads_raw or (self.kind is not None and KINDS[self.kind].reads == RAW)


RAM_WORKERS = 8  # a cap: past a few workers the host's copy bandwidth, not their number, bounds the rate

ENTRIES: dict[str, Entry] = {
    # "ram" as users get it (on a GPU the zero-copy path when it can run); "ram-workers": the worker path always
    "ram": Entry("ram", max_workers=RAM_WORKERS, cold=True),
    "ram-workers": Entry("ram", {"zero_copy": False}, max_workers=RAM_WORKERS),
    "ram-resident": Entry("ram", {"resident": True}, max_workers=RAM_WORKERS),
    "wds": Entry("wds", cold=True),
    "wds-workers": Entry("wds", {"zero_copy": False}, cold=True),
    "dali-external": Entry("dali-external", requires=DALI, cold=True),
    "dali-file": Entry("dali-file", requires=DALI),
    "cv2-disk": Entry(baseline=Cv2DiskPairs, pin=True, reads_raw=True),
    "naive-pil": Entry(baseline=NaivePilPairs, reads_raw=True),
}

for _kind in LOADER_KINDS:  # a kind registered in `pairload.kinds` is benchmarked as it is
    ENTRIES.setdefault(_kind, Entry(_kind))

# the kinds whose loaders say which path cuts the crops (`zero_copy`, and `path_note` when the GPU does not)
CUT_PATH_KINDS = ("ram", "wds", "dali-external")


def cold_entries(names) -> list[str]:
    return [n for n in names if ENTRIES[n].cold]


def check_available(name: str) -> None:
    """Raise `Skip` when the entry's package is missing (before any rank or loader is started for it)."""
    needed = ENTRIES[name].requires
    if needed is None:
        return
    try:
        __import__(needed)
    except ImportError:
        raise Skip("nvidia-dali is not installed (pip install 'pairload[dali]')" if needed == DALI
                   else f"{needed} is not installed") from None


def build_loader(name: str, cfg: BenchConfig, device: torch.device, workers: int, rank: int = 0, world_size: int = 1):
    """The entry's loader for this rank, or `Skip` with the reason it cannot run."""
    entry = ENTRIES[name]
    if entry.max_workers is not None:
        workers = min(workers, entry.max_workers)
    if world_size > 1 and entry.baseline is not None:
        raise Skip("a baseline has no rank share: measured with --ranks 1 only")
    if entry.raw and cfg.raw is None:
        raise Skip("needs --raw FOLDER (the images the shards were packed from)")
    if entry.kind is not None:
        from ..loaders import make_loader

        return make_loader(entry.kind, cfg.raw if entry.raw else cfg.shards, split=cfg.split,
                           batch_size=cfg.batch_size, crop=cfg.crop, device=str(device), rank=rank,
                           world_size=world_size, num_workers=workers, **entry.options)
    from ..folders.discover import find_pairs

    pairs = find_pairs(cfg.raw).splits().get(cfg.split)
    if not pairs:
        raise Skip(f"{cfg.raw} has no split {cfg.split!r}")
    return TorchBaseline(entry.baseline(pairs, cfg.crop), batch_size=cfg.batch_size, device=device, workers=workers,
                         pin=entry.pin)


def cut_path(name: str, loader) -> str:
    """How the entry's loader cuts its crops: the device's path ("zero-copy", "resident", or "decode" for an encoded
    split), or "workers" with the reason the GPU path was given up ("" for kinds without that choice)."""
    if name not in ENTRIES or ENTRIES[name].kind not in CUT_PATH_KINDS:  # the raw bench's rows are not entries
        return ""
    if loader.zero_copy:
        return getattr(loader, "path", "zero-copy")
    return "workers" + (f" ({loader.path_note})" if loader.path_note else "")
