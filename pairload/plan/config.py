"""What the planner decides from and what it hands out: `PlanConfig` (validated on construction), the
`LastBatch` rule, crop/batch schedule `Phase`s, and `BatchPlan`, one planned batch. Numpy only."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..degrade import Degradation
from .clips import Clips
from .crops import Crop, check_crop, crop_size, is_whole



def _source_names(given) -> tuple[str, ...]:
    """`degrade_sources` as a tuple of names: one name, or a list or tuple of distinct non-empty names."""
    names = (given,) if isinstance(given, str) else given
    if names is None:
        return ()
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) and n.strip() for n in names):
        raise ConfigError.for_value("degrade_sources", repr(given), "expected the names of mixed sources, a name or a "
                                    "list of names, e.g. degrade_sources=('made',)")
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ConfigError.for_value("degrade_sources", repr(given), f"{', '.join(twice)} named twice; name each "
                                    "source once")
    return tuple(names)

class LastBatch(str, Enum):
    """What happens to the samples of an epoch that do not fill a whole batch on every rank.

    Worked example: 23 samples, 2 ranks, batch_size 4.
    - DROP: each rank takes floor(23 / 2) = 11 samples, rounded down to whole batches: 2 batches of 4 per rank;
      7 samples wait for a later epoch (the order changes every epoch, so no sample is dropped for good).
    - PAD: the epoch's order wraps around until every rank has whole batches: 3 batches of 4 per rank, the one
      repeated sample flagged in `PairBatch.padded` (count only `valid` rows in metrics).
    - PARTIAL: every sample exactly once: 12 and 11 samples, last batches of 4 and 3 (ranks differ by at most one
      sample).
    """

    DROP = "drop"
    PAD = "pad"
    PARTIAL = "partial"

    def __str__(self) -> str:
        return self.value


LAST_BATCH = tuple(m.value for m in LastBatch)
Groups = tuple[tuple[str, int], ...]  # (name, samples) of each source, in index order: source s owns one index range


@dataclass(frozen=True)
class Phase:
    """From global step `step` on (batches delivered per rank since epoch 0), batches of `batch_size` crops of
    `crop` (per rank)."""

    step: int
    crop: Crop
    batch_size: int


def parse_schedule(spec) -> tuple[Phase, ...]:
    """A crop/batch schedule from "step:crop:batch,…" (e.g. "0:128:8,92000:160:5") or (step, crop, batch) items."""
    if isinstance(spec, str):
        items = []
        for part in filter(None, (p.strip() for p in spec.split(","))):
            fields = part.split(":")
            try:
                if len(fields) != 3:
                    raise ValueError
                items.append((int(fields[0]), None if fields[1].lower() == "none" else int(fields[1]), int(fields[2])))
            except ValueError:
                raise ConfigError(f"schedule phase {part!r}: expected step:crop:batch with whole numbers, e.g. "
                                  "0:128:8,92000:160:5") from None
        spec = items
    phases = tuple(s if isinstance(s, Phase) else Phase(*s) for s in spec)
    if not phases or phases[0].step != 0:
        raise ConfigError(f"schedule {spec!r}: expected phases starting at step 0, e.g. 0:128:8,92000:160:5")
    for a, b in zip(phases, phases[1:]):
        if b.step <= a.step:
            raise ConfigError(f"schedule: phase at step {b.step} comes after step {a.step}; list phases by "
                              "increasing step")
    checked = []
    for st in phases:
        where = f"schedule phase at step {st.step}: crop"
        crop = check_crop(st.crop, where)
        if not is_whole(st.batch_size) or st.batch_size < 1 or not is_whole(st.step):
            raise ConfigError(f"schedule phase at step {st.step!r}: crop {st.crop}, batch {st.batch_size!r}: expected "
                              "positive sizes and whole numbers")
        checked.append(Phase(int(st.step), crop, int(st.batch_size)))
    return tuple(checked)




@dataclass(frozen=True)
class BatchPlan:
    """One batch: sample indices, crop corners, augmentation codes and padding flags (numpy arrays), and the crop
    side of its windows (None: whole images)."""

    index: np.ndarray
    y: np.ndarray
    x: np.ndarray
    code: np.ndarray
    padded: np.ndarray
    crop: Crop = None
    params: np.ndarray | None = None  # (n, columns) float32: each sample's degradation parameters (`degrade`)
    noise: np.ndarray | None = None  # (n,) uint64: each sample's noise key
    frames: int = 1  # clips: each T consecutive rows are the frames of one clip (one window, one code)
    at: int = 0  # its number in its run (`plan.run.Run`): executors find a batch's part of a run's tables by it

    def __len__(self) -> int:
        return len(self.index)

    @property
    def items(self) -> int:
        """What the batch holds in the user's terms: clips (rows / frames), else samples."""
        return len(self.index) // self.frames

    def out_hw(self, hw: np.ndarray) -> tuple[int, int]:
        """Height and width of this batch's windows (`hw`: the split's (n, 2) image sizes)."""
        size = crop_size(self.crop)
        if size is not None:
            return size
        h, w = hw[self.index[0]]
        return int(h), int(w)


class _Required:
    def __repr__(self) -> str:
        return "<required>"


REQUIRED = _Required()  # batch_size and crop: given, or taken from the schedule's first phase


@dataclass(frozen=True, kw_only=True)
class PlanConfig:
    """What the planner decides from. `repeats`: passes over the split per epoch (fresh crops each time).
    `weights` ((source, weight), …) and `epoch_size`: a mixed epoch of `epoch_size` draws from several sources
    (see `_mixed_rows`). `schedule`: phases of crop and batch size by global step; `batch_size` and `crop` are then
    its first phase's. `degrade`: the degradation that makes each sample's input from its target
    (`pairload.degrade.Degradation`, or what `Degradation.of` reads); its parameters are planned per sample;
    `degrade_sources`: the mixed sources it applies to (empty: all). `clips`: batches of clips of frames from a
    split packed with --sequences (`pairload.plan.clips.Clips`, or what `Clips.of` reads: 5,
    "5,stride=2,start=grid"); `batch_size` then counts clips."""

    batch_size: int | None = None
    crop: Crop | _Required = REQUIRED  # see `pairload.plan.crops`: 256, (192, 256) or None
    seed: int = 0
    rank: int = 0
    world_size: int = 1
    last_batch: LastBatch | str = LastBatch.DROP
    augment: bool = True
    shuffle: bool = True
    repeats: int = 1
    weights: tuple[tuple[str, float], ...] = ()
    epoch_size: int | None = None
    schedule: tuple[Phase, ...] = ()
    degrade: Any = None
    degrade_sources: tuple[str, ...] = ()
    clips: Any = None

    def __post_init__(self) -> None:
        # in this order, the first of several mistakes is the one reported
        self._check_samples()
        self._check_whole_numbers()
        self._take_schedule()
        self._check_sizes()
        self._check_ranks()
        self._check_epoch()
        self._check_mixing()

    def _set(self, name: str, value) -> None:
        object.__setattr__(self, name, value)  # frozen: a field's checked form replaces the value given

    def _check_samples(self) -> None:
        """What a sample is: its degradation (`degrade`, and the mixed sources it applies to) and its clip."""
        self._set("degrade", Degradation.of(self.degrade))
        self._set("clips", Clips.of(self.clips))
        self._set("degrade_sources", _source_names(self.degrade_sources))
        if self.degrade_sources and self.degrade is None:
            raise ConfigError(f"degrade_sources={list(self.degrade_sources)}: there is no degradation to apply; give "
                              "degrade= too (e.g. degrade='lowlight')")

    def _check_whole_numbers(self) -> None:
        """Sizes, seed and ranks are integers (numpy's too), never floats or bools (True would be a batch of 1)."""
        for name in ("batch_size", "crop", "seed", "rank", "world_size", "repeats", "epoch_size"):
            value = getattr(self, name)
            if name == "crop" and isinstance(value, (tuple, list)):
                continue  # (height, width): checked by its crop policy (`crops.check_crop`)
            if value is not None and value is not REQUIRED and not is_whole(value):
                raise ConfigError(f"{name}={value!r}: expected a whole number (int), found {type(value).__name__}",
                                  option=name, fix=f"pass an int, e.g. {name}=32" if name == "crop" else "pass an int")

    def _take_schedule(self) -> None:
        """A schedule gives `batch_size` and `crop` (its first phase's); given as well, they must be the same."""
        if not self.schedule:
            return
        phases = parse_schedule(self.schedule)
        self._set("schedule", phases)
        first = phases[0]
        for name, given, want in (("batch_size", self.batch_size, first.batch_size), ("crop", self.crop, first.crop)):
            if given is None and name == "batch_size" or given is REQUIRED:
                self._set(name, want)
            elif given != want:
                raise ConfigError(f"{name}={given!r} but the schedule's first phase has {want!r}: with a schedule, "
                                  f"leave {name} out (or give the first phase's)")

    def _check_sizes(self) -> None:
        """The batch size and the crop, both required."""
        if self.batch_size is None:
            raise ConfigError("batch_size is required (or a schedule, whose first phase gives it)")
        if self.crop is REQUIRED:
            raise ConfigError("crop is required: a size in pixels, or None for whole images")
        if self.batch_size < 1:
            raise ConfigError.for_value("batch_size", self.batch_size, "expected at least 1")
        self._set("batch_size", int(self.batch_size))
        self._set("crop", check_crop(self.crop))

    def _check_ranks(self) -> None:
        """This rank among the ranks, and how an epoch that does not fill their batches ends (`LastBatch`)."""
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ConfigError(f"rank={self.rank}, world_size={self.world_size}: expected 0 <= rank < world_size")
        if self.last_batch not in LAST_BATCH:
            raise ConfigError(f"last_batch={self.last_batch!r}: expected one of {', '.join(LAST_BATCH)}")
        self._set("last_batch", LastBatch(self.last_batch))

    def _check_epoch(self) -> None:
        """How much an epoch draws: `repeats` passes over the split, or `epoch_size` draws."""
        if self.repeats < 1:  # a whole number already (`_check_whole_numbers`), numpy's included
            raise ConfigError(f"repeats={self.repeats!r}: expected a whole number of passes, at least 1")
        self._set("repeats", int(self.repeats))
        if self.epoch_size is not None and self.epoch_size < 1:
            raise ConfigError(f"epoch_size={self.epoch_size}: expected at least 1 sample")

    def _check_mixing(self) -> None:
        """A mixed epoch's `weights` (a dict or (source, weight) pairs), positive and finite; it is not repeated."""
        try:
            weights = tuple(self.weights.items()) if isinstance(self.weights, dict) else tuple(self.weights or ())
            weights = tuple((str(k), float(v)) for k, v in weights)
        except (TypeError, ValueError):
            raise ConfigError(f"weights={self.weights!r}: expected {{source: weight}} or (source, weight) pairs with "
                              "numbers for weights", option="weights",
                              fix="e.g. weights={'real': 1, 'made': 3}") from None
        bad = [f"{k}={v}" for k, v in weights if not v > 0 or v == float("inf")]
        if bad:
            raise ConfigError(f"weights {', '.join(bad)}: expected positive finite weights")
        self._set("weights", weights)
        if self.repeats > 1 and self.mixed:
            raise ConfigError(f"repeats={self.repeats} with a mixed epoch (weights/epoch_size): a mixed epoch is "
                              "epoch_size draws, and a source is drawn again once it is used up; raise epoch_size "
                              "instead of repeating")

    @property
    def mixed(self) -> bool:
        return bool(self.weights) or self.epoch_size is not None

    @property
    def phases(self) -> tuple[Phase, ...]:
        return self.schedule or (Phase(0, self.crop, self.batch_size),)

    def epoch_length(self, n: int) -> int:
        """Samples an epoch over `n` draws: epoch_size (default n) when mixed, else n per repeat."""
        return (self.epoch_size or n) if self.mixed else n * self.repeats

    @property
    def max_batch(self) -> int:
        return max(st.batch_size for st in self.phases)

    @property
    def frames(self) -> int:
        """Rows a batch holds per item: a clip's frames, else 1."""
        return self.clips.frames if self.clips is not None else 1


def phase_at(cfg: PlanConfig, step: int) -> Phase:
    """The schedule phase in force at global `step`."""
    phase = cfg.phases[0]
    for st in cfg.phases:
        if st.step > step:
            break
        phase = st
    return phase


def check_groups(cfg: PlanConfig, groups: Groups, where: str) -> None:
    """Refuse weights that do not name the sources exactly, and empty sources."""
    names = [name for name, _ in groups]
    if cfg.weights and names == [""]:
        raise ConfigError(f"{where}: weights need named sources: make_loader(kind, {{'real': folder, 'made': "
                          "folder}, weights={'real': 1, 'made': 3}); one folder takes epoch_size alone")
    if cfg.weights:
        given = [k for k, _ in cfg.weights]
        if sorted(given) != sorted(names):
            missing, extra = sorted(set(names) - set(given)), sorted(set(given) - set(names))
            raise ConfigError(f"{where}: weights name {', '.join(given)} but the sources are {', '.join(names)}"
                              + (f"; no weight for {', '.join(missing)}" if missing else "")
                              + (f"; no source {', '.join(extra)}" if extra else ""))
    for name, n in groups:
        if n == 0:
            raise ConfigError(f"{where}: source {name!r} has no samples")


def check_split(cfg: PlanConfig, keys, hw: np.ndarray, split: str, bounds=None) -> None:
    """Refuse a crop larger than the smallest image, mixed sizes without a crop, and a batch larger than a rank's
    share. `bounds`: ((least h, least w), (greatest h, greatest w)) of `hw` where known (the manifest's): then the
    sizes are read only to name an image that does not fit."""
    n = len(keys)
    if n == 0:
        raise ConfigError(f"split {split!r} is empty")
    for crop in sorted({st.crop for st in cfg.phases if st.crop is not None}, key=crop_size, reverse=True):
        ch, cw = crop_size(crop)
        if bounds is not None and bounds[0][0] >= ch and bounds[0][1] >= cw:
            continue
        hw = np.asarray(hw)
        small = np.flatnonzero((hw[:, 0] < ch) | (hw[:, 1] < cw))
        if len(small):
            i = int(small[np.argmin(hw[small].min(axis=1))])
            fits = f"crop <= {int(hw.min())}" if ch == cw else f"crop <= ({int(hw[:, 0].min())}, {int(hw[:, 1].min())})"
            raise ConfigError(f"crop {crop} is larger than sample {keys[i]!r} of split {split!r}, which is "
                              f"{hw[i, 1]}x{hw[i, 0]} (crop {cw}x{ch})", option="crop",
                              fix=f"use {fits} or repack without that image",
                              flag_fix=f"use {fits.replace('crop', '{flag}', 1)} or repack without that image")
    if any(st.crop is None and st.batch_size > 1 for st in cfg.phases) and (
            bounds is None or bounds[0] != bounds[1]) and len(np.unique(np.asarray(hw), axis=0)) > 1:
        raise ConfigError(f"split {split!r} has images of {len(np.unique(hw, axis=0))} different sizes, so whole "
                          "images (crop=None) cannot be batched; use batch_size=1 or a crop")
    rows = cfg.epoch_length(n)
    share = rows // cfg.world_size if cfg.last_batch == "drop" else -(-rows // cfg.world_size)
    if cfg.last_batch == "drop" and share < cfg.max_batch:
        raise ConfigError(f"batch_size {cfg.max_batch} is larger than a rank's share of split {split!r} ({rows} "
                          f"samples / {cfg.world_size} ranks = {share})", option="batch_size",
                          fix="lower batch_size, set repeats=K (K passes over a small split per epoch), or use "
                              "last_batch='pad' or 'partial'", flag_fix="lower {flag}, or pass --repeats K")
