"""The distinct image sizes of a split's samples and how many have each (`size_counts`), a chunk of rows at a time:
the (n, 2) size column of a 10^9-sample split is neither held whole nor sorted row-wise (numpy's unique along an
axis sorts rows as records: 18 s for 10^7 rows, against under a second as one int64 key a row), and a mapped column
is asked for a chunk ahead (a large index is mapped without read-ahead). Numpy only."""

from __future__ import annotations

import numpy as np

from .columns import will_read

CHUNK = 1 << 22  # rows read at a time: 64 MB of int64 sizes


def size_counts(hw, chunk: int = CHUNK) -> tuple[np.ndarray, np.ndarray, int]:
    """(sizes, counts, pixels): each distinct (h, w) row of `hw` (an (n, 2) array or a column read by rows, sorted by
    h then w), how many rows have it, and the sum of h × w over all rows."""
    found: dict[int, int] = {}
    pixels = 0
    n = len(hw)
    if n and isinstance(hw, np.ndarray):
        will_read(hw[:chunk])
    for a in range(0, n, chunk):
        if a + chunk < n and isinstance(hw, np.ndarray):  # a large index is mapped without read-ahead: ask for the
            will_read(hw[a + chunk:a + 2 * chunk])  # next chunk while this one is counted
        part = np.asarray(hw[a:a + chunk], dtype=np.int64).reshape(-1, 2)
        pixels += int((part[:, 0] * part[:, 1]).sum())
        keys, counts = np.unique((part[:, 0] << 32) | part[:, 1], return_counts=True)
        for k, c in zip(keys.tolist(), counts.tolist()):
            found[k] = found.get(k, 0) + c
    keys = np.array(sorted(found), dtype=np.int64)
    sizes = np.stack([keys >> 32, keys & 0xFFFFFFFF], axis=1) if len(keys) else np.zeros((0, 2), np.int64)
    return sizes, np.array([found[k] for k in keys.tolist()], dtype=np.int64), pixels
