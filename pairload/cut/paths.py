"""The cut paths as one table, and the one choice between them (as `make_loader` reads `pairload.kinds`). A path is
a way of turning a run's `BatchPlan`s into `Cut`s: what it requires, the reason it gives when it cannot run here,
and how its cutter is built.

- `zero-copy`: the kernel cuts the oriented windows straight out of the page cache, registered piece by piece as the
  plan reads it (`memory.pages.PageCache`: the whole split for `ram`, a shuffle buffer of shards at a time for `wds`).
- `resident`: the split is copied to the device once (`memory.resident.DeviceCopy`) and the kernel cuts it there.
- `decode`: a split stored encoded (`pack --store encoded`): the GPU decodes the images each batch reads
  (`memory.decoded.DecodedMemory`: JPEG files by nvImageCodec, lossless tiles by nvCOMP) and the kernel cuts them.
- `workers`: worker processes (or the loading process) copy the windows out of the memory-mapped shards into a
  shared host ring (`workers.WorkerCuts`); the device stage copies them over and orients them.

Where the degrade stage runs (`pairload.cut.degrade`) is each path's too: after the cut, on the device, for the
device paths and for the workers' cuts on a GPU (copied over first); in the worker processes when the batch stays on
the host (a CPU device). A cutter that runs it has `degrades` set; on the device paths the kernel then reads targets
only when every input is made (`degrades_every_row`).

`choose` takes a request's device path (`decode` for an encoded split, else `resident` or `zero-copy`) where it
runs, else the workers; a device path that could not run is named
in one line (a warning, or a `ConfigError` when it was asked for with `zero_copy=True`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..errors import ConfigError
from ..hooks import Hooks
from ..hostmemory import host_memory
from ..units import human_bytes
from .payload import Cutter

BUDGET_FRACTION = 0.5  # default pinning budget: this fraction of the memory available when the loader starts


@dataclass(frozen=True, kw_only=True)
class Request:
    """What a loader asks of its cutter. `zero_copy`: True (the device must cut: refuse with a ConfigError if it
    cannot), False (never), None (when it can, else the workers with a warning naming the reason). `resident`: the
    device cuts from a copy of the split in its memory. `pin_budget`: bytes of shard files the page cache may pin
    (None: `default_budget()`). A streamed split (the by-shard deal): `streaming`, `need` (bytes pinned at once at
    most) and `ahead` (bytes registered beyond the current batch). The rest goes to the workers."""

    ds: object
    cfg: object
    plan_for: Callable
    device: torch.device
    who: str
    zero_copy: bool | None = None
    resident: bool = False
    pin_budget: int | None = None
    streaming: bool = False
    need: int | None = None
    ahead: int | None = None
    num_workers: int = 0
    prefetch: int = 4
    timeout: float = 300.0
    hold: int = 0
    hooks: Hooks = field(default_factory=Hooks)

    def __post_init__(self) -> None:
        b = self.pin_budget
        if b is not None and (not isinstance(b, int) or isinstance(b, bool) or b <= 0):
            raise ConfigError(f"pin_budget={b!r}: expected a positive number of bytes")

    def budget(self) -> int:
        """Bytes of shard files the page cache may pin: `pin_budget`, or `default_budget()` now."""
        return default_budget() if self.pin_budget is None else self.pin_budget


@dataclass(frozen=True)
class CutPath:
    """One row of the table: `requires` (what users read in the docs), `why_not(request)` (None: it can run here,
    else the one-line reason) and `build(request)` (its cutter, or the reason it could not be made after all: a
    registration the driver refuses, a kernel Triton cannot build, a device that reads other bytes)."""

    name: str
    requires: str
    why_not: Callable[[Request], str | None]
    build: Callable[[Request], "Cutter | str"]


@dataclass(frozen=True)
class Choice:
    cutter: Cutter
    why: str  # why the device does not cut ('' when it does, or when it was never a candidate)


def default_budget() -> int:
    """Bytes of shard files the zero-copy path may pin by default: half of the memory available now, under this
    process's memory limit where there is one (`hostmemory`: pinned pages cannot be reclaimed)."""
    return int(BUDGET_FRACTION * host_memory().available)


def _budget_note(r: Request) -> str:
    if r.pin_budget is not None:
        return "pin_budget="
    return f"pin_budget=; by default half of the memory available: {host_memory().describe()}"


def triton_missing() -> str | None:
    """Why Triton cannot run here (None: it can)."""
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means: not available
        return f"Triton is not importable ({type(exc).__name__}: {exc}); it ships with CUDA builds of torch"
    return None


def _kernel_why_not(r: Request, pinned: bool = False) -> str | None:
    """Why the kernel cannot cut `r`'s split here; `pinned`: it would read the page cache, within the budget."""
    if r.device.type != "cuda":
        return f"device {r.device} is not a CUDA device (the GPU kernel cuts the crops)"
    encoded = next((part.index.encoding for part in r.ds.sources if not part.index.encoding.plain), None)
    if encoded is not None and not encoded.per_member:
        return (f"the split is compressed (pack --compress {encoded.name}): its images are decoded by CPU workers; "
                "repack without --compress for the zero-copy path")
    if encoded is not None:
        return "the split is stored encoded (pack --store encoded): the decode path cuts it"
    budget = r.budget() if pinned else 0
    if pinned and r.need is None and sum(r.ds.shard_bytes) > budget:
        return (f"the split's shards are {human_bytes(sum(r.ds.shard_bytes))}, more than the pinning budget of "
                f"{human_bytes(budget)} ({_budget_note(r)}); the wds loader streams it a shuffle buffer at a time")
    if pinned and r.need is not None and r.need > budget:
        return (f"a shuffle buffer of shards and the next one are {human_bytes(r.need)}, more than the pinning "
                f"budget of {human_bytes(budget)} ({_budget_note(r)}; or a smaller shuffle_buffer)")
    return triton_missing()


def _kernel_cutter(r: Request, memory, path: str, tolerance: int = 0) -> "Cutter | str":
    from .gpu import KernelCuts, self_test

    why = self_test(memory, r.ds, r.device, tolerance=tolerance)
    if why:
        memory.close()
        return why
    return KernelCuts(memory, r.device, path, r.hooks, inputs=not degrades_every_row(r.cfg))


def degrades_every_row(cfg) -> bool:
    """Every input of the plan is made from its target (no source keeps stored inputs): a cut reads targets only."""
    return cfg.degrade is not None and not cfg.degrade_sources


def _pages(r: Request) -> "Cutter | str":
    from .memory.driver import DriverError
    from .memory.pages import PageCache

    try:
        memory = PageCache(r.ds, r.device, budget=r.budget(), streaming=r.streaming, ahead=r.ahead)
    except (OSError, AttributeError, DriverError) as exc:  # an old libcuda: fall back, not an error
        return f"the CUDA driver cannot register the page cache here ({exc})"
    return _kernel_cutter(r, memory, "zero-copy")


def _resident(r: Request) -> "Cutter | str":
    from .memory.resident import DeviceCopy

    return _kernel_cutter(r, DeviceCopy(r.ds, r.device), "resident")


def encoded(r: Request) -> bool:
    """Some source of the split keeps its images encoded (`pack --store encoded`): the GPU decodes them."""
    return any(part.index.encoding.per_member for part in r.ds.sources)


def _decode_why_not(r: Request) -> str | None:
    from .memory.decoders import decoder_missing

    if r.device.type != "cuda":
        return f"device {r.device} is not a CUDA device (the GPU decodes the encoded images)"
    if r.resident:
        return "resident=True keeps decoded pixels on the device; an encoded split is decoded batch by batch"
    return triton_missing() or decoder_missing(r.ds)


def _decoded(r: Request) -> "Cutter | str":
    from ..format import imageformats
    from .memory.decoded import DecodedMemory
    from .memory.decoders import JPEG_TOLERANCE

    memory = DecodedMemory(r.ds, r.device, inputs=not degrades_every_row(r.cfg), hooks=r.hooks)
    jpeg = imageformats.JPEG in memory.formats
    if jpeg and memory.proc is None and not memory.decoders:  # the decode process makes its own (self-tested)
        return "nvImageCodec could make no JPEG decoder on this GPU"
    # lossless tiles decode exactly; a JPEG's pixels may differ from libjpeg-turbo's by the decoders' rounding
    return _kernel_cutter(r, memory, "decode", tolerance=JPEG_TOLERANCE if jpeg else 0)


def _workers(r: Request) -> Cutter:
    from .workers import WorkerCuts

    cuda = r.device.type == "cuda"
    # on a CPU device the host side applies the flips while copying (nearly free there, a full pass later) and
    # runs the degrade stage, which a GPU runs faster after the copy
    return WorkerCuts(r.ds, r.cfg, r.plan_for, num_workers=r.num_workers, prefetch=r.prefetch, pin=cuda,
                      apply_codes=not cuda, name=f"pairload-{r.who}", hold=r.hold, timeout=r.timeout,
                      hooks=r.hooks, degrade=None if cuda else r.cfg.degrade)


PATHS = {p.name: p for p in (
    CutPath("zero-copy", "a CUDA device, Triton, an uncompressed split whose shards (or, streaming, a shuffle buffer "
            "of them) fit the pinning budget, a driver that registers page-cache pages",
            lambda r: _kernel_why_not(r, pinned=True), _pages),
    CutPath("resident", "a CUDA device, Triton, an uncompressed split that fits in 80% of the free device memory",
            _kernel_why_not, _resident),
    CutPath("decode", "a CUDA device, Triton, a split stored encoded (pack --store encoded), nvImageCodec for its "
            "JPEG files, nvCOMP's library for its lossless tiles",
            _decode_why_not, _decoded),
    CutPath("workers", "nothing: numpy-only processes (or the loading process) and a shared host ring",
            lambda r: None, _workers),
)}


def choose(r: Request, stacklevel: int = 5) -> Choice:
    """The cutter for `r`: its device path (`resident`, else `zero-copy`) where that runs here, else the `workers`
    path, which always runs. A device path that was asked for (`zero_copy=True`) and cannot run is a ConfigError;
    one that was only preferred is a one-line warning naming the reason (none on a CPU device, where the device never
    cuts)."""
    cuda = r.device.type == "cuda"
    why = ""
    if r.zero_copy is not False:
        path = PATHS["decode" if encoded(r) else "resident" if r.resident else "zero-copy"]
        why = path.why_not(r)
        got = path.build(r) if why is None else why
        if not isinstance(got, str):
            return Choice(got, "")
        why = got
        if r.zero_copy:
            raise ConfigError(f"zero_copy=True: {why}; leave zero_copy unset to fall back to the worker path")
        if cuda:
            note = ("the workers decode and cut the crops (not the GPU)" if path.name == "decode"
                    else "the workers cut the crops (not the GPU from a resident copy)" if r.resident
                    else "the workers cut the crops (not the GPU from the page cache)")
            warnings.warn(f"{r.who} loader: {note}: {why}", stacklevel=stacklevel)
    return Choice(PATHS["workers"].build(r), why if cuda else "")
