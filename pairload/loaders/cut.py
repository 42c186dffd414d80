"""What a cutter yields: one planned batch, cut (`Cut`), and what every cutter offers (`Cutter`). The cutters
themselves (`ring.WorkerCuts`, `zerocopy.KernelCuts`, `resident.DeviceStore`) and the choice between them
(`cutters.choose`) import this; it imports none of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Protocol

import numpy as np

from ..format.members import BatchLayout
from ..plan import BatchPlan


@dataclass
class Cut:
    """One planned batch, cut. `block`: a host cut's numpy array laid out by `layout`, flat uint8 bytes or a stacked
    layout's (2, n, h, w, C) array (None for a device cut: its `sides`); `oriented`: the plan's codes are
    applied; `ready`: a CUDA event recorded once the block is complete (None: complete now); `release`: gives the
    block's memory back once the consumer is done with it (None: nothing to give back)."""

    plan: BatchPlan
    layout: BatchLayout
    block: object
    oriented: bool
    ready: object = None
    release: Callable[[], None] | None = None
    sides: tuple | None = None  # the resident gather's cuts: (low, high) N×H×W×C tensors in the split's dtypes
    nchw: tuple | None = None  # the kernel's cuts: (low, high) as N×C×H×W views of the block their launch cut
    #                            (what a `PairBatch` holds; `hwc()` gives either as N×H×W×C)
    group: tuple | None = None  # device cuts: (low, high) N×H×W×C of every batch its launch cut (one object per
    #                             launch, shared by those batches' cuts)

    def hwc(self) -> tuple:
        """A device cut's (low, high) as N×H×W×C tensors in the split's dtypes (`sides`, or views of `nchw`)."""
        if self.sides is not None:
            return self.sides
        low, high = self.nchw
        return low.permute(0, 2, 3, 1), high.permute(0, 2, 3, 1)

    @property
    def on_device(self) -> bool:
        return not isinstance(self.block, np.ndarray)

    def host_sides(self) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) numpy views of a host cut."""
        return self.layout.views(self.block)


class Cutter(Protocol):
    """What every way of cutting batches offers. `path`: "workers", "zero-copy", "resident" or "gather";
    `on_device`: its cuts are device tensors, already oriented."""

    path: str
    on_device: bool

    def start(self) -> None: ...
    def cuts(self, run: tuple, plans: list[BatchPlan], reclaim: Callable[[], None] = ...) -> Iterator[Cut]: ...
    def worker_pids(self) -> list[int]: ...
    def close(self) -> None: ...
