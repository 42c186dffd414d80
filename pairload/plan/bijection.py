"""The epoch's order as a keyed bijection of positions: `permute(positions, n, key)` is the sample index at each
position of [0, n), computed for any positions alone, in O(1) memory per position. No permutation of n need ever be
materialised, so a rank can plan the batches it runs from their positions, whatever n is.

A balanced Feistel network over the smallest even power of two ≥ n (6 rounds, each mixing one half with the round's
key by SplitMix64's multiply-xorshift steps) is a bijection of that domain; positions whose image falls outside
[0, n) walk the cycle on (apply the network again) until they land inside, which keeps it a bijection of [0, n)
(cycle walking). The domain is under 4n, so a position takes under 4 applications on average. Numpy only.
"""

from __future__ import annotations

import numpy as np

from ..splitmix import M64, MUL1, MUL2, splitmix_int

ROUNDS = 6  # Luby-Rackoff: 4 rounds of a pseudo-random function give a pseudo-random permutation; 6 for margin


def order_key(seed: int, epoch: int, salt: tuple[int, ...] = ()) -> int:
    """The key of one epoch's order (`salt`: another, independent order of the same epoch, e.g. a repeat's)."""
    key = splitmix_int((seed & 0xFFFFFFFF) << 32 ^ 0x5EED)
    for part in (epoch, *salt):
        key = splitmix_int((key + (int(part) & M64)) & M64)
    return key


def permute(positions: np.ndarray, n: int, key: int) -> np.ndarray:
    """int64: the sample index at each of `positions` (int64 in [0, n)) in the order `key` names; a bijection of
    [0, n) for every key."""
    pos = np.asarray(positions, dtype=np.int64)
    if n <= 1 or not pos.size:
        return np.zeros_like(pos)
    half = max(1, ((n - 1).bit_length() + 1) // 2)  # bits of each half: 4**half >= n
    keys = _round_keys(key)
    out = _feistel(pos.astype(np.uint64), half, keys)
    outside = np.flatnonzero(out >= np.uint64(n))
    while len(outside):  # cycle walking: each step moves a position along its cycle of the domain's permutation
        walked = _feistel(out[outside], half, keys)
        out[outside] = walked
        outside = outside[walked >= np.uint64(n)]
    return out.astype(np.int64)


def _round_keys(key: int) -> list[np.uint64]:
    keys, k = [], key & M64
    for _ in range(ROUNDS):
        k = splitmix_int(k)
        keys.append(np.uint64(k))
    return keys


def _feistel(x: np.ndarray, half: int, keys: list[np.uint64]) -> np.ndarray:
    """The Feistel network on `2 * half`-bit values (uint64 arrays; a new array). Each round's function is two
    multiply-xorshift steps of SplitMix64's finaliser over the right half xor the round's key, in place."""
    mask, shift = np.uint64((1 << half) - 1), np.uint64(half)
    left, right = x >> shift, x & mask
    for k in keys:
        f = right ^ k
        f *= _MUL1
        f ^= f >> _SHIFT1
        f *= _MUL2
        f ^= f >> _SHIFT2
        f &= mask
        f ^= left
        left, right = right, f
    return left << shift | right


_MUL1, _MUL2 = np.uint64(MUL1), np.uint64(MUL2)
_SHIFT1, _SHIFT2 = np.uint64(27), np.uint64(31)
