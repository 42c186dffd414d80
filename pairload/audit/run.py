"""`audit`: every split of one or more packs compared by content, as `pairload audit` reports it. The same scene in a
training split and an evaluation split (across packs too), in two splits of one pack, or twice in one split; pairs
shifted beyond a threshold; targets far darker than their split's others; each split's brightness.

Two images are the same scene when their fingerprints lie within `RADIUS` bits (`search.near_pairs`) and their
thumbnails, compared finely after aligning (`similar.similarity`), correlate by `MIN_SIMILARITY` or more; or when
their pixels are identical (their exact hashes agree)."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

from ..errors import ConfigError
from ..format.facts import HIGH, FactsColumns
from ..workerpool import WorkerPool
from . import packing
from .facts import split_facts
from .measures import VERSION as MEASURES
from .findings import AuditReport, Finding, Place
from .search import near_pairs
from .similar import look, similarity

RADIUS = 20  # fingerprint bits two images may differ by and still be compared finely
MIN_SIMILARITY = 0.85  # the verified likeness from which two images are the same scene
NEAR = 10  # fingerprint bits within which two images are always compared finely
PER_SAMPLE = 16  # candidates compared finely per sample at most, nearest fingerprints first
NEAREST = 2 * PER_SAMPLE  # fingerprints of the other split kept per image (with ties): a copy's are among the
# nearest, and random ones within RADIUS bits would otherwise grow with the product of the splits' sizes
FAR_PER_SAMPLE = 1  # of those beyond NEAR bits whose other sides are not near too
SIDES = ("input", "target")
TRAINING_WORDS = ("train", "training", "trainset", "train_set", "training_set")

Progress = Callable[[str, int, int], None]  # (what, done, total)


@dataclass
class AuditedSplit:
    """One split of one pack as audited: its dataset, facts, and whether it is a training split."""

    pack: str
    name: str
    ds: object
    facts: FactsColumns
    origin: str
    training: bool
    measures: int | None = MEASURES  # the version of `measures` its facts are of (None: a pack that did not say)

    @property
    def paired(self) -> bool:
        return not self.ds.targets_only

    def place(self, i: int) -> Place:
        return Place(self.pack, self.name, str(self.ds.keys[int(i)]))

    def images(self, span: tuple[int, int] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(sample, side, exact hash, fingerprint) of each stored image of the samples in [span) (all where None):
        both sides of a pair, a targets-only sample's target once."""
        f = self.facts
        lo, hi = span or (0, len(f.high_fp))
        sides = (1,) if not self.paired else (0, 1)
        sample = np.concatenate([np.arange(lo, hi)] * len(sides))
        side = np.repeat(np.array(sides), hi - lo)
        exact = np.concatenate([(f.low_exact, f.high_exact)[s][lo:hi] for s in sides])
        fp = np.concatenate([(f.low_fp, f.high_fp)[s][lo:hi] for s in sides])
        return sample, side, exact, fp


def is_training(split: str) -> bool:
    """A split a model trains on, by its name: `train`, `training`, or one whose words include either."""
    words = split.lower().replace("-", "_").split("_")
    return split.lower() in TRAINING_WORDS or "train" in words or "training" in words


def open_splits(paths, *, progress: Progress | None = None, workers: int | None = None, cache_dir=None,
                storage_options=None) -> list[AuditedSplit]:
    """Every split of each pack, with its facts; a pack is named by its folder's name (its path where two share a
    name)."""
    from ..read.shards import open_shards, read_manifest_at

    paths = [str(p) for p in paths]
    seen = [p for i, p in enumerate(paths) if p in paths[:i]]
    if seen:
        raise ConfigError(f"{seen[0]} is given twice: every image of it would match itself; give each pack once")
    names = [Path(p.rstrip("/")).name or p for p in paths]
    names = [n if names.count(n) == 1 else p for n, p in zip(names, paths)]
    out = []
    for path, name in zip(paths, names):
        for split in read_manifest_at(path, storage_options=storage_options)["splits"]:
            ds = open_shards(path, split, cache_dir=cache_dir, storage_options=storage_options)
            tell = (lambda done, total, what=f"measuring {name}:{split}": progress(what, done, total)) \
                if progress else None
            got = split_facts(ds, progress=tell, workers=workers)
            out.append(AuditedSplit(name, split, ds, got.facts, got.origin, is_training(split), got.measures))
    return out


class Match(NamedTuple):
    """Image `side_a` of sample `a` of one split and image `side_b` of sample `b` of another show one scene."""

    a: int
    side_a: int
    b: int
    side_b: int
    hamming: int | None  # None: identical pixels
    similarity: float


def matches(qa: AuditedSplit, qb: AuditedSplit, *, radius: int = RADIUS, min_similarity: float = MIN_SIMILARITY,
            workers: int | None = None, looks: dict | None = None) -> list[Match]:
    """The images of `qa` that show a scene of `qb`: identical pixels, or fingerprints within `radius` bits and a
    verified likeness of `min_similarity` or more (the candidates `_candidates` keeps). From `SPREAD_FROM` samples
    of `qa` on, its samples are shared out among `workers` forked processes, each doing all of it for its share
    (threads would queue on the interpreter's lock for the many small steps of each comparison)."""
    workers = workers or os.cpu_count() or 1
    whole = (0, len(qa.facts.high_fp))
    if workers == 1 or whole[1] < SPREAD_FROM or "fork" not in multiprocessing.get_all_start_methods():
        return _matches_of(qa, qb, whole, radius, min_similarity, workers, {} if looks is None else looks)
    global _SHARED
    _SHARED = (qa, qb, radius, min_similarity)
    bounds = np.linspace(0, whole[1], 4 * workers + 1).astype(np.int64)
    try:
        # (a worker the out-of-memory killer ends is an error naming it, not a pool waiting for its share forever)
        with WorkerPool(workers, multiprocessing.get_context("fork"), "audit") as pool:
            parts = list(pool.imap(_spread_share, list(zip(bounds[:-1].tolist(), bounds[1:].tolist()))))
    finally:
        _SHARED = None
    return [m for part in parts for m in part]


SPREAD_FROM = 4096  # samples of the query split from which `matches` forks processes
_SHARED: tuple | None = None  # what forked processes of `matches` read: (qa, qb, radius, min_similarity)


def _spread_share(span: tuple[int, int]) -> list[Match]:
    qa, qb, radius, min_similarity = _SHARED
    return _matches_of(qa, qb, span, radius, min_similarity, 1, {})


def _matches_of(qa: AuditedSplit, qb: AuditedSplit, span: tuple[int, int], radius: int, min_similarity: float,
                workers: int, looks: dict) -> list[Match]:
    """`matches` of `qa`'s samples in [span)."""
    sa, ea_side, xa, fa = qa.images(span)
    sb, eb_side, xb, fb = qb.images()
    found = _identical(sa, ea_side, xa, sb, eb_side, xb)
    near = near_pairs(fa, fb, radius, most=NEAREST, workers=workers)
    candidates = _candidates(sa[near.i], ea_side[near.i], sb[near.j], eb_side[near.j], near.distance,
                             {(m.a, m.b) for m in found}, len(qb.facts.high_fp))

    def seen(q: AuditedSplit, i: int, side: int):
        key = (id(q), i, side)
        if key not in looks:
            looks[key] = _look_at(q.ds, i, side)
        return looks[key]

    def verify(c) -> Match | None:
        a, side_a, b, side_b, d = (int(v) for v in c)
        s = similarity(seen(qa, a, side_a), seen(qb, b, side_b))
        return Match(a, side_a, b, side_b, d, s) if s >= min_similarity else None

    if workers == 1:
        verified = [m for m in map(verify, candidates) if m is not None]
    else:
        with ThreadPoolExecutor(workers) as pool:
            verified = [m for m in pool.map(verify, candidates) if m is not None]
    return found + verified


def _look_at(ds, i: int, side: int):
    """`similar.look` of one stored image; a URL's shard is made local (in the node's cache) for the read."""
    token = ds.acquire([i]) if getattr(ds, "remote", False) else None
    try:
        return look(ds.arrays(i)[side])
    finally:
        if token is not None:
            ds.release(token)


def _identical(sa, side_a, xa, sb, side_b, xb) -> list[Match]:
    """Images of the two splits with equal exact hashes (one match per pair of samples)."""
    order = np.argsort(xb, kind="stable")
    lo = np.searchsorted(xb[order], xa, "left")
    hi = np.searchsorted(xb[order], xa, "right")
    out, seen = [], set()
    for i in np.flatnonzero(hi > lo):
        for j in order[lo[i]:hi[i]]:
            pair = (int(sa[i]), int(sb[j]))
            if pair not in seen:
                seen.add(pair)
                out.append(Match(pair[0], int(side_a[i]), pair[1], int(side_b[j]), None, 1.0))
    return out


def _candidates(a, side_a, b, side_b, distance, skip: set, nb: int) -> np.ndarray:
    """(a, side_a, b, side_b, distance) rows to compare finely, one per pair of samples (its targets where they are
    near, else its nearest images, the same sides first), leaving out the pairs in `skip`. A pair is kept when its
    fingerprints are within `NEAR` bits, when both its inputs and its targets are near each other (a pair copied
    whole), or else as one of the `FAR_PER_SAMPLE` nearest of its sample of the first split; at most `PER_SAMPLE`
    per sample. (Random fingerprints come within `RADIUS` bits of 0.2% of others: comparing all would not scale.)"""
    pair = a.astype(np.int64) * nb + b
    if skip:
        keep = ~np.isin(pair, np.array([x * nb + y for x, y in skip], dtype=np.int64))
        a, side_a, b, side_b, distance, pair = (v[keep] for v in (a, side_a, b, side_b, distance, pair))
    same = side_a == side_b
    near_sides, count = np.unique(np.unique(pair[same] * 2 + side_a[same]) // 2, return_counts=True)
    whole = near_sides[count == 2]
    order = np.lexsort((~same, distance, (side_a & side_b) == 0, pair))  # targets first: less noisy
    first = order[np.unique(pair[order], return_index=True)[1]]
    sure = (distance[first] <= NEAR) | np.isin(pair[first], whole)
    far = _nearest_per_sample(first[~sure], a, distance, FAR_PER_SAMPLE)
    chosen = _nearest_per_sample(np.concatenate([first[sure], far]), a, distance, PER_SAMPLE)
    return np.stack([a[chosen], side_a[chosen], b[chosen], side_b[chosen], distance[chosen]], axis=1).astype(np.int64)


def _nearest_per_sample(rows: np.ndarray, a: np.ndarray, distance: np.ndarray, most: int) -> np.ndarray:
    """Of `rows`, the `most` nearest of each sample `a`."""
    rows = rows[np.lexsort((distance[rows], a[rows]))]
    starts = np.searchsorted(a[rows], a[rows], "left")
    return rows[np.arange(len(rows)) - starts < most]


def _compared(splits: list[AuditedSplit]) -> list[tuple[AuditedSplit, AuditedSplit, str]]:
    """(query, other, kind) of each pair of splits to compare: an evaluation split against every training split
    (any pack: "leak"), and two splits of one pack otherwise ("near-duplicate")."""
    out = []
    for i, s in enumerate(splits):
        for t in splits[i + 1:]:
            if s.training != t.training:
                query, other = (t, s) if s.training else (s, t)
                out.append((query, other, "leak"))
            elif s.pack == t.pack:
                out.append((s, t, "near-duplicate"))
    return out


def _finding(kind: str, q: AuditedSplit, o: AuditedSplit, m: Match) -> Finding:
    return Finding(kind, q.place(m.a), o.place(m.b), sides=f"{SIDES[m.side_a]}~{SIDES[m.side_b]}",
                   hamming=m.hamming, similarity=round(m.similarity, 4))


def duplicates(s: AuditedSplit) -> list[Finding]:
    """Samples of one split whose stored image (a pair's input, a targets-only sample's target) repeats another's
    pixel for pixel; each named with the first sample it repeats. (Pairs sharing a target, as exposure brackets
    do, are no duplicates.)"""
    exact = s.facts.low_exact if s.paired else s.facts.high_exact
    order = np.argsort(exact, kind="stable")
    sorted_exact = exact[order]
    repeat = np.flatnonzero(sorted_exact[1:] == sorted_exact[:-1]) + 1
    out = []
    for r in repeat:
        first = r
        while first > 0 and sorted_exact[first - 1] == sorted_exact[r]:
            first -= 1
        side = SIDES[0] if s.paired else SIDES[1]
        out.append(Finding("duplicate", s.place(order[r]), s.place(order[first]), sides=f"{side}~{side}",
                           similarity=1.0))
    return out


def misaligned(s: AuditedSplit, max_shift: float) -> list[Finding]:
    """Pairs confidently shifted by more than `max_shift` input pixels (`audit.packing.misaligned`)."""
    if not s.paired:
        return []
    return [Finding("misaligned", s.place(k), shift=tuple(float(v) for v in s.facts.shift[k]))
            for k in packing.misaligned(s.facts, max_shift)]


def exposure(s: AuditedSplit) -> tuple[dict, list[Finding]]:
    """A split's brightness (`audit.packing.exposure_stats`) and its targets far darker than its others; nothing
    for camera raw counts (their brightness is the exposure's, not the scene's)."""
    if s.ds.sensor is not None:
        return {}, []
    shares = s.ds.index.shares_high
    stats = packing.exposure_stats(s.facts, shares < 0 if shares is not None else None)
    if not s.paired:
        stats = {k: v for k, v in stats.items() if k not in ("input", "brighter_inputs", "differing")}
    median = stats.get("target", {}).get("median", 0.0)
    dark = [Finding("dark-target", s.place(k), luma=float(s.facts.luma[k, HIGH]),
                    note=f"under {stats['dark_below']:g}; the split's median {median:.3f}")
            for k in stats.pop("dark_targets", [])]
    return stats, dark


def audit(paths, *, max_shift: float = 1.0, radius: int = RADIUS, min_similarity: float = MIN_SIMILARITY,
          workers: int | None = None, progress: Progress | None = None, cache_dir=None,
          storage_options=None) -> AuditReport:
    """Audit packs (folders or URLs written by `pairload pack`): see the module's docstring. Facts a pack lacks
    are measured in place, and kept beside its index for next time (`audit.facts`)."""
    if isinstance(max_shift, bool) or not isinstance(max_shift, (int, float)) or not 0 < max_shift < float("inf"):
        raise ConfigError.for_value("max_shift", max_shift, "expected a positive number of pixels (e.g. 1.0)")
    splits = open_splits(paths, progress=progress, workers=workers, cache_dir=cache_dir,
                         storage_options=storage_options)
    report = AuditReport(settings={"max_shift": max_shift, "radius": radius, "min_similarity": min_similarity,
                                   "confident": packing.CONFIDENT})
    for s in splits:
        entry = report.sources.setdefault(s.pack, {"path": str(s.ds.where), "splits": {}})
        entry["splits"][s.name] = {"samples": len(s.ds), "facts": s.origin, "measures": s.measures,
                                   "training": s.training}
    looks: dict = {}
    for q, o, kind in _compared(splits):
        found = matches(q, o, radius=radius, min_similarity=min_similarity, workers=workers, looks=looks)
        for m in sorted(found, key=lambda m: (m.a, m.b)):
            report.findings.append(_finding(kind, q, o, m))
    for s in splits:
        report.findings += duplicates(s)
        report.findings += misaligned(s, max_shift)
        stats, dark = exposure(s)
        if stats:
            report.exposure[f"{s.pack}:{s.name}"] = stats
        report.findings += dark
    return report
