"""An epoch's batches for one rank, from positions: the rows of the whole epoch (repeats, mixing: `EpochRows`), the
last-batch rule, the deal to ranks, resuming an epoch started on another world size (`consumed`) and crop/batch
schedules, each a view of positions (`plan.positions`), and the batches of the rank's run laid out over them
(`Segment`s). `plan_run` gives the run (`plan.run.Run`, planned a block of batches at a time); `plan_epoch` is the
same run as a list, and `num_batches` is its length without planning. Nothing here is of the split's size. Numpy
only."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from .clips import ClipUnits
from .config import BatchPlan, Groups, LastBatch, PlanConfig
from .deals import Deal, Shards, get_deal
from .mix import labels_at, source_counts
from .positions import Cut, Stride, View, Wrap, rows_of
from .run import Run, Segment

Consumed = tuple[tuple[int, int], ...]  # ((world_size, batches per rank), ...): how an epoch was started before
MIX_SALT = 0x313  # salts a mixed source's orders (with its number): independent of a plain epoch's


@dataclass(frozen=True)
class EpochRows:
    """The whole epoch's rows (sample index, draw), the same on every rank, before padding and dealing. Plain: the
    deal's order, `repeats` times (draw r: the r-th pass, each its own order). Mixed (`weights` or `epoch_size`):
    `epoch_size` draws, the sources interleaved (`mix.labels_at`); source s reads its own endless stream of orders
    (cycle k: the deal's order of its samples, seeded by (seed, s, k)) and epoch e takes positions [e·c_s,
    (e+1)·c_s) of it, so a source's samples are used up before any is drawn again, across epochs; the draw number is
    the cycle (a sample drawn again gets a fresh crop and flip)."""

    cfg: PlanConfig
    n: int
    epoch: int
    groups: Groups
    unit: int
    deal: Deal
    shards: Shards | None

    def __post_init__(self) -> None:
        none = np.zeros(0, dtype=np.int64)  # the sources' orders checked now (shard sizes), not at their first row
        for offset, n in self._sources():
            self._order(n, self.epoch, (), self._part(offset, n), none)

    def _sources(self):
        offset = 0
        for _, n in (self.groups or (("", self.n),)) if self.cfg.mixed else (("", self.n),):
            yield offset, n
            offset += n

    def _part(self, offset: int, n: int) -> Shards | None:
        if self.shards is None or not self.cfg.mixed:
            return self.shards
        return self.shards.part(offset, offset + n)

    @property
    def length(self) -> int:
        return self.cfg.epoch_length(self.n)

    def _order(self, n: int, cycle: int, salt: tuple, shards, positions: np.ndarray) -> np.ndarray:
        return self.deal.order(n, seed=self.cfg.seed, epoch=cycle, shuffle=self.cfg.shuffle, salt=salt,
                               shards=shards, positions=positions)

    def at(self, pos: np.ndarray):
        index, draw = np.empty(len(pos), dtype=np.int64), np.empty(len(pos), dtype=np.int64)
        if not self.cfg.mixed:
            if not len(pos) or int(pos.max()) < self.n:  # one pass (no repeats): one order
                index[:] = self._order(self.n, self.epoch, (), self.shards, pos)
                return index, np.zeros(len(pos), dtype=bool), np.zeros(len(pos), dtype=np.int64)
            r, within = np.divmod(pos, self.n)
            for k in np.unique(r).tolist():
                sel = r == k
                index[sel] = self._order(self.n, self.epoch, (k,) if k else (), self.shards, within[sel])
            return index, np.zeros(len(pos), dtype=bool), r
        groups = self.groups or (("", self.n),)
        counts = source_counts(groups, self.cfg.weights, self.length)
        src, occ = labels_at(counts, self.unit, pos)
        for s, (offset, n) in enumerate(self._sources()):
            sel = np.flatnonzero(src == s)
            if len(sel):
                part = self._part(offset, n)
                cycle, within = np.divmod(self.epoch * int(counts[s]) + occ[sel], n)
                for k in np.unique(cycle).tolist():
                    on = cycle == k
                    index[sel[on]] = offset + self._order(n, k, (MIX_SALT, s), part, within[on])
                draw[sel] = cycle
        return index, np.zeros(len(pos), dtype=bool), draw


def epoch_view(cfg: PlanConfig, n: int, epoch: int, groups: Groups = (), world_size: int | None = None,
               deal: str = "strided", shards: Shards | None = None) -> EpochRows:
    d = get_deal(deal)
    return EpochRows(cfg, n, epoch, tuple(groups), d.unit(world_size or cfg.world_size), d, shards)


def epoch_rows(cfg: PlanConfig, n: int, epoch: int, groups: Groups = (), world_size: int | None = None,
               deal: str = "strided", shards: Shards | None = None) -> np.ndarray:
    """(2, L) rows (sample index, draw) of the whole epoch (`EpochRows`), materialised (for tests and tools)."""
    return rows_of(epoch_view(cfg, n, epoch, groups, world_size, deal, shards))[[0, 2]]


def _padded_total(length: int, world_size: int, batch_size: int) -> int:
    return -(-length // (world_size * batch_size)) * world_size * batch_size


def stream_view(cfg: PlanConfig, n: int, epoch: int, groups: Groups = (), world_size: int | None = None,
                deal: str = "strided", shards: Shards | None = None) -> View:
    """The epoch's rows wrapped around for 'pad' until every rank gets the same number of whole batches."""
    ws = world_size or cfg.world_size
    rows = epoch_view(cfg, n, epoch, groups, ws, deal, shards)
    if cfg.last_batch == LastBatch.PAD and rows.length:
        return Wrap(rows, _padded_total(rows.length, ws, cfg.batch_size))
    return rows


def epoch_stream(cfg: PlanConfig, n: int, epoch: int, groups: Groups = (), world_size: int | None = None,
                 deal: str = "strided", shards: Shards | None = None) -> np.ndarray:
    """(3, L) rows (index, padded, draw) of the whole epoch before it is dealt to ranks (`stream_view`)."""
    return rows_of(stream_view(cfg, n, epoch, groups, world_size, deal, shards))


def _even(rows: View, world_size: int, batch_size: int, last_batch: str, resumed: bool) -> View:
    """The stream cut (drop) or wrapped (pad) so that every rank gets the same number of batches.

    drop: floor(n / world_size) samples per rank, rounded down to whole batches; in an epoch resumed mid-way the
    rest is only cut to equal shares, so each rank's last batch may be short (never more than world_size - 1
    samples are skipped beyond what the uninterrupted epoch skipped). pad: a resumed epoch wraps its rest again."""
    length = rows.length
    if last_batch == LastBatch.DROP:
        per = length // world_size if resumed else (length // world_size) // batch_size * batch_size
        return Cut(rows, 0, per * world_size)
    if last_batch == LastBatch.PAD and resumed:
        total = _padded_total(length, world_size, batch_size)
        if total > length and length:
            return Wrap(rows, total)
    return rows


def share_view(cfg: PlanConfig, n: int, epoch: int, *, rank: int | None = None, deal: str = "strided",
               consumed: Consumed = (), groups: Groups = (), shards: Shards | None = None) -> View:
    """This rank's part of the epoch, batch-aligned by `last_batch` (see `rank_share`). Not for schedules."""
    d = get_deal(deal)
    ws0 = consumed[0][0] if consumed else cfg.world_size
    rows = stream_view(cfg, n, epoch, groups, ws0, deal, shards)
    resumed = False
    for ws, batches in consumed:
        rows = _even(rows, ws, cfg.batch_size, cfg.last_batch, resumed)
        rows = d.after(rows, ws, batches * cfg.batch_size)
        resumed = True
    rows = _even(rows, cfg.world_size, cfg.batch_size, cfg.last_batch, resumed)
    return d.take(rows, cfg.rank if rank is None else rank, cfg.world_size)


def share_rows(cfg: PlanConfig, n: int, epoch: int, *, rank: int | None = None, deal: str = "strided",
               consumed: Consumed = (), groups: Groups = (), shards: Shards | None = None) -> np.ndarray:
    """(3, L) rows (index, padded, draw) of this rank's part of the epoch (`share_view`), materialised."""
    return rows_of(share_view(cfg, n, epoch, rank=rank, deal=deal, consumed=consumed, groups=groups, shards=shards))


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

def _phase_spans(cfg: PlanConfig):
    """(first step, end step or None, phase) of each phase; the first phase also covers every step before it."""
    phases = cfg.phases
    for i, st in enumerate(phases):
        yield (st.step if i else None), (phases[i + 1].step if i + 1 < len(phases) else None), st


def _rows_in_steps(cfg: PlanConfig, t: int, k: int) -> int:
    """Rows per rank that steps t .. t+k-1 take (each its phase's batch size)."""
    total = 0
    for lo, hi, st in _phase_spans(cfg):
        a, b = t if lo is None else max(t, lo), t + k if hi is None else min(t + k, hi)
        total += max(0, b - a) * st.batch_size
    return total


def _walk(cfg: PlanConfig, rows: int, t: int, world_size: int, rank: int, last_batch: str) -> list[Segment]:
    """The batches an epoch of `rows` rows gives from global step `t` on: global batches of world_size × the phase's
    batch size in turn, and the rank's share of each (a short last one by `last_batch`), as segments."""
    out = []
    for _, end, st in _phase_spans(cfg):
        if end is not None and end <= t:
            continue
        g = world_size * st.batch_size
        full = rows // g if end is None else min(rows // g, end - t)
        if full:
            out.append(Segment(full, st.batch_size, st.crop))
        t, rows = t + full, rows - full * g
        if rows and (end is None or t < end):  # the epoch's last, short global batch
            if last_batch == LastBatch.PARTIAL:
                mine = len(range(rank, rows, world_size))
                if mine:
                    out.append(Segment(1, mine, st.crop))
            elif last_batch == LastBatch.PAD:
                out.append(Segment(1, st.batch_size, st.crop))  # wrapped round to the epoch's start, flagged
            break
        if not rows:
            break
    return out


def whole_steps(cfg: PlanConfig, rows: int, start: int, world_size: int) -> int:
    """Batches per rank an epoch of `rows` rows gives when it starts at global step `start` (with a short last
    batch unless `last_batch` is 'drop')."""
    t = start
    for _, end, st in _phase_spans(cfg):
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


def _scheduled(cfg: PlanConfig, rows: View, t: int, consumed: Consumed) -> tuple[View, list[Segment]]:
    """Strided deals: global batches of world_size × the phase's batch size, taken in turn from the epoch's rows
    (past what `consumed` took) and dealt strided, each with its phase's crop. The rank's rows of every batch are
    one strided view: batch i's are the next g_i of it."""
    start = 0
    for cws, k in consumed:
        start += cws * _rows_in_steps(cfg, t, k)
        t += k
    ws, left = cfg.world_size, max(0, rows.length - start)
    segments = _walk(cfg, left, t, ws, cfg.rank, cfg.last_batch)
    span = start + ws * (sum(s.batches * s.rows for s in segments) + 1)
    return Stride(Cut(Wrap(rows, span), start, span - start), cfg.rank, ws), segments


def _scheduled_blocks(cfg: PlanConfig, rows: View, t: int, consumed: Consumed,
                      deal: Deal) -> tuple[View, list[Segment]]:
    """Block deals ('drop' only): each rank's own block of the epoch, cut into the phases' batches in turn; every
    rank has as many steps (its block holds floor(rows / world_size))."""
    if cfg.last_batch != LastBatch.DROP:
        raise ConfigError(f"a crop/batch schedule with last_batch={cfg.last_batch.value!r} and the {deal.name} deal: "
                          "it is planned with 'drop' only (every rank the same shapes at every step)")
    for cws, k in consumed:
        taken = _rows_in_steps(cfg, t, k)
        t += k
        rows = deal.after(Cut(rows, 0, rows.length // cws * cws), cws, taken)
    per = rows.length // cfg.world_size
    return Cut(rows, cfg.rank * per, per), _walk(cfg, per, t, 1, 0, LastBatch.DROP)


# ---------------------------------------------------------------------------------------------------------- plans

def plan_run(cfg: PlanConfig, key_hash: np.ndarray, hw: np.ndarray, epoch: int, *, deal: str = "strided",
             consumed: Consumed = (), groups: Groups = (), shards: Shards | None = None,
             units: ClipUnits | None = None) -> Run:
    """This rank's batches for `epoch` (for the rest of it, when `consumed` says how it was started before), as a
    `Run` that plans them a block at a time. `groups`: the sources' (name, samples) when several sources share the
    index space (mixing); `shards`: the split's shard structure (the by-shard deal); `units`: clips (`cfg.clips`):
    `key_hash`, `hw`, `groups` and `shards` are then the units', and each planned clip becomes its frames' rows."""
    n = len(key_hash)
    if cfg.schedule:
        d = get_deal(deal)
        if deal == "contiguous":
            raise ConfigError("a crop/batch schedule is planned for loaders over shards (deal 'strided' or 'by_shard')")
        ws0 = consumed[0][0] if consumed else cfg.world_size
        rows = epoch_view(cfg, n, epoch, groups, ws0, deal, shards)
        t = epoch_start_step(cfg, rows.length, epoch, deal)
        view, segments = (_scheduled(cfg, rows, t, consumed) if d.strided
                          else _scheduled_blocks(cfg, rows, t, consumed, d))
    else:
        view = share_view(cfg, n, epoch, deal=deal, consumed=consumed, groups=groups, shards=shards)
        bs, length = cfg.batch_size, view.length
        segments = [Segment(length // bs, bs, cfg.crop)] if length >= bs else []
        if length % bs:
            segments.append(Segment(1, length % bs, cfg.crop))
    return Run(cfg, key_hash, hw, epoch, view, tuple(segments), units)


def plan_epoch(cfg: PlanConfig, key_hash: np.ndarray, hw: np.ndarray, epoch: int, **kw) -> list[BatchPlan]:
    """`plan_run`'s batches as a list (every block planned: for tests and small splits)."""
    return list(plan_run(cfg, key_hash, hw, epoch, **kw))


def num_batches(cfg: PlanConfig, n: int, epoch: int = 0, deal: str = "strided") -> int:
    """Batches on this rank in `epoch` when it is not resumed: `len(plan_run(...))` without planning (the same
    for every epoch without a schedule)."""
    d, rows = get_deal(deal), cfg.epoch_length(n)
    if cfg.schedule:
        return _epoch_steps(cfg, rows, epoch_start_step(cfg, rows, epoch, deal), d)
    if cfg.last_batch == LastBatch.DROP:
        return (rows // cfg.world_size) // cfg.batch_size
    if cfg.last_batch == LastBatch.PAD:
        return -(-rows // (cfg.world_size * cfg.batch_size))
    return -(-d.share_length(rows, cfg.rank, cfg.world_size) // cfg.batch_size)
