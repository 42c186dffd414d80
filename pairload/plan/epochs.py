"""An epoch's batches for one rank: the rows of the whole epoch (repeats, mixing), the last-batch rule, the deal
to ranks, resuming an epoch started on another world size (`consumed`), crop/batch schedules, and the crop
windows and codes of every row. `plan_epoch` is what every loader executes and `len(plan_epoch(...))` is every
loader's `len()` (`num_batches` is the same number without planning). Numpy only."""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from .clips import ClipUnits, frame_noise
from .config import BatchPlan, Groups, LastBatch, PlanConfig, phase_at
from .deals import Deal, Shards, get_deal
from .draws import noise_keys, sample_params, uniforms
from .mix import interleave, source_counts

Consumed = tuple[tuple[int, int], ...]  # ((world_size, batches per rank), ...): how an epoch was started before


def _mixed_rows(cfg: PlanConfig, groups: Groups, epoch: int, deal: Deal, unit: int,
                shards: Shards | None) -> np.ndarray:
    """(2, epoch_size) rows (sample index, draw) of a mixed epoch. Source s reads its own endless stream of
    orders (cycle k: the deal's order of its samples, seeded by (seed, s, k)); epoch e takes positions
    [e·c_s, (e+1)·c_s) of it, so a source's samples are used up before any is drawn again, across epochs. The
    draw number is the cycle (a sample drawn again gets a fresh crop and flip)."""
    epoch_size = cfg.epoch_length(sum(n for _, n in groups))
    counts = source_counts(groups, cfg.weights, epoch_size)
    labels = interleave(counts, unit)
    rows = np.empty((2, epoch_size), dtype=np.int64)
    offset = 0
    for s, ((_, n), c) in enumerate(zip(groups, counts.tolist())):
        part = shards.part(offset, offset + n) if shards is not None else None
        pos = epoch * c + np.arange(c, dtype=np.int64)
        cycle, within = pos // n, pos % n
        local = np.empty(c, dtype=np.int64)
        for k in np.unique(cycle).tolist():
            sel = cycle == k
            local[sel] = deal.order(n, seed=cfg.seed, epoch=k, shuffle=cfg.shuffle, salt=(0x313, s),
                                    shards=part)[within[sel]]
        at = labels == s
        rows[0, at] = offset + local
        rows[1, at] = cycle
        offset += n
    return rows


def epoch_rows(cfg: PlanConfig, n: int, epoch: int, groups: Groups = (), world_size: int | None = None,
               deal: str = "strided", shards: Shards | None = None) -> np.ndarray:
    """(2, L) rows (sample index, draw) of the whole epoch, before padding and dealing, the same on every rank.
    Plain: the deal's order, `repeats` times (draw r: the r-th pass, each its own order). Mixed (`weights` or
    `epoch_size`): `epoch_size` draws from the sources (see `_mixed_rows`)."""
    d = get_deal(deal)
    if cfg.mixed:
        return _mixed_rows(cfg, groups or (("", n),), epoch, d, d.unit(world_size or cfg.world_size), shards)
    parts = [d.order(n, seed=cfg.seed, epoch=epoch, shuffle=cfg.shuffle, salt=(r,) if r else (), shards=shards)
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


def _padded_total(length: int, world_size: int, batch_size: int) -> int:
    return -(-length // (world_size * batch_size)) * world_size * batch_size


def epoch_stream(cfg: PlanConfig, n: int, epoch: int, groups: Groups = (), world_size: int | None = None,
                 deal: str = "strided", shards: Shards | None = None) -> np.ndarray:
    """(3, L) rows (index, padded, draw) of the whole epoch before it is dealt to ranks, wrapped around for 'pad'
    until every rank gets the same number of whole batches (repeats flagged)."""
    ws = world_size or cfg.world_size
    rows = epoch_rows(cfg, n, epoch, groups, ws, deal, shards)
    length = rows.shape[1]
    total = _padded_total(length, ws, cfg.batch_size) if cfg.last_batch == LastBatch.PAD else length
    return _with_pad(rows, total)


def _even(rows: np.ndarray, world_size: int, batch_size: int, last_batch: str, resumed: bool) -> np.ndarray:
    """The stream cut (drop) or wrapped (pad) so that every rank gets the same number of batches.

    drop: floor(n / world_size) samples per rank, rounded down to whole batches; in an epoch resumed mid-way the
    rest is only cut to equal shares, so each rank's last batch may be short (never more than world_size - 1
    samples are skipped beyond what the uninterrupted epoch skipped). pad: a resumed epoch wraps its rest again."""
    length = rows.shape[1]
    if last_batch == LastBatch.DROP:
        per = length // world_size if resumed else (length // world_size) // batch_size * batch_size
        return rows[:, : per * world_size]
    if last_batch == LastBatch.PAD and resumed:
        total = _padded_total(length, world_size, batch_size)
        if total > length and length:
            return _with_pad(rows, total)
    return rows


def share_rows(cfg: PlanConfig, n: int, epoch: int, *, rank: int | None = None, deal: str = "strided",
               consumed: Consumed = (), groups: Groups = (), shards: Shards | None = None) -> np.ndarray:
    """(3, L) rows (index, padded, draw) of this rank's part of the epoch, batch-aligned by `last_batch` (see
    `rank_share`). Not for schedules (their batches are cut by `plan_epoch`)."""
    d = get_deal(deal)
    ws0 = consumed[0][0] if consumed else cfg.world_size
    rows = epoch_stream(cfg, n, epoch, groups, ws0, deal, shards)
    resumed = False
    for ws, batches in consumed:
        rows = _even(rows, ws, cfg.batch_size, cfg.last_batch, resumed)
        rows = d.after(rows, ws, batches * cfg.batch_size)
        resumed = True
    rows = _even(rows, cfg.world_size, cfg.batch_size, cfg.last_batch, resumed)
    return d.take(rows, cfg.rank if rank is None else rank, cfg.world_size)


def rank_share(n: int, *, seed: int, epoch: int, rank: int, world_size: int, batch_size: int, last_batch: str,
               shuffle: bool = True, deal: str = "strided", consumed: Consumed = (),
               shards: Shards | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(indices, padded) for this rank's part of a plain epoch, batch-aligned according to `last_batch`
    (see `LastBatch`), dealt by `deal` (see `pairload.plan.deals`).
    consumed: ((world_size, batches), …): the epoch was started before, by that many ranks each delivering that
    many batches (then by the next entry's ranks, …); this rank's share is then of the rest of the epoch, which
    is dealt again over `world_size` ranks. With the same world size the rest is exactly the uninterrupted tail.
    """
    cfg = PlanConfig(batch_size=batch_size, crop=None, seed=seed, rank=rank, world_size=world_size,
                     last_batch=last_batch, shuffle=shuffle)
    rows = share_rows(cfg, n, epoch, deal=deal, consumed=consumed, shards=shards)
    return rows[0], rows[1].astype(bool)


# ------------------------------------------------------------------------------------------------------ schedules

def whole_steps(cfg: PlanConfig, rows: int, start: int, world_size: int) -> int:
    """Batches per rank an epoch of `rows` rows gives when it starts at global step `start` (with a short last
    batch unless `last_batch` is 'drop')."""
    t = start
    for i, st in enumerate(cfg.phases):
        end = cfg.phases[i + 1].step if i + 1 < len(cfg.phases) else None
        if end is not None and end <= t:
            continue
        g = world_size * st.batch_size
        full = rows // g if end is None else min(rows // g, end - t)
        t, rows = t + full, rows - full * g
        if rows and (end is None or t < end):  # a short last batch in this phase
            return t - start + (cfg.last_batch != LastBatch.DROP)
        if not rows:
            return t - start
    return t - start


def _epoch_steps(cfg: PlanConfig, rows: int, start: int, deal: Deal) -> int:
    """Steps of a scheduled epoch of `rows` rows starting at `start`: global batches (strided deals) or each
    rank's own whole batches of its block (block deals, 'drop')."""
    if deal.strided:
        return whole_steps(cfg, rows, start, cfg.world_size)
    return whole_steps(cfg, rows // cfg.world_size, start, 1)


def epoch_start_step(cfg: PlanConfig, rows: int, epoch: int, deal: str = "strided") -> int:
    """The global step at which `epoch` starts, counting every earlier epoch (of `rows` rows) on this world size."""
    d, t = get_deal(deal), 0
    for _ in range(epoch):
        t += _epoch_steps(cfg, rows, t, d)
    return t


def _scheduled(cfg: PlanConfig, rows: np.ndarray, t: int, consumed: Consumed) -> list[tuple[np.ndarray, int | None]]:
    """Strided deals: global batches of world_size × the phase's batch size, taken in turn from the epoch's rows
    and dealt strided, each with its phase's crop."""
    ws, length, pos = cfg.world_size, rows.shape[1], 0
    for cws, k in consumed:
        for _ in range(k):
            pos += cws * phase_at(cfg, t).batch_size
            t += 1
    batches = []
    while pos < length:
        st = phase_at(cfg, t)
        take = pos + np.arange(ws * st.batch_size)
        if take[-1] >= length:  # the epoch's last, short global batch
            if cfg.last_batch == LastBatch.DROP:
                break
            if cfg.last_batch == LastBatch.PARTIAL:
                take = take[take < length]
        pos += len(take)
        full = np.stack([rows[0, take % length], take >= length, rows[1, take % length]])  # pad: wrapped, flagged
        mine = full[:, cfg.rank::ws]
        t += 1
        if mine.shape[1]:
            batches.append((mine, st.crop))
    return batches


def _scheduled_blocks(cfg: PlanConfig, rows: np.ndarray, t: int, consumed: Consumed,
                      deal: Deal) -> list[tuple[np.ndarray, int | None]]:
    """Block deals ('drop' only): each rank's own block of the epoch, cut into the phases' batches in turn; every
    rank has as many steps (its block holds floor(rows / world_size))."""
    if cfg.last_batch != LastBatch.DROP:
        raise ConfigError(f"a crop/batch schedule with last_batch={cfg.last_batch.value!r} and the {deal.name} deal: "
                          "it is planned with 'drop' only (every rank the same shapes at every step)")
    rows = np.stack([rows[0], np.zeros_like(rows[0]), rows[1]])
    for cws, k in consumed:
        taken = sum(phase_at(cfg, t + j).batch_size for j in range(k))
        t += k
        rows = deal.after(rows[:, : rows.shape[1] // cws * cws], cws, taken)
    per = rows.shape[1] // cfg.world_size
    mine = rows[:, cfg.rank * per:(cfg.rank + 1) * per]
    batches, pos = [], 0
    for j in range(whole_steps(cfg, per, t, 1)):
        st = phase_at(cfg, t + j)
        batches.append((mine[:, pos:pos + st.batch_size], st.crop))
        pos += st.batch_size
    return batches


# ---------------------------------------------------------------------------------------------------------- plans

def _cut(cfg: PlanConfig, key_hash: np.ndarray, hw: np.ndarray, epoch: int,
         batches: list[tuple[np.ndarray, int | None]], units: ClipUnits | None = None) -> list[BatchPlan]:
    """BatchPlans of (rows, crop) batches: the crop windows and codes of all rows of one crop in one vectorised
    call (an epoch is planned in a few numpy passes, not one per batch)."""
    out: list[BatchPlan | None] = [None] * len(batches)
    for crop in {c for _, c in batches}:
        which = [i for i, (_, c) in enumerate(batches) if c == crop]
        rows = np.concatenate([batches[i][0] for i in which], axis=1)
        for i, plan in zip(which, sized_plans(cfg, key_hash, hw, epoch, rows, [batches[i][0].shape[1] for i in which],
                                          crop, units)):
            out[i] = plan
    return out


def sized_plans(cfg: PlanConfig, key_hash: np.ndarray, hw: np.ndarray, epoch: int, rows: np.ndarray, sizes: list[int],
                crop, units: ClipUnits | None = None) -> list[BatchPlan]:
    """The BatchPlans of consecutive batches of `sizes` rows of (3, n) `rows` (index, padded, draw), one crop.
    With `units` (clips) the rows are clip units, each then expanded into its T frames (`_frames`)."""
    idx = rows[0]
    draw = rows[2] if rows[2].any() else None
    spec = cfg.degrade
    y, x, code = sample_params(key_hash[idx], hw[idx], seed=cfg.seed, epoch=epoch, crop=crop, augment=cfg.augment,
                               draw=draw, codes=spec.codes if spec is not None else None)
    columns = (idx, y, x, code, rows[1].astype(bool))
    if spec is not None:
        u = uniforms(key_hash[idx], seed=cfg.seed, epoch=epoch, count=spec.spec.uniforms, draw=draw)
        columns += (spec.draw(u), noise_keys(key_hash[idx], seed=cfg.seed, epoch=epoch, draw=draw))
    extra = {}
    if units is not None:
        columns, sizes = _frames(cfg, units, epoch, draw, columns), [s * units.clips.frames for s in sizes]
        extra = {"frames": units.clips.frames}
    # batches of one size (all but perhaps the last) as the rows of one reshape: numpy makes their views, not Python
    size = sizes[0] if sizes else 0
    whole = next((k for k, s in enumerate(sizes) if s != size), len(sizes))
    pieces = ([list(c[:whole * size].reshape(whole, size, *c.shape[1:])) for c in columns] if size
              else [[] for _ in columns])
    plans = [BatchPlan(*parts[:5], crop, *parts[5:], **extra) for parts in zip(*pieces)]
    start = whole * size
    for s in sizes[whole:]:
        parts = [c[start:start + s] for c in columns]
        plans.append(BatchPlan(*parts[:5], crop, *parts[5:], **extra))
        start += s
    return plans


def _frames(cfg: PlanConfig, units: ClipUnits, epoch: int, draw: np.ndarray | None, columns: tuple) -> tuple:
    """Columns of clip units → columns of their frames: each clip's T samples in order (`ClipUnits.frame_rows`)
    with its window, code, padding flag and degradation parameters, and a noise key of each frame's own."""
    t = units.clips.frames
    frames = units.frame_rows(columns[0], seed=cfg.seed, epoch=epoch, draw=draw).reshape(-1)
    out = (frames,) + tuple(np.repeat(c, t, axis=0) for c in columns[1:6])
    if len(columns) > 6:
        out += (frame_noise(columns[6], t),)
    return out


def plan_epoch(cfg: PlanConfig, key_hash: np.ndarray, hw: np.ndarray, epoch: int, *, deal: str = "strided",
               consumed: Consumed = (), groups: Groups = (), shards: Shards | None = None,
               units: ClipUnits | None = None) -> list[BatchPlan]:
    """This rank's batches for `epoch` (for the rest of it, when `consumed` says how it was started before).
    `groups`: the sources' (name, samples) when several sources share the index space (mixing); `shards`: the
    split's shard structure (the by-shard deal); `units`: clips (`cfg.clips`): `key_hash`, `hw`, `groups` and
    `shards` are then the units', and each planned clip becomes its frames' rows."""
    n = len(key_hash)
    if cfg.schedule:
        d = get_deal(deal)
        if deal == "contiguous":
            raise ConfigError("a crop/batch schedule is planned for loaders over shards (deal 'strided' or 'by_shard')")
        ws0 = consumed[0][0] if consumed else cfg.world_size
        rows = epoch_rows(cfg, n, epoch, groups, ws0, deal, shards)
        t = epoch_start_step(cfg, rows.shape[1], epoch, deal)
        batches = (_scheduled(cfg, rows, t, consumed) if d.strided else _scheduled_blocks(cfg, rows, t, consumed, d))
        return _cut(cfg, key_hash, hw, epoch, batches, units)
    rows = share_rows(cfg, n, epoch, deal=deal, consumed=consumed, groups=groups, shards=shards)
    bs, length = cfg.batch_size, rows.shape[1]
    return sized_plans(cfg, key_hash, hw, epoch, rows, [min(bs, length - s) for s in range(0, length, bs)], cfg.crop,
                       units)


def num_batches(cfg: PlanConfig, n: int, epoch: int = 0, deal: str = "strided") -> int:
    """Batches on this rank in `epoch` when it is not resumed: `len(plan_epoch(...))` without planning (the same
    for every epoch without a schedule)."""
    d, rows = get_deal(deal), cfg.epoch_length(n)
    if cfg.schedule:
        return _epoch_steps(cfg, rows, epoch_start_step(cfg, rows, epoch, deal), d)
    if cfg.last_batch == LastBatch.DROP:
        return (rows // cfg.world_size) // cfg.batch_size
    if cfg.last_batch == LastBatch.PAD:
        return -(-rows // (cfg.world_size * cfg.batch_size))
    return -(-d.share_length(rows, cfg.rank, cfg.world_size) // cfg.batch_size)
