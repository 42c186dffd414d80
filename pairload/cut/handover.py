"""The one device stage every loader over shards passes its cuts through (as timm's PrefetchLoader is for its
loaders): a `Cut` becomes `PairBatch`es on the device, handed to the caller's stream one batch ahead.

A host cut (one buffer holding both sides, page-locked when the device is a GPU) is copied on a side CUDA stream with
its orientation codes and oriented there, so the copy of batch k+1 overlaps the caller's work on batch k. On a CPU
device the block is used as it is (the host side has applied the flips). A device cut is only viewed and handed
over.
"""

from __future__ import annotations

from collections import deque
from typing import Callable

import torch

from ..batch import PairBatch, Rows, batches_of, oriented_sides
from ..hooks import Hooks
from ..plan import BatchPlan
from .payload import Cut


class DeviceStage:
    def __init__(self, device: torch.device, hooks: Hooks | None = None):
        self.device = device
        self.cuda = device.type == "cuda"
        self.hooks = hooks or Hooks()
        self._stream = torch.cuda.Stream(device) if self.cuda else None
        self._copying: deque = deque()  # (release callback, event) of host buffers whose copy may still run
        self._handed: tuple = (None, None)  # (event, stream) of the last batch handed over

    def put(self, cut: Cut, rows: Callable[[BatchPlan], Rows], *, augment: bool = True) -> list[tuple]:
        """The cut's batches on the device, as (batch, ready event or None) per plan; pass both to `handover` before
        the caller uses the batch. A host block is copied over (one copy for both sides) and oriented there, its
        `release()` called once the host memory may be reused. `rows(bp)`: a plan's keys, padding flags (on the
        device for a device cut), sources and sensor facts."""
        with self.hooks.timed("handover"):
            labels = [rows(bp) for bp in cut.plans]
            if cut.synthesized:  # the host cutter made the inputs: the rows keep only their parameters
                labels = [r._replace(synth=r.synth.made()) if r.synth is not None else r for r in labels]
            if cut.on_device:
                if labels[0].synth is None or not self.cuda:
                    return [(batch, cut.ready) for batch in batches_of(*cut.sides(), labels)]
                with torch.cuda.stream(self._stream):  # inputs synthesized once the cut is done, before handover
                    if cut.ready is not None:
                        self._stream.wait_event(cut.ready)
                    batches = batches_of(*cut.sides(), labels)
                    ready = torch.cuda.Event()
                    ready.record(self._stream)
                return [(batch, ready) for batch in batches]
            (bp,) = cut.plans
            # a cut not yet oriented is oriented here by its plan's codes (all 0 without `augment`: nothing to do)
            code = torch.from_numpy(bp.code) if augment and not cut.oriented else None
            host = torch.from_numpy(cut.layout.shaped(cut.block))
            if not self.cuda:
                sides = oriented_sides(cut.layout, host if cut.release is None else host.clone(), code)
                if cut.release is not None:
                    cut.release()
                return [(batches_of(*sides, labels)[0], None)]
            with torch.cuda.stream(self._stream):
                block = host.to(self.device, non_blocking=True)
                copied = torch.cuda.Event()
                copied.record(self._stream)
                sides = oriented_sides(cut.layout, block,
                                       None if code is None else code.to(self.device, non_blocking=True))
                (r,) = labels
                batch = batches_of(*sides, [r._replace(padded=r.padded.to(self.device, non_blocking=True))])[0]
                ready = torch.cuda.Event()
                ready.record(self._stream)
            if cut.release is not None:
                self._copying.append((cut.release, copied))
            return [(batch, ready)]

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
            stream.wait_event(ready)
            for t in (batch.low, batch.high, batch.padded):
                t.record_stream(stream)
            self._handed = (ready, stream)
        return batch

    def one_ahead(self, cuts, rows: Callable[[BatchPlan], Rows], *, augment: bool = True):
        """Yield the batches of an iterator of cuts, each handed over while the next one is copied or cut."""
        prev = None
        for cut in cuts:
            for cur in self.put(cut, rows, augment=augment):
                if prev is not None:
                    yield self.handover(*prev)
                prev = cur
        if prev is not None:
            yield self.handover(*prev)

    def clear(self) -> None:
        self._copying.clear()
