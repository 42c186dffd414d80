"""From a cut block to `PairBatch`es: the block's (low, high) views in the members' torch types (`sides_of`), the
torch executor of the orientation codes (`apply_codes`, the gather `pairload.dihedral` defines), and the one converter
(`batches_of`, with what a batch holds besides its pixels: `Rows`). Torch only."""

from __future__ import annotations

from typing import NamedTuple, Sequence

import torch

from ..batch import PairBatch, SensorBatch
from ..dihedral import HFLIP, TRANSPOSE, VFLIP
from ..format.members import DTYPE_TABLE

TORCH_DTYPES = {name: getattr(torch, row[1]) for name, row in DTYPE_TABLE.items()}
_WORK_DTYPES = {name: getattr(torch, row[2]) for name, row in DTYPE_TABLE.items()}  # what torch can flip


def apply_codes(pixels: torch.Tensor, code: torch.Tensor | None) -> torch.Tensor:
    """Apply each sample's orientation code (`pairload.dihedral`) to a (..., N, H, W, C) tensor (both sides stacked
    in front, or one side): transpose, then vertical flip, then horizontal flip. Branch-free (`torch.where`), so no
    device synchronisation happens here."""
    if code is None:
        return pixels
    lead = pixels.dim() - 4
    mask = code.view(*([1] * lead), -1, 1, 1, 1)
    h, w = lead + 1, lead + 2
    if pixels.shape[h] == pixels.shape[w]:
        pixels = torch.where((mask & TRANSPOSE) != 0, pixels.transpose(h, w), pixels)
    pixels = torch.where((mask & VFLIP) != 0, pixels.flip(h), pixels)
    return torch.where((mask & HFLIP) != 0, pixels.flip(w), pixels)


def sides_of(layout, flat: torch.Tensor, work: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(low, high) N×H×W×C tensors over `flat`, a block laid out by `layout` (`members.BatchLayout`): flat uint8
    bytes, or the (2, N, H, W, C) tensor of a stacked layout; `work`: in the dtypes torch can flip (uint16 as
    int16)."""
    table = _WORK_DTYPES if work else TORCH_DTYPES
    if flat.dim() == 5:
        return flat[0], flat[1]
    n, h, w, _ = layout.low_shape
    low = flat[:n * layout.low.nbytes(h, w)].view(table[layout.low.dtype]).view(layout.low_shape)
    n, h, w, _ = layout.high_shape
    high = flat[layout.high_offset:layout.high_offset + n * layout.high.nbytes(h, w)]
    return low, high.view(table[layout.high.dtype]).view(layout.high_shape)


class Rows(NamedTuple):
    """What a `PairBatch` holds besides its pixels, for one planned batch (see `PairBatch`)."""

    keys: list[str]
    padded: torch.Tensor
    source: list[str] | None = None
    sensor: SensorBatch | None = None
    degradation: dict[str, torch.Tensor] | None = None


def oriented_sides(layout, block: torch.Tensor, code: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(low, high) N×H×W×C of a block laid out by `layout` (flat uint8 bytes, or the (2, N, H, W, C) tensor of a
    stacked layout), oriented by `code` (None: already oriented). A stacked block is oriented as one tensor."""
    if code is None:
        return sides_of(layout, block)
    if layout.stacked:
        both = block if block.dim() == 5 else block[:layout.total].view(TORCH_DTYPES[layout.low.dtype]).view(
            layout.stacked_shape)
        both = apply_codes(both.view(_WORK_DTYPES[layout.low.dtype]), code)
        return _final(both[0], layout.low.dtype), _final(both[1], layout.high.dtype)
    low, high = (apply_codes(side, code) for side in sides_of(layout, block, work=True))
    return _final(low, layout.low.dtype), _final(high, layout.high.dtype)


def _final(t: torch.Tensor, dtype: str) -> torch.Tensor:
    return t if t.dtype == TORCH_DTYPES[dtype] else t.view(TORCH_DTYPES[dtype])


def batches_of(low: torch.Tensor, high: torch.Tensor, rows: Sequence[Rows]) -> list[PairBatch]:
    """The one converter into `PairBatch`: oriented N×H×W×C sides holding the rows of one or more planned batches, in
    order (a kernel launch cuts several; DALI delivers one) → one batch of N×C×H×W views per `Rows`."""
    low, high = low.permute(0, 3, 1, 2), high.permute(0, 3, 1, 2)
    if len(rows) == 1:
        return [_batch(low, high, rows[0])]
    sizes = [len(r.keys) for r in rows]
    return [_batch(lo, hi, r) for lo, hi, r in zip(low.split(sizes), high.split(sizes), rows)]


def _batch(low: torch.Tensor, high: torch.Tensor, r: Rows) -> PairBatch:
    return PairBatch(low, high, list(r.keys), r.padded, r.source, r.sensor, r.degradation)
