"""The resident memory (`make_loader("ram", ..., resident=True)` on a CUDA device): every shard file copied once into
device memory, which the kernel cuts from. Nothing to schedule or wait for: the do-nothing `Memory`."""

from __future__ import annotations

import warnings

import numpy as np
import torch

from ...errors import ConfigError
from ...units import human_bytes
from .pages import sample_offsets


def check_room(ds, need: int, device: torch.device) -> None:
    """Refuse a resident split of `need` bytes that would take more than 80% of the device's free memory."""
    free, total = torch.cuda.mem_get_info(device)
    if need > 0.8 * free:
        raise ConfigError(f"split {ds.split!r} needs {human_bytes(need)} of device memory to be resident but only "
                          f"{human_bytes(free)} of {human_bytes(total)} are free; use resident=False")


class DeviceCopy:
    """Every shard file of `ds` copied once into memory of `device`; `low`/`high`: each sample's device address
    there, `width`: its width in pixels."""

    streaming = False
    together = 1  # not streaming: every batch's memory stays
    pids: list[int] = []  # no processes of its own

    def __init__(self, ds, device: torch.device):
        need = sum(ds.shard_bytes)
        check_room(ds, need, device)
        self.ds, self.device = ds, device
        self.store = torch.empty(need, dtype=torch.uint8, device=device)
        filled = 0
        bases = []
        for part in ds.sources:
            for number, size in enumerate(part.shard_bytes):
                with warnings.catch_warnings():  # the map is read-only and only read here
                    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
                    self.store[filled:filled + size].copy_(torch.from_numpy(part.shard_map(number)))
                bases.append(self.store.data_ptr() + filled)
                filled += size
        base = np.array(bases, dtype=np.int64)
        shard, low, high = sample_offsets(ds)
        self.low = torch.from_numpy(base[shard] + low).to(device)
        self.high = torch.from_numpy(base[shard] + high).to(device)
        self.width = torch.from_numpy(np.ascontiguousarray(ds.sizes[:, 1], dtype=np.int64)).to(device)

    def begin(self, plans, after=None) -> None:
        """Everything is on the device already (nor do `wait`, `done`, `check`, `warm` have anything to
        do: the device holds its own copy, which changes on disk cannot reach)."""

    def wait(self, b: int) -> None:
        pass

    def done(self, b: int, event) -> None:
        pass

    def check(self, force: bool = False) -> None:
        pass

    def warm(self, samples) -> None:
        pass

    def reopen(self) -> "DeviceCopy":
        return DeviceCopy(self.ds, self.device)

    @property
    def closed(self) -> bool:
        return self.store is None

    def close(self) -> None:
        self.store = None
