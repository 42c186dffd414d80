"""The one interface between planned batches and the memory they are cut into, and the one choice between its three
implementations. A cutter turns a run's `BatchPlan`s into `Cut`s, in plan order, each with the event that marks it
ready and the callback that gives its memory back:

- `workers` (`ring.WorkerCuts`): worker processes (or this process) copy the windows out of the memory-mapped
  shards into a shared host ring; the device stage copies them over and orients them.
- `zero-copy` (`zerocopy.KernelCuts` over `pins.Pins`): a GPU kernel cuts the oriented windows straight out of
  the page cache, registered piece by piece as the plan reads it (the whole split for `ram`, a window of shards at a
  time for `wds`).
- `resident` (`zerocopy.KernelCuts` over `DeviceCopy` on CUDA; `resident.DeviceStore` elsewhere): the split is
  copied to the device once and cut there.

`ram`, `wds` and `dali-external` consume cutters the same way; `choose` gives the reason a faster one was not used.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import zerocopy
from .cut import Cut, Cutter  # noqa: F401 - the interface, importable from here too
from .resident import DeviceStore
from .ring import WorkerCuts


@dataclass(frozen=True)
class Choice:
    cutter: Cutter
    why: str  # why the device does not cut ('' when it does, or when it was never a candidate)


def choose(ds, cfg, plan_for, device, *, zero_copy: bool | None, resident: bool, pin_budget: int | None,
           num_workers: int, prefetch: int, timeout: float, name: str, who: str, apply_codes: bool,
           hold: int = 0, streaming: bool = False, need: int | None = None, ahead: int | None = None) -> Choice:
    """The cutter for a loader over `ds` on `device`: the GPU kernel (zero-copy, or resident) when it can run, else
    the resident gather (resident=True without the kernel), else the workers. `zero_copy`: True (must: refuse
    with a ConfigError if it cannot), False (never), None (when it can, with a warning naming the reason when not).
    `apply_codes`: the host path orients the windows itself (a CPU device). `streaming`, `need`, `ahead`: the
    split is read a window at a time (the wds deal; `zerocopy.setup`)."""
    source, why = zerocopy.setup(ds, device, requested=zero_copy, budget=pin_budget, resident=resident,
                                 streaming=streaming, need=need, ahead=ahead, who=who, stacklevel=5)
    if source is not None:
        return Choice(zerocopy.KernelCuts(source, device, "resident" if resident else "zero-copy"), why)
    if resident:
        return Choice(DeviceStore(ds, device), why)
    return Choice(WorkerCuts(ds, cfg, plan_for, num_workers=num_workers, prefetch=prefetch,
                              pin=device.type == "cuda", apply_codes=apply_codes, name=name, hold=hold,
                              timeout=timeout), why)
