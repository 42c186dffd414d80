"""The device cutter (paths `zero-copy` and `resident`): planned batches cut by the kernel (`pairload.cut.kernel`)
straight out of a `Memory` (the registered page cache, or the split's device copy) on a side stream of its own.
No worker process and no host copy is involved; the planner still decides every window and orientation, so the
batches equal the workers' bit for bit.
"""

from __future__ import annotations

import threading

import numpy as np
import torch

from ..devices import loader_stream
from ..errors import PairloadError
from ..hooks import Hooks
from ..plan import Run
from . import kernel
from .kernel import Launch
from .payload import Cut


class KernelCuts:
    """Planned batches cut by the kernel from `memory` on `self.stream`, each `Cut` a device block with the event that
    marks it ready. `group` > 1: up to that many consecutive batches of one shape are cut by one launch into one
    block (one `Cut` holding their plans), which spares the per-launch Python of the others. `inputs` False: only the
    targets are cut (every input is made from its target by the degrade stage, after the cut)."""

    on_device = True
    degrades = False  # the degrade stage runs after the cut, on the device

    def __init__(self, memory, device: torch.device, path: str, hooks: Hooks | None = None, *, inputs: bool = True):
        self.memory, self.device, self.path, self.inputs = memory, device, path, inputs
        self.hooks = hooks or Hooks()
        self.members = memory.ds.members
        self.stream = loader_stream(device)
        self._launches: dict[tuple[int, int, int], Launch] = {}  # per (n, h, w): worked out once

    def _launch(self, n: int, h: int, w: int) -> Launch:
        launch = self._launches.get((n, h, w))
        if launch is None:
            launch = self._launches[(n, h, w)] = Launch.of(self.members.batch(n, h, w), self.members.scale)
        return launch

    def start(self) -> None:
        """Nothing to start: no worker processes."""

    def worker_pids(self) -> list[int]:
        """The memory's processes (the decode processes of a JPEG split): no worker processes."""
        return list(self.memory.pids)

    def cuts(self, run: tuple, plans: Run, reclaim=None, *, augment: bool = True, hw=None,
             events: bool = True, group: int = 1, after=None):
        """The run's plans as `Cut`s, each cut on `self.stream` with the event that marks it ready (`events`; a
        streamed memory records them anyway: what a batch read goes back once it is cut); `group` > 1: up to that
        many batches of one shape per launch and `Cut`; `after`: what gives the run expected next (`Memory.begin`)."""
        if not plans:
            return
        hw = self.memory.ds.sizes if hw is None else hw
        if self.memory.closed:
            self.memory = self.memory.reopen()
        memory = self.memory
        memory.check(force=True)
        if memory.streaming:
            self.stream.synchronize()  # what the last run left pinned may go back now
        with self.hooks.timed("plan"):
            memory.begin(plans, after)
        if memory.streaming:  # what a launch's batches read is held at once: at most `together` batches (known now:
            group = min(group, memory.together)  # a decode call holds fewer batches of larger images)
        events = events or memory.streaming
        b, block = 0, None
        while b < len(plans):
            memory.check()
            if block is None or b >= block.first + len(block):
                with self.hooks.timed("plan"):  # each block's plan goes to the device in one copy
                    block = plans.block_at(b)
                    with torch.cuda.stream(self.stream):
                        plan = kernel.plan_tensor(block.plans, self.device, augment)
                    shapes = kernel.out_shapes(block.plans, hw)
            at = b - block.first
            start = int(block.starts[at])
            h, w = shapes[at]
            n = len(block.plans[at])
            k = 1
            while (k < group and at + k < len(block) and len(block.plans[at + k]) == n
                   and shapes[at + k] == (h, w)):
                k += 1
            launch = self._launch(k * n, h, w)
            with torch.cuda.stream(self.stream):
                with self.hooks.timed("wait"):
                    for j in range(k):  # everything these batches read is readable by the device
                        memory.wait(b + j)
                with self.hooks.timed("launch"):
                    out = kernel.cut(memory, plan, start, launch, inputs=self.inputs)
                ready = None
                if events:
                    ready = torch.cuda.Event()
                    ready.record(self.stream)
            for j in range(k):
                memory.done(b + j, ready)
            yield Cut(tuple(block.plans[at:at + k]), launch.layout, out, True, ready)
            b += k

    def close(self) -> None:
        """Give the memory back (unpin the pages, or free the device copy) once the kernels reading it are done; the
        next run makes it again."""
        self.stream.synchronize()
        self.memory.close()


def self_test(memory, ds, device: torch.device, tolerance: int = 0) -> str:
    """Cut the first sample's window once on the device and compare it with the CPU's slice: '' when they are equal,
    else why the path cannot be used (Triton could not build or launch the kernel, e.g. without a C compiler, or
    the device read other bytes than the CPU)."""
    h, w = (int(v) for v in ds.sizes[0])
    ch, cw = min(h, 8), min(w, 8)
    plan = torch.tensor([[0], [h - ch], [w - cw], [0]], dtype=torch.int64, device=device)
    members = ds.members
    launch = Launch.of(members.batch(1, ch, cw), members.scale)
    out = torch.empty(launch.out_shape, dtype=torch.uint8, device=device)
    # the kernel is built while the first sample is read (decoded by the decode processes as they start: ~2 s)
    builder = threading.Thread(target=_build, args=(memory, plan, launch, out, device), name="pairload-build",
                               daemon=True)
    builder.start()
    try:
        memory.warm([0])
    except PairloadError as exc:
        return f"registering the first shard failed ({exc})"
    finally:
        builder.join()
    try:
        got = launch.layout.views(kernel.cut(memory, plan, 0, launch, out).cpu().numpy().reshape(-1))
    except Exception as exc:  # noqa: BLE001 - any failure to build or run the kernel means: not here
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        return f"the GPU kernel could not be built or run ({type(exc).__name__}: {first})"
    low, high = ds.arrays(0)  # read by the CPU after the device: a failure above never touched the map
    s = members.scale
    if not (_close(got[0][0], low[h - ch:, w - cw:], tolerance)
            and _close(got[1][0], high[(h - ch) * s:, (w - cw) * s:], tolerance)):
        return (f"the GPU read other bytes than the CPU for {ds.keys[0]} (a driver that maps registered memory "
                "elsewhere)")
    return ""


def _build(memory, plan: torch.Tensor, launch: Launch, out: torch.Tensor, device: torch.device) -> None:
    """`kernel.build` of the self-test's launch, on `device` (the memory's tables are device tensors by then: the
    page cache's are made as it registers, and so it is left to the launch)."""
    if all(isinstance(getattr(memory, name, None), torch.Tensor) for name in ("low", "high", "width")):
        with torch.cuda.device(device):
            kernel.build(memory, plan, 0, launch, out)


def _close(a: np.ndarray, b: np.ndarray, tolerance: int) -> bool:
    """Equal, or (a GPU's JPEG decode against the CPU's) within `tolerance` levels."""
    if tolerance == 0:
        return np.array_equal(a, b)
    return a.shape == b.shape and int(np.abs(a.astype(np.int32) - b.astype(np.int32)).max(initial=0)) <= tolerance
