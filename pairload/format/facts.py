"""What `pairload pack` measures of every sample (`pairload.audit.measures.PairFacts`), as index columns: each
image's exact hash and perceptual fingerprint, the input's shift against its target and each side's brightness. The
column table (`COLUMNS`), and `FactsColumns`, the arrays a split's index holds, or None for a pack that predates
them (an older pairload, or `--index json`)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

# (name, dtype, trailing shape) of each index column, in file order (after the split's other columns)
COLUMNS = (("low_exact", "<u8", ()), ("high_exact", "<u8", ()), ("low_fp", "<u8", ()), ("high_fp", "<u8", ()),
           ("shift", "<f4", (3,)), ("luma", "<f4", (2,)))
NAMES = tuple(name for name, _, _ in COLUMNS)
DY, DX, CONFIDENCE = 0, 1, 2  # the shift column's fields
LOW, HIGH = 0, 1  # the luma column's
# What is stored is rounded to these steps: the last bits of a measure vary with the process's floating-point state
# (OpenCV's thread count; denormals flushed to zero once torch is loaded), and must not change an index's bytes (the
# bytes of a pack do not depend on where or in how many parts it was made).
SHIFT_STEP = 1 / 256  # pixels
CONFIDENCE_STEP = 1 / 1024
LUMA_STEP = 1 / 65536


def _step(value: float, step: float) -> float:
    return round(float(value) / step) * step


class FactsColumns(NamedTuple):
    """Per sample of a split: `low_exact`, `high_exact` (uint64 (n,): `measures.exact_hash`), `low_fp`, `high_fp`
    (uint64 (n,): `measures.perceptual_hash`), `shift` (float32 (n, 3): dy, dx in input pixels, and the estimate's
    confidence in [0, 1]) and `luma` (float32 (n, 2): the input's and the target's mean luma in [0, 1]). A targets-only
    sample's input is its target: its input columns are its target's, its shift 0 with confidence 0."""

    low_exact: np.ndarray
    high_exact: np.ndarray
    low_fp: np.ndarray
    high_fp: np.ndarray
    shift: np.ndarray
    luma: np.ndarray

    @classmethod
    def of(cls, columns: dict) -> "FactsColumns | None":
        """The facts among a split's columns by name (None when it has none)."""
        if NAMES[0] not in columns:
            return None
        return cls(*(columns[name] for name in NAMES))

    @classmethod
    def empty(cls, n: int) -> "FactsColumns":
        """n samples' columns, zeroed, to be filled."""
        return cls(*(np.zeros((n, *shape), np.dtype(dtype).newbyteorder("=")) for _, dtype, shape in COLUMNS))

    @classmethod
    def concat(cls, parts: list["FactsColumns | None"]) -> "FactsColumns | None":
        """The parts one after the other (None when one of them has no facts)."""
        if not parts or any(p is None for p in parts):
            return None
        return cls(*(np.concatenate(arrays) for arrays in zip(*parts)))

    def fill(self, i: int, facts) -> None:
        """Set sample i's columns from one pair's `audit.measures.PairFacts`, rounded to the stored steps (every
        writer of these columns fills them here, so that pack and a later audit store the same values)."""
        self.low_exact[i], self.high_exact[i] = facts.low_exact, facts.high_exact
        self.low_fp[i], self.high_fp[i] = facts.low_fp, facts.high_fp
        self.shift[i] = (_step(facts.dy, SHIFT_STEP), _step(facts.dx, SHIFT_STEP),
                         _step(facts.shift_confidence, CONFIDENCE_STEP))
        self.luma[i] = _step(facts.low_luma, LUMA_STEP), _step(facts.high_luma, LUMA_STEP)

    def take(self, indices) -> "FactsColumns":
        rows = np.asarray(indices, dtype=np.int64)
        return FactsColumns(*(column[rows] for column in self))

    def as_targets(self) -> "FactsColumns":
        """The facts of the same samples read as targets only: each input is its target."""
        return FactsColumns(self.high_exact, self.high_exact, self.high_fp, self.high_fp,
                            np.broadcast_to(np.zeros(3, dtype=self.shift.dtype), self.shift.shape),
                            np.broadcast_to(self.luma[:, HIGH:], (len(self.luma), 2)))  # views, not copies

    def shift_px(self) -> np.ndarray:
        """float64 (n,): each sample's shift in input pixels, |(dy, dx)|."""
        return np.hypot(self.shift[:, DY].astype(np.float64), self.shift[:, DX].astype(np.float64))

    def columns(self) -> dict[str, np.ndarray]:
        return dict(zip(NAMES, self))
