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
    """Source number of each row of a mixed epoch: runs of `unit` rows (one per rank) of one source, the runs of
    every source spread evenly over the epoch, so any `unit`-strided deal gives every rank the sources in
    proportion in every stretch of its share; the few rows left over (fewer than `unit` per source) close it.
    (A contiguous deal uses unit 1: each rank's block then holds a contiguous run of every source's rows.)"""
    runs = counts // unit
    pos = np.concatenate([(np.arange(r) + 0.5) / r for r in runs if r] or [np.zeros(0)])
    src = np.concatenate([np.full(r, s) for s, r in enumerate(runs) if r] or [np.zeros(0, dtype=np.int64)])
    order = src[np.argsort(pos, kind="stable")]
    rest = np.concatenate([np.full(int(c % unit), s) for s, c in enumerate(counts)])
    return np.concatenate([np.repeat(order, unit), rest]).astype(np.int64)
