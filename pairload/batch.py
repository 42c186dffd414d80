"""The batch every loader yields (`PairBatch`, with a camera raw split's `SensorBatch`), and the two ways it becomes
float on the device (`Normalize`, `RawNormalize`).

Batches keep their stored integer types until they are on the device; normalising is the one place where images
become float. (How cut blocks become batches: `pairload.cut.convert`.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn

from .errors import ConfigError


@dataclass
class SensorBatch:
    """The per-row facts of a camera raw batch, on its device (float32 views of one (N, 8) or (N, 13) table; a batch
    of clips: (N, T, 8) or (N, T, 13), each frame's):
    `ratio` (N,) the input's amplification, `exposure` (N, 2) input and target seconds, `black` (N, 4) and
    `white` (N,) the input's levels in sensor counts (packed channel order R, G, B, G), and `black_high`,
    `white_high` the same for a packed raw target (None for a developed one)."""

    values: torch.Tensor

    @property
    def ratio(self) -> torch.Tensor:
        return self.values[..., 0]

    @property
    def exposure(self) -> torch.Tensor:
        return self.values[..., 1:3]

    @property
    def black(self) -> torch.Tensor:
        return self.values[..., 3:7]

    @property
    def white(self) -> torch.Tensor:
        return self.values[..., 7]

    @property
    def black_high(self) -> torch.Tensor | None:
        return self.values[..., 8:12] if self.values.shape[-1] > 8 else None

    @property
    def white_high(self) -> torch.Tensor | None:
        return self.values[..., 12] if self.values.shape[-1] > 8 else None


@dataclass
class PairBatch:
    """low and high: N×C×H×W tensors on the loader's device (channels_last memory layout), of the split's member
    types (`pairload.format.members`: uint8 RGB at one size by default; a packed raw input may have 4 channels and
    half the target's size); keys: the shard key of each row ("source/key" when sources are mixed); padded: bool N,
    True for samples repeated to fill the last batch (last_batch='pad'); source: the source name of each row when
    sources are mixed, else None; sensor: a camera raw split's ratios and levels (`SensorBatch`, which
    `RawNormalize` applies), else None; degradation: when the inputs are degraded from the targets (`degrade=`),
    each parameter of the model as an (N,) float32 tensor on the batch's device (NaN for rows of a source that is not
    degraded), else None.

    A batch of clips (`clips=T`): low and high N×T×C×H×W, keys N lists of the T frames' keys, and padded, source
    and degradation per clip (one parameter set per clip); sensor per frame."""

    low: torch.Tensor
    high: torch.Tensor
    keys: list[str]
    padded: torch.Tensor
    source: list[str] | None = None
    sensor: SensorBatch | None = None
    degradation: dict[str, torch.Tensor] | None = None

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def valid(self) -> torch.Tensor:
        """bool N: rows that are not padding (count these, and only these, in validation metrics)."""
        return ~self.padded

    @property
    def frames(self) -> int:
        """Frames per clip (T) of a batch of clips, else 1."""
        return self.low.shape[1] if self.low.dim() == 5 else 1

    def as_clips(self, frames: int) -> "PairBatch":
        """This batch of N·T frames (each T consecutive rows one clip's) as N clips: views, nothing copied."""
        n = len(self.keys) // frames
        keys = list(self.keys)
        return PairBatch(self.low.unflatten(0, (n, frames)), self.high.unflatten(0, (n, frames)),
                         [keys[i * frames:(i + 1) * frames] for i in range(n)], self.padded[::frames],
                         None if self.source is None else list(self.source[::frames]),
                         None if self.sensor is None else SensorBatch(self.sensor.values.unflatten(0, (n, frames))),
                         None if self.degradation is None else {k: v[::frames] for k, v in self.degradation.items()})


FULL_SCALE = {torch.uint8: 255.0, torch.uint16: 65535.0}  # the value that means 1.0, per stored integer type


class Normalize(nn.Module):
    """Integer N×C×H×W on the device → float, `(x / full - mean) / std` with `full` the type's largest value (255
    for uint8, 65535 for uint16 members); optionally channels_last.

    Mean and std are given for images in [0, 1] and pre-scaled per type, so the conversion is one fused pass.
    """

    def __init__(self, mean: Sequence[float] = (0.0, 0.0, 0.0), std: Sequence[float] = (1.0, 1.0, 1.0), *,
                 channels_last: bool = False, dtype: torch.dtype = torch.float32):
        super().__init__()
        if len(mean) != len(std) or any(s <= 0 for s in std):
            raise ConfigError(f"Normalize: mean {tuple(mean)} and std {tuple(std)} need one positive std per "
                              "channel")
        mean_t = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
        std_t = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
        self.register_buffer("unit_mean", mean_t, persistent=False)
        self.register_buffer("unit_std", std_t, persistent=False)
        for name, full in (("8", 255.0), ("16", 65535.0)):  # x·inv - shift = (x / full - mean) / std
            self.register_buffer(f"inv{name}", 1.0 / (std_t * full), persistent=False)
            self.register_buffer(f"shift{name}", mean_t / std_t, persistent=False)
        self.channels_last = channels_last
        self.dtype = dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype not in FULL_SCALE:
            raise ConfigError(f"Normalize takes the stored integer images (uint8 or uint16), got {x.dtype}: "
                              "normalise once, on the device, straight from the batch")
        if x.shape[-3] != self.unit_mean.shape[1] and self.unit_mean.shape[1] != 1:
            raise ConfigError(f"Normalize: the images have {x.shape[-3]} channels but mean and std give "
                              f"{self.unit_mean.shape[1]}; give one mean and std per channel (or one for all)")
        inv, shift = (self.inv8, self.shift8) if x.dtype == torch.uint8 else (self.inv16, self.shift16)
        out = x.to(self.dtype) * inv.to(self.dtype) - shift.to(self.dtype)
        return out.contiguous(memory_format=_layout(out, self.channels_last))

    def pair(self, batch: PairBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """(input, target) of a batch as floats (what `RawNormalize` returns for camera raw batches)."""
        return self(batch.low), self(batch.high)

    def denormalize(self, y: torch.Tensor) -> torch.Tensor:
        """float in the normalised space → float in [0, 1] (for metrics and pictures), whatever the stored type."""
        return y.float() * self.unit_std + self.unit_mean


def _layout(x: torch.Tensor, channels_last: bool) -> torch.memory_format:
    """channels_last where asked for N×C×H×W images; clips (N×T×C×H×W) stay contiguous."""
    return torch.channels_last if channels_last and x.dim() == 4 else torch.contiguous_format


class RawNormalize(nn.Module):
    """A camera raw batch → float (input, target) on the device, as SID's training does: the input's black level is
    subtracted per packed channel (negative counts become 0) and divided by white - black, multiplied by the pair's
    ratio (`amplify`) and clipped to [0, 1] (`clip`); a developed 16-bit target is divided by 65535, a packed raw
    target is levelled like the input (without the ratio). All from the batch's `sensor` facts, in one pass per
    side; N×C×H×W out, channels_last if asked."""

    def __init__(self, *, amplify: bool = True, clip: bool = True, channels_last: bool = False,
                 dtype: torch.dtype = torch.float32):
        super().__init__()
        self.amplify, self.clip, self.channels_last, self.dtype = amplify, clip, channels_last, dtype

    def forward(self, batch: PairBatch) -> tuple[torch.Tensor, torch.Tensor]:
        s = batch.sensor
        if s is None:
            raise ConfigError("RawNormalize: the batch carries no sensor facts (its split is not camera raw); use "
                              "Normalize for image splits")
        if batch.low.dtype != torch.uint16 or batch.low.shape[-3] != s.black.shape[-1]:
            raise ConfigError(f"RawNormalize: expected packed uint16 inputs with {s.black.shape[-1]} channels, got "
                              f"{batch.low.dtype} with {batch.low.shape[-3]}")
        x = self._levelled(batch.low, s.black, s.white, s.ratio if self.amplify else None)
        if s.black_high is not None:
            y = self._levelled(batch.high, s.black_high, s.white_high, None)
        else:
            y = batch.high.to(self.dtype) * (1.0 / FULL_SCALE.get(batch.high.dtype, 1.0))
        return (x.contiguous(memory_format=_layout(x, self.channels_last)),
                y.contiguous(memory_format=_layout(y, self.channels_last)))

    pair = forward  # the same call as Normalize.pair, so a training loop takes either

    def _levelled(self, counts: torch.Tensor, black: torch.Tensor, white: torch.Tensor,
                  ratio: torch.Tensor | None) -> torch.Tensor:
        lead = counts.shape[:-3]  # (N,) or, for clips, (N, T): the facts are per row
        black = black.to(self.dtype).view(*lead, -1, 1, 1)
        scale = 1.0 / (white.to(self.dtype).view(*lead, 1, 1, 1) - black)
        if ratio is not None:
            scale = scale * ratio.to(self.dtype).view(*lead, 1, 1, 1)
        out = (counts.to(self.dtype) - black).clamp_min_(0) * scale
        return out.clamp_(max=1.0) if self.clip else out
