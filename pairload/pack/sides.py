"""Each split's members, from the headers pack probed: one element type and channel count per side (input, target)
and the target at the input's size. A side whose files disagree (8- and 16-bit exports mixed, .npy arrays of two
channel counts) is refused naming the odd files."""

from __future__ import annotations

from dataclasses import astuple
from pathlib import Path

from ..errors import ImageError
from ..format.members import Member, Members
from ..folders.decode import Header
from ..folders.discover import Pair
from .sensor import CameraPlan

SHOWN = 5  # odd files named in a refusal


def split_members(raw: Path, pairs: list[Pair], headers: list[Header], to_8bit: bool,
                  camera: CameraPlan | None = None, targets_only: bool = False) -> dict[str, Members]:
    """{split: Members} of `pairs` (headers: low then high of each pair); `camera`: how camera raw splits are
    stored; `targets_only`: each pair's one file is its target, stored alone, and the input's type is the target's."""
    # (split, side) -> kind -> [files of that kind, the first SHOWN + 1 of them]: counts, not every file's name (a
    # dict of every file took ~100 bytes a pair); a target shared by consecutive pairs is counted once
    found: dict[tuple[str, int], dict[tuple[str, int], list]] = {}
    cams = camera.splits if camera is not None else {}
    before = None
    for i, pair in enumerate(pairs):
        for side, rel in enumerate((pair.low_rel, pair.high_rel)):
            if (targets_only and side == 0) or (side == 1 and before is not None
                                                 and (before.split, before.high_rel) == (pair.split, rel)):
                continue
            kinds = found.setdefault((pair.split, side), {})
            header = headers[2 * i + side]
            cs = cams.get(pair.split)
            kind = header.stored(to_8bit) if cs is None else astuple(cs.member(side, header))
            seen = kinds.setdefault(kind, [0, []])
            seen[0] += 1
            if len(seen[1]) <= SHOWN:
                seen[1].append(rel)
        before = pair
    out: dict[str, dict[int, Member]] = {}
    for (split, side), kinds in found.items():
        if len(kinds) > 1:
            raise ImageError(_mixed(raw, split, side, kinds))
        (dtype, channels), = kinds
        out.setdefault(split, {})[side] = Member(dtype, channels)
    return {split: Members(low=sides.get(0, sides[1]), high=sides[1], scale=cams[split].scale if split in cams else 1)
            for split, sides in out.items()}


def _mixed(raw: Path, split: str, side: int, kinds: dict[tuple[str, int], list]) -> str:
    """The refusal of a side holding files of several pixel types: the largest group is taken as what was meant."""
    ranked = sorted(kinds.items(), key=lambda kv: -kv[1][0])  # stable: the first seen wins a tie
    (dtype, channels), (usual, _) = ranked[0]
    odd = [(kind, rel) for kind, (_, rels) in ranked[1:] for rel in rels]
    count = sum(n for _, (n, _) in ranked[1:])
    named = ", ".join(f"{rel} ({k[0]} ×{k[1]})" for k, rel in odd[:SHOWN])
    more = f" and {count - SHOWN} more" if count > SHOWN else ""
    what = "inputs" if side == 0 else "targets"
    only_depth = len({c for _, c in kinds}) == 1
    fix = ("re-export the odd files like the others" +
           (", or pass --to-8bit to store every image as 8 bits" if only_depth else ""))
    files = "1 file is" if usual == 1 else f"{usual} files are"
    return (f"{raw}: split {split!r}: the {what} are not all of one pixel type: {files} {dtype} ×{channels} but these "
            f"are not: {named}{more} (an accidental export?); a side of a split is stored as one type: {fix}")
