"""Making inputs on the host: the one numpy path every host executor takes (the worker processes after cutting a
window, the loading process for a batch that stays on the CPU, a DALI feed of host arrays). Numpy only: worker
processes import it."""

from __future__ import annotations

import numpy as np


def make_inputs(degrade, high: np.ndarray, low: np.ndarray, table: np.ndarray, keys: np.ndarray,
                code: np.ndarray | None, apply: np.ndarray, levels: np.ndarray | None = None) -> None:
    """Write the inputs `low` (n, h, w, C) made from the targets `high` by `degrade` (a `Degradation`) for the rows
    `apply` marks: `table` (n, columns) their parameters, `keys` (n,) their noise keys (uint64 bits in any 8-byte
    type), `code` (n,) the orientation each window was cut in (None: not yet oriented, so the noise is drawn where it
    lies), `levels` (n, 5) the camera raw levels of a model that needs them."""
    rows = np.flatnonzero(apply)
    if not len(rows):
        return
    codes = np.zeros(len(rows), dtype=np.int32) if code is None else np.asarray(code)[rows]
    low[rows] = degrade.spec.numpy(high[rows], table[rows], np.asarray(keys)[rows].view(np.uint64), codes,
                                   None if levels is None else levels[rows], degrade.extra)
