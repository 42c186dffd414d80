"""The one shape a batch takes between the planner and the `PairBatch` (`Cut`), and what every cutter offers
(`Cutter`). Cutters, memories and kernels import this; it imports none of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol

import numpy as np

from ..format.members import BatchLayout
from ..plan import BatchPlan, Run


@dataclass
class Cut:
    """One or more planned batches, cut: `block` holds the rows of every plan in `plans` (in order) laid out by
    `layout` (`members.BatchLayout`): a numpy array on the host, a torch tensor on the device; flat uint8 bytes, or
    the (2, N, H, W, C) array of a stacked layout. Several plans share a block when one kernel launch cut them
    (batches of one shape). `oriented`: the plans' orientation codes are applied; `ready`: a CUDA event recorded once
    the block is complete (None: complete now); `release`: gives the block's memory back once the consumer is done
    with it (None: nothing to give back); `pair`: its (low, high) N×H×W×C sides when they are not views of `block`
    (a host cut oriented on the device)."""

    plans: tuple[BatchPlan, ...]
    layout: BatchLayout
    block: Any
    oriented: bool
    ready: object = None
    release: Callable[[], None] | None = None
    pair: tuple | None = None

    @property
    def on_device(self) -> bool:
        return not isinstance(self.block if self.pair is None else self.pair[0], np.ndarray)

    @property
    def rows(self) -> int:
        return self.layout.low_shape[0]

    def sides(self) -> tuple:
        """(low, high) N×H×W×C views of the block in the members' types (numpy or torch, as the block)."""
        if self.pair is not None:
            return self.pair
        if not self.on_device:
            return self.layout.views(self.block)
        from .convert import sides_of

        return sides_of(self.layout, self.block)


class Cutter(Protocol):
    """What every way of cutting batches offers (`pairload.cut.paths` chooses one). `path`: its name in the table;
    `on_device`: its cuts are device tensors, already oriented; `degrades`: it makes the inputs of a degradation
    itself (the cut path places the degrade stage in it), so its cuts hold them."""

    path: str
    on_device: bool
    degrades: bool

    def start(self) -> None: ...
    def cuts(self, run: tuple, plans: Run, reclaim: Callable[[], None] = ...,
             **options) -> Iterator[Cut]: ...
    def worker_pids(self) -> list[int]: ...
    def close(self) -> None: ...
