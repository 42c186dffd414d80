"""What every loader shares: validated options, the plan for an epoch, and epoch bookkeeping."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Callable, Iterator, Protocol, runtime_checkable

import numpy as np
import torch

from ..batch import SensorBatch
from ..cut.convert import Rows
from ..devices import resolve_device
from ..format.sensor import table as sensor_table
from ..hooks import Hooks
from ..format.columns import LazyColumn, paged
from ..read.concat import Offsets, PerSource
from ..errors import ConfigError
from ..units import human_bytes
from ..plan import (BatchPlan, Block, PlanConfig, Run, Shards, check_groups, check_split, key_hashes, num_batches,
                    plan_run)
from ..plan.run import next_run


@dataclass(frozen=True, kw_only=True)
class LoaderOptions:
    """What every loader kind takes: the planner's config (the one frozen object the workers receive too), the
    split, the CPU parallelism and the device."""

    plan: PlanConfig
    split: str = "train"
    num_workers: int = 0
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.num_workers < 0:
            raise ConfigError(f"num_workers={self.num_workers}: expected 0 or more")
        resolve_device(self.device)  # a device that is not here is refused now, not at the first batch

    @classmethod
    def build(cls, *, split: str = "train", num_workers: int = 0, device: str = "cpu", **plan) -> "LoaderOptions":
        """From flat keyword arguments: every `PlanConfig` field goes to the planner (a new planner field needs no
        change here)."""
        return cls(plan=PlanConfig(**plan), split=split, num_workers=num_workers, device=str(device))

    @property
    def torch_device(self) -> torch.device:
        return resolve_device(self.device)


@dataclass(frozen=True)
class RemoteOptions:
    """Where a loader over shards at a URL caches them: `cache_dir` (node-local, shared by every rank and worker
    of the node), `cache_limit` (bytes kept; None: the disk's free space less a margin), `storage_options` (for
    the fsspec backend: credentials, endpoint_url, ...). `kind` names the loader in messages."""

    cache_dir: str | os.PathLike | None = None
    cache_limit: int | None = None
    storage_options: dict | None = None
    kind: str = "this loader"

    def open(self, source, split: str, *, whole: bool, plan: PlanConfig | None = None):
        """The shards of `source`; remote ones are made local now when `whole` (the split cached whole, refused if
        larger than the limit), or fetched ahead of use and evictable once used (streaming). With a degradation in
        `plan`, the sources it applies to are read as targets only (`open_shards`'s `targets_only`)."""
        from ..read.shards import open_shards

        if self.cache_limit is not None and (not isinstance(self.cache_limit, int) or self.cache_limit <= 0):
            raise ConfigError(f"cache_limit={self.cache_limit!r}: expected a positive number of bytes")
        if plan is not None and plan.degrade_sources:
            check_named(plan.degrade_sources, list(source) if isinstance(source, dict) else [])
        degrade = plan.degrade if plan is not None else None
        ds = open_shards(source, split, cache_dir=self.cache_dir, cache_limit=self.cache_limit,
                         storage_options=self.storage_options,
                         targets_only=(plan.degrade_sources or True) if degrade is not None else False)
        if plan is not None:
            check_degrade(ds, plan, split)
        if not ds.remote:
            return ds
        if not whole:
            ds.transient = True
            return ds
        total = sum(ds.shard_bytes)
        if self.cache_limit is not None and total > self.cache_limit:
            raise ConfigError(f"{ds.where}: split {split!r} is {human_bytes(total)} of shards and cache_limit is "
                              f"{human_bytes(self.cache_limit)}; the {self.kind} loader needs the split cached whole: "
                              "raise cache_limit, or use the wds loader (it streams a shuffle buffer of shards at a "
                              "time)")
        try:
            ds.fetch_all()
        except BaseException:
            ds.close_remote()  # the downloads ahead stop too
            raise
        return ds


def check_named(names, known) -> None:
    """`degrade_sources` names only sources there are."""
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise ConfigError(f"degrade_sources names {', '.join(unknown)}, and the sources are "
                          f"{', '.join(known) or 'one unnamed folder'}; name mixed sources "
                          "(make_loader(kind, {'real': folder, 'made': folder}, ...))")


def check_degrade(ds, plan: PlanConfig, split: str) -> None:
    """Every source of targets only has a degradation to make its inputs, and the degradation takes its targets."""
    check_named(plan.degrade_sources, [name for name, _ in ds.groups if name])
    only = getattr(ds, "targets_only_sources", ("",) if ds.targets_only else ())
    named = plan.degrade_sources
    missing = [name for name in only if plan.degrade is None or (named and name not in named)]
    if missing:
        what = f"source {missing[0]!r}" if missing[0] else f"split {split!r}"
        raise ConfigError(f"{ds.where}: {what} holds targets only (packed with --targets-only): give a degradation "
                          "that makes its inputs, e.g. degrade='lowlight'" + (f", degrade_sources=({missing[0]!r},)"
                                                                               if named else "")
                          + " (docs/degrade.md)")
    if plan.degrade is not None:
        plan.degrade.check_source(ds.members, ds.sensor, f"{ds.where}: split {split!r}")


@runtime_checkable
class Loader(Protocol):
    """What every kind of `make_loader` is. `len()` is this rank's batches in the current epoch: the same for every
    epoch, except the epoch resumed from a `state_dict` (its rest) and under a crop/batch schedule (the phases the
    epoch spans); `batches_in(e)` is epoch e's, without planning it. `close()` stops the workers; iterating again
    starts them."""

    def __iter__(self) -> Iterator: ...
    def __len__(self) -> int: ...
    def batches_in(self, epoch: int) -> int: ...
    def set_epoch(self, epoch: int) -> None: ...
    def state_dict(self) -> dict: ...
    def load_state_dict(self, state: dict) -> None: ...
    def start_workers(self) -> None: ...
    def close(self) -> None: ...
    def __enter__(self): ...
    def __exit__(self, *exc) -> None: ...


STATE_FORMAT = "pairload-loader-state"
# the epochs' order (`plan.bijection`); a state saved under another order (a state without the field: numpy's
# permutations, before 2026-11-29) describes a part of an epoch this planner does not draw
ORDER = "feistel-6"
_PLAN_FIELDS = ("seed", "batch_size", "crop", "split", "last_batch", "shuffle", "augment", "samples", "deal")
# fields a state written before they existed lacks; absent means this default
_NEWER_FIELDS = {"repeats": 1, "mix": None, "schedule": None, "degrade": None, "clips": None}


def clip_units(cfg: PlanConfig, sequences, key_hash: np.ndarray, hw: np.ndarray, split: str, keys=None,
               bounds=None):
    """The clip units of a split's sequences (`plan.clips.ClipUnits`); a split packed without --sequences is
    refused. Sequences left out as too short (short='drop'), and breaks in a sequence's frame numbering (`keys`),
    are reported in a warning, by name."""
    from ..plan.clips import ClipUnits

    if sequences is None:
        raise ConfigError(f"split {split!r} has no sequences: clips={cfg.clips.frames} takes frames of videos or "
                          "bursts from a split packed with `pairload pack FOLDER SHARDS --sequences` (a mix: every "
                          "source packed so)", option="clips")
    units = ClipUnits.build(cfg.clips, sequences, key_hash, hw, f"split {split!r}", keys, bounds)
    import warnings

    if units.gaps:
        warnings.warn(units.gaps, stacklevel=3)
    if units.dropped_count:
        warnings.warn(f"split {split!r}: {units.dropped_count} sequence(s) shorter than a clip of {cfg.clips.frames} "
                      f"frames are left out (short='drop'): {', '.join(units.dropped[:8])}"
                      + (", …" if units.dropped_count > 8 else ""), stacklevel=3)
    if not len(units):
        raise ConfigError(f"split {split!r}: no sequence has {cfg.clips.frames} frames, so there is no clip to plan",
                          option="clips", fix="use shorter clips or short='pad'")
    return units


def check_options(cls, backend: dict, where: str, accepted=None) -> None:
    """Refuse options `cls` does not take (`accepted`, or its keyword-only parameters), naming the ones it accepts."""
    import inspect

    if accepted is None:
        accepted = [name for name, p in inspect.signature(cls.__init__).parameters.items()
                    if p.kind is inspect.Parameter.KEYWORD_ONLY]
    accepted = sorted(accepted)
    unknown = sorted(set(backend) - set(accepted))
    if unknown:
        raise ConfigError(f"{where}: unknown option(s) {', '.join(unknown)}; this kind accepts "
                          f"{', '.join(accepted) or 'no options'} besides the common ones (CPU parallelism is "
                          "num_workers for every kind)")


def named_groups(groups) -> tuple:
    """Sources' (name, samples) as a loader keeps them: none for one unnamed source."""
    return tuple(groups) if len(groups) > 1 or (groups and groups[0][0]) else ()


def with_sources(opts: LoaderOptions, groups, n: int, split: str) -> tuple[LoaderOptions, tuple]:
    """(options, groups) of a loader over `groups` ((name, samples) of each source; one unnamed source: no
    groups): several sources without weights or an epoch size are mixed in proportion to their sizes (each sample
    once per epoch), and weights must name the sources."""
    groups = named_groups(groups)
    if groups and not opts.plan.mixed:
        opts = replace(opts, plan=replace(opts.plan, epoch_size=n))
    if opts.plan.mixed:
        check_groups(opts.plan, groups or (("", n),), split)
    return opts, groups


def plan_fields(opts: LoaderOptions, samples: int, deal: str, groups=()) -> dict:
    """What a loader state must agree on to describe the same epochs (everything but the world size)."""
    p = opts.plan
    fields = {"seed": p.seed, "batch_size": p.batch_size, "crop": p.crop, "split": opts.split,
              "last_batch": str(p.last_batch), "shuffle": p.shuffle, "augment": p.augment, "samples": samples,
              "deal": deal,
              "repeats": p.repeats, "mix": None, "schedule": None,
              "degrade": None if p.degrade is None else [p.degrade.describe(), list(p.degrade_sources)],
              "clips": None if p.clips is None else p.clips.describe()}
    if p.mixed:
        fields["mix"] = {"sources": [[name, n] for name, n in groups], "weights": [[k, w] for k, w in p.weights],
                         "epoch_size": p.epoch_size}
    if p.schedule:
        fields["schedule"] = [[st.step, st.crop, st.batch_size] for st in p.schedule]
    return fields


def check_state(state: dict, mine: dict) -> tuple[int, tuple[tuple[int, int], ...]]:
    """(epoch, consumed) from a loader state, after checking that it describes this loader's plan."""
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        raise ConfigError(f"loader state: expected a dict from a pairload loader's state_dict(), found "
                          f"{type(state).__name__} {str(state)[:80]!r}")
    for name in ("clips", *_PLAN_FIELDS, *_NEWER_FIELDS):  # clips first: they change what `samples` counts
        saved = state.get(name, _NEWER_FIELDS.get(name))
        if saved != mine[name]:
            raise ConfigError(f"loader state: {name} was {saved!r} when it was saved, this loader has "
                              f"{mine[name]!r}; build the loader with the saved {name} (the rest of an epoch is "
                              "only defined for the same plan)")
    try:
        epoch = int(state["epoch"])
        consumed = tuple((int(ws), int(k)) for ws, k in state["consumed"])
    except (KeyError, TypeError, ValueError):
        raise ConfigError("loader state: 'epoch' and 'consumed' ([[world_size, batches], ...]) are missing or "
                          "malformed") from None
    if any(ws < 1 or k < 0 for ws, k in consumed):
        raise ConfigError(f"loader state: consumed {consumed} needs world sizes >= 1 and batch counts >= 0")
    saved = state.get("order", "numpy-permutation")
    if saved != ORDER and any(k for _, k in consumed):
        raise ConfigError(f"loader state: saved in the middle of epoch {epoch} by a pairload that ordered epochs "
                          f"otherwise ({saved!r}; this one: {ORDER!r}), so the rest of that epoch is not defined "
                          f"here; resume with that pairload, or start epoch {epoch + 1} from the state with "
                          f"state['epoch'] = {epoch + 1} and state['consumed'] = []")
    return epoch, consumed


class StatefulEpochs:
    """Epoch bookkeeping and `state_dict`/`load_state_dict` shared by every loader kind. Subclasses set `opts`,
    `cfg`, `samples` and `DEAL` and run `_begin(epoch)` / `_delivered += 1` around their iteration."""

    DEAL = "strided"  # how an epoch is dealt to ranks (see `pairload.plan.deals`)
    epoch: int = 0
    samples: int

    def _init_state(self) -> None:
        self.epoch = 0
        self._resume: dict[int, tuple[tuple[int, int], ...]] = {}  # epoch -> how it was started before
        self._active: tuple[int | None, tuple] = (None, ())  # (epoch, consumed) of the iteration under way
        self._delivered = 0
        self.hooks = Hooks()  # timing hooks: `loader.hooks.add(listener)` (see `pairload.hooks`)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)
        self._active, self._delivered = (None, ()), 0

    def _consumed(self, epoch: int) -> tuple[tuple[int, int], ...]:
        if epoch in self._resume:
            return self._resume[epoch]
        return self._active[1] if self._active[0] == epoch else ()

    def _begin(self, epoch: int) -> tuple[tuple[int, int], ...]:
        consumed = self._resume.pop(epoch, ())
        self._active, self._delivered = (epoch, consumed), 0
        return consumed

    def _deal_name(self) -> str:
        return self.DEAL

    def _plan_fields(self) -> dict:
        return plan_fields(self.opts, self.samples, self._deal_name(), getattr(self, "groups", ()))

    def start_workers(self) -> None:
        """Start CPU workers now (kinds without any: nothing to do)."""

    def worker_pids(self) -> list[int]:
        """Process ids of this loader's worker processes now running (none for kinds without workers)."""
        return []

    def close(self) -> None:
        """Stop workers and free buffers; the next iteration starts them again."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def state_dict(self) -> dict:
        """Where this loader stands, as plain JSON-able values: the epoch and the batches this rank has delivered
        in it (every rank of a DDP job delivers as many, so one rank's state describes them all). Take it after
        the step on the last batch: a batch handed over counts as consumed."""
        epoch = self.epoch
        consumed = list(self._consumed(epoch))
        if self._active[0] == epoch and self._delivered:
            consumed.append((self.cfg.world_size, self._delivered))
        return {"format": STATE_FORMAT, "version": 1, "order": ORDER, "epoch": epoch,
                "consumed": [list(c) for c in consumed], "world_size": self.cfg.world_size, **self._plan_fields()}

    def load_state_dict(self, state: dict) -> None:
        """Continue from a state: the next iteration delivers the rest of its epoch (dealt over this loader's
        ranks), then `set_epoch(epoch + 1)` goes on as usual."""
        epoch, consumed = check_state(state, self._plan_fields())
        self.set_epoch(epoch)
        self._resume = {epoch: consumed} if consumed else {}


class PlannedLoader(StatefulEpochs):
    """Base for every loader: the planner decides each epoch's batches, subclasses execute them (`_batches`).
    Stateful: `state_dict()` after k batches of epoch e, loaded into a new loader (even one with another world
    size), makes its next iteration deliver the rest of epoch e, each sample once. `shards`: the split's shard
    structure, for the by-shard deal."""

    PLANS_KEPT = 3  # runs whose plans are kept: the current one, the next (workers run ahead), one more for len()

    def __init__(self, keys, hw: np.ndarray, split: str, opts: LoaderOptions, groups=(), shards: Shards | None = None,
                 key_hash: np.ndarray | None = None, sequences=None, bounds=None):
        """`groups`: (name, samples) of each source when several share the index space (see `with_sources`);
        `keys` any sequence (a version-5 split's `columns.Keys` is kept as it is, never made a tuple); `key_hash`:
        the planner's hash of each key when the source has them (else computed here); `sequences`: a split packed
        with --sequences (`format.sequences.Sequences`), which clips (`PlanConfig.clips`) need; `bounds`: the least
        and greatest image sizes where the source knows them (`size_bounds`). With clips the
        planner deals clip units (`plan.clips.ClipUnits`): `samples`, `groups` and `shards` count units, and each
        planned batch holds its clips' frames."""
        self.keys = keys if isinstance(keys, Sequence) else tuple(keys)
        # a mapped index's columns are viewed, not copied; a mix's are read from its sources as rows are asked
        self.hw = _column(hw, np.int64)
        self.key_hash = key_hashes(self.keys) if key_hash is None else _column(key_hash, np.uint64)
        frame_groups = named_groups(groups)
        self.units = clip_units(opts.plan, sequences, self.key_hash, self.hw, split, self.keys, bounds) \
            if opts.plan.clips is not None else None
        units = self.units
        plan_groups = units.groups(groups) if units is not None else groups
        self.opts, self.groups = with_sources(opts, plan_groups, len(units or self.keys), split)
        self.cfg = self.opts.plan
        if (self.cfg.mixed or self.cfg.schedule or self.cfg.repeats > 1 or self.cfg.clips) \
                and self.DEAL == "contiguous":
            raise ConfigError("mixing, epoch_size, repeats, clips and crop/batch schedules are planned for the "
                              "loaders over packed shards (ram, wds, dali-external): pack the folder with "
                              "`pairload pack` and use one of them")
        if units is None:
            check_split(self.cfg, self.keys, self.hw, split, bounds)
            self.samples = len(self.keys)
            self._plan_by = (self.key_hash, self.hw)  # what the planner deals: samples, or clip units
        else:
            check_split(self.cfg, units.labels(), units.hw, split, bounds)
            self.samples = len(units)
            self._plan_by = (units.key_hash, units.hw)
            shards = units.shards(shards)
        self.shards = shards
        self.device = opts.torch_device
        # the source of each sample from the sources' sizes (a name per source, not one per sample)
        self._source_names = [name for name, _ in frame_groups] if frame_groups else None
        self._source_rows = Offsets([n for _, n in frame_groups]) if frame_groups else None
        self.sensor_rows = None  # camera raw splits: set by the loaders over shards (`format.sensor.SensorRows`)
        self._degrade_applies = self._degraded_rows(frame_groups)  # per sample: degraded (None: all, or none)
        self._degrade = None  # the degrade stage (`cut.degrade.Degrade`), made on first use: `degrade_stage`
        self._plans: dict[tuple, Run] = {}
        self._planning = threading.Lock()  # the device cut asks for the next epoch's from its stage thread
        self._init_state()

    def _degraded_rows(self, groups) -> PerSource | None:
        """Which samples `degrade` makes the inputs of when it names some of the mixed sources (None: every
        sample)."""
        names = self.cfg.degrade_sources
        if not names:
            return None
        check_named(names, [name for name, _ in groups])
        return PerSource([name in names for name, _ in groups], [n for _, n in groups])

    def __len__(self) -> int:
        consumed = self._consumed(self.epoch)
        if consumed:
            return len(self.plan_for(self.epoch, consumed))
        return num_batches(self.cfg, self.samples, self.epoch, self.DEAL)

    def batches_in(self, epoch: int) -> int:
        """Batches this rank delivers in `epoch` from its start (what `len()` says once `set_epoch(epoch)`)."""
        return num_batches(self.cfg, self.samples, epoch, self.DEAL)

    def plan_for(self, epoch: int, consumed: tuple[tuple[int, int], ...] = ()) -> Run:
        """This rank's batches for `epoch` (for the rest of it, when `consumed` says how it was started before), as
        a `Run` (planned a block at a time); the last few runs are kept."""
        run = (epoch, tuple(consumed))
        with self._planning:
            if run not in self._plans:
                if len(self._plans) >= self.PLANS_KEPT:
                    self._plans.pop(next(iter(self._plans)))
                self._plans[run] = plan_run(self.cfg, *self._plan_by, epoch, deal=self.DEAL, consumed=consumed,
                                            groups=self.groups, shards=self.shards, units=self.units)
            return self._plans[run]

    def _keys(self, bp: BatchPlan) -> list[str]:
        """The shard keys of a planned batch's rows."""
        take = getattr(self.keys, "take", None)  # a version-5 split's `columns.Keys`: one gather for the batch
        return take(bp.index) if take is not None else [self.keys[i] for i in bp.index.tolist()]

    def _keys_on(self, run: Run) -> Callable[[BatchPlan], list[str]]:
        """`keys(bp)` for the batches of one run: a version-5 split's keys are taken a block of the run at a time
        (one `Keys.take`, not one per batch: a fast cut leaves a batch little Python time)."""
        take = getattr(self.keys, "take", None)
        if take is None:
            return self._keys

        def block_keys(block: Block) -> list[list[str]]:
            flat = take(block.column("index"))
            return [flat[a:a + n] for a, n in zip(block.starts.tolist(), block.sizes.tolist())]
        return run.per_block(block_keys)

    def _source(self, bp: BatchPlan) -> list[str] | None:
        """The source name of each of a planned batch's rows (None: one source)."""
        if self._source_rows is None:
            return None
        return [self._source_names[k] for k in self._source_rows.of(bp.index).tolist()]

    @staticmethod
    def _padded(bp: BatchPlan) -> torch.Tensor:
        """A planned batch's padding flags as a (CPU) bool tensor of its own."""
        return torch.from_numpy(bp.padded.copy())

    def _padded_on(self, run: Run) -> Callable[[BatchPlan], torch.Tensor]:
        """`padded(bp)` on the loader's device for the batches of one run (views of one copy per block:
        `_on_device`)."""
        if self.device.type != "cuda":
            return lambda bp: self._padded(bp).to(self.device)

        def flags(block: Block) -> list[torch.Tensor]:
            padded = block.column("padded")
            if not padded.any():  # no padding (most blocks): nothing copied
                return _split(block, torch.zeros(len(padded), dtype=torch.bool, device=self.device))
            return self._on_device(block, padded)
        return run.per_block(flags)

    def _sensor_on(self, run: Run, degrade=None) -> Callable[[BatchPlan], SensorBatch | None]:
        """`sensor(bp)`: a planned batch's camera raw facts on the loader's device (None for an image split), as
        views of one copy per block (`_on_device`); a degraded raw input's ratio is the one drawn for it (`degrade`:
        the run's `DegradeRuns`), its exposure the target's over that ratio."""
        if self.sensor_rows is None:
            return lambda bp: None

        def facts(block: Block) -> list[SensorBatch]:
            table = sensor_table(self.sensor_rows.take(block.column("index")))
            tables = degrade.of_block(block) if degrade is not None else None
            ratio = tables.ratios() if tables is not None else None
            if ratio is not None:
                on = tables.host_apply
                table[on, 0] = ratio[on]
                table[on, 1] = table[on, 2] / ratio[on]
            return [SensorBatch(v) for v in self._on_device(block, table)]
        return run.per_block(facts)

    @property
    def degrade_stage(self):
        """The loader's degrade stage (`pairload.cut.degrade.Degrade`), or None without a degradation."""
        if self._degrade is None and self.cfg.degrade is not None:
            from ..cut.degrade import Degrade

            self._degrade = Degrade(self.cfg.degrade, self._degrade_applies, self.sensor_rows, self.device)
        return self._degrade

    def _degrade_run(self, run: Run):
        """The run's `DegradeRuns` (its tables on the loader's device, made once per block), or None."""
        stage = self.degrade_stage
        return None if stage is None or not len(run) else stage.begin(run)

    def _on_device(self, block: Block, rows: np.ndarray) -> list[torch.Tensor]:
        """A block's `rows` (its batches' rows in order, first axis the samples) on the loader's device, split into
        each batch's view of one copy made on the current stream from page-locked memory (a copy per batch from
        pageable memory would wait for every kernel queued before it, and one copy per batch costs launches)."""
        values = torch.from_numpy(rows)
        if self.device.type == "cuda":
            values = values.pin_memory()
        return _split(block, values.to(self.device, non_blocking=True))

    def _rows_on(self, run: Run) -> Callable[[BatchPlan], Rows]:
        """`rows(bp)`: what each planned batch of one run holds besides its pixels (`cut.convert.Rows`), on the loader's
        device, asked in plan order."""
        padded = self._padded_on(run)
        degrade = self._degrade_run(run)
        sensor = self._sensor_on(run, degrade)
        keys = self._keys_on(run)
        if degrade is None:
            return lambda bp: Rows(keys(bp), padded(bp), self._source(bp), sensor(bp))
        return lambda bp: Rows(keys(bp), padded(bp), self._source(bp), sensor(bp), degrade.params(bp))

    def plan(self) -> Run:
        return self.plan_for(self.epoch, self._consumed(self.epoch))

    def _batches(self, epoch: int, plans: Run, consumed: tuple[tuple[int, int], ...]):
        raise NotImplementedError

    def __iter__(self):
        epoch = self.epoch
        consumed = self._begin(epoch)
        clips = self.units is not None
        for batch in self._batches(epoch, self.plan_for(epoch, consumed), consumed):
            self._delivered += 1  # counted when handed over: state_dict() after the step on it includes it
            yield self._as_clips(batch) if clips else batch

    def _as_clips(self, batch):
        """A batch of clips' frames as clips (`PairBatch.as_clips`)."""
        return batch.as_clips(self.cfg.frames)


def expected_after(loader, run: tuple) -> Callable[[], Run | None]:
    """What gives the run expected after `run` ((epoch, consumed)) of `loader`: the next epoch from its start
    (`plan.run.next_run`), for a memory that reads on into it (`Memory.begin`). It holds the loader weakly: the
    memory's reading threads hold it, and a loader dropped unclosed must still be collected (its readers stopped)."""
    ref, following = weakref.ref(loader), next_run(run)

    def after() -> Run | None:
        owner = ref()
        return None if owner is None else owner.plan_for(*following)
    return after


def _split(block: Block, values: torch.Tensor) -> list[torch.Tensor]:
    """Each batch's rows of a block's `values` (the block's rows in order)."""
    return list(values.split(block.sizes.tolist()))


def _column(values, dtype):
    """A per-sample column as the planner reads it: a lazy one as it is, an array of a large mapped file read for the
    rows asked (`format.columns.paged`), any other made an array of `dtype` (a mapped column is viewed, not copied)."""
    if isinstance(values, LazyColumn):
        return values
    return paged(np.asarray(values, dtype=dtype))
