"""Which shard each pair goes into, and where: pairs ordered so that the pairs sharing one target follow the one
storing it, then cut into `ShardPlan`s of at most `--shard-size` raw bytes with every member's offset planned."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..format import schema
from ..format.members import DEFAULT, Members
from ..folders.discover import Pair, PairTable


@dataclass
class ShardPlan:
    """One shard: the pairs `first` to `first + count` (in `target_groups` order) and the end of its last member.
    Only this is kept for every shard of a pack: the samples' layouts and header bytes are made again (`lay_out`)
    when the shard is written, so a plan of a million pairs costs a few bytes per shard, not kilobytes per pair."""

    split: str
    number: int
    first: int = 0
    count: int = 0
    end: int = 0

    @property
    def name(self) -> str:
        return schema.shard_name(self.split, self.number)

    @property
    def partial_name(self) -> str:
        return self.name + schema.PARTIAL_SUFFIX

    @property
    def size(self) -> int:
        return schema.archive_end(self.end)


def target_groups(pairs: PairTable) -> PairTable:
    """Pairs in (split, key) order, except that pairs sharing one target (SID's exposures of a scene, SICE's
    sequence, a pairs file naming one high for several lows) follow the first of them, which stores the target.
    Sorted as columns, in place (a dict of every target and a list of Pairs took hundreds of bytes a pair); a list
    of Pairs is made a table first."""
    if not isinstance(pairs, PairTable):
        pairs = PairTable(pairs)
    n = len(pairs)
    if not n:
        return pairs
    split, high = pairs.split_codes(), pairs.fixed("high_rel")
    by = np.lexsort((high, split))  # stable: each (split, target)'s pairs together, in the order given
    start = np.flatnonzero(np.r_[True, (high[by][1:] != high[by][:-1]) | (split[by][1:] != split[by][:-1])])
    first = np.empty(n, np.int64)  # per pair: the first pair given of its (split, target), which stores it
    first[by] = np.repeat(by[start], np.diff(np.r_[start, n]))
    del high, by
    key = pairs.fixed("key")
    lead = key[first]
    order = np.lexsort((key, key != lead, lead, split))
    del key, lead, first
    pairs.reorder(order)
    return pairs


def shared_targets(pairs) -> np.ndarray:
    """Per pair (bool): another pair of its split has the same target file. Only these can store a target once for
    several samples, so only they are remembered while a shard is planned or laid out (a dict of every pair's target
    took ~300 bytes a pair in a shard of distinct targets)."""
    n = len(pairs)
    if isinstance(pairs, PairTable):
        if not n:
            return np.zeros(0, bool)
        split, high = pairs.split_codes(), pairs.fixed("high_rel")
        by = np.lexsort((high, split))
        high, split = high[by], split[by]
        same = np.r_[False, (high[1:] == high[:-1]) & (split[1:] == split[:-1])]
        del high, split
        first = np.r_[same[1:], False]  # the first of a run of equal targets
        out = np.zeros(n, bool)
        out[by[same | first]] = True
        return out
    seen: dict[tuple[str, str], int] = {}
    for pair in pairs:
        seen[pair.split, pair.high_rel] = seen.get((pair.split, pair.high_rel), 0) + 1
    return np.array([seen[pair.split, pair.high_rel] > 1 for pair in pairs], bool)


def plan_shards(pairs: list[Pair], sizes: list[tuple[int, int]], out_sizes: list[tuple[int, int]],
                shard_size: int, members: dict[str, Members] | None = None, targets_only: bool = False,
                shared: np.ndarray | None = None) -> list[ShardPlan]:
    """The raw shards of `pairs` (in `target_groups` order, or key order for `pack --sequences`), cut only between
    groups sharing a target; `members`: each split's, where not the default uint8 RGB; `targets_only`: each sample
    stores its target alone. Sequences: a shard is cut between any two frames of a sequence whose frames have targets
    of their own, and never inside one whose frames share a target (stored once); so a clip of T consecutive frames
    reads at most two shards wherever every shard holds at least T - 1 frames (`sequences`). `shared`:
    `shared_targets(pairs)`, made here if not given."""
    members = members or {}
    plans: list[ShardPlan] = []
    current: ShardPlan | None = None
    leaders: dict[str, str] = {}  # high file -> key of the pair in the current shard storing it (shared ones only)
    shared = shared_targets(pairs) if shared is None else shared
    for k, (pair, hw, out_hw) in enumerate(zip(pairs, sizes, out_sizes)):
        if current is None or current.split != pair.split:
            current = ShardPlan(pair.split, 0, k)
            plans.append(current)
            leaders = {}
        ref = leaders.get(pair.high_rel) if shared[k] else None
        meta = len(schema.sample_meta(None if targets_only else pair.low_rel, pair.high_rel, hw, out_hw, high_ref=ref))
        kinds = members.get(pair.split, DEFAULT)
        end = schema.sample_end(pair.key, out_hw[0], out_hw[1], meta, current.end, ref is not None, kinds,
                                targets_only)
        if ref is None and current.count and schema.archive_end(end) > shard_size:  # cut between groups only
            current = ShardPlan(pair.split, current.number + 1, k)
            plans.append(current)
            leaders = {}
            end = schema.sample_end(pair.key, out_hw[0], out_hw[1], meta, 0, False, kinds, targets_only)
        if ref is None and shared[k]:
            leaders[pair.high_rel] = pair.key
        current.count += 1
        current.end = end
    return plans


def lay_out(plan: ShardPlan, pairs: list[Pair], sizes: list[tuple[int, int]], out_sizes: list[tuple[int, int]],
            members: dict[str, Members] | None = None, targets_only: bool = False, shared: np.ndarray | None = None
            ) -> Iterator[tuple[int, schema.SampleLayout, int, list[tuple[int, bytes]]]]:
    """Each sample of one planned shard in order, as (its place in the shard, its layout, `lead`: the place of the
    sample whose target it shares or -1, the (offset, bytes) header pieces to write): made one at a time, so that a
    shard of any number of samples is written in bounded memory. `shared`: `shared_targets(pairs)`, made here if not
    given."""
    kinds = (members or {}).get(plan.split, DEFAULT)
    shared = shared_targets(pairs) if shared is None else shared
    # high file -> (place, target offset, key) of the sample storing it, for the targets that samples share
    leaders: dict[str, tuple[int, int, str]] = {}
    end = 0
    for i in range(plan.count):
        k = plan.first + i
        pair, hw, out_hw = pairs[k], sizes[k], out_sizes[k]
        lead = leaders.get(pair.high_rel) if shared[k] else None
        meta = schema.sample_meta(None if targets_only else pair.low_rel, pair.high_rel, hw, out_hw,
                                  high_ref=None if lead is None else lead[2])
        layout, pieces = schema.layout_sample(pair.key, out_hw[0], out_hw[1], meta, end,
                                              None if lead is None else lead[1], kinds, targets_only)
        if lead is None and shared[k]:
            leaders[pair.high_rel] = (i, layout.high_data, pair.key)
        yield i, layout, -1 if lead is None else lead[0], pieces
        end = layout.end
    if end != plan.end:
        raise AssertionError(f"{plan.name}: laid out to {end} bytes, planned {plan.end}")
