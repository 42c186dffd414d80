"""`PairedSource`, what both DALI sources share: the planner's batches fed into a pipeline epoch after epoch, the
pipeline bound, built, drained and dropped as the consumer moves between runs, and each delivered batch checked
against the plan it was fed for. The timed stages (`self.hooks`): build, feed, schedule_run, outputs, convert, drain."""

from __future__ import annotations

import atexit
import weakref

import numpy as np
from nvidia.dali import pipeline_def
from nvidia.dali.pipeline import Pipeline

from ...errors import ConfigError, LoaderError, PairloadError
from ...plan import BatchPlan, Run
from ...plan.run import next_run
from ..base import LoaderOptions, PlannedLoader
from .convert import dali_error, named_tensors
from .graph import Binding, Feed, PairedNodes, attach, device_id
from .runs import RunState


# sources alive now: a pipeline left running into the next epoch must stop before the interpreter tears down what it
# reads. One hook for the process; a source that is collected leaves the set by itself.
_LIVE: "weakref.WeakSet[PairedSource]" = weakref.WeakSet()


@atexit.register
def _close_live() -> None:
    for source in list(_LIVE):
        source.close()


class PairedSource(PlannedLoader):
    """The planner's aligned crops as DALI inputs, epoch after epoch: call `paired_inputs(source)` inside a
    `@pipeline_def` function, then iterate with `PairedIterator`. The two kinds are subclasses:
    `ExternalSource` (packed shards) and `FileSource` (image folders).

    Iterating yields one dict per batch: each pipeline output named by `output_map` as a torch tensor on the
    pipeline's device, `keys` and `padded`. Epoch bookkeeping, `len()`, `set_epoch()` and
    `state_dict()`/`load_state_dict()` are the loaders' own."""

    KIND = ""

    def __init__(self, keys, hw, split, opts: LoaderOptions, prefetch: int, groups=(), key_hash=None, sequences=None,
                 bounds=None):
        super().__init__(keys, hw, split, opts, groups, key_hash=key_hash, sequences=sequences, bounds=bounds)
        if prefetch < 1:
            raise ConfigError(f"prefetch={prefetch}: expected at least 1 batch")
        self.prefetch = prefetch
        self.output_map: tuple[str, ...] = ("low", "high")
        self._binding = Binding()
        self._pipe = None
        self.run_state = RunState(queue_depth=prefetch)
        _LIVE.add(self)  # closed at exit if still alive (`_close_live`)
        self._share = False  # the outputs are viewed, not copied (set when a pipeline is built)
        self._per_iteration = 1  # planned batches per DALI iteration of the pipeline being run (`_iteration_batches`)

    # ------------------------------------------------------------------ graph and feed

    @property
    def per_iteration(self) -> int:
        """Planned batches each DALI iteration of the pipeline being run carries."""
        return self._per_iteration

    def nodes(self) -> PairedNodes:
        """The aligned (low, high) uint8 HWC DataNodes for the pipeline being defined (on the GPU when it has one)."""
        pipe = Pipeline.current()
        if pipe is None:
            raise ConfigError("paired_inputs() makes DALI nodes: call it inside a @pipeline_def function")
        per = self._iteration_batches() if self._binding.how == "default" else 1
        rows = self.cfg.max_batch * self.cfg.frames  # a batch of clips: each clip's frames are samples of DALI's
        if pipe.max_batch_size != rows * per:
            raise ConfigError(f"the pipeline's batch_size is {pipe.max_batch_size} but the paired source plans batches "
                              f"of up to {rows}" + (f" frames ({self.cfg.max_batch} clips of {self.cfg.frames})"
                                                    if self.cfg.frames > 1 else "")
                              + "; give the pipeline that batch size")
        self._per_iteration = per
        attach(pipe, self)
        depth = pipe.prefetch_queue_depth  # how many fed batches the pipeline may still read (no_copy inputs)
        state = self.run_state
        state.queue_depth = sum(depth.values()) if isinstance(depth, dict) else int(depth)
        state.reset(runs=self._runs_served(state.defining or (self.epoch, self._consumed(self.epoch))))
        return self._graph(pipe.device_id is not None)

    def _iteration_batches(self) -> int:
        """Planned batches the default pipeline takes per iteration (one DALI batch of their samples): DALI's cost per
        iteration hardly depends on its size (`benchmarks/dali_batch_micro.py`), so a loader that can feed several
        batches at once does. Pipelines users bind take one planned batch per iteration."""
        return 1

    def _feed(self) -> Feed:
        """What the graph's `fn.external_source` iterates."""
        return Feed(self._run_feed)

    def _graph(self, on_gpu: bool) -> PairedNodes:
        raise NotImplementedError

    def _inputs(self, run: tuple, plans: Run):
        """The external_source batches of one run (appending (run, plan) to `run_state.fed` for each)."""
        raise NotImplementedError

    def _runs_served(self, first: tuple) -> list[tuple]:
        """The runs a new graph serves, starting with `first`."""
        return [first]

    def _fits(self, run: tuple) -> bool:
        """Whether the current graph can deliver `run` after the run it delivered last (or first, when fresh)."""
        return True

    def _auto_next(self) -> tuple | None:
        """The run to feed when the consumer named none (DALI's own iterators): the epoch after the last one."""
        state = self.run_state
        return state.runs[0] if state.last_run is None else next_run(state.last_run)

    def _run_feed(self):
        return self.run_state.feed(lambda run: self._inputs(run, self.plan_for(*run)), self._auto_next,
                                   self.hooks.timed)

    # ------------------------------------------------------------------ pipelines

    def bind(self, pipeline, output_map=("low", "high")) -> None:
        """Iterate `pipeline`: a Pipeline whose graph calls paired_inputs() with this source, or a function that
        builds one (kind "file" needs the function to start its readers over after a jump or a run left early)."""
        self.close()
        self.output_map = tuple(output_map)
        self._binding = Binding.of(pipeline, self)

    def _default_pipeline(self):
        rows = self.cfg.max_batch * self.cfg.frames * self._iteration_batches()

        @pipeline_def(batch_size=rows, num_threads=self._threads(),
                      device_id=device_id(self.device),
                      prefetch_queue_depth=self.prefetch, seed=self.cfg.seed & 0x7FFFFFFF)
        def pipe():
            nodes = self.nodes()
            return (*nodes, *nodes.checks)

        return pipe()

    def _threads(self) -> int:
        return max(1, self.opts.num_workers)

    def _build(self, run: tuple):
        with self.hooks.timed("build"):
            self.run_state.defining = run
            try:
                pipe = self._binding.make(self, lambda: self._fits(run), self._default_pipeline)
            finally:
                self.run_state.defining = None
            pipe.build()
        self._pipe = pipe
        # DALI's default (dynamic) executor keeps an output alive while a view of it lives: no copy needed
        self._share = bool(getattr(pipe, "exec_dynamic", False))
        self.run_state.built()
        return pipe

    def _drain(self) -> None:
        """Run the pipeline to the end of the run it is on (outputs discarded) and reset it for the next run."""
        with self.hooks.timed("drain"):
            while True:
                try:
                    self._pipe.schedule_run()
                    self._pipe.outputs()
                except StopIteration:
                    break
            self._pipe.reset()
        self.run_state.drained()
        self._release_held()

    def _ready_for(self, run: tuple):
        """A pipeline whose next outputs are the batches of `run`."""
        state = self.run_state
        if self._pipe is not None and state.follows(run):
            return self._pipe
        if self._pipe is not None and state.at != ("fresh",):
            if state.at is None and self.KIND == "file":  # the readers stopped mid-list: they cannot skip ahead
                self._discard()
            else:
                state.leave()
                self._drain()
                if not self._fits(run):
                    self._discard()
        if self._pipe is None:
            self._build(run)
        elif state.at == ("fresh",) and not self._fits(run):
            self._discard()
            self._build(run)
        state.queue(run)
        return self._pipe

    def _discard(self) -> None:
        self._pipe = None
        self.run_state.dropped()
        self._release_held()

    def _release_held(self) -> None:
        """Give back host buffers DALI may have been reading."""
        self.run_state.release_held()

    def close(self) -> None:
        """Drop the pipeline (a bound function or the default pipeline builds a new one on the next iteration)."""
        self._discard()

    # ------------------------------------------------------------------ iteration

    def _batches(self, epoch: int, plans: Run, consumed: tuple):
        run = (epoch, consumed)
        state = self.run_state
        state.start(follow=self.KIND == "external")
        pipe = self._ready_for(run)
        state.delivering()
        self._rows_now = self._rows_on(plans)
        if self._per_iteration > 1:
            yield from self._iterations(pipe, run, plans)
            state.ended(run)
            return
        timed = self.hooks.timed
        for b, bp in enumerate(plans):
            outputs = self._run_once(pipe, run, plans, b)
            fed_run, fed = state.take()
            if fed_run != run or (fed is not bp and not np.array_equal(fed.index, bp.index)):
                raise LoaderError(f"{self.where}: internal: DALI delivered a batch fed for {fed_run} where epoch "
                                  f"{epoch} batch {b} was expected")
            with timed("convert"):
                batch = self._convert(self._checked(outputs, bp, b), bp)
            yield batch
        state.ended(run)

    def _run_once(self, pipe, run: tuple, plans: Run, b: int):
        """One iteration's outputs (batch b of the run comes next); DALI's failures as pairload's errors."""
        timed = self.hooks.timed
        try:
            with timed("schedule_run"):  # run() in two steps: DALI's run() adds API checks to every batch
                pipe.schedule_run()
            with timed("outputs"):
                return pipe.outputs()
        except StopIteration:
            raise LoaderError(f"{self.where}: the DALI pipeline ended after {b} of {len(plans)} batches of epoch "
                              f"{run[0]}") from None
        except (RuntimeError, ValueError) as exc:
            self._discard()
            raise (self._diagnose(plans, b) or dali_error(exc, self.where)) from None

    def _iterations(self, pipe, run: tuple, plans: Run):
        """The batches of a run when each DALI iteration carries several planned batches (fed together, in plan
        order: `RunState.fed` holds the tuple of their plans): each iteration's outputs split into them."""
        state, b = self.run_state, 0
        while b < len(plans):
            outputs = self._run_once(pipe, run, plans, b)
            fed_run, fed = state.take()
            expected = plans[b:b + len(fed)] if isinstance(fed, tuple) else ()
            if fed_run != run or not expected or len(expected) != len(fed) or not all(
                    got is want or np.array_equal(got.index, want.index) for got, want in zip(fed, expected)):
                raise LoaderError(f"{self.where}: internal: DALI delivered batches fed for {fed_run} where epoch "
                                  f"{run[0]} batch {b} was expected")
            with self.hooks.timed("convert"):  # this run's own plans: the feed may have planned the run again
                batches = self._convert_many(self._checked(outputs, expected[0], b), tuple(expected))
            b += len(fed)
            yield from batches

    def _convert_many(self, outputs, plans: tuple) -> list:
        """One iteration's outputs as the batches of `plans` (`_iterations`)."""
        raise NotImplementedError

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

    def _diagnose(self, plans: Run, b: int) -> PairloadError | None:
        """After a DALI failure at batch b, find a file to blame (DALI's own message often names none)."""
        return None

    def _as_clips(self, batch):
        """A batch of clips' frames as clips: each output N×T×…, keys N lists of T, the rest per clip (sensor facts
        per frame)."""
        if not isinstance(batch, dict):
            return super()._as_clips(batch)
        t = self.cfg.frames
        out = {}
        for name, value in batch.items():
            if name in self.output_map:
                out[name] = value.unflatten(0, (value.shape[0] // t, t))
            elif name == "keys":
                out[name] = [list(value[i:i + t]) for i in range(0, len(value), t)]
            elif name == "sensor":
                out[name] = type(value)(value.values.unflatten(0, (value.values.shape[0] // t, t)))
            elif name == "degradation":
                out[name] = {k: v[::t] for k, v in value.items()}
            else:  # padded, source
                out[name] = value[::t]
        return out

    def _convert(self, outputs, bp: BatchPlan):
        n = len(bp)
        out = named_tensors(outputs, self.output_map, n, self._pipe.device_id, self._share)
        rows = self._rows_now(bp)
        out["keys"] = rows.keys
        out["padded"] = self._padded(bp)
        if self.groups:
            out["source"] = rows.source
        if rows.sensor is not None:
            out["sensor"] = rows.sensor
        if rows.degradation is not None:
            out["degradation"] = rows.degradation
        return out

    def _out_hw_index(self, index: np.ndarray, crop: int | None) -> np.ndarray:
        """(N, 2) output height and width of these samples: the crop, or the whole image."""
        if crop is not None:
            return np.full((len(index), 2), crop, dtype=np.int64)
        return self.hw[index]
