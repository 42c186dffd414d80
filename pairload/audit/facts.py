"""A split's facts (`format.facts.FactsColumns`): read from its index where `pairload pack` stored them, else
measured in place (`measures.pair_facts` over every sample) and kept in a sidecar file beside the index,
`<split>.facts.npz`, keyed by the index's sha256 so that a repack measures again."""

from __future__ import annotations

import hashlib
import io
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

from ..format.atomic import write_bytes_atomic
from ..format.facts import NAMES, FactsColumns
from .measures import VERSION as MEASURES, facts_of, scan_pair

SIDECAR = "{split}.facts.npz"
_KEY = "index_sha256"
_CHUNK = 64  # samples a thread measures at a time


class SplitFacts(NamedTuple):
    """One split's facts and where they came from: "index" (stored by pack), "sidecar" (measured earlier, read
    from `<split>.facts.npz`) or "measured" (just now; `cached` says whether the sidecar could be written);
    `measures`: the version of `measures` that measured them (None: stored by a pack that did not record it, 3 or
    older)."""

    facts: FactsColumns
    origin: str
    cached: bool = True
    measures: int | None = MEASURES


def split_facts(ds, *, progress: Callable[[int, int], None] | None = None, workers: int | None = None
                ) -> SplitFacts:
    """The facts of every sample of a split (a `ShardDataset`), in its index order."""
    stored = ds.facts() if callable(getattr(ds, "facts", None)) else None
    if stored is not None:
        return SplitFacts(stored, "index", measures=ds.index.measures)
    path = sidecar_path(ds)
    key = f"{index_identity(ds)} measures {MEASURES}" if path is not None else ""
    found = _read_sidecar(path, key, len(ds)) if path is not None else None
    if found is not None:
        return SplitFacts(found, "sidecar")
    facts = measure(ds, progress=progress, workers=workers)
    cached = path is not None and _write_sidecar(path, key, facts)
    return SplitFacts(facts, "measured", cached)


def measure(ds, *, progress: Callable[[int, int], None] | None = None, workers: int | None = None) -> FactsColumns:
    """Every sample's facts measured from its pixels (`measures.scan_pair`, then `facts_of` a chunk at a time), in
    threads: OpenCV and the CRC let go of the GIL."""
    n = len(ds)
    facts = FactsColumns.empty(n)
    targets_only = bool(getattr(ds, "targets_only", False))

    def run(start: int) -> int:
        stop = min(n, start + _CHUNK)
        scans = []
        for i in range(start, stop):
            low, high = ds.arrays(i)
            scans.append(scan_pair(None if targets_only else low, high))
        for i, one in enumerate(facts_of(scans), start):  # the chunk's pairs measured together, as pack does
            facts.fill(i, one)
        return stop - start

    done = 0
    with ThreadPoolExecutor(workers or os.cpu_count() or 1) as pool:
        for count in pool.map(run, range(0, n, _CHUNK)):
            done += count
            if progress is not None:
                progress(done, n)
    return facts


def index_identity(ds) -> str:
    """The sha256 of the split's index: its index file's (a version-5 pack), else its manifest entry's."""
    mapped = getattr(ds.index, "mapped", None)
    if mapped is not None:
        return str(mapped.entry["index"]["sha256"])
    from ..format import schema

    entry = schema.read_manifest(ds.root)["splits"][ds.split]
    return hashlib.sha256(json.dumps(entry, sort_keys=True).encode()).hexdigest()


def sidecar_path(ds) -> Path | None:
    """Where a split's measured facts are kept: beside its index (None for a URL's split, or image files: their
    folder is not ours to write)."""
    if getattr(ds, "url", None) is not None or getattr(ds, "index", None) is None:
        return None
    return Path(ds.root) / SIDECAR.format(split=ds.split)


def _read_sidecar(path: Path, key: str, n: int) -> FactsColumns | None:
    """The facts kept at `path` for the index `key`; None when absent, stale (another index) or unreadable (it is
    measured again and replaced)."""
    try:
        with np.load(path, allow_pickle=False) as doc:
            if str(doc[_KEY]) != key:
                return None
            facts = FactsColumns(*(doc[name] for name in NAMES))
    except (OSError, KeyError, ValueError):
        return None
    return facts if all(len(column) == n for column in facts) else None


def _write_sidecar(path: Path, key: str, facts: FactsColumns) -> bool:
    """Keep the facts for next time; False where the folder is read-only (they are measured again next time)."""
    buf = io.BytesIO()
    np.savez(buf, **{_KEY: np.array(key)}, **facts.columns())
    try:
        write_bytes_atomic(path, buf.getvalue())
    except OSError:
        return False
    return True
