"""Camera raw facts in a manifest: a split's `"sensor"` entry (what each side holds: a packed Bayer mosaic in sensor
counts or a LibRaw-developed image, the cameras and CFA patterns, LibRaw's version and options, the ratio cap) and
the per-sample index columns that normalisation needs (`SensorRows`: amplification ratio, exposures, black and white
levels). Numpy only; the packer writes these, every reader takes them from here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ShardError

FIELD = "sensor"  # split field
PACKED = "bayer-rgbg"  # a Bayer mosaic packed into 4 half-resolution channels R, G, B, G; sensor counts
DEVELOPED = "developed"  # developed by LibRaw into RGB, 16 bits (no auto-brightness; the options recorded)
IMAGE = "image"  # an ordinary image (a PNG/TIFF/.npy target beside a raw input)
KINDS = (PACKED, DEVELOPED, IMAGE)

# index columns of a sensor split, one entry per sample
RATIO = "ratio"  # the input's amplification: min(target exposure / input exposure, ratio cap)
EXPOSURE = "exposure"  # [input seconds, target seconds]
LEVELS = "levels"  # the input's [black of each packed channel (4), white]
LEVELS_HIGH = "levels_high"  # the same for a packed raw target
COLUMNS = (RATIO, EXPOSURE, LEVELS)


@dataclass(frozen=True)
class SensorRows:
    """Per-sample sensor facts of a split (or of some rows of it), in index order: `ratio` float32 (n,),
    `exposure` float64 (n, 2), `levels` float32 (n, 5) (black of each packed channel, then white), `levels_high`
    the same for a packed raw target (None otherwise)."""

    ratio: np.ndarray
    exposure: np.ndarray
    levels: np.ndarray
    levels_high: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ratio)

    def take(self, index) -> "SensorRows":
        """The rows at `index` (an integer array: a batch's samples, repeats included)."""
        index = np.asarray(index, dtype=np.int64)
        return SensorRows(self.ratio[index], self.exposure[index], self.levels[index],
                          None if self.levels_high is None else self.levels_high[index])

    def as_targets(self) -> "SensorRows | None":
        """The rows of these samples read as targets only: a packed raw target's levels on both sides, ratio 1, the
        target's exposure on both sides; None where the targets are images (developed), which have no sensor counts."""
        if self.levels_high is None:
            return None
        return SensorRows(np.ones_like(self.ratio), self.exposure[:, [1, 1]], self.levels_high, self.levels_high)

    @staticmethod
    def concat(parts: list["SensorRows"]) -> "SensorRows":
        """The rows of several splits one after the other (mixed sources share one index space)."""
        highs = [p.levels_high for p in parts]
        if any(h is None for h in highs) and not all(h is None for h in highs):
            raise ShardError("mixed sources: some keep their targets as packed raw and some do not; mix sources whose "
                             "targets are of one kind")
        return SensorRows(np.concatenate([p.ratio for p in parts]), np.concatenate([p.exposure for p in parts]),
                          np.concatenate([p.levels for p in parts]),
                          None if highs[0] is None else np.concatenate(highs))


def has_sensor(entry: dict) -> bool:
    return entry.get(FIELD) is not None


def index_fields(entry: dict) -> tuple[str, ...]:
    """The index columns a split entry's shards must have for its sensor facts (none for an ordinary split)."""
    doc = entry.get(FIELD)
    if doc is None:
        return ()
    packed_target = isinstance(doc, dict) and isinstance(doc.get("high"), dict) and doc["high"].get("kind") == PACKED
    return COLUMNS + ((LEVELS_HIGH,) if packed_target else ())


def check_doc(entry: dict, where, split: str) -> None:
    """A split's "sensor" value has the fields readers rely on; else a ShardError naming the manifest and split."""
    doc = entry.get(FIELD)
    if doc is None:
        return
    try:
        if not isinstance(doc, dict):
            raise TypeError("expected an object")
        for side in ("low", "high"):
            if not isinstance(doc.get(side), dict) or doc[side].get("kind") not in KINDS:
                raise TypeError(f"{side}.kind must be one of {', '.join(KINDS)}")
        if doc["low"]["kind"] != PACKED:
            raise TypeError(f"low.kind must be {PACKED}")
        cap = doc.get("ratio_cap")
        if not isinstance(cap, (int, float)) or isinstance(cap, bool) or not cap > 0:
            raise TypeError("ratio_cap must be a positive number")
    except TypeError as exc:
        raise ShardError(f"{where}: split {split!r}: \"{FIELD}\" is malformed ({exc}); the manifest is damaged or was "
                         "edited: re-run the same `pairload pack` command to rewrite it") from None


def rows_from_columns(columns: dict[str, list], n: int, where, split: str) -> SensorRows:
    """`SensorRows` from a split's concatenated index columns (`index_fields`), checked for shape and sense."""
    try:
        ratio = np.asarray(columns[RATIO], dtype=np.float32).reshape(n)
        exposure = np.asarray(columns[EXPOSURE], dtype=np.float64).reshape(n, 2)
        levels = np.asarray(columns[LEVELS], dtype=np.float32).reshape(n, 5)
        high = columns.get(LEVELS_HIGH)
        high = None if high is None else np.asarray(high, dtype=np.float32).reshape(n, 5)
    except (TypeError, ValueError) as exc:
        raise ShardError(f"{where}: split {split!r}: the sensor columns of its index are malformed ({exc}); re-run "
                         "the same `pairload pack` command to rewrite the manifest") from None
    for name, lv in ((LEVELS, levels), (LEVELS_HIGH, high)):
        if lv is not None and n and not (lv[:, :4] < lv[:, 4:5]).all():
            k = int(np.argmin((lv[:, :4] < lv[:, 4:5]).all(axis=1)))
            raise ShardError(f"{where}: split {split!r}: index \"{name}\" of sample {k} is {lv[k].tolist()}: every "
                             "black level must be below the white level; re-run `pairload pack`")
    if n and not (ratio > 0).all():
        raise ShardError(f"{where}: split {split!r}: index \"{RATIO}\" holds a value that is not positive; re-run "
                         "`pairload pack`")
    return SensorRows(ratio, exposure, levels, high)


def table(rows: SensorRows) -> np.ndarray:
    """The rows as one float32 (n, 8) array, or (n, 13) with a packed target's levels: ratio, input and target
    exposure, the input's 4 black levels and white level[, the target's]: what `pairload.batch.SensorBatch` views."""
    parts = [rows.ratio[:, None], rows.exposure, rows.levels]
    if rows.levels_high is not None:
        parts.append(rows.levels_high)
    return np.concatenate([np.asarray(p, dtype=np.float32) for p in parts], axis=1)
