"""pairload for DALI users: the planner's paired crops inside your own pipelines, and the two DALI loaders.

Building block: make a source once (`paired_source(shards, kind="external", ...)` or `kind="file"` over raw
image folders), call `low, high = paired_inputs(source)` inside a `@pipeline_def` function, add your own
operators, and iterate with `PairedIterator`: epochs of the planned length, `set_epoch`, `state_dict`, and the
keys of every batch. Input and target get the same window and the same flip/transpose, decided by the one
planner every pairload loader executes.

kind "external": worker processes cut the planned windows out of the memory-mapped shards (the `ram` loader's
ring), `fn.external_source` takes each batch as two dense arrays without a copy, and one exact nearest-neighbour
`warp_affine` applies the flips on the GPU (in CPU-only mode the workers flip while copying).
kind "file": two sharded `readers.file` over the raw images, `decoders.image_slice` for the window and one exact
nearest-neighbour `warp_affine` for the flips; a pair has one label in both file lists and the labels the
readers return are compared with the plan's for every batch, so out-of-step readers stop the loader.

`make_loader("dali-external" | "dali-file")` are these sources through a pipeline that returns the crops,
yielding `PairBatch`. GPU (`device="cuda:k"`) or DALI's CPU-only mode (`device_id=None`); only the public
`nvidia.dali` API is used, so the cuda120 and cuda130 builds both work.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import weakref
import re
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from torch.utils.dlpack import from_dlpack, to_dlpack

from ...batch import batch_from_hwc
from ...raw.decode import probe_size
from ...raw.discover import find_pairs
from ...errors import ConfigError, ImageError, LoaderError, MissingDependencyError, PairingError, PairloadError
from ..base import LoaderOptions, PlannedLoader, RemoteOptions, check_options
from ..ring import HostWindows
from ...plan import HFLIP, TRANSPOSE, VFLIP, BatchPlan, PlanConfig, rank_share

try:
    import nvidia.dali.fn as fn
    import nvidia.dali.types as types
    from nvidia.dali import pipeline_def
    from nvidia.dali.pipeline import Pipeline
    from nvidia.dali.tensors import TensorListGPU
except ImportError:  # pragma: no cover - exercised where DALI is absent
    raise MissingDependencyError(
        "pairload.dali needs NVIDIA DALI: pip install 'pairload[dali]' (CUDA 12 build) or 'pairload[dali-cu13]' "
        "(CUDA 13 build); DALI also runs without a GPU"
    ) from None


def _stamp(path) -> tuple[int, int, int] | None:
    """(inode, size, mtime) of a file, None if it is gone."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _device_id(device: torch.device) -> int | None:
    return device.index if device.type == "cuda" else None


def _augment(images, matrix):
    """The planner's transpose/vflip/hflip of every sample as one exact nearest-neighbour `warp_affine`.

    The per-sample 2x3 matrix maps output pixel centres onto source pixel centres, so every output pixel is
    copied from exactly one source pixel (no interpolation); no DALI conditionals are needed."""
    if matrix is None:
        return images
    return fn.warp_affine(images, matrix=matrix, interp_type=types.INTERP_NN, inverse_map=True, fill_value=0)


def dihedral_matrices(code: np.ndarray, hw: np.ndarray) -> np.ndarray:
    """(N, 2, 3) float32 inverse maps (output x, y, 1 -> source x, y) for augmentation codes on H×W outputs.

    Output pixel (row i, col j) shows source (j', i') after a transpose, else (i', j'), where i' = H-1-i under a
    vertical flip and j' = W-1-j under a horizontal flip: the planner's order (transpose, vflip, hflip)."""
    n = len(code)
    h, w = hw[:, 0].astype(np.float32), hw[:, 1].astype(np.float32)
    hflip, vflip, trans = (code & HFLIP) != 0, (code & VFLIP) != 0, (code & TRANSPOSE) != 0
    ax = np.zeros((n, 3), np.float32)  # x' (source column before transposing) as a function of (x, y, 1)
    ax[:, 0] = np.where(hflip, -1, 1)
    ax[:, 2] = np.where(hflip, w, 0)
    ay = np.zeros((n, 3), np.float32)
    ay[:, 1] = np.where(vflip, -1, 1)
    ay[:, 2] = np.where(vflip, h, 0)
    src_x = np.where(trans[:, None], ay, ax)
    src_y = np.where(trans[:, None], ax, ay)
    return np.ascontiguousarray(np.stack([src_x, src_y], axis=1))


def _to_torch(tensor_list, device: torch.device, share: bool = False, stream=None) -> torch.Tensor:
    """A dense DALI TensorList (CPU or GPU) → a torch tensor on `device`. `share` (pipelines on DALI's default,
    dynamic executor): a GPU output is viewed, and stays valid while the view lives, as DALI's own PyTorch iterator
    does; else one copy. `stream`: the torch stream that will use it (default: the current one)."""
    dense = tensor_list.as_tensor()
    if device.type == "cuda" and stream is None:
        stream = torch.cuda.current_stream(device)
    if share and device.type == "cuda":  # `stream` waits for DALI's work on the output
        return from_dlpack(dense.__dlpack__(stream=stream.cuda_stream or 1))  # DLPack calls the legacy stream 1
    # CPU outputs are copied: torch cannot view page-locked ones (kDLCUDAHost), and a view of a CPU-only pipeline's
    # output still held at interpreter exit crashed the process (SIGSEGV in the README's DALI example)
    from nvidia.dali.plugin.pytorch import feed_ndarray, to_torch_type

    out = torch.empty(tuple(dense.shape()), dtype=to_torch_type[dense.dtype], device=device)
    if device.type == "cuda":
        feed_ndarray(dense, out, cuda_stream=stream)
    else:
        feed_ndarray(dense, out)
    return out


def _labels(tensor_list) -> np.ndarray:
    return np.array(tensor_list.as_cpu().as_tensor() if hasattr(tensor_list, "as_cpu") else tensor_list.as_tensor()).reshape(-1)


_SOURCE_INFO = re.compile(r"(?:source info|Source info|sample's source info)[^:]*:\s*(\S+)")


def _dali_error(exc: Exception, where: str) -> PairloadError:
    text = str(exc)
    m = _SOURCE_INFO.search(text)
    name = m.group(1) if m else None
    first = next((ln.strip() for ln in text.splitlines() if ln.strip() and "Error" in ln), text.strip().splitlines()[0] if text.strip() else type(exc).__name__)
    if name:
        return ImageError(f"{name}: DALI could not read or decode it ({first[:200]}); replace or remove the file")
    return ImageError(f"{where}: DALI failed: {first[:300]}")


class PairedNodes(tuple):
    """`(low, high)` DataNodes of one pipeline, plus `source` (the `PairedSource` feeding them) and `checks`
    (for kind "file": the two readers' labels and the labels the plan expects; return them after your own
    outputs and `PairedIterator` stops at the first batch where the readers disagree)."""

    source: "PairedSource"
    checks: tuple

    def __new__(cls, low, high, source: "PairedSource", checks: tuple = ()):
        self = super().__new__(cls, (low, high))
        self.source, self.checks = source, checks
        return self


_CUT_GROUP = 4  # batches cut by one launch
_CUT_AHEAD = _CUT_GROUP + 2  # batches cut before the one fed: a group's kernel is done before DALI needs it


class _Feed:
    """What `fn.external_source(cycle="raise")` iterates: `iter()` gives the next run's inputs, lazily (a generator
    body runs at the first `next()`, after the consumer has said which run comes next)."""

    def __init__(self, source: "PairedSource"):
        self.source = source

    def __iter__(self):
        return self.source._run_feed()


class PairedSource(PlannedLoader):
    """The planner's aligned crops as DALI inputs, epoch after epoch: call `paired_inputs(source)` inside a
    `@pipeline_def` function, then iterate with `PairedIterator`. The two kinds are subclasses:
    `ExternalSource` (packed shards) and `FileSource` (raw image folders).

    Iterating yields one dict per batch: each pipeline output named by `output_map` as a torch tensor on the
    pipeline's device, `keys` and `padded`. Epoch bookkeeping, `len()`, `set_epoch()` and
    `state_dict()`/`load_state_dict()` are the loaders' own."""

    KIND = ""

    def __init__(self, keys, hw, split, opts: LoaderOptions, prefetch: int, groups=()):
        super().__init__(keys, hw, split, opts, groups)
        if prefetch < 1:
            raise ConfigError(f"prefetch={prefetch}: expected at least 1 batch")
        self.prefetch = prefetch
        self.output_map: tuple[str, ...] = ("low", "high")
        self._binding: tuple[str, object] = ("default", None)  # ("default" | "factory" | "instance", what)
        self._pipe = None
        self._at: tuple | None = None  # ("fresh",) after a build, ("end", run) after a whole run, None mid-run
        self._building: tuple | None = None  # the run a pipeline is being defined for
        self._runs: list[tuple] = []  # the runs the current graph was made for (kind "file")
        self._fed: deque = deque(maxlen=4096)  # (run, BatchPlan) of each batch fed to DALI, in order
        self._queued: deque = deque()  # runs the feed is to deliver next
        self._last_run: tuple | None = None
        self._cancel = False
        self._queue_depth = prefetch
        self._follow = False  # the feed goes on into the next epoch (set while our iterator drives; kind external)
        # a pipeline left running into the next epoch must stop before the interpreter tears down what it reads
        ref = weakref.ref(self)
        atexit.register(lambda: (src := ref()) is not None and src.close())
        self._share = False  # the outputs are viewed, not copied (set when a pipeline is built)

    # ------------------------------------------------------------------ graph and feed

    def nodes(self) -> PairedNodes:
        """The aligned (low, high) uint8 HWC DataNodes for the pipeline being defined (on the GPU when it has one)."""
        pipe = Pipeline.current()
        if pipe is None:
            raise ConfigError("paired_inputs() makes DALI nodes: call it inside a @pipeline_def function")
        if pipe.max_batch_size != self.cfg.max_batch:
            raise ConfigError(f"the pipeline's batch_size is {pipe.max_batch_size} but the paired source plans batches "
                              f"of up to {self.cfg.max_batch}; give the pipeline that batch size")
        pipe._pairload_source = self  # PairedIterator(pipe) finds its source here
        depth = pipe.prefetch_queue_depth  # how many fed batches the pipeline may still read (no_copy inputs)
        self._queue_depth = sum(depth.values()) if isinstance(depth, dict) else int(depth)
        self._window(self._building or (self.epoch, self._consumed(self.epoch)))
        self._reset_feed()
        return self._graph(pipe.device_id is not None)

    def _graph(self, on_gpu: bool) -> PairedNodes:
        raise NotImplementedError

    def _inputs(self, run: tuple, plans: list[BatchPlan]):
        """The external_source batches of one run (appending (run, plan) to `_fed` for each)."""
        raise NotImplementedError

    def _window(self, first: tuple) -> None:
        """The runs a new graph serves, starting with `first`."""
        self._runs = [first]

    def _fits(self, run: tuple) -> bool:
        """Whether the current graph can deliver `run` after the run it delivered last (or first, when fresh)."""
        return True

    def _auto_next(self) -> tuple | None:
        """The run to feed when the consumer named none (DALI's own iterators): the epoch after the last one."""
        return self._runs[0] if self._last_run is None else (self._last_run[0] + 1, ())

    def _reset_feed(self) -> None:
        self._fed.clear()
        self._queued.clear()
        self._last_run, self._cancel = None, False

    def _run_feed(self):
        run = self._queued.popleft() if self._queued else self._auto_next()
        while run is not None and not self._cancel:
            self._last_run = run
            fed = 0
            for batch in self._inputs(run, self.plan_for(*run)):
                if self._cancel:  # the consumer left this run: end it here
                    break
                fed += 1
                yield batch
            # DALI's own iterators end an epoch at StopIteration; ours know its length, and the pipeline goes on
            # into the next epoch, which is what the consumer asks for next unless it jumps (`_ready_for`)
            if not (self._follow and fed) or self._cancel:
                break
            run = (run[0] + 1, ())
        self._cancel = False

    def _follows(self, run: tuple) -> bool:
        """Whether the pipeline, at the end of a run, is already delivering `run` (the next epoch, from its start)."""
        return self._follow and self._at is not None and self._at[0] == "end" and run == (self._at[1][0] + 1, ())

    # ------------------------------------------------------------------ pipelines

    def bind(self, pipeline, output_map=("low", "high")) -> None:
        """Iterate `pipeline`: a Pipeline whose graph calls paired_inputs() with this source, or a function that
        builds one (kind "file" needs the function to start its readers over after a jump or a run left early)."""
        self.close()
        self.output_map = tuple(output_map)
        if isinstance(pipeline, Pipeline):
            if getattr(pipeline, "_pairload_source", None) is not self:
                raise ConfigError("this pipeline's graph does not call paired_inputs() with this source")
            self._binding = ("instance", pipeline)
        elif callable(pipeline):
            self._binding = ("factory", pipeline)
        else:
            raise ConfigError(f"expected a DALI Pipeline or a function that builds one, found {type(pipeline).__name__}")

    def _default_pipeline(self):
        @pipeline_def(batch_size=self.cfg.max_batch, num_threads=self._threads(), device_id=_device_id(self.device),
                      prefetch_queue_depth=self.prefetch, seed=self.cfg.seed & 0x7FFFFFFF)
        def pipe():
            nodes = self.nodes()
            return (*nodes, *nodes.checks)

        return pipe()

    def _threads(self) -> int:
        return max(1, self.opts.num_workers)

    def _build(self, run: tuple):
        how, what = self._binding
        if how == "instance":
            if what is None or not self._fits(run):
                raise ConfigError("a bound pipeline instance serves the epochs it was built for, from their start; "
                                  "bind a function that builds the pipeline (PairedIterator(lambda: my_pipe(...), "
                                  "source=src)) to go on at another epoch or after leaving one early")
            pipe, self._binding = what, ("instance", None)
        else:
            self._building = run
            try:
                pipe = what() if how == "factory" else self._default_pipeline()
            finally:
                self._building = None
            if getattr(pipe, "_pairload_source", None) is not self:
                raise ConfigError("the pipeline function did not call paired_inputs() with this source (make the "
                                  "source once with paired_source(...) and pass it to paired_inputs in the function)")
        pipe.build()
        self._pipe, self._at = pipe, ("fresh",)
        # DALI's default (dynamic) executor keeps an output alive while a view of it lives: no copy needed
        self._share = bool(getattr(pipe, "exec_dynamic", False))
        self._reset_feed()
        return pipe

    def _drain(self) -> None:
        """Run the pipeline to the end of the run it is on (outputs discarded) and reset it for the next run."""
        while True:
            try:
                self._pipe.schedule_run()
                self._pipe.outputs()
            except StopIteration:
                break
        self._pipe.reset()
        self._cancel = False  # the feed has ended (or never ran again): the next one starts with the queued run
        self._fed.clear()
        self._release_held()

    def _ready_for(self, run: tuple):
        """A pipeline whose next outputs are the batches of `run`."""
        if self._pipe is not None and self._follows(run):
            return self._pipe
        if self._pipe is not None and self._at != ("fresh",):
            if self._at is None and self.KIND == "file":  # the readers stopped mid-list: they cannot skip ahead
                self._discard()
            else:
                # left mid-run, or the feed went on into an epoch not asked for: it ends at its next call
                self._cancel = self._at is None or self._follow
                self._drain()
                if not self._fits(run):
                    self._discard()
        if self._pipe is None:
            self._build(run)
        elif self._at == ("fresh",) and not self._fits(run):
            self._discard()
            self._build(run)
        self._queued.append(run)
        return self._pipe

    def _discard(self) -> None:
        self._pipe, self._at = None, None
        self._reset_feed()
        self._release_held()

    def _release_held(self) -> None:
        """Give back host buffers DALI may have been reading (kind "external")."""

    def close(self) -> None:
        """Drop the pipeline (a bound function or the default pipeline builds a new one on the next iteration)."""
        self._discard()

    # ------------------------------------------------------------------ iteration

    def _batches(self, epoch: int, plans: list[BatchPlan], consumed: tuple):
        run = (epoch, consumed)
        self._follow = self.KIND == "external"
        pipe = self._ready_for(run)
        self._at = None
        self._padded_now = self._padded_on(plans)
        for b, bp in enumerate(plans):
            try:
                pipe.schedule_run()  # run() in two steps: DALI's run() adds ~10 us of API checks per batch
                outputs = pipe.outputs()
            except StopIteration:
                raise LoaderError(f"{self.where}: the DALI pipeline ended after {b} of {len(plans)} batches of epoch "
                                  f"{epoch}") from None
            except (RuntimeError, ValueError) as exc:
                self._discard()
                raise (self._diagnose(plans, b) or _dali_error(exc, self.where)) from None
            fed_run, fed = self._fed.popleft() if self._fed else (None, None)
            if fed_run != run or (fed is not bp and not np.array_equal(fed.index, bp.index)):
                raise LoaderError(f"{self.where}: internal: DALI delivered a batch fed for {fed_run} where epoch "
                                  f"{epoch} batch {b} was expected")
            yield self._convert(self._checked(outputs, bp, b), bp)
        self._at = ("end", run)

    def _checked(self, outputs, bp: BatchPlan, b: int) -> tuple:
        n = len(self.output_map)
        if len(outputs) == n + 3 and self.KIND == "file":
            self._check(outputs[n:], bp, b)
        elif len(outputs) != n:
            raise ConfigError(f"the pipeline has {len(outputs)} outputs but output_map names {n} "
                              f"({', '.join(self.output_map)}): name every output (kind 'file' may add its 3 checks)")
        return outputs[:n]

    def _check(self, labels, bp: BatchPlan, b: int) -> None:
        """Raise if the labels that came out are not the plan's (readers out of step)."""

    def _diagnose(self, plans: list[BatchPlan], b: int) -> PairloadError | None:
        """After a DALI failure at batch b, find a file to blame (DALI's own message often names none)."""
        return None

    def _convert(self, outputs, bp: BatchPlan):
        n = len(bp)
        out = {}
        for name, tl in zip(self.output_map, outputs):
            dev = torch.device("cuda", self._pipe.device_id) if isinstance(tl, TensorListGPU) else torch.device("cpu")
            out[name] = _to_torch(tl, dev, self._share)[:n]
        out["keys"] = self._keys(bp)
        out["padded"] = self._padded(bp)
        if self.groups:
            out["source"] = self._source(bp)
        return out

    def _out_hw_index(self, index: np.ndarray, crop: int | None) -> np.ndarray:
        """(N, 2) output height and width of these samples: the crop, or the whole image."""
        if crop is not None:
            return np.full((len(index), 2), crop, dtype=np.int64)
        return self.hw[index]


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
        self.ds = remote.open(source, opts.split, whole=True)
        self.where = self.ds.where
        super().__init__(self.ds.keys, self.ds.sizes, self.ds.split, opts, prefetch, self.ds.groups)
        from .. import zerocopy

        self._held: deque = deque()
        self._flip_on_device = False
        kernel_source, self.path_note = zerocopy.setup(self.ds, self.device, requested=zero_copy, budget=pin_budget,
                                                       who="dali-external")
        self._zero = None if kernel_source is None else zerocopy.KernelCuts(kernel_source, self.device)
        self._zero_active = False  # the graph being run takes device batches from `_zero`
        self._host = HostWindows(self.ds, self.cfg, self.plan_for, num_workers=opts.num_workers,
                                 prefetch=prefetch, pin=self.device.type == "cuda",
                                 apply_codes=self.device.type != "cuda", name="pairload-dali", hold=self._hold,
                                 timeout=timeout)

    @property
    def _hold(self) -> int:
        """Ring slots held after they were fed: DALI reads a batch until it has left the pipeline's queues (+3)."""
        return self._queue_depth + 3

    def _threads(self) -> int:
        # the workers cut; DALI's threads only stage the host-to-device copies, and 4 of them make that copy
        # 2.4x faster than 1 (benchmarks/dali_micro.py on the H100: 18k -> 44k pairs/s with the warp)
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
        if self._held and self._zero_active:  # outputs drained or dropped unseen: DALI may still read the batches
            torch.cuda.synchronize(self.device)
        while self._held:
            self._held.popleft()()

    def _hold_until_consumed(self, release, before=None) -> None:
        """Keep a fed batch's memory until DALI is past it: `release()` runs once `_hold` newer batches were fed
        (`before()` first, when any is released)."""
        self._held.append(release)
        if before is not None and len(self._held) > self._hold:
            before()
        while len(self._held) > self._hold:
            self._held.popleft()()

    def _graph(self, on_gpu: bool) -> PairedNodes:
        self._zero_active = on_gpu and self._zero is not None
        if self._zero_active:  # the device cuts, flips included; DALI takes the batches on the device
            # no_copy: DALI reads the kernel's output, complete when it is fed (`_device_inputs`); a copy into
            # DALI's buffers would cost ~50 us of host time per batch
            low, high = fn.external_source(source=_Feed(self), num_outputs=2, batch=True, device="gpu",
                                           no_copy=True, cycle="raise", parallel=False)
            return PairedNodes(low, high, self)
        # with a GPU the flips/transposes run there, in one exact warp per batch: a flipped or transposed copy is
        # ~20x slower than a straight one on the host (numpy strides); without one the workers flip while copying
        self._flip_on_device = on_gpu and self.cfg.augment
        self._host.set_hold(self._hold)
        if self._host.pool is not None and self._host.apply_codes == on_gpu:
            self._host.close()  # workers started for the other device: start them again for this one
        # a page-locked ring on a GPU: DALI's host-to-device copies run at full speed
        self._host.pin, self._host.apply_codes = on_gpu, not on_gpu
        outs = fn.external_source(source=_Feed(self), num_outputs=2 + self._flip_on_device, batch=True, no_copy=True,
                                  cycle="raise", parallel=False)
        low, high = outs[0], outs[1]
        if on_gpu:
            low, high = low.gpu(), high.gpu()
        if self._flip_on_device:
            low, high = _augment(low, outs[2]), _augment(high, outs[2])
        return PairedNodes(low, high, self)

    def _device_inputs(self, run: tuple, plans: list[BatchPlan]):
        """The zero-copy batches, fed without a copy once their kernel has finished. DALI orders its reads of a
        no_copy input after the stream the array itself names, and torch names none: external_source's
        `cuda_stream` does not order them. So the kernels run ahead (`_CUT_AHEAD` batches, `_CUT_GROUP` per launch)
        and a batch is fed after its event completed, which it has by then: the GPU cuts faster than DALI takes."""
        ahead: deque = deque()
        for item in self._zero.cuts(run, plans, augment=self.cfg.augment, hw=self.hw, group=_CUT_GROUP):
            ahead.append(item)
            if len(ahead) > _CUT_AHEAD:
                yield self._ready_batch(run, ahead.popleft())
        while ahead:
            yield self._ready_batch(run, ahead.popleft())

    def _ready_batch(self, run: tuple, cut) -> list:
        bp, ready = cut.plan, cut.ready
        if not ready.query():  # done long ago, but for an epoch's first batches
            ready.synchronize()
        self._fed.append((run, bp))
        sides = cut.device_sides()
        pixels = cut.block
        # DALI reads the memory until it is past the batch: kept here (so DALI's release never frees it) for `_hold`
        # batches. DALI copies it to its output on its own stream, and the current stream has waited for the
        # outputs taken so far: the cutting stream waits for it before the memory of the oldest goes back to torch
        self._hold_until_consumed(lambda kept=(pixels, sides): None,
                                  before=lambda: self._zero.stream.wait_stream(torch.cuda.current_stream(self.device)))
        return [TensorListGPU(to_dlpack(side)) for side in sides]  # DLPack: no per-call probing of the tensor

    def _inputs(self, run: tuple, plans: list[BatchPlan]):
        if self._zero_active:
            yield from self._device_inputs(run, plans)
            return
        for cut in self._host.cuts(run, plans):
            bp = cut.plan
            self._fed.append((run, bp))
            if cut.release is not None:
                self._hold_until_consumed(cut.release)
            batch = list(cut.host_sides())
            if self._flip_on_device:
                batch.append(dihedral_matrices(bp.code, self._out_hw_index(bp.index, bp.crop)))
            yield batch


class FileSource(PairedSource):
    """kind "file": two `fn.readers.file` (low, high) over the raw images, sharded by rank, decoded on the GPU
    ("mixed") or CPU with the planned window (`decoders.image_slice`), flipped by one exact `warp_affine`. A
    pipeline's file lists cover a window of consecutive epochs; another epoch needs a new pipeline."""

    KIND = "file"
    DEAL = "contiguous"  # readers.file gives each shard one contiguous block of its file list
    WINDOW_BATCHES = 1024  # a pipeline's file lists cover at least this many batches (or 64 epochs)

    def __init__(self, raw_dir, opts: LoaderOptions, *, low_dir: str | None = None, high_dir: str | None = None,
                 pairs_file: str | None = None, prefetch: int = 2, probe_threads: int = 8):
        found = find_pairs(raw_dir, low_dir=low_dir, high_dir=high_dir, pairs_file=pairs_file).splits()
        if opts.split not in found:
            raise ConfigError(f"{raw_dir}: no split {opts.split!r}; found {sorted(found)}")
        self.pairs = found[opts.split]
        self.where = str(raw_dir)
        for p in self.pairs:  # DALI's readers take UTF-8 names only (they fail on others without naming the file)
            for path in (p.low, p.high):
                try:
                    str(path).encode("utf-8")
                except UnicodeEncodeError:
                    raise ImageError(f"{os.fsencode(path)!r}: the file name is not valid UTF-8, which DALI's file "
                                     "reader cannot open; rename it, or pack the folder (`pairload pack`) and use "
                                     "the ram or dali-external loader") from None
        self._stamps = {path: _stamp(path) for p in self.pairs for path in (p.low, p.high)}
        with ThreadPoolExecutor(probe_threads) as pool:
            lows = list(pool.map(probe_size, [p.low for p in self.pairs]))
            highs = list(pool.map(probe_size, [p.high for p in self.pairs]))
        for p, a, b in zip(self.pairs, lows, highs):
            if a != b:
                raise ImageError(f"{p.low_rel} is {a[1]}x{a[0]} but {p.high_rel} is {b[1]}x{b[0]}; a pair must have one size")
        super().__init__([p.key for p in self.pairs], np.array(lows, dtype=np.int64).reshape(-1, 2), opts.split, opts,
                         prefetch)

    def _window(self, first: tuple) -> None:
        epoch, consumed = first
        if self.cfg.last_batch == "partial" or consumed:  # ranks may differ in length: one run per graph
            self._runs = [first]
        else:
            count = min(64, max(1, -(-self.WINDOW_BATCHES // max(1, len(self)))))
            self._runs = [(e, ()) for e in range(epoch, epoch + count)]

    def _auto_next(self) -> tuple | None:
        """The run after the last one in this graph's file lists (None past their end)."""
        if self._last_run is None:
            k = 0
        else:
            k = self._runs.index(self._last_run) + 1 if self._last_run in self._runs else len(self._runs)
        return self._runs[k] if k < len(self._runs) else None

    def _fits(self, run: tuple) -> bool:
        return run == self._auto_next()

    def _blocks(self, epoch: int, consumed: tuple = ()) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per rank, (pair indices, padded flags) of its share of `epoch`: contiguous blocks of the epoch's order,
        cut where `readers.file` cuts shards (rank r reads [r·T/ws, (r+1)·T/ws) of a list of length T)."""
        cfg = self.cfg
        return [rank_share(len(self.keys), seed=cfg.seed, epoch=epoch, rank=r, world_size=cfg.world_size,
                           batch_size=cfg.batch_size, last_batch=cfg.last_batch, shuffle=cfg.shuffle,
                           deal=self.DEAL, consumed=consumed) for r in range(cfg.world_size)]

    def _file_lists(self, order: np.ndarray) -> dict[str, tuple[list[str], list[int]]]:
        """Per reader, (files, labels) in reading order; a pair's label is its index in the split, on both sides."""
        labels = [int(i) for i in order]
        return {"low": ([str(self.pairs[i].low) for i in order], labels),
                "high": ([str(self.pairs[i].high) for i in order], labels)}

    def _inputs(self, run: tuple, plans: list[BatchPlan]):
        bs = self.cfg.batch_size
        for bp in plans:
            changed = self._changed(bp.index)  # before DALI reads the batch's files
            if changed is not None:
                raise changed
            fill = bs - len(bp)  # readers pad a short last batch by repeating the shard's last sample
            rep = lambda a: np.concatenate([a, np.repeat(a[-1:], fill)]) if fill else a  # noqa: E731
            index = rep(bp.index)
            batch = [index.astype(np.int32)]  # the labels the readers must return
            if self.cfg.crop is not None:
                batch.append(np.stack([rep(bp.y), rep(bp.x)], axis=1).astype(np.int32))
            if self.cfg.augment:
                batch.append(dihedral_matrices(rep(bp.code), self._out_hw_index(index, self.cfg.crop)))
            self._fed.append((run, bp))
            yield batch

    def _graph(self, on_gpu: bool) -> PairedNodes:
        crop = self.cfg.crop
        # each rank's block holds its shares of every run of the window, one after the other; drop and pad make
        # them whole batches of equal length on every rank, so readers.file cuts the same blocks
        blocks = [self._blocks(e, consumed) for e, consumed in self._runs]
        order = np.concatenate([blocks[k][r][0] for r in range(self.cfg.world_size) for k in range(len(self._runs))])
        shard = dict(shard_id=self.cfg.rank, num_shards=self.cfg.world_size, random_shuffle=False, pad_last_batch=True,
                     stick_to_shard=True)
        decoder = "mixed" if on_gpu else "cpu"
        n_in = 1 + (crop is not None) + self.cfg.augment
        fed = list(fn.external_source(source=_Feed(self), num_outputs=n_in, batch=True, cycle="raise", parallel=False))
        expect = fed.pop(0)
        anchor = fed.pop(0) if crop is not None else None
        matrix = fed.pop(0) if self.cfg.augment else None
        outs, labs = [], []
        for name, (files, labels) in self._file_lists(order).items():
            data, label = fn.readers.file(files=files, labels=labels, name=name, **shard)
            if crop is not None:
                shape = types.Constant(np.array([crop, crop], dtype=np.int32), device="cpu")
                img = fn.decoders.image_slice(data, anchor, shape, axes=[0, 1], device=decoder,
                                              output_type=types.RGB, adjust_orientation=False)
            else:
                img = fn.decoders.image(data, device=decoder, output_type=types.RGB, adjust_orientation=False)
            outs.append(_augment(img, matrix))
            labs.append(label)
        return PairedNodes(outs[0], outs[1], self, (labs[0], labs[1], expect))

    def _changed(self, index) -> PairloadError | None:
        """The first file of these pairs that is missing or changed since the loader was made (its probed size and
        the plan's windows may no longer hold)."""
        for i in np.asarray(index).tolist():
            for path in (self.pairs[i].low, self.pairs[i].high):
                now = _stamp(path)
                if now is None:
                    return ImageError(f"{path}: missing (it was there when the loader was made); restore it or "
                                      "make the loader again")
                if now != self._stamps[path]:
                    return ImageError(f"{path}: changed since the loader was made (modified or replaced); make the "
                                      "loader again so that its size is probed and its pair planned anew")
        return None

    def _diagnose(self, plans: list[BatchPlan], b: int) -> PairloadError | None:
        from ...raw.decode import decode_rgb

        for bp in plans[b:b + self.prefetch + 2]:  # DALI may have failed on a batch it was prefetching
            changed = self._changed(bp.index)
            if changed is not None:
                return changed
            for i in bp.index.tolist():
                for path in (self.pairs[i].low, self.pairs[i].high):
                    try:
                        decode_rgb(path, to_8bit=True)
                    except PairloadError as exc:
                        return exc
        return None

    def _check(self, labels, bp: BatchPlan, b: int) -> None:
        low, high, expect = (_labels(o) for o in labels)
        n = len(bp)
        if not (np.array_equal(low[:n], expect[:n]) and np.array_equal(high[:n], expect[:n])):
            bad = int(np.flatnonzero((low[:n] != expect[:n]) | (high[:n] != expect[:n]))[0])
            raise PairingError(
                f"{self.where}: the low and high readers are out of step at epoch {self.epoch}, batch {b}, row {bad}: "
                f"low file {self.pairs[int(low[bad])].low_rel}, high file {self.pairs[int(high[bad])].high_rel}, plan "
                f"expected pair {self.pairs[int(expect[bad])].low_rel}; training stopped rather than learn from "
                "mismatched pairs"
            )


class _AsPairBatch:
    """The loaders: a source iterated through its default pipeline, each batch a `PairBatch` on the device."""

    def _convert(self, outputs, bp: BatchPlan):
        n = len(bp)
        stream = torch.cuda.current_stream(self.device) if self.device.type == "cuda" else None
        low, high = (_to_torch(tl, self.device, self._share, stream) for tl in outputs)
        if low.shape[0] != n:  # the pipeline's batch is larger than this (last) batch
            low, high = low[:n], high[:n]
        return batch_from_hwc(low, high, self._keys(bp), self._padded_now(bp), self._source(bp))


class DaliExternalLoader(_AsPairBatch, ExternalSource):
    """make_loader("dali-external"): `ExternalSource` through a pipeline that returns its crops."""


class DaliFileLoader(_AsPairBatch, FileSource):
    """make_loader("dali-file"): `FileSource` through a pipeline that returns its crops and checks the readers."""


def paired_source(source, *, kind: str = "external", split: str = "train", num_workers: int = 0,
                  **options) -> PairedSource:
    """A `PairedSource` over packed shards (kind "external"; a folder, or `{name: folder}` to mix) or raw image
    folders (kind "file"; `low_dir`, `high_dir`, `pairs_file` as for `pairload pack`). `options` are the planner's,
    as for `make_loader` (batch_size, crop, seed, rank, world_size, last_batch, augment, shuffle, repeats, weights,
    epoch_size, schedule). Make it once per process and pass it to `paired_inputs` inside the pipeline function;
    `num_workers` is its CPU parallelism (cutting processes for "external"; the pipeline's own `num_threads`
    decodes for "file"). With a schedule, the pipeline's batch_size is the largest stage's."""
    if kind not in ("external", "file"):
        raise ConfigError(f"kind={kind!r}: expected 'external' (packed shards) or 'file' (raw image folders)")
    plan_names = {f.name for f in dataclasses.fields(PlanConfig)}
    backend = {k: options.pop(k) for k in list(options) if k not in plan_names}
    cls = ExternalSource if kind == "external" else FileSource
    check_options(cls, backend, f"paired_source(kind={kind!r})")
    opts = LoaderOptions.build(split=split, num_workers=num_workers, **options)
    return cls(source, opts, **backend)


def paired_inputs(source, **options) -> PairedNodes:
    """Inside a `@pipeline_def` function: `low, high = paired_inputs(source)`, the planned, aligned crops of one
    batch as uint8 HWC DataNodes (on the GPU when the pipeline has a device), fed epoch after epoch by the
    planner. `source` is a `PairedSource` (from `paired_source`), or a path with `paired_source`'s options."""
    if not isinstance(source, PairedSource):
        source = paired_source(source, **options)
    elif options:
        raise ConfigError(f"paired_inputs(PairedSource, ...): the source is already configured; unexpected "
                          f"{', '.join(sorted(options))}")
    return source.nodes()


class PairedIterator:
    """Epochs of a pipeline built on `paired_inputs`, of the planned length: each batch is a dict of the
    pipeline's outputs named by `output_map` (torch tensors on the pipeline's device, cut to the batch's real
    length), `keys` and `padded`. `pipeline` is a built or unbuilt Pipeline, or a function that builds one
    (needed by kind "file" to start its readers over). `len`, `set_epoch`, `state_dict`/`load_state_dict` and
    `close` are the source's."""

    def __init__(self, pipeline, output_map=("low", "high"), *, source: PairedSource | None = None):
        if source is None:
            probe = pipeline if isinstance(pipeline, Pipeline) else None
            source = getattr(probe, "_pairload_source", None)
            if source is None:
                raise ConfigError("PairedIterator: pass source= (the PairedSource the pipeline function uses), or a "
                                  "pipeline whose graph calls paired_inputs()")
        self.source = source
        source.bind(pipeline, output_map)

    def __iter__(self):
        return iter(self.source)

    def __len__(self) -> int:
        return len(self.source)

    def batches_in(self, epoch: int) -> int:
        return self.source.batches_in(epoch)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def epoch(self) -> int:
        return self.source.epoch

    def set_epoch(self, epoch: int) -> None:
        self.source.set_epoch(epoch)

    def state_dict(self) -> dict:
        return self.source.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.source.load_state_dict(state)

    def close(self) -> None:
        self.source.close()


__all__ = ["DaliExternalLoader", "DaliFileLoader", "ExternalSource", "FileSource", "PairedIterator", "PairedNodes",
           "PairedSource", "paired_inputs", "paired_source"]
