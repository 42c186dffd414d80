"""Which fingerprints lie within a Hamming radius of each other, without comparing every pair where that is cheaper:
multi-index hashing (the 64 bits cut into bands; two fingerprints within radius R agree within R // bands bits in at
least one band, so each band's buckets are probed around each query), else a blocked scan of all pairs. Both give
exactly the pairs within the radius; where each image of the query may keep only its nearest few (`most`), both keep
the same."""

from __future__ import annotations

import itertools
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .measures import popcount

BANDS = 4  # 16-bit bands
_BAND_BITS = 64 // BANDS
_BLOCK = 1 << 18  # fingerprint pairs a scan compares at a time (in cache; numpy lets go of the GIL meanwhile)
_PROBE_SHARE = 0.01  # the bands are probed when they compare under this share of the pairs the scan would (their
# bookkeeping costs ~30× a scanned pair)


class NearPairs:
    """Pairs (i of `a`, j of `b`) within the radius, and their Hamming distance: int64 `i`, `j`, uint8 `distance`,
    sorted by i then j."""

    def __init__(self, i: np.ndarray, j: np.ndarray, distance: np.ndarray):
        order = np.lexsort((j, i))
        self.i, self.j, self.distance = i[order], j[order], distance[order]

    def __len__(self) -> int:
        return len(self.i)


def near_pairs(a, b=None, radius: int = 8, *, most: int | None = None, method: str | None = None,
               workers: int | None = None) -> NearPairs:
    """Every pair of fingerprints within `radius` bits: of `a` against `b` (uint64 arrays), or of `a` against itself
    (`b` None: pairs i < j). `most`: of each fingerprint of `a`, only its `most` nearest (all of those tied with the
    last kept), so that what is found stays proportional to `a` where fingerprints crowd (random 64-bit ones come
    within 20 bits of 0.2% of others). `method` "bands" or "scan" forces one (tests compare them); None picks the
    cheaper."""
    a = np.ascontiguousarray(a, dtype=np.uint64)
    same = b is None
    b = a if same else np.ascontiguousarray(b, dtype=np.uint64)
    if not 0 <= radius < 64:
        raise ValueError(f"radius {radius}: expected 0 to 63 bits")
    if most is not None and most < 1:
        raise ValueError(f"most {most}: expected at least 1 fingerprint")
    method = method or ("bands" if _probe_cost(len(a), len(b), radius) < _PROBE_SHARE else "scan")
    find = _by_bands if method == "bands" else _by_scan
    chunks = _chunks(len(a), max(1, _BLOCK // max(1, len(b) if method == "scan" else _probes(radius) * BANDS)))
    with ThreadPoolExecutor(workers or os.cpu_count() or 1) as pool:
        tables = _band_tables(b) if method == "bands" else None
        parts = list(pool.map(lambda span: _nearest(*find(a, b, span, radius, tables), a, b, span, radius, most),
                              chunks))
    i = np.concatenate([p[0] for p in parts] or [np.zeros(0, np.int64)])
    j = np.concatenate([p[1] for p in parts] or [np.zeros(0, np.int64)])
    if same:
        keep = i < j
        i, j = i[keep], j[keep]
    distance = popcount(a[i] ^ b[j]).astype(np.uint8)
    return NearPairs(i, j, distance)


def _chunks(n: int, size: int) -> list[tuple[int, int]]:
    return [(start, min(n, start + size)) for start in range(0, n, size)]


def _nearest(i, j, a, b, span, radius: int, most: int | None):
    """Of the pairs (i, j) a chunk found, each i's `most` nearest and those tied with them (all where `most` is
    None): every pair up to the distance at which i has `most`, counted from the distances' histogram."""
    if most is None or len(i) <= most:
        return i, j
    start, stop = span
    distance = popcount(a[i] ^ b[j]).astype(np.int64)
    counts = np.bincount((i - start) * (radius + 1) + distance, minlength=(stop - start) * (radius + 1))
    reached = counts.reshape(stop - start, radius + 1).cumsum(axis=1) >= most
    cut = np.where(reached.any(axis=1), reached.argmax(axis=1), radius)
    keep = distance <= cut[i - start]
    return i[keep], j[keep]


def _by_scan(a, b, span, radius, _tables):
    start, stop = span
    d = popcount(a[start:stop, None] ^ b[None, :])
    i, j = np.nonzero(d <= radius)
    return i.astype(np.int64) + start, j.astype(np.int64)


def _probes(radius: int) -> int:
    """Keys probed per band and query: every key within radius // BANDS bits of the query's."""
    r = radius // BANDS
    return sum(_comb(_BAND_BITS, k) for k in range(r + 1))


def _comb(n: int, k: int) -> int:
    from math import comb

    return comb(n, k)


def _probe_cost(n: int, m: int, radius: int) -> float:
    """The pairs the bands compare, as a share of the n·m a scan compares (a bucket holds m / 2^16 on average)."""
    return BANDS * _probes(radius) * (m / (1 << _BAND_BITS) + 1) / max(1, m)


def _masks(radius: int) -> np.ndarray:
    """Every band key flip within radius // BANDS bits (0 first)."""
    r = radius // BANDS
    out = [0]
    for k in range(1, r + 1):
        out += [sum(1 << bit for bit in bits) for bits in itertools.combinations(range(_BAND_BITS), k)]
    return np.array(out, dtype=np.uint64)


def _band_tables(b: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per band: b's positions sorted by their band key, and those keys."""
    tables = []
    for band in range(BANDS):
        keys = (b >> np.uint64(band * _BAND_BITS)) & np.uint64((1 << _BAND_BITS) - 1)
        order = np.argsort(keys, kind="stable")
        tables.append((order, keys[order]))
    return tables


def _by_bands(a, b, span, radius, tables):
    start, stop = span
    masks = _masks(radius)
    found_i, found_j = [], []
    for band, (order, keys) in enumerate(tables):
        q = (a[start:stop] >> np.uint64(band * _BAND_BITS)) & np.uint64((1 << _BAND_BITS) - 1)
        probe = (q[:, None] ^ masks[None, :]).ravel()
        lo = np.searchsorted(keys, probe, "left")
        hi = np.searchsorted(keys, probe, "right")
        counts = hi - lo
        total = int(counts.sum())
        if not total:
            continue
        which = np.repeat(np.arange(len(probe)), counts)
        offsets = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
        i = which // len(masks) + start
        j = order[lo[which] + offsets]
        close = popcount(a[i] ^ b[j]) <= radius
        found_i.append(i[close])
        found_j.append(j[close].astype(np.int64))
    if not found_i:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    pairs = np.unique(np.stack([np.concatenate(found_i), np.concatenate(found_j)], axis=1), axis=0)
    return pairs[:, 0], pairs[:, 1]
