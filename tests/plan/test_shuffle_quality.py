"""The epoch's order is a good shuffle (`plan.bijection` through `plan.draws.epoch_order`): every position equally
likely for every sample, a sample's positions in two epochs (or under two seeds) independent, neighbours in the index
far apart; and these checks catch an order that merely rotates the index, which is uniform but no shuffle."""

from __future__ import annotations

import numpy as np
import pytest

from pairload.plan.bijection import order_key, permute
from pairload.plan.draws import epoch_order

chi2 = pytest.importorskip("scipy.stats").chi2
P = 1e-4  # a real shuffle fails a check once in 10,000 runs (the seeds are fixed: never, in fact)


def positions(order, n: int, seed: int, epoch: int) -> np.ndarray:
    """Each sample's position in the order."""
    where = np.empty(n, dtype=np.int64)
    where[order(n, seed, epoch)] = np.arange(n)
    return where


def chi_square_fails(counts: np.ndarray) -> bool:
    """Whether counts expected equal in every cell are too uneven to be chance (at P)."""
    expected = counts.sum() / counts.size
    stat = float(((counts - expected) ** 2 / expected).sum())
    return stat > chi2.ppf(1 - P, counts.size - 1)


def uniform_positions_fail(order) -> bool:
    """Over 3,000 seeds, each of 16 samples' position among 8 buckets of a 64-sample split."""
    n, buckets = 64, 8
    counts = np.zeros((16, buckets))
    for seed in range(3000):
        counts[np.arange(16), positions(order, n, seed, 0)[:16] * buckets // n] += 1
    return any(chi_square_fails(row) for row in counts)


def dependent_fail(first, second) -> bool:
    """A sample's position in one order (n -> order) against another: the 8×8 table of their buckets over 20,000
    samples is as even as independent positions make it."""
    n, buckets = 20_000, 8
    a, b = (np.argsort(order(n)) * buckets // n for order in (first, second))
    return chi_square_fails(np.bincount(a * buckets + b, minlength=buckets * buckets).reshape(buckets, buckets))


def next_epoch_fail(order) -> bool:
    return dependent_fail(lambda n: order(n, 7, 3), lambda n: order(n, 7, 4))


def close_neighbours_fail(order) -> bool:
    """Samples next to each other in the index land within 1% of the epoch of each other about 2% of the time."""
    n = 20_000
    where = positions(order, n, 11, 0)
    gap = np.abs(np.diff(where))
    near = float(np.mean(np.minimum(gap, n - gap) < n // 100))
    return not 0.01 < near < 0.03


def real(n: int, seed: int, epoch: int) -> np.ndarray:
    return epoch_order(n, seed=seed, epoch=epoch)


def rotation(n: int, seed: int, epoch: int) -> np.ndarray:
    """The index rotated by an offset drawn from the seed and epoch: every position equally likely, no shuffle."""
    return np.roll(np.arange(n), order_key(seed, epoch) % n)


def test_the_epochs_order_is_a_bijection_at_any_size_and_positions_alone_give_it():
    for n in (1, 2, 3, 5, 64, 65, 4097):
        whole = epoch_order(n, seed=3, epoch=1)
        assert sorted(whole.tolist()) == list(range(n))
        some = np.array([n - 1, 0, n // 2])
        assert epoch_order(n, seed=3, epoch=1, positions=some).tolist() == whole[some].tolist()
    assert epoch_order(10, seed=3, epoch=1, shuffle=False).tolist() == list(range(10))
    big = permute(np.array([0, 1, 10**9 - 1]), 10**9, order_key(0, 0))  # positions of a billion: no permutation made
    assert len(set(big.tolist())) == 3 and big.max() < 10**9


def test_every_position_is_equally_likely():
    assert not uniform_positions_fail(real)


def test_positions_are_independent_across_epochs_seeds_and_repeats():
    assert not next_epoch_fail(real)
    assert not dependent_fail(lambda n: real(n, 7, 3), lambda n: real(n, 8, 3))
    assert not dependent_fail(lambda n: real(n, 7, 3),  # a repeat's order against the epoch's own
                              lambda n: epoch_order(n, seed=7, epoch=3, salt=(1,)))


def test_neighbours_in_the_index_land_far_apart():
    assert not close_neighbours_fail(real)


def test_the_checks_catch_an_order_that_only_rotates():
    assert not uniform_positions_fail(rotation)  # uniform: what the other checks are for
    assert next_epoch_fail(rotation)
    assert close_neighbours_fail(rotation)
