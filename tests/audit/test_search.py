"""The candidate search (`pairload.audit.search`): multi-index hashing finds exactly the pairs a scan of all pairs
finds, on random fingerprints with near copies planted at every distance."""

from __future__ import annotations

import numpy as np
import pytest

from pairload.audit.measures import hamming
from pairload.audit.search import near_pairs


def planted(n: int, m: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2 ** 64, n, dtype=np.uint64, endpoint=False)
    b = rng.integers(0, 2 ** 64, m, dtype=np.uint64, endpoint=False)
    for k in range(min(n, m) // 2):  # b[k]: a[k] with k % 24 bits flipped
        bits = rng.choice(64, k % 24, replace=False)
        b[k] = a[k] ^ np.uint64(sum(1 << int(t) for t in bits))
    return a, b


@pytest.mark.parametrize("radius", [0, 3, 7, 12, 16])
def test_bands_find_exactly_what_a_scan_finds(radius):
    a, b = planted(600, 3000)
    scan = near_pairs(a, b, radius, method="scan")
    bands = near_pairs(a, b, radius, method="bands")
    assert np.array_equal(scan.i, bands.i) and np.array_equal(scan.j, bands.j)
    assert np.array_equal(scan.distance, hamming(a[scan.i], b[scan.j]))
    assert (scan.distance <= radius).all()
    assert {(k, k) for k in range(300) if k % 24 <= radius} <= set(zip(scan.i.tolist(), scan.j.tolist()))
    assert len(near_pairs(a, b, radius)) == len(scan)  # whichever it picks


def test_one_set_against_itself_gives_each_pair_once():
    a, b = planted(200, 400, seed=1)
    both = np.concatenate([a, b])
    for method in ("scan", "bands"):
        found = near_pairs(both, None, 9, method=method)
        assert (found.i < found.j).all()
        assert {(k, 200 + k) for k in range(100) if k % 24 <= 9} <= set(zip(found.i.tolist(), found.j.tolist()))


def test_most_keeps_each_fingerprints_nearest_and_their_ties():
    a, b = planted(300, 4000, seed=2)
    radius, most = 22, 5  # random fingerprints crowd within 22 bits: dozens each
    every = near_pairs(a, b, radius, method="scan")
    expected = set()
    for i in range(len(a)):
        d = np.sort(every.distance[every.i == i])
        cut = d[most - 1] if len(d) >= most else radius
        expected |= {(i, int(j)) for j, dj in zip(every.j[every.i == i], every.distance[every.i == i]) if dj <= cut}
    for method in ("scan", "bands"):
        kept = near_pairs(a, b, radius, most=most, method=method)
        assert set(zip(kept.i.tolist(), kept.j.tolist())) == expected
    assert len(expected) < len(every) / 4
    assert {(k, k) for k in range(150) if k % 24 <= 12} <= expected  # near copies are never crowded out
