"""Mixed epochs: how many draws each source gives an epoch (weights, largest remainder) and how the sources'
rows are interleaved so that every rank's stretch of the epoch holds them in proportion. Numpy only."""

from __future__ import annotations

import numpy as np


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


def source_counts(groups, weights: tuple[tuple[str, float], ...], epoch_size: int) -> np.ndarray:
    """Draws each source gives a mixed epoch: by the weights, or by the sources' sizes when none are given."""
    by_name = dict(weights) if weights else {name: n for name, n in groups}
    return mix_counts([n for _, n in groups], [by_name[name] for name, _ in groups], epoch_size)


def interleave(counts: np.ndarray, unit: int) -> np.ndarray:
    """Source number of each row of a mixed epoch (`labels_at` of every position): runs of `unit` rows (one per
    rank) of one source, the runs of every source spread evenly over the epoch, so any `unit`-strided deal gives
    every rank the sources in proportion in every stretch of its share; the few rows left over (fewer than `unit`
    per source) close it. (A contiguous deal uses unit 1: each rank's block then holds a contiguous run of every
    source's rows.)"""
    counts = np.asarray(counts, dtype=np.int64)
    return labels_at(counts, unit, np.arange(int(counts.sum()), dtype=np.int64))[0]


# The runs of source s sit at keys (j + 0.5) / runs[s], j = 0 .. runs[s] - 1 (float64, as numpy computes them); the
# epoch's runs are all sources' runs sorted by key, ties in source order. Where the m-th run of that order is, and
# which, is found from m alone: a bisection over the keys' float64 bit patterns counts the runs before it.
_GAP = 4096  # order positions asked further apart than this are worked out separately (a wrapped pad, a rest)


def _key(j, runs) -> np.ndarray:
    return (np.asarray(j, dtype=np.float64) + 0.5) / np.maximum(np.asarray(runs, dtype=np.float64), 1.0)


def _below(runs: np.ndarray, v: float) -> np.ndarray:
    """Per source: how many of its runs have a key < v."""
    est = np.clip(np.ceil(v * runs.astype(np.float64) - 0.5), 0, runs).astype(np.int64)
    while True:  # the float estimate is off by one at most; made exact against the keys themselves
        down = (est > 0) & (_key(est - 1, runs) >= v)
        up = (est < runs) & (_key(est, runs) < v)
        if not (down.any() or up.any()):
            return est
        est += up.astype(np.int64) - down.astype(np.int64)


def _before(runs: np.ndarray, m: int) -> np.ndarray:
    """Per source: its runs among the first `m` of the epoch's order."""
    total = int(runs.sum())
    if m <= 0:
        return np.zeros_like(runs)
    if m >= total:
        return runs.copy()
    lo, hi = 0, int(np.float64(1.0).view(np.int64))  # every key is in (0, 1)
    while lo < hi:  # the largest key value v with fewer than or exactly m runs below it
        mid = (lo + hi + 1) // 2
        if int(_below(runs, float(np.int64(mid).view(np.float64))).sum()) <= m:
            lo = mid
        else:
            hi = mid - 1
    v = float(np.int64(lo).view(np.float64))
    below = _below(runs, v)
    at_v = np.flatnonzero(_below(runs, float(np.nextafter(v, 2.0))) > below)  # sources with a run keyed v
    below[at_v[: m - int(below.sum())]] += 1  # ties go in source order
    return below


def _order_at(runs: np.ndarray, m0: int, m1: int) -> tuple[np.ndarray, np.ndarray]:
    """(source, its run number j) of order positions [m0, m1)."""
    lo = _before(runs, m0)
    span = m1 - m0
    js = [np.arange(a, min(int(r), a + span), dtype=np.int64) for a, r in zip(lo.tolist(), runs.tolist())]
    src = np.concatenate([np.full(len(j), s, dtype=np.int64) for s, j in enumerate(js)])
    j = np.concatenate(js)
    first = np.lexsort((src, _key(j, runs[src])))[:span]
    return src[first], j[first]


def labels_at(counts: np.ndarray, unit: int, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(source, occurrence) of each of `positions` of a mixed epoch whose sources give `counts` draws: which source
    the row belongs to (`interleave`) and how many rows of that source come before it."""
    counts = np.asarray(counts, dtype=np.int64)
    q = np.asarray(positions, dtype=np.int64)
    runs, rest = counts // unit, counts % unit
    main_rows = int(runs.sum()) * unit
    src, occ = np.empty(len(q), dtype=np.int64), np.empty(len(q), dtype=np.int64)
    main = q < main_rows
    m = q[main] // unit
    if len(m):
        got_s, got_j = np.empty(len(m), dtype=np.int64), np.empty(len(m), dtype=np.int64)
        order = np.argsort(m, kind="stable")
        sm = m[order]
        cuts = np.flatnonzero(np.diff(sm) > _GAP) + 1
        for a, b in zip(np.concatenate([[0], cuts]).tolist(), np.concatenate([cuts, [len(sm)]]).tolist()):
            s, j = _order_at(runs, int(sm[a]), int(sm[b - 1]) + 1)
            got_s[order[a:b]], got_j[order[a:b]] = s[sm[a:b] - sm[a]], j[sm[a:b] - sm[a]]
        src[main], occ[main] = got_s, got_j * unit + q[main] % unit
    if not main.all():
        i = q[~main] - main_rows
        ends = np.cumsum(rest)
        s = np.searchsorted(ends, i, side="right")
        src[~main], occ[~main] = s, runs[s] * unit + i - (ends - rest)[s]
    return src, occ
