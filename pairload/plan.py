"""The one planner of randomness: sample order, rank shares, crop windows and dihedral augmentation, and what
restoration recipes do around them: repeats (k passes per epoch), mixed epochs over several sources (weights,
epoch_size, each source used up before it is drawn again, across epochs) and crop/batch schedules by global step.

Everything is a pure function of (seed, epoch, rank, world_size), the config and each sample's key (and which
draw of it this is), so every backend (ram, GPU-resident, WebDataset, DALI) executes the same plan, and input and
target always receive the same window and the same transform. Numpy only. (`wds` streams shards, so it takes
from here the order of shards and of each source's runs, every crop and flip, and the schedule's shapes; the
sample order inside a worker is its shuffle buffer's.)

Augmentation code (one per sample, applied to both images after cropping, in this order):
bit 2 (4): transpose H and W (square crops only), bit 1 (2): flip vertically, bit 0 (1): flip horizontally.
The eight codes are the eight symmetries of the square (flips and 90° rotations).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from .errors import ConfigError

LAST_BATCH = ("drop", "pad", "partial")
HFLIP, VFLIP, TRANSPOSE = 1, 2, 4

def key_hashes(keys) -> np.ndarray:
    """A stable 64-bit hash of each sample key (uint64 array); the planner's handle on a sample."""
    return np.array([int.from_bytes(hashlib.blake2b(k.encode(), digest_size=8).digest(), "little") for k in keys],
                    dtype=np.uint64)


def _splitmix(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _stream(key_hash: np.ndarray, seed: int, epoch: int, stream: int, draw: np.ndarray | None = None) -> np.ndarray:
    base = np.array([(seed & 0xFFFFFFFF) << 32 | (epoch & 0xFFFFFF) << 8 | stream], dtype=np.uint64)
    if draw is not None:  # the k-th draw of a sample in an epoch (repeats, mixing): draw 0 is the plain epoch's
        with np.errstate(over="ignore"):
            base = base + np.asarray(draw, dtype=np.uint64) * np.uint64(0xD1B54A32D192ED03)
    return _splitmix(np.asarray(key_hash, dtype=np.uint64) ^ _splitmix(base))


def sample_params(key_hash: np.ndarray, hw: np.ndarray, *, seed: int, epoch: int, crop: int | None,
                  augment: bool, draw: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Crop corner (y, x) and augmentation code for each sample, from its key (and, for a sample drawn more than
    once in an epoch, which draw it is) alone: (y, x, code) int64 arrays."""
    key_hash = np.atleast_1d(np.asarray(key_hash, dtype=np.uint64))
    hw = np.asarray(hw, dtype=np.int64).reshape(-1, 2)
    n = len(key_hash)
    if crop is None:
        y = x = np.zeros(n, dtype=np.int64)
    else:
        y = (_stream(key_hash, seed, epoch, 1, draw) % (hw[:, 0] - crop + 1).astype(np.uint64)).astype(np.int64)
        x = (_stream(key_hash, seed, epoch, 2, draw) % (hw[:, 1] - crop + 1).astype(np.uint64)).astype(np.int64)
    if not augment:
        return y, x, np.zeros(n, dtype=np.int64)
    code = (_stream(key_hash, seed, epoch, 3, draw) & np.uint64(7)).astype(np.int64)
    if crop is None:
        code[hw[:, 0] != hw[:, 1]] &= HFLIP | VFLIP  # a non-square image cannot be transposed in place
    return y, x, code


def epoch_order(n: int, *, seed: int, epoch: int, shuffle: bool = True, salt: tuple[int, ...] = ()) -> np.ndarray:
    """The epoch's permutation of a split's sample indices, the same on every rank (`salt`: another, independent
    permutation of the same epoch, e.g. for a repeat)."""
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    return np.random.default_rng([seed & 0xFFFFFFFF, epoch, 0x5EED, *salt]).permutation(n).astype(np.int64)


# ---------------------------------------------------------------------------------------------------------- mixing

Groups = tuple[tuple[str, int], ...]  # (name, samples) of each source, in index order: source s owns one index range


def mix_counts(sizes, weights, epoch_size: int) -> np.ndarray:
    """Samples each source gives an epoch of `epoch_size`: proportional to the weights, rounded by largest
    remainder (the same every epoch). `sizes` only says how many sources there are."""
    w = np.asarray(weights, dtype=np.float64)
    exact = epoch_size * w / w.sum()
    counts = np.floor(exact).astype(np.int64)
    short = epoch_size - int(counts.sum())
    counts[np.argsort(-(exact - counts), kind="stable")[:short]] += 1
    assert len(counts) == len(sizes)
    return counts


def source_counts(groups: Groups, weights: tuple[tuple[str, float], ...], epoch_size: int) -> np.ndarray:
    """Draws each source gives a mixed epoch: by the weights, or by the sources' sizes when none are given."""
    by_name = dict(weights) if weights else {name: n for name, n in groups}
    return mix_counts([n for _, n in groups], [by_name[name] for name, _ in groups], epoch_size)


def interleave(counts: np.ndarray, unit: int) -> np.ndarray:
    """Source number of each row of a mixed epoch: runs of `unit` rows (one per rank) of one source, the runs of
    every source spread evenly over the epoch, so any `unit`-strided deal gives every rank the sources in
    proportion in every stretch of its share; the few rows left over (fewer than `unit` per source) close it."""
    runs = counts // unit
    pos = np.concatenate([(np.arange(r) + 0.5) / r for r in runs if r] or [np.zeros(0)])
    src = np.concatenate([np.full(r, s) for s, r in enumerate(runs) if r] or [np.zeros(0, dtype=np.int64)])
    order = src[np.argsort(pos, kind="stable")]
    rest = np.concatenate([np.full(int(c % unit), s) for s, c in enumerate(counts)])
    return np.concatenate([np.repeat(order, unit), rest]).astype(np.int64)


def _mixed_rows(groups: Groups, weights: tuple[tuple[str, float], ...], epoch_size: int, *, seed: int, epoch: int,
                shuffle: bool, unit: int) -> np.ndarray:
    """(2, epoch_size) rows (sample index, draw) of a mixed epoch. Source s reads its own endless stream of
    permutations (cycle k: a permutation of its samples, seeded by (seed, s, k)); epoch e takes positions
    [e·c_s, (e+1)·c_s) of it, so a source's samples are used up before any is drawn again, across epochs. The
    draw number is the cycle (a sample drawn again gets a fresh crop and flip)."""
    counts = source_counts(groups, weights, epoch_size)
    labels = interleave(counts, unit)
    rows = np.empty((2, epoch_size), dtype=np.int64)
    offset = 0
    for s, ((_, n), c) in enumerate(zip(groups, counts.tolist())):
        pos = epoch * c + np.arange(c, dtype=np.int64)
        cycle, within = pos // n, pos % n
        local = np.empty(c, dtype=np.int64)
        for k in np.unique(cycle).tolist():
            sel = cycle == k
            local[sel] = epoch_order(n, seed=seed, epoch=k, shuffle=shuffle, salt=(0x313, s))[within[sel]]
        at = labels == s
        rows[0, at] = offset + local
        rows[1, at] = cycle
        offset += n
    return rows


# ---------------------------------------------------------------------------------------------------------- epochs

def epoch_rows(cfg: "PlanConfig", n: int, epoch: int, groups: Groups = (), world_size: int | None = None) -> np.ndarray:
    """(2, L) rows (sample index, draw) of the whole epoch, before padding and dealing, the same on every rank.
    Plain: the epoch's permutation, `repeats` times (draw r: the r-th pass, each its own permutation). Mixed
    (`weights` or `epoch_size`): `epoch_size` draws from the sources (see `_mixed_rows`)."""
    if cfg.mixed:
        return _mixed_rows(groups or (("", n),), cfg.weights, cfg.epoch_length(n), seed=cfg.seed, epoch=epoch,
                           shuffle=cfg.shuffle, unit=world_size or cfg.world_size)
    parts = [epoch_order(n, seed=cfg.seed, epoch=epoch, shuffle=cfg.shuffle, salt=(r,) if r else ())
             for r in range(cfg.repeats)]
    return np.stack([np.concatenate(parts), np.repeat(np.arange(cfg.repeats, dtype=np.int64), n)])


def _with_pad(rows: np.ndarray, total: int) -> np.ndarray:
    """(3, total) rows (index, padded, draw) from (index, draw) or (index, padded, draw) rows: cut to `total`, or
    wrapped around to it with the repeats flagged."""
    length = rows.shape[1]
    if not length:
        return np.zeros((3, 0), dtype=np.int64)
    at = np.arange(total)
    take = at % length
    flags = rows[1, take] if rows.shape[0] == 3 else np.zeros(total, dtype=np.int64)
    return np.stack([rows[0, take], flags | (at >= length), rows[-1, take]])


def epoch_stream(cfg: "PlanConfig", n: int, epoch: int, groups: Groups = (), world_size: int | None = None) -> np.ndarray:
    """(3, L) rows (index, padded, draw) of the whole epoch before it is dealt to ranks, wrapped around for 'pad'
    until every rank gets the same number of whole batches (repeats flagged)."""
    ws = world_size or cfg.world_size
    rows = epoch_rows(cfg, n, epoch, groups, ws)
    length = rows.shape[1]
    total = -(-length // (ws * cfg.batch_size)) * ws * cfg.batch_size if cfg.last_batch == "pad" else length
    return _with_pad(rows, total)


def _even(rows: np.ndarray, world_size: int, batch_size: int, last_batch: str, resumed: bool) -> np.ndarray:
    """The stream cut (drop) or wrapped (pad) so that every rank gets the same number of batches.

    drop: floor(n / world_size) samples per rank, rounded down to whole batches; in an epoch resumed mid-way the
    rest is only cut to equal shares, so each rank's last batch may be short (never more than world_size - 1
    samples are skipped beyond what the uninterrupted epoch skipped). pad: a resumed epoch wraps its rest again."""
    length = rows.shape[1]
    if last_batch == "drop":
        per = length // world_size if resumed else (length // world_size) // batch_size * batch_size
        return rows[:, : per * world_size]
    if last_batch == "pad" and resumed:
        total = -(-length // (world_size * batch_size)) * world_size * batch_size
        if total > length and length:
            return _with_pad(rows, total)
    return rows


def _bounds(length: int, rank: int, world_size: int) -> tuple[int, int]:
    return rank * length // world_size, (rank + 1) * length // world_size


def _take(rows: np.ndarray, rank: int, world_size: int, deal: str) -> np.ndarray:
    if deal == "strided":
        return rows[:, rank::world_size]
    lo, hi = _bounds(rows.shape[1], rank, world_size)
    return rows[:, lo:hi]


def _after(rows: np.ndarray, world_size: int, taken: int, deal: str) -> np.ndarray:
    """What is left of an evenly dealt stream once every rank has taken `taken` samples of its share."""
    if deal == "strided":  # rank r's j-th sample sits at j * world_size + r
        return rows[:, taken * world_size:]
    keep = np.concatenate([np.arange(lo + min(taken, hi - lo), hi) for lo, hi in
                           (_bounds(rows.shape[1], r, world_size) for r in range(world_size))]).astype(np.int64)
    return rows[:, keep]


DEALS = ("strided", "contiguous")


def share_rows(cfg: "PlanConfig", n: int, epoch: int, *, rank: int | None = None, deal: str = "strided",
               consumed: tuple[tuple[int, int], ...] = (), groups: Groups = ()) -> np.ndarray:
    """(3, L) rows (index, padded, draw) of this rank's part of the epoch, batch-aligned by `last_batch` (see
    `rank_share`). Not for schedules (their batches are cut by `plan_epoch`)."""
    if deal not in DEALS:
        raise ConfigError(f"deal={deal!r}: expected one of {', '.join(DEALS)}")
    ws0 = consumed[0][0] if consumed else cfg.world_size
    rows = epoch_stream(cfg, n, epoch, groups, ws0)
    resumed = False
    for ws, batches in consumed:
        rows = _even(rows, ws, cfg.batch_size, cfg.last_batch, resumed)
        rows = _after(rows, ws, batches * cfg.batch_size, deal)
        resumed = True
    rows = _even(rows, cfg.world_size, cfg.batch_size, cfg.last_batch, resumed)
    return _take(rows, cfg.rank if rank is None else rank, cfg.world_size, deal)


def rank_share(n: int, *, seed: int, epoch: int, rank: int, world_size: int, batch_size: int, last_batch: str,
               shuffle: bool = True, deal: str = "strided",
               consumed: tuple[tuple[int, int], ...] = ()) -> tuple[np.ndarray, np.ndarray]:
    """(indices, padded) for this rank's part of a plain epoch, batch-aligned according to `last_batch`.

    drop: every rank gets floor(n / world_size) samples rounded down to whole batches; the rest is skipped.
    pad: the order wraps around until every rank has the same number of whole batches; repeats are flagged.
    partial: every sample exactly once; ranks differ by at most one sample and the last batch may be short.
    deal: "strided" (rank r takes every world_size-th sample) or "contiguous" (rank r takes one block, as
    DALI's sharded readers read).
    consumed: ((world_size, batches), …): the epoch was started before, by that many ranks each delivering that
    many batches (then by the next entry's ranks, …); this rank's share is then of the rest of the epoch, which
    is dealt again over `world_size` ranks. With the same world size the rest is exactly the uninterrupted tail.
    """
    cfg = PlanConfig(batch_size=batch_size, crop=None, seed=seed, rank=rank, world_size=world_size,
                     last_batch=last_batch, shuffle=shuffle)
    rows = share_rows(cfg, n, epoch, deal=deal, consumed=consumed)
    return rows[0], rows[1].astype(bool)


# ------------------------------------------------------------------------------------------------------ schedules

@dataclass(frozen=True)
class Stage:
    """From global step `step` on (batches delivered per rank since epoch 0), batches of `batch_size` crops of
    `crop` (per rank)."""

    step: int
    crop: int | None
    batch_size: int


def parse_schedule(spec) -> tuple[Stage, ...]:
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
                raise ConfigError(f"schedule stage {part!r}: expected step:crop:batch with whole numbers, e.g. "
                                  "0:128:8,92000:160:5") from None
        spec = items
    stages = tuple(s if isinstance(s, Stage) else Stage(*s) for s in spec)
    if not stages or stages[0].step != 0:
        raise ConfigError(f"schedule {spec!r}: expected stages starting at step 0, e.g. 0:128:8,92000:160:5")
    for a, b in zip(stages, stages[1:]):
        if b.step <= a.step:
            raise ConfigError(f"schedule: stage at step {b.step} comes after step {a.step}; list stages by "
                              "increasing step")
    for st in stages:
        if st.batch_size < 1 or (st.crop is not None and st.crop < 1):
            raise ConfigError(f"schedule stage at step {st.step}: crop {st.crop}, batch {st.batch_size}: expected "
                              "positive sizes")
    return stages


def stage_at(cfg: "PlanConfig", step: int) -> Stage:
    stage = cfg.stages[0]
    for st in cfg.stages:
        if st.step > step:
            break
        stage = st
    return stage


def whole_steps(cfg: "PlanConfig", rows: int, start: int, world_size: int) -> int:
    """Batches per rank an epoch of `rows` rows gives when it starts at global step `start` (with a short last
    batch unless `last_batch` is 'drop')."""
    t = start
    for i, st in enumerate(cfg.stages):
        end = cfg.stages[i + 1].step if i + 1 < len(cfg.stages) else None
        if end is not None and end <= t:
            continue
        g = world_size * st.batch_size
        full = rows // g if end is None else min(rows // g, end - t)
        t, rows = t + full, rows - full * g
        if rows and (end is None or t < end):  # a short last batch in this stage
            return t - start + (cfg.last_batch != "drop")
        if not rows:
            return t - start
    return t - start


def epoch_start_step(cfg: "PlanConfig", rows: int, epoch: int) -> int:
    """The global step at which `epoch` starts, counting every earlier epoch (of `rows` rows) on this world size."""
    t = 0
    for _ in range(epoch):
        t += whole_steps(cfg, rows, t, cfg.world_size)
    return t


def _scheduled(cfg: "PlanConfig", key_hash, hw, epoch: int, consumed, groups: Groups) -> list["BatchPlan"]:
    """This rank's batches of a scheduled epoch: global batches of world_size × the stage's batch size, taken in
    turn from the epoch's stream and dealt strided, each with its stage's crop."""
    n, ws = len(key_hash), cfg.world_size
    ws0 = consumed[0][0] if consumed else ws
    full = epoch_rows(cfg, n, epoch, groups, ws0)
    length = full.shape[1]
    t = epoch_start_step(cfg, length, epoch)
    pos = 0
    for cws, k in consumed:
        for _ in range(k):
            pos += cws * stage_at(cfg, t).batch_size
            t += 1
    batches = []
    while pos < length:
        st = stage_at(cfg, t)
        take = pos + np.arange(ws * st.batch_size)
        if take[-1] >= length:  # the epoch's last, short global batch
            if cfg.last_batch == "drop":
                break
            if cfg.last_batch == "partial":
                take = take[take < length]
        pos += len(take)
        rows = np.stack([full[0, take % length], take >= length, full[1, take % length]])  # pad: wrapped, flagged
        mine = rows[:, cfg.rank::ws]
        t += 1
        if mine.shape[1]:
            batches.append((mine, st.crop))
    return _cut(cfg, key_hash, hw, epoch, batches)


# ---------------------------------------------------------------------------------------------------------- config

@dataclass(frozen=True)
class BatchPlan:
    """One batch: sample indices, crop corners, augmentation codes and padding flags (numpy arrays), and the crop
    side of its windows (None: whole images)."""

    index: np.ndarray
    y: np.ndarray
    x: np.ndarray
    code: np.ndarray
    padded: np.ndarray
    crop: int | None = None

    def __len__(self) -> int:
        return len(self.index)

    def out_hw(self, hw: np.ndarray) -> tuple[int, int]:
        """Height and width of this batch's windows (`hw`: the split's (n, 2) image sizes)."""
        if self.crop is not None:
            return self.crop, self.crop
        h, w = hw[self.index[0]]
        return int(h), int(w)


class _Required:
    def __repr__(self) -> str:
        return "<required>"


REQUIRED = _Required()  # batch_size and crop: given, or taken from the schedule's first stage


@dataclass(frozen=True, kw_only=True)
class PlanConfig:
    """What the planner decides from. `repeats`: passes over the split per epoch (fresh crops each time).
    `weights` ((source, weight), …) and `epoch_size`: a mixed epoch of `epoch_size` draws from several sources
    (see `_mixed_rows`). `schedule`: stages of crop and batch size by global step; `batch_size` and `crop` are then
    its first stage's."""

    batch_size: int | None = None
    crop: int | None | _Required = REQUIRED
    seed: int = 0
    rank: int = 0
    world_size: int = 1
    last_batch: str = "drop"
    augment: bool = True
    shuffle: bool = True
    repeats: int = 1
    weights: tuple[tuple[str, float], ...] = ()
    epoch_size: int | None = None
    schedule: tuple[Stage, ...] = ()

    def __post_init__(self) -> None:
        if self.schedule:
            stages = parse_schedule(self.schedule)
            object.__setattr__(self, "schedule", stages)
            first = stages[0]
            for name, given, want in (("batch_size", self.batch_size, first.batch_size), ("crop", self.crop, first.crop)):
                if given is None and name == "batch_size" or given is REQUIRED:
                    object.__setattr__(self, name, want)
                elif given != want:
                    raise ConfigError(f"{name}={given!r} but the schedule's first stage has {want!r}: with a schedule, "
                                      f"leave {name} out (or give the first stage's)")
        if self.batch_size is None:
            raise ConfigError("batch_size is required (or a schedule, whose first stage gives it)")
        if self.crop is REQUIRED:
            raise ConfigError("crop is required: a size in pixels, or None for whole images")
        if self.batch_size < 1:
            raise ConfigError(f"batch_size={self.batch_size}: expected at least 1")
        if self.crop is not None and self.crop < 1:
            raise ConfigError(f"crop={self.crop}: expected a positive size in pixels, or None for whole images")
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ConfigError(f"rank={self.rank}, world_size={self.world_size}: expected 0 <= rank < world_size")
        if self.last_batch not in LAST_BATCH:
            raise ConfigError(f"last_batch={self.last_batch!r}: expected one of {', '.join(LAST_BATCH)}")
        if not isinstance(self.repeats, int) or self.repeats < 1:
            raise ConfigError(f"repeats={self.repeats!r}: expected a whole number of passes, at least 1")
        if self.epoch_size is not None and self.epoch_size < 1:
            raise ConfigError(f"epoch_size={self.epoch_size}: expected at least 1 sample")
        weights = tuple(self.weights.items()) if isinstance(self.weights, dict) else tuple(self.weights or ())
        weights = tuple((str(k), float(v)) for k, v in weights)
        bad = [f"{k}={v}" for k, v in weights if not v > 0 or v == float("inf")]
        if bad:
            raise ConfigError(f"weights {', '.join(bad)}: expected positive finite weights")
        object.__setattr__(self, "weights", weights)
        if self.repeats > 1 and self.mixed:
            raise ConfigError(f"repeats={self.repeats} with a mixed epoch (weights/epoch_size): a mixed epoch is "
                              "epoch_size draws, and a source is drawn again once it is used up; raise epoch_size "
                              "instead of repeating")

    @property
    def mixed(self) -> bool:
        return bool(self.weights) or self.epoch_size is not None

    @property
    def stages(self) -> tuple[Stage, ...]:
        return self.schedule or (Stage(0, self.crop, self.batch_size),)

    def epoch_length(self, n: int) -> int:
        """Samples an epoch over `n` draws: epoch_size (default n) when mixed, else n per repeat."""
        return (self.epoch_size or n) if self.mixed else n * self.repeats

    @property
    def max_batch(self) -> int:
        return max(st.batch_size for st in self.stages)


def check_groups(cfg: PlanConfig, groups: Groups, where: str) -> None:
    """Refuse weights that do not name the sources exactly, and empty sources."""
    names = [name for name, _ in groups]
    if cfg.weights and names == [""]:
        raise ConfigError(f"{where}: weights need named sources: make_loader(kind, {{'real': folder, 'synth': "
                          "folder}, weights={'real': 1, 'synth': 3}); one folder takes epoch_size alone")
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


def check_split(cfg: PlanConfig, keys, hw: np.ndarray, split: str) -> None:
    """Refuse a crop larger than the smallest image, mixed sizes without a crop, and a batch larger than a rank's share."""
    n = len(keys)
    if n == 0:
        raise ConfigError(f"split {split!r} is empty")
    crops = sorted({st.crop for st in cfg.stages if st.crop is not None})
    if crops:
        crop = crops[-1]
        small = np.flatnonzero((hw[:, 0] < crop) | (hw[:, 1] < crop))
        if len(small):
            i = int(small[np.argmin(hw[small].min(axis=1))])
            raise ConfigError(f"crop {crop} is larger than sample {keys[i]!r} of split {split!r}, which is "
                              f"{hw[i, 1]}x{hw[i, 0]} (crop {crop}x{crop}); use crop <= {int(hw.min())} or repack "
                              "without that image")
    if any(st.crop is None and st.batch_size > 1 for st in cfg.stages) and len(np.unique(hw, axis=0)) > 1:
        raise ConfigError(f"split {split!r} has images of {len(np.unique(hw, axis=0))} different sizes, so whole images "
                          "(crop=None) cannot be batched; use batch_size=1 or a crop")
    rows = cfg.epoch_length(n)
    share = rows // cfg.world_size if cfg.last_batch == "drop" else -(-rows // cfg.world_size)
    if cfg.last_batch == "drop" and share < cfg.max_batch:
        raise ConfigError(f"batch_size {cfg.max_batch} is larger than a rank's share of split {split!r} ({rows} samples "
                          f"/ {cfg.world_size} ranks = {share}); lower batch_size, or use last_batch='pad' or 'partial'")


def _cut(cfg: PlanConfig, key_hash: np.ndarray, hw: np.ndarray, epoch: int,
         batches: list[tuple[np.ndarray, int | None]]) -> list[BatchPlan]:
    """BatchPlans of (rows, crop) batches: the crop windows and codes of all rows of one crop in one vectorised
    call (an epoch is planned in a few numpy passes, not one per batch)."""
    out: list[BatchPlan | None] = [None] * len(batches)
    for crop in {c for _, c in batches}:
        which = [i for i, (_, c) in enumerate(batches) if c == crop]
        rows = np.concatenate([batches[i][0] for i in which], axis=1)
        idx = rows[0]
        y, x, code = sample_params(key_hash[idx], hw[idx], seed=cfg.seed, epoch=epoch, crop=crop, augment=cfg.augment,
                                   draw=rows[2] if rows[2].any() else None)
        padded = rows[1].astype(bool)
        start = 0
        for i in which:
            sl = slice(start, start + batches[i][0].shape[1])
            start = sl.stop
            out[i] = BatchPlan(idx[sl], y[sl], x[sl], code[sl], padded[sl], crop)
    return out


def plan_epoch(cfg: PlanConfig, key_hash: np.ndarray, hw: np.ndarray, epoch: int, *, deal: str = "strided",
               consumed: tuple[tuple[int, int], ...] = (), groups: Groups = ()) -> list[BatchPlan]:
    """This rank's batches for `epoch` (for the rest of it, when `consumed` says how it was started before).
    `groups`: the sources' (name, samples) when several sources share the index space (mixing)."""
    if cfg.schedule:
        if deal != "strided":
            raise ConfigError("a crop/batch schedule is planned for loaders over shards (deal 'strided')")
        return _scheduled(cfg, key_hash, hw, epoch, consumed, groups)
    rows = share_rows(cfg, len(key_hash), epoch, deal=deal, consumed=consumed, groups=groups)
    bs = cfg.batch_size
    return _cut(cfg, key_hash, hw, epoch, [(rows[:, s:s + bs], cfg.crop) for s in range(0, rows.shape[1], bs)])


def num_batches(cfg: PlanConfig, n: int, epoch: int = 0) -> int:
    """Batches per epoch on this rank (the same for every epoch without a schedule)."""
    rows = cfg.epoch_length(n)
    if cfg.schedule:
        return whole_steps(cfg, rows, epoch_start_step(cfg, rows, epoch), cfg.world_size)
    if cfg.last_batch == "drop":
        return (rows // cfg.world_size) // cfg.batch_size
    if cfg.last_batch == "pad":
        return -(-rows // (cfg.world_size * cfg.batch_size))
    return -(-len(range(cfg.rank, rows, cfg.world_size)) // cfg.batch_size)
