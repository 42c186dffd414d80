"""`ExternalSource` (kind "external", the `dali-external` loader): packed shards fed through `fn.external_source`,
cut by the `ram` loader's workers into a ring DALI reads without a copy, or on a GPU pipeline by the zero-copy
kernel straight out of the page cache."""

from __future__ import annotations

import itertools
import os
from collections import deque

import nvidia.dali.fn as fn
import torch
from nvidia.dali.tensors import TensorListGPU
from torch.utils.dlpack import to_dlpack

from ...plan import Run
from ...plan.run import next_run
from ..base import LoaderOptions, RemoteOptions, expected_after
from ...cut import PATHS, Cut, Request, choose
from ...cut.degrade import Degrade
from .graph import PairedNodes, augment, dihedral_matrices
from .source import PairedSource

_CUT_GROUP = 4  # batches cut by one launch
_CUT_AHEAD = _CUT_GROUP + 2  # batches cut before the one fed: a group's kernel is done before DALI needs it
_LAUNCHES_AHEAD = 2  # several batches an iteration: launches cut beyond the one fed


class ExternalSource(PairedSource):
    """kind "external": the packed shards. `num_workers` processes cut each batch's planned windows out of the
    memory-mapped shards (the `ram` loader's workers, ring and read-ahead), and `fn.external_source` takes each
    batch as two dense arrays without a copy. With a GPU the batch moves there and is flipped in one exact warp;
    in CPU-only mode the workers flip while copying. The pipeline's first operator sees the final crops."""

    KIND = "external"

    def __init__(self, source, opts: LoaderOptions, *, prefetch: int = 4, timeout: float = 300.0,
                 zero_copy: bool | None = None, pin_budget: int | None = None,
                 cache_dir: str | os.PathLike | None = None, cache_limit: int | None = None,
                 storage_options: dict | None = None):
        """`zero_copy`, `pin_budget`: as for the ram loader; on a GPU pipeline the device cuts the windows straight
        out of the page cache and external_source takes them on the device (no workers, no warp)."""
        remote = RemoteOptions(cache_dir, cache_limit, storage_options, kind="dali-external")
        self.ds = remote.open(source, opts.split, whole=True, plan=opts.plan)
        self.where = self.ds.where
        super().__init__(self.ds.keys, self.ds.sizes, self.ds.split, opts, prefetch, self.ds.groups,
                         key_hash=self.ds.key_hash, sequences=self.ds.sequences if opts.plan.clips else None,
                         bounds=self.ds.size_bounds)
        self.sensor_rows = self.ds.sensor
        self._flip_on_device = False
        request = Request(ds=self.ds, cfg=self.cfg, plan_for=self.plan_for, device=self.device, who="dali-external",
                          zero_copy=zero_copy, pin_budget=pin_budget, num_workers=opts.num_workers,
                          prefetch=prefetch, timeout=timeout, hold=self._hold, hooks=self.hooks)
        choice = choose(request)
        self.path_note = choice.why
        self.cutter = choice.cutter  # the cutter `choose` picked: the kernel's where it runs, else the workers'
        # the kernel's cuts feed a GPU pipeline; a CPU pipeline (or no kernel) takes the workers' ring
        self._zero = choice.cutter if choice.cutter.on_device else None
        self._zero_active = False  # the graph being run takes device batches from `_zero`
        self._launched: dict = {}  # run -> its launches, the first made while the run before it was fed
        self._host = choice.cutter if self._zero is None else PATHS["workers"].build(request)

    @property
    def _hold(self) -> int:
        """Ring slots held after they were fed (`RunState.hold_limit`)."""
        return self.run_state.hold_limit

    def _threads(self) -> int:
        # the workers cut; DALI's threads only stage the host-to-device copies, which several threads copy faster
        # than one (benchmarks/dali_micro.py)
        return 4 if self.device.type == "cuda" else 1

    @property
    def zero_copy(self) -> bool:
        """True when the device cuts the windows (on a GPU pipeline; a CPU pipeline still uses the workers)."""
        return self._zero is not None

    def start_workers(self) -> None:
        if self._zero is None:
            self._host.start()

    def worker_pids(self) -> list[int]:
        return self._host.worker_pids()

    def close(self) -> None:
        """Drop the pipeline and stop the workers (they start again with the next iteration)."""
        super().close()
        self._host.close()
        if self._zero is not None:
            self._zero.close()
        self.ds.close_remote()

    def _release_held(self) -> None:
        self._launched = {}  # launches made ahead for a run that will not be fed now
        if self.run_state.held and self._zero_active:  # outputs drained or dropped unseen: DALI may still read them
            torch.cuda.synchronize(self.device)
        self.run_state.release_held()

    def _hold_until_consumed(self, release, before=None) -> None:
        """Keep a fed batch's memory until DALI is past it (`RunState.hold`)."""
        self.run_state.hold(release, before)

    def _graph(self, on_gpu: bool) -> PairedNodes:
        self._zero_active = on_gpu and self._zero is not None
        if self._zero_active:  # the device cuts, flips included; DALI takes the batches on the device
            # no_copy: DALI reads the kernel's output, complete when it is fed (`_device_inputs`); a copy into
            # DALI's buffers would cost host time on every batch
            low, high = fn.external_source(source=self._feed(), num_outputs=2, batch=True, device="gpu",
                                           no_copy=True, cycle="raise", parallel=False)
            return PairedNodes(low, high, self)
        # with a GPU the flips/transposes run there, in one exact warp per batch: a flipped or transposed copy is
        # far slower than a straight one on the host (numpy strides); without one the workers flip while copying
        self._flip_on_device = on_gpu and self.cfg.augment
        self._host.set_hold(self._hold)
        if self._host.pool is not None and self._host.apply_codes == on_gpu:
            self._host.close()  # workers started for the other device: start them again for this one
        # a page-locked ring on a GPU: DALI's host-to-device copies run at full speed
        self._host.pin, self._host.apply_codes = on_gpu, not on_gpu
        outs = fn.external_source(source=self._feed(), num_outputs=2 + self._flip_on_device, batch=True, no_copy=True,
                                  cycle="raise", parallel=False)
        low, high = outs[0], outs[1]
        if on_gpu:
            low, high = low.gpu(), high.gpu()
        if self._flip_on_device:
            low, high = augment(low, outs[2]), augment(high, outs[2])
        return PairedNodes(low, high, self)

    def _device_inputs(self, run: tuple, plans: Run):
        """The zero-copy batches, fed without a copy once their kernel has finished. DALI orders its reads of a
        no_copy input after the stream the array itself names, and torch names none: external_source's
        `cuda_stream` does not order them. So the kernels run ahead (`_CUT_AHEAD` batches, `_CUT_GROUP` per launch)
        and a batch is fed after its event completed, which it has by then: the GPU cuts faster than DALI takes."""
        ahead: deque = deque()
        for cut in self._zero.cuts(run, plans, augment=self.cfg.augment, hw=self.hw, group=_CUT_GROUP,
                                   after=expected_after(self, run)):
            ready = self._degraded(run, cut)
            low, high = cut.sides()
            sizes = [len(bp) for bp in cut.plans]
            for bp, lo, hi in zip(cut.plans, low.split(sizes), high.split(sizes)):
                ahead.append((bp, ready, (lo, hi)))
            while len(ahead) > _CUT_AHEAD:
                yield self._to_dali(run, *ahead.popleft())
        while ahead:
            yield self._to_dali(run, *ahead.popleft())

    def _to_dali(self, run: tuple, fed, ready, sides) -> list:
        """A cut block's (low, high) as DALI's inputs, once its kernel is done (`ready`; long done but for an epoch's
        first batches); `fed`: its plan, or the tuple of an iteration's plans."""
        if not ready.query():
            ready.synchronize()
        self.run_state.fed.append((run, fed))
        # DALI reads the memory until it is past the batch: kept here (so DALI's release never frees it) for `_hold`
        # batches. DALI copies it to its output on its own stream, and the current stream has waited for the
        # outputs taken so far: the cutting stream waits for it before the memory of the oldest goes back to torch
        self._hold_until_consumed(lambda kept=sides: None,
                                  before=lambda: self._zero.stream.wait_stream(torch.cuda.current_stream(self.device)))
        return [TensorListGPU(to_dlpack(side)) for side in sides]  # DLPack: no per-call probing of the tensor

    def _device_iterations(self, run: tuple, plans: Run):
        """`_per_iteration` planned batches per DALI iteration: each launch of the kernel (up to that many batches of
        one shape, one `Cut`) is fed as one DALI batch of all their samples, with _LAUNCHES_AHEAD more launched
        behind it, so that the device keeps cutting while DALI takes it. When the feed runs on into the next epoch,
        that epoch's first launches go out before this one's last are fed: its setup (plan, schedule, the plan's
        upload) then runs while the device still cuts, not while it waits (an epoch of a small split is a few
        launches)."""
        launches = self._launched.pop(run, None) or self._launches(run, plans)
        ahead: deque = deque()
        for cut in launches:
            ahead.append((cut, self._degraded(run, cut)))
            if len(ahead) > _LAUNCHES_AHEAD:
                yield self._ready_iteration(run, ahead.popleft())
        state = self.run_state
        if ahead and state.follow and not state.cancel:
            following = next_run(run)
            # DALI takes the next epoch's first iterations before it hands over this one's last
            more = self._launches(following, self.plan_for(*following))
            first = list(itertools.islice(more, _LAUNCHES_AHEAD))
            self._launched = {following: itertools.chain(first, more)}
        while ahead:
            yield self._ready_iteration(run, ahead.popleft())

    def _launches(self, run: tuple, plans: Run):
        """The kernel's launches for a run, one `Cut` each (launched when it is yielded)."""
        return self._zero.cuts(run, plans, augment=self.cfg.augment, hw=self.hw, group=self._per_iteration,
                               after=expected_after(self, run))

    def _ready_iteration(self, run: tuple, launched: tuple) -> list:
        cut, ready = launched
        return self._to_dali(run, cut.plans, ready, cut.sides())

    def _degraded(self, run: tuple, cut: Cut):
        """The event after which a device cut's inputs are made (the degrade stage, on the cutting stream: the
        pipeline's own nodes carry them), or the cut's own without a degradation."""
        tables = self._degrade_run(self.plan_for(*run))
        if tables is None:
            return cut.ready
        with self.hooks.timed(Degrade.name):
            return tables.apply(cut, self._zero.stream).ready

    def _inputs(self, run: tuple, plans: Run):
        if self._zero_active and self._per_iteration > 1:
            yield from self._device_iterations(run, plans)
            return
        if self._zero_active:
            yield from self._device_inputs(run, plans)
            return
        # the degrade stage runs in the feed where the workers do not run it (they leave a GPU pipeline's inputs)
        tables = None if self._host.degrades else self._degrade_run(plans)
        for cut in self._host.cuts(run, plans):
            (bp,) = cut.plans
            self.run_state.fed.append((run, bp))
            if cut.release is not None:
                self._hold_until_consumed(cut.release)
            batch = list(cut.sides())
            if tables is not None:
                with self.hooks.timed(Degrade.name):
                    tables.apply(cut)
            if self._flip_on_device:
                batch.append(dihedral_matrices(bp.code, self._out_hw_index(bp.index, bp.crop)))
            yield batch
