"""`bench-loaders`' rows by name: every kind of `pairload.kinds` (a kind's variants right after it), then the
baselines. The rows' options live in `entries` (a new kind is benchmarked as it is, with no entry there). Torch-free:
the CLI reads these names for --loaders without importing torch."""

from __future__ import annotations

from ..kinds import KIND_LIST

BENCH_VARIANTS = {"ram": ("ram-workers", "ram-resident"), "wds": ("wds-workers",)}
BASELINES = ("cv2-disk", "naive-pil")
BENCH_ENTRIES = tuple(name for k in KIND_LIST for name in (k.name, *BENCH_VARIANTS.get(k.name, ()))) + BASELINES
