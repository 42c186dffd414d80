"""The one device stage every host-side loader passes through (as timm's PrefetchLoader is for its loaders).

Host cuts (one flat buffer per batch holding both sides, in pinned memory when the device is a GPU) are copied on a
side CUDA stream together with their orientation codes, oriented there, and handed to the caller's stream one batch
ahead, so the copy of batch k+1 overlaps the caller's work on batch k. On a CPU device the batch is used as it is
(the host side has already applied the flips). Device cuts (the GPU kernel, a resident split) are only handed over.
"""

from __future__ import annotations

from collections import deque

import torch

from ..batch import PairBatch, SensorBatch, batch_from_hwc, make_batch
from .cut import Cut


def _current_stream_id(index: int) -> int:
    """The id of the caller's current stream on device `index` (what `torch.cuda.current_stream(d).stream_id` is,
    without making a Stream object: a few us a batch at a million pairs a second)."""
    return torch._C._cuda_getCurrentStream(index)[0]


class DeviceStage:
    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self._stream = torch.cuda.Stream(device) if self.cuda else None
        self._copying: deque = deque()  # (release callback, event) of host buffers whose copy may still run
        self._handed: tuple = (None, None)  # (event, stream id) of the last batch handed over
        self._index = (torch.cuda.current_device() if device.index is None else device.index) if self.cuda else None

    def put(self, cut: Cut, keys: list[str], padded: torch.Tensor, source: list[str] | None = None, *,
            augment: bool = True, sensor: SensorBatch | None = None):
        """A batch on the device from a `Cut`: a host block is copied over (one copy for both sides) and oriented
        there, its `release()` called once the host memory may be reused; a device block is viewed as it is.
        Returns (batch, ready event or None); pass both to `handover` before the caller uses the batch. `sensor`:
        the batch's camera raw facts, already on the device."""
        batch, ready = self._put(cut, keys, padded, source, augment)
        batch.sensor = sensor
        return batch, ready

    def _put(self, cut: Cut, keys: list[str], padded: torch.Tensor, source: list[str] | None, augment: bool):
        # a cut not yet oriented is oriented here by its plan's codes (all 0 without `augment`: nothing to do)
        code = torch.from_numpy(cut.plan.code) if augment and not cut.oriented else None
        if cut.nchw is not None:  # the kernel's cuts: already the batch's views
            return PairBatch(low=cut.nchw[0], high=cut.nchw[1], keys=keys, padded=padded, source=source), cut.ready
        if cut.on_device:  # the resident gather cuts oriented windows
            return batch_from_hwc(*cut.hwc(), keys, padded, source), cut.ready
        host = torch.from_numpy(cut.layout.shaped(cut.block))
        if not self.cuda:
            batch = make_batch(cut.layout, host if cut.release is None else host.clone(), code, keys, padded, source)
            if cut.release is not None:
                cut.release()
            return batch, None
        with torch.cuda.stream(self._stream):
            flat = host.to(self.device, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(self._stream)
            batch = make_batch(cut.layout, flat, None if code is None else code.to(self.device, non_blocking=True),
                               keys, padded.to(self.device, non_blocking=True), source)
            ready = torch.cuda.Event()
            ready.record(self._stream)
        if cut.release is not None:
            self._copying.append((cut.release, copied))
        return batch, ready

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
            stream_id = _current_stream_id(self._index)
            if ready is self._handed[0] and stream_id == self._handed[1]:
                return batch
            stream = torch.cuda.current_stream(self.device)
            stream.wait_event(ready)
            for t in (batch.low, batch.high, batch.padded):
                t.record_stream(stream)
            self._handed = (ready, stream_id)
        return batch

    def one_ahead(self, produced):
        """Yield the batches of an iterator of (batch, ready), each handed over while the next one is copied."""
        prev = next(produced, None)
        for cur in produced:
            yield self.handover(*prev)
            prev = cur
        if prev is not None:
            yield self.handover(*prev)

    def clear(self) -> None:
        self._copying.clear()
