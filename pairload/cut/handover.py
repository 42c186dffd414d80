"""The one device stage every loader over shards passes its cuts through (as timm's PrefetchLoader is for its
loaders): a `Cut` becomes `PairBatch`es on the device, handed to the caller's stream one batch ahead.

A host cut (one buffer holding both sides, page-locked when the device is a GPU) is copied on a side CUDA stream with
its orientation codes and oriented there, so the copy of batch k+1 overlaps the caller's work on batch k. On a CPU
device the block is used as it is (the host side has applied the flips). A device cut is only viewed and handed
over.

On a GPU the stage keeps at most DEPTH blocks in flight: before it hands over a block it waits until the caller's
stream has finished the work it queued before the block handed over DEPTH blocks ago. Launching is far faster than
the GPU runs, so a caller that never synchronises (a loop that logs every N steps, CUDA graphs, a benchmark's timed
window) would otherwise let launches run ahead without end, each holding its block in the caching allocator.
"""

from __future__ import annotations

from collections import deque
from typing import Callable

import torch

from ..batch import PairBatch
from ..devices import loader_stream
from .convert import Rows, batches_of, oriented_sides
from ..hooks import Hooks
from ..plan import BatchPlan
from .degrade import Degrade
from .payload import Cut

DEPTH = 3  # blocks handed over whose use by the caller may still be queued on the GPU


class DeviceStage:
    """The stages after the cutter, each timed under its name (`Hooks`): `transfer` (a host cut copied to the device
    and oriented there), `degrade` (a run's inputs made, when the cut path makes them on the device: `run` of
    `one_ahead`) and `handover` (the cut's `PairBatch`es)."""

    def __init__(self, device: torch.device, hooks: Hooks | None = None):
        self.device = device
        self.cuda = device.type == "cuda"
        self.hooks = hooks or Hooks()
        self._stream = loader_stream(device) if self.cuda else None
        self._copying: deque = deque()  # (release callback, event) of host buffers whose copy may still run
        self._handed: tuple = (None, None)  # (event, stream) of the last batch handed over
        self._used: deque = deque()  # per block handed over: an event after the caller's work queued before it

    def stages(self, run=None, *, augment: bool = True) -> list[tuple[str, Callable[[Cut], Cut]]]:
        """(name, stage) in order for one run's cuts; `run`: the run's `DegradeRun` when its inputs are made here."""
        out = [("transfer", lambda cut: self._to_device(cut, augment))]
        if run is not None:
            out.append((Degrade.name, lambda cut: run.apply(cut, self._stream)))
        return out

    def put(self, cut: Cut, rows: Callable[[BatchPlan], Rows], stages) -> list[tuple]:
        """The cut's batches on the device, as (batch, ready event or None) per plan; pass both to `handover` before
        the caller uses the batch. `rows(bp)`: a plan's keys, padding flags, sources, sensor facts and degradation
        parameters, on the device."""
        timed = self.hooks.timed
        for name, stage in stages:
            with timed(name):
                cut = stage(cut)
        with timed("handover"):
            return [(batch, cut.ready) for batch in batches_of(*cut.sides(), [rows(bp) for bp in cut.plans])]

    def _to_device(self, cut: Cut, augment: bool) -> Cut:
        """A host cut (one buffer holding both sides, page-locked when the device is a GPU) as device sides: copied
        on a side stream (one copy for both sides) and oriented there by its plan's codes, the cut ready once that is
        done; `release()` is called once the host memory may be reused. On a CPU device the block is used as it is
        (oriented by the host side). A device cut passes as it is."""
        if cut.on_device:
            return cut
        (bp,) = cut.plans
        # a cut not yet oriented is oriented here by its plan's codes (all 0 without `augment`: nothing to do)
        code = torch.from_numpy(bp.code) if augment and not cut.oriented else None
        host = torch.from_numpy(cut.layout.shaped(cut.block))
        if not self.cuda:
            sides = oriented_sides(cut.layout, host if cut.release is None else host.clone(), code)
            if cut.release is not None:
                cut.release()
            return Cut(cut.plans, cut.layout, None, True, pair=sides)
        with torch.cuda.stream(self._stream):
            block = host.to(self.device, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(self._stream)
            sides = oriented_sides(cut.layout, block, None if code is None else code.to(self.device, non_blocking=True))
            ready = torch.cuda.Event()
            ready.record(self._stream)
        if cut.release is not None:
            self._copying.append((cut.release, copied))
        return Cut(cut.plans, cut.layout, block, True, ready, pair=sides)

    def reclaim(self, block: bool = False) -> None:
        """Release the host buffers whose device copy has finished (all of them with `block`)."""
        while self._copying and (block or self._copying[0][1].query()):
            release, ev = self._copying.popleft()
            ev.synchronize()
            release()

    def handover(self, batch: PairBatch, ready) -> PairBatch:
        """Make the caller's stream wait for `ready` and keep the batch's memory until that stream is done with it.
        Batches cut by one launch share their event and their memory (views of one block, and of one run's padding
        flags): after the first of them on a stream, there is nothing left to do for the others."""
        if ready is not None:
            stream = torch.cuda.current_stream(self.device)
            if ready is self._handed[0] and stream == self._handed[1]:
                return batch
            self._bound(stream)
            stream.wait_event(ready)
            for t in (batch.low, batch.high, batch.padded):
                t.record_stream(stream)
            self._handed = (ready, stream)
        return batch

    def _bound(self, stream) -> None:
        """A new block is handed over on `stream`: mark how far the caller's queued work goes, and wait until the
        work queued before the block DEPTH blocks back is done (its memory is then free to be used again)."""
        self._used.append(stream.record_event())
        if len(self._used) > DEPTH:
            self._used.popleft().synchronize()

    def one_ahead(self, cuts, rows: Callable[[BatchPlan], Rows], run=None, *, augment: bool = True):
        """Yield the batches of an iterator of cuts through the stages (`stages(run)`), each handed over while the
        next one is copied or cut."""
        stages = self.stages(run, augment=augment)
        prev = None
        for cut in cuts:
            for cur in self.put(cut, rows, stages):
                if prev is not None:
                    yield self.handover(*prev)
                prev = cur
        if prev is not None:
            yield self.handover(*prev)

    def clear(self) -> None:
        self._copying.clear()
        self._used.clear()
