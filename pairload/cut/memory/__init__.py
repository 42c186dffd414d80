"""The memories a device cut reads from, behind one protocol (`Memory`), as FFCV's memory managers are: told a run's
schedule first (`begin`, FFCV's `schedule_epoch`), then asked for each batch (`wait`, its `start_batch`) and told
when the batch's kernels are done with it (`done`).

- `pages.PageCache`: the shard maps' page-cache pages registered with the device a piece at a time, in the order the
  plan reads them (zero-copy: the GPU reads them over PCIe);
- `resident.DeviceCopy`: the split copied once into device memory: the do-nothing case, every method but `close`
  returns at once.

Both give the kernel the same tables: `low[i]`/`high[i]`, the device address of sample i's input and target, and
`width[i]`, its width in pixels. The host-side path reads the page cache through the maps in worker processes
(`pairload.cut.workers`): it needs no memory object.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class Memory(Protocol):
    """What a device cutter reads from. `streaming`: what a batch reads goes back once its kernels are done (a split
    read a shuffle buffer of shards at a time, or decoded batch by batch); `together`: then, how many consecutive
    batches one launch may cut at most (a streamed page cache: 1, each batch's pieces go back on their own; decoded
    images: the batches of one decode call, which it holds until the last of them is cut; read once `begin` has
    run); `pids`: processes of its own (the decode processes of a JPEG split), whose CPU and memory are the loader's."""

    ds: object
    device: torch.device
    streaming: bool
    together: int
    pids: list[int]
    low: torch.Tensor
    high: torch.Tensor
    width: torch.Tensor

    def begin(self, plans, after=None) -> object:
        """Make ready what this run's planned batches read, in the order they read it. `after`: None, or a callable
        giving the run expected next (the loader's next epoch), which a memory may start reading before this run's
        last batches, so that the disk does not wait while they are cut; `begin` of that run goes on from there."""

    def wait(self, b: int) -> None:
        """Return once everything batch b of the run reads is readable by the device."""

    def done(self, b: int, event) -> None:
        """Batch b is cut once `event` (a CUDA event, or None: now) is done."""

    def check(self, force: bool = False) -> None:
        """Raise a named `LoaderError` if what the device reads no longer matches the files on disk."""

    def warm(self, samples) -> None:
        """Make these samples readable now (the self-test, before any run)."""

    def reopen(self) -> "Memory":
        """A memory like this one, made again after `close()`."""

    @property
    def closed(self) -> bool: ...

    def close(self) -> None:
        """Give everything back once the kernels reading it are done."""
