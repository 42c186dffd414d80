"""The one interface between planned batches and the memory they are cut into, and the one choice between its three
implementations. A cutter turns a run's `BatchPlan`s into `Cut`s, in plan order, each with the event that marks it
ready and the callback that gives its memory back:

- `workers` (`ring.HostWindows`): worker processes (or this process) copy the windows out of the memory-mapped
  shards into a shared host ring; the device stage copies them over and orients them.
- `zero-copy` (`zerocopy.KernelCuts` over `Registration`): a GPU kernel cuts the oriented windows straight out of
  the registered page cache.
- `resident` (`zerocopy.KernelCuts` over `DeviceCopy` on CUDA; `resident.DeviceStore` elsewhere): the split is
  copied to the device once and cut there.

`ram`, `wds` and `dali-external` consume cutters the same way; `choose` gives the reason a faster one was not used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Protocol

import numpy as np

from ..format.members import BatchLayout
from ..plan import BatchPlan


@dataclass
class Cut:
    """One planned batch, cut. `block`: a flat uint8 buffer laid out by `layout` (a numpy array in host memory, or a
    torch tensor on the device); `oriented`: the plan's codes are applied; `ready`: a CUDA event recorded once the
    block is complete (None: complete now); `release`: gives the block's memory back once the consumer is done with
    it (None: nothing to give back)."""

    plan: BatchPlan
    layout: BatchLayout
    block: object
    oriented: bool
    ready: object = None
    release: Callable[[], None] | None = None
    sides: tuple | None = None  # device cuts: (low, high) N×H×W×C tensors when they are not one block (a slice of
    #                             a group cut by one launch)

    @property
    def on_device(self) -> bool:
        return not isinstance(self.block, np.ndarray)

    def host_sides(self) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) numpy views of a host cut."""
        return self.layout.views(self.block)

    def device_sides(self):
        """(low, high) N×H×W×C tensors of a device cut, in the split's dtypes."""
        if self.sides is not None:
            return self.sides
        from ..batch import sides_of

        return sides_of(self.layout, self.block)


class Cutter(Protocol):
    """What every way of cutting batches offers. `path`: "workers", "zero-copy" or "resident"."""

    path: str
    on_device: bool

    def start(self) -> None: ...
    def cuts(self, run: tuple, plans: list[BatchPlan], reclaim: Callable[[], None] = ...) -> Iterator[Cut]: ...
    def worker_pids(self) -> list[int]: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class Choice:
    cutter: Cutter
    why: str  # why the device does not cut ('' when it does, or when it was never a candidate)


def choose(ds, cfg, plan_for, device, *, zero_copy: bool | None, resident: bool, pin_budget: int | None,
           num_workers: int, prefetch: int, timeout: float, name: str, who: str, apply_codes: bool,
           hold: int = 0) -> Choice:
    """The cutter for a loader over `ds` on `device`: the GPU kernel (zero-copy, or resident) when it can run, else
    the resident gather (resident=True without the kernel), else the workers. `zero_copy`: True (must: refuse
    with a ConfigError if it cannot), False (never), None (when it can, with a warning naming the reason when not).
    `apply_codes`: the host path orients the windows itself (a CPU device)."""
    from . import zerocopy
    from .resident import DeviceStore
    from .ring import HostWindows

    source, why = zerocopy.setup(ds, device, requested=zero_copy, budget=pin_budget, resident=resident, who=who,
                                 stacklevel=5)
    if source is not None:
        return Choice(zerocopy.KernelCuts(source, device, "resident" if resident else "zero-copy"), why)
    if resident:
        return Choice(DeviceStore(ds, device), why)
    return Choice(HostWindows(ds, cfg, plan_for, num_workers=num_workers, prefetch=prefetch,
                              pin=device.type == "cuda", apply_codes=apply_codes, name=name, hold=hold,
                              timeout=timeout), why)
