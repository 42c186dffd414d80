"""Which shard each pair goes into, and where: pairs ordered so that the pairs sharing one target follow the one
storing it, then cut into `ShardPlan`s of at most `--shard-size` raw bytes with every member's offset planned."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..format import schema
from ..format.members import DEFAULT, Members
from ..raw.discover import Pair


@dataclass
class ShardPlan:
    """One shard: its samples as (pair, layout, lead) with `lead` the index of the sample in this shard whose
    target it shares (-1: it stores its own), the header pieces to write, and the end of its last member."""

    split: str
    number: int
    samples: list[tuple[Pair, schema.SampleLayout, int]] = field(default_factory=list)
    pieces: list[tuple[int, bytes]] = field(default_factory=list)
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


def target_groups(pairs: list[Pair]) -> list[Pair]:
    """Pairs in (split, key) order, except that pairs sharing one target (SID's exposures of a scene, SICE's
    sequence, a pairs file naming one high for several lows) follow the first of them, which stores the target."""
    leader: dict[tuple[str, Path], str] = {}
    for p in pairs:
        leader.setdefault((p.split, p.high), p.key)
    return sorted(pairs, key=lambda p: (p.split, leader[(p.split, p.high)], p.key != leader[(p.split, p.high)], p.key))


def plan_shards(pairs: list[Pair], sizes: list[tuple[int, int]], out_sizes: list[tuple[int, int]],
                shard_size: int, members: dict[str, Members] | None = None) -> list[ShardPlan]:
    """The raw shards of `pairs` (in `target_groups` order), cut only between groups sharing a target; `members`:
    each split's, where not the default uint8 RGB."""
    members = members or {}
    plans: list[ShardPlan] = []
    current: ShardPlan | None = None
    leaders: dict[tuple[str, Path], int] = {}  # (split, high file) -> index in the current shard of its first pair
    for pair, hw, out_hw in zip(pairs, sizes, out_sizes):
        lead = leaders.get((pair.split, pair.high)) if current is not None and current.split == pair.split else None
        if current is None or current.split != pair.split:
            current = ShardPlan(pair.split, 0)
            plans.append(current)
            leaders = {}
        shared = None if lead is None else current.samples[lead][1].high_data
        ref = None if lead is None else current.samples[lead][0].key
        meta = schema.sample_meta(pair.low_rel, pair.high_rel, hw, out_hw, high_ref=ref)
        kinds = members.get(pair.split, DEFAULT)
        layout, pieces = schema.layout_sample(pair.key, out_hw[0], out_hw[1], meta, current.end, shared, kinds)
        if lead is None and current.samples and schema.archive_end(layout.end) > shard_size:  # cut between groups only
            current = ShardPlan(pair.split, current.number + 1)
            plans.append(current)
            leaders = {}
            layout, pieces = schema.layout_sample(pair.key, out_hw[0], out_hw[1], meta, 0, members=kinds)
        if lead is None:
            leaders[(pair.split, pair.high)] = len(current.samples)
        current.samples.append((pair, layout, -1 if lead is None else lead))
        current.pieces.extend(pieces)
        current.end = layout.end
    return plans
