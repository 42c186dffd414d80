"""Pack's checks of the pairs it measured (`audit.packing`), run on the written shards' rows before anything takes
their place: every split of a pack before its shards are renamed (`check_pack`), a part's own pairs before its
shards are (`check_part`: `--max-shift` only, a split's brightness being a matter of the whole split), and a pack
made in parts before its manifest is written. And `--skip-misaligned`'s first pass (`leave_out_misaligned`): every
pair decoded and measured, the misaligned ones left out before the shards are planned, so that the shards hold only
the others and every part of a pack plans alike."""

from __future__ import annotations

import dataclasses
import itertools
import time

import numpy as np

from ..audit import packing
from ..errors import PairingError
from ..format import schema, sensor as fmt
from ..format.facts import CONFIDENCE, DX, DY, NAMES, FactsColumns
from ..folders.discover import Pair
from ..folders.rules import EXPOSURE_BRACKETS
from .jobs import JobResult
from .rows import ShardRows, joined_keys
from .spill import joined_column
from .shardwrite import CHUNK, RUN_TASK, Inputs, tasks, task_size, units


def _names(pairs: list[Pair] | None):
    """names(split, key) -> (input file, target file) relative to the dataset folder, from `pairs` (looked up once
    something is named: a pack with nothing to say builds no table); None without pairs."""
    if pairs is None:
        return None
    table: dict[tuple[str, str], Pair] = {}

    def names(split: str, key: str) -> tuple[str, str] | None:
        if not table:
            table.update(((p.split, p.key), p) for p in pairs)
        pair = table.get((split, key))
        return None if pair is None else (pair.low_rel, pair.high_rel)

    return names


def _bright_ok(entry: dict, options: dict) -> str | None:
    """Why a split's inputs may be brighter than their targets: told so, or paired as exposure brackets."""
    if options.get("allow_bright_inputs"):
        return f"{packing.ALLOW_BRIGHT} given"
    brackets = [rule for rule in entry.get("pairing", []) if rule in EXPOSURE_BRACKETS]
    if brackets:
        return (f"paired by {brackets[0]!r}, several exposures of a scene sharing its target (exposure correction, as "
                f"SICE and MSEC: over-exposed inputs expected)")
    return None


def checked_splits(skel: dict, rows: list[ShardRows], pairs: list[Pair] | None = None) -> list[packing.CheckedSplit]:
    """Each split's facts among `rows` (in shard order), as `audit.packing` checks them; `pairs`: the pack's, to
    name files (None: keys only)."""
    names = _names(pairs)
    by_split: dict[str, list[ShardRows]] = {}
    for r in rows:
        by_split.setdefault(r.split, []).append(r)
    out = []
    for split, parts in by_split.items():
        facts = _split_facts(parts)
        if facts is None:
            continue  # a part's record written before pack measured pairs
        entry = skel["splits"][split]
        keys = joined_keys(parts)
        own = np.concatenate([r.columns["shares_high"] < 0 for r in parts])
        out.append(packing.CheckedSplit(
            split, keys, facts, own, None if names is None else (lambda k, s=split, ks=keys: names(s, ks[k])),
            _bright_ok(entry, skel["options"]), paired=not entry.get(schema.TARGETS_ONLY),
            brightness=fmt.FIELD not in entry))
    return out


def _split_facts(parts: list[ShardRows]) -> FactsColumns | None:
    """The facts of a split's shards one after the other (spilled ones joined in their spill and mapped: only the
    pages the checks read are ever in memory)."""
    if any(NAMES[0] not in r.columns for r in parts):
        return None
    return FactsColumns(*(joined_column([r.columns for r in parts], name) for name in NAMES))


def check_pack(skel: dict, rows: list[ShardRows], pairs: list[Pair] | None = None) -> packing.TrustReport:
    """Review a whole pack (`audit.packing.review`) with the options its skeleton records: raise on what it
    refuses; else its report, with the pairs `--skip-misaligned` left out."""
    options = skel["options"]
    report = packing.review(checked_splits(skel, rows, pairs), max_shift=options.get("max_shift"))
    report.skipped = [_skipped_line(m) for m in skel["report"].get("misaligned", [])]
    return report


def check_part(skel: dict, rows: list[ShardRows], pairs: list[Pair]) -> None:
    """Refuse a part's own pairs beyond `--max-shift` (the whole pack's other checks wait for its last part)."""
    max_shift = skel["options"].get("max_shift")
    if max_shift is not None:
        packing.refuse_misaligned(checked_splits(skel, rows, pairs), max_shift)


def _skipped_line(m: dict) -> str:
    px = float(np.hypot(m["dy"], m["dx"]))
    return (f"{m['split']}: {m['low']} ↔ {m['high']}: shifted by {px:.1f} px (dy {m['dy']:+.2f}, dx {m['dx']:+.2f}; "
            f"confidence {m['confidence']:.2f})")


def measure(inputs: Inputs, options, pool) -> list[JobResult]:
    """Every pair of `inputs` decoded and measured, nothing stored: each result's `facts`, in pair order."""
    def jobs():
        for k, pair in enumerate(inputs.pairs):
            before = inputs.pairs[k - 1] if k else None
            own = before is None or (before.split, before.high_rel) != (pair.split, pair.high_rel)
            yield inputs.job(k, own, options, measure_only=True)

    out: list[JobResult] = []
    work = lambda runs: pool.imap(RUN_TASK, runs) if pool else map(RUN_TASK, runs)  # noqa: E731 - one line
    it = jobs()
    while chunk := list(itertools.islice(it, CHUNK)):
        out += [res.check() for res in itertools.chain.from_iterable(work(tasks(units(chunk), task_size(chunk))))]
    return out


def leave_out_misaligned(discovery, inputs: Inputs, options, pool, report) -> tuple[object, list[dict]]:
    """`--skip-misaligned`: (the discovery without the pairs confidently shifted by more than `--max-shift`, those
    pairs as the manifest's report lists them), every pair decoded and measured once to find them."""
    t0 = time.perf_counter()
    results = measure(inputs, options, pool)
    facts = FactsColumns.empty(len(results))
    for k, res in enumerate(results):
        facts.fill(k, res.facts)  # rounded as the index stores them: the pass and the shards agree
    out = packing.misaligned(facts, options.max_shift)
    report.phases["measure"] = time.perf_counter() - t0
    if not len(out):
        return discovery, []
    gone = {(inputs.pairs[k].split, inputs.pairs[k].key) for k in out.tolist()}
    skipped = [{"split": inputs.pairs[k].split, "key": inputs.pairs[k].key, "low": inputs.pairs[k].low_rel,
                "high": inputs.pairs[k].high_rel, "dy": round(float(facts.shift[k, DY]), 2),
                "dx": round(float(facts.shift[k, DX]), 2), "confidence": round(float(facts.shift[k, CONFIDENCE]), 2)}
               for k in sorted(out.tolist(), key=lambda k: (inputs.pairs[k].split, inputs.pairs[k].key))]
    kept = discovery.pairs.take(np.flatnonzero(np.fromiter(((p.split, p.key) not in gone for p in discovery.pairs),
                                                           bool, count=len(discovery.pairs))))
    if not kept:
        raise PairingError(f"every one of the {len(skipped)} pairs is shifted by more than --max-shift "
                           f"{options.max_shift:g} px (the first: {_skipped_line(skipped[0])}); nothing is left to "
                           "pack: raise --max-shift, or check that the folders hold pairs of the same scenes")
    return dataclasses.replace(discovery, pairs=kept), skipped
