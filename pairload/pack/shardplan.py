"""Which shard each pair goes into, and where: pairs ordered so that the pairs sharing one target follow the one
storing it, then cut into `ShardPlan`s of at most `--shard-size` raw bytes with every member's offset planned."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..format import schema
from ..format.members import DEFAULT, Members
from ..raw.discover import Pair


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


@dataclass
class LaidOut:
    """A shard's samples as (pair, layout, lead) with `lead` the index of the sample in this shard whose target it
    shares (-1: it stores its own), and the header pieces to write: what `lay_out` makes from a `ShardPlan`."""

    plan: ShardPlan
    samples: list[tuple[Pair, schema.SampleLayout, int]] = field(default_factory=list)
    pieces: list[tuple[int, bytes]] = field(default_factory=list)


def target_groups(pairs: list[Pair]) -> list[Pair]:
    """Pairs in (split, key) order, except that pairs sharing one target (SID's exposures of a scene, SICE's
    sequence, a pairs file naming one high for several lows) follow the first of them, which stores the target."""
    leader: dict[tuple[str, str], str] = {}
    for p in pairs:
        leader.setdefault((p.split, p.high_rel), p.key)
    return sorted(pairs, key=lambda p: (p.split, leader[(p.split, p.high_rel)], p.key != leader[(p.split, p.high_rel)],
                                        p.key))


def plan_shards(pairs: list[Pair], sizes: list[tuple[int, int]], out_sizes: list[tuple[int, int]],
                shard_size: int, members: dict[str, Members] | None = None) -> list[ShardPlan]:
    """The raw shards of `pairs` (in `target_groups` order), cut only between groups sharing a target; `members`:
    each split's, where not the default uint8 RGB."""
    members = members or {}
    plans: list[ShardPlan] = []
    current: ShardPlan | None = None
    leaders: dict[str, str] = {}  # high file -> key of the pair in the current shard storing it
    for k, (pair, hw, out_hw) in enumerate(zip(pairs, sizes, out_sizes)):
        if current is None or current.split != pair.split:
            current = ShardPlan(pair.split, 0, k)
            plans.append(current)
            leaders = {}
        ref = leaders.get(pair.high_rel)
        meta = len(schema.sample_meta(pair.low_rel, pair.high_rel, hw, out_hw, high_ref=ref))
        kinds = members.get(pair.split, DEFAULT)
        end = schema.sample_end(pair.key, out_hw[0], out_hw[1], meta, current.end, ref is not None, kinds)
        if ref is None and current.count and schema.archive_end(end) > shard_size:  # cut between groups only
            current = ShardPlan(pair.split, current.number + 1, k)
            plans.append(current)
            leaders = {}
            end = schema.sample_end(pair.key, out_hw[0], out_hw[1], meta, 0, False, kinds)
        if ref is None:
            leaders[pair.high_rel] = pair.key
        current.count += 1
        current.end = end
    return plans


def lay_out(plan: ShardPlan, pairs: list[Pair], sizes: list[tuple[int, int]], out_sizes: list[tuple[int, int]],
            members: dict[str, Members] | None = None) -> LaidOut:
    """The layouts and header bytes of one planned shard's samples (`plan_shards` computed only where it ends)."""
    kinds = (members or {}).get(plan.split, DEFAULT)
    out = LaidOut(plan)
    leaders: dict[str, int] = {}  # high file -> index in this shard of the sample storing it
    end = 0
    for k in range(plan.first, plan.first + plan.count):
        pair, hw, out_hw = pairs[k], sizes[k], out_sizes[k]
        lead = leaders.get(pair.high_rel)
        shared = None if lead is None else out.samples[lead][1].high_data
        ref = None if lead is None else out.samples[lead][0].key
        meta = schema.sample_meta(pair.low_rel, pair.high_rel, hw, out_hw, high_ref=ref)
        layout, pieces = schema.layout_sample(pair.key, out_hw[0], out_hw[1], meta, end, shared, kinds)
        if lead is None:
            leaders[pair.high_rel] = len(out.samples)
        out.samples.append((pair, layout, -1 if lead is None else lead))
        out.pieces.extend(pieces)
        end = layout.end
    if end != plan.end:
        raise AssertionError(f"{plan.name}: laid out to {end} bytes, planned {plan.end}")
    return out
