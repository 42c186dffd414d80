"""Running a model on whole test images of any size: padded to the network's multiple and cropped back
(`run_whole`), or in overlapping tiles for images too large for one pass (`run_tiled`, `Tiling`).

`run_whole` pads as the Restormer and Retinexformer test scripts do: at the bottom and the right, by reflection,
up to the next multiple of the network's stride. It runs the model and keeps the top-left h×w of the output (×
`scale` for a model that enlarges). Padding never changes a pixel of the image itself, so an identity model
returns its input exactly.

`run_tiled` pads the image as `run_whole` does and covers it with tiles of `Tiling.tile` pixels. The tiles
overlap by `Tiling.overlap`, and their starts are spaced tile - overlap apart, the last tile flush with the far
edge, as in the tiled test code of SwinIR, Restormer and KAIR. Where tiles overlap, their outputs are averaged, with
the sums taken in float64, so averaging identical values gives those values exactly. The field's code averages
whole tiles (`margin=0` here). By default, `margin` = overlap // 2 pixels are first trimmed from each tile edge
that lies inside the image, so a pixel's value never comes from a tile edge. A convolutional model whose output
at a pixel depends only on inputs within `margin` pixels of it (its receptive radius) then gives the same output
tiled as whole, up to float rounding. An identity or pixelwise model gives exactly its whole-image output with any
margin.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..errors import ConfigError, EvaluationError
from ..plan.crops import is_whole
from .checks import check_image

PAD_MODES = ("reflect", "replicate", "constant")


def _check_int(name: str, value, least: int) -> None:
    if not is_whole(value) or value < least:
        raise ConfigError.for_value(name, value, f"expected a whole number, at least {least}")


def pad_to_multiple(x: torch.Tensor, multiple: int, mode: str = "reflect") -> torch.Tensor:
    """`x` padded at the bottom and the right up to the next multiple of `multiple` in height and width. Reflection
    (as Restormer and Retinexformer's test scripts do) needs a pad smaller than the side it mirrors; a smaller image
    is padded by replication instead."""
    check_image(x, "pad_to_multiple")
    _check_int("multiple", multiple, 1)
    if mode not in PAD_MODES:
        raise ConfigError.for_value("pad_mode", mode, f"expected one of {', '.join(PAD_MODES)}")
    h, w = x.shape[-2:]
    ph, pw = (-h) % multiple, (-w) % multiple
    if not (ph or pw):
        return x
    if mode == "reflect" and (ph >= h or pw >= w):
        mode = "replicate"
    return F.pad(x, (0, pw, 0, ph), mode=mode)


@torch.no_grad()
def run_whole(model, x: torch.Tensor, *, multiple: int = 1, scale: int = 1, pad_mode: str = "reflect") -> torch.Tensor:
    """`model(x)` for whole images of any size: `x` (N×C×H×W) padded up to a multiple of `multiple` (the
    network's stride: 2**levels of a U-Net, the window size of a windowed transformer, 4 for Retinexformer), and
    the output cropped back to H×W (H·scale × W·scale for a model that enlarges by `scale`). Call the model's
    `eval()` first; gradients are not kept."""
    check_image(x, "run_whole")
    _check_int("scale", scale, 1)
    h, w = x.shape[-2:]
    padded = pad_to_multiple(x, multiple, pad_mode)
    out = model(padded)
    ph, pw = padded.shape[-2:]
    if not isinstance(out, torch.Tensor) or out.dim() != 4 or tuple(out.shape[-2:]) != (ph * scale, pw * scale):
        found = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise EvaluationError(f"run_whole: the model returned {found} for a {ph}×{pw} input; expected "
                              f"N×C×{ph * scale}×{pw * scale} (pass scale= for a model that enlarges, or a model "
                              "that returns one tensor)")
    if len(out) != len(x):
        raise EvaluationError(f"run_whole: the model returned {len(out)} image(s) for a batch of {len(x)}; expected "
                              "one output image per input image (a model that keeps the batch dimension)")
    return out[..., :h * scale, :w * scale]


@dataclass(frozen=True, kw_only=True)
class Tiling:
    """Tiles of `tile`×`tile` input pixels, neighbours sharing `overlap` pixels. `margin`: pixels trimmed from each
    tile edge inside the image before the overlapping outputs are averaged (None: overlap // 2; 0: whole tiles
    averaged, as SwinIR's and Restormer's tiled tests do). It must be at most overlap // 2, or some pixels would be
    covered by no tile's kept part."""

    tile: int
    overlap: int = 32
    margin: int | None = None

    def __post_init__(self) -> None:
        _check_int("tile", self.tile, 1)
        _check_int("overlap", self.overlap, 0)
        if self.overlap >= self.tile:
            raise ConfigError(f"Tiling: overlap={self.overlap} with tile={self.tile}; expected an overlap smaller "
                              "than the tile (tiles would never advance)", option="overlap", fix="lower overlap")
        if self.margin is None:
            object.__setattr__(self, "margin", self.overlap // 2)
        _check_int("margin", self.margin, 0)
        if self.margin > self.overlap // 2:
            raise ConfigError(f"Tiling: margin={self.margin} with overlap={self.overlap}; expected at most "
                              f"overlap // 2 = {self.overlap // 2} (the kept parts of neighbouring tiles must "
                              "meet)", option="margin", fix="raise overlap or lower margin")

    def starts(self, length: int) -> list[int]:
        """Where the tiles along a side of `length` pixels begin: every tile - overlap pixels, the last one flush
        with the far edge; one tile (the whole side) when the side is no longer than a tile."""
        if length <= self.tile:
            return [0]
        return list(range(0, length - self.tile, self.tile - self.overlap)) + [length - self.tile]

    def kept(self, start: int, size: int, length: int) -> tuple[int, int]:
        """The part of the tile [start, start + size) of a side of `length` whose output is used: `margin` pixels
        fewer at each edge that lies inside the image."""
        return (start + (self.margin if start > 0 else 0),
                start + size - (self.margin if start + size < length else 0))


@torch.no_grad()
def run_tiled(model, x: torch.Tensor, tiling: Tiling, *, multiple: int = 1, scale: int = 1,
              pad_mode: str = "reflect") -> torch.Tensor:
    """`model` over `x` (N×C×H×W) in overlapping tiles (`Tiling`): the image is padded to `multiple` as in
    `run_whole` and tiled, so the tiles at its edges see the same padding as one whole-image pass would; the kept
    parts of the tiles' outputs are averaged where they overlap, and the result is cropped back to H×W (× `scale`).
    `tiling.tile` must be a multiple of `multiple`; for a network with strided layers, make `overlap` one too, so
    that every tile lies on the whole image's grid. Every image of the batch is tiled alike, one tile position at a
    time."""
    if not isinstance(tiling, Tiling):
        raise ConfigError(f"run_tiled: tiling is a {type(tiling).__name__}; expected a pairload.evaluate.Tiling, "
                          "e.g. Tiling(tile=512, overlap=32)")
    check_image(x, "run_tiled")
    _check_int("scale", scale, 1)
    _check_int("multiple", multiple, 1)
    if tiling.tile % multiple:
        raise ConfigError(f"run_tiled: tile={tiling.tile} with multiple={multiple}; expected a tile that is a "
                          f"multiple of {multiple} (the model takes only such sizes)", option="tile",
                          fix=f"use tile={max(multiple, tiling.tile // multiple * multiple)}")
    h, w = x.shape[-2:]
    padded = pad_to_multiple(x, multiple, pad_mode)
    ph, pw = padded.shape[-2:]
    s = scale
    total = count = None
    for top in tiling.starts(ph):
        th = min(tiling.tile, ph)
        y0, y1 = tiling.kept(top, th, ph)
        for left in tiling.starts(pw):
            tw = min(tiling.tile, pw)
            x0, x1 = tiling.kept(left, tw, pw)
            out = run_whole(model, padded[..., top:top + th, left:left + tw], scale=s)
            if total is None:
                # float64 sums: a value averaged with copies of itself comes back exactly (float32 outputs)
                total = torch.zeros((*out.shape[:2], ph * s, pw * s), dtype=torch.float64, device=out.device)
                count = torch.zeros((1, 1, ph * s, pw * s), dtype=torch.float64, device=out.device)
                dtype = out.dtype
            if out.shape[1] != total.shape[1]:
                raise EvaluationError(f"run_tiled: the model returned {out.shape[1]} channels for the tile at "
                                      f"({top}, {left}) but {total.shape[1]} for the first; expected a model that "
                                      "returns as many channels for every tile")
            part = out[..., (y0 - top) * s:(y1 - top) * s, (x0 - left) * s:(x1 - left) * s]
            total[..., y0 * s:y1 * s, x0 * s:x1 * s] += part
            count[..., y0 * s:y1 * s, x0 * s:x1 * s] += 1
    return (total / count).to(dtype)[..., :h * s, :w * s]
