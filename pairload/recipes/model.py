"""The reference low-light enhancement network: a small U-Net that predicts a residual over the input.

Images enter in [0, 1] (after `pairload.Normalize` with mean 0, std 1) and the output is input + residual.
`width` sets the channels of the first level; each of the `depth` levels below doubles them. A camera raw split
(`in_channels` 4, `out_channels` 3, `scale` 2) ends as SID's network does: the last layer gives scale² × 3 channels
that a pixel shuffle turns into the RGB image at twice the packed input's size (no residual: the sides differ).
A model of clips (`frames` T > 1) takes N×T×C×H×W, the T frames stacked in channels (its first layer has T·C
inputs), and predicts the target of the centre frame (T//2): the residual is then over that frame.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from ..errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    width: int = 32
    depth: int = 3
    in_channels: int = 3
    out_channels: int = 3
    scale: int = 1  # the target is this many times the input's height and width
    frames: int = 1  # clips: the input frames stacked in channels (in_channels each)

    def __post_init__(self) -> None:
        if self.width < 4 or not 1 <= self.depth <= 6:
            raise ConfigError(f"model width={self.width}, depth={self.depth}: expected width >= 4 and 1 <= depth <= 6")
        if self.in_channels < 1 or self.out_channels < 1 or self.scale < 1 or self.frames < 1:
            raise ConfigError(f"model in_channels={self.in_channels}, out_channels={self.out_channels}, "
                              f"scale={self.scale}, frames={self.frames}: expected positive numbers")

    @property
    def residual(self) -> bool:
        return self.in_channels == self.out_channels and self.scale == 1

    def to_dict(self) -> dict:
        # the fields an RGB model leaves at their defaults are left out, so checkpoints from before them still match
        doc = asdict(self)
        for name in ("in_channels", "out_channels", "scale", "frames"):
            if doc[name] == getattr(ModelConfig, name):
                del doc[name]
        return doc


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.SiLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.SiLU(inplace=True),
    )


class EnhanceUNet(nn.Module):
    def __init__(self, config: ModelConfig = ModelConfig()):
        super().__init__()
        self.config = config
        w = config.width
        chans = [w * 2**i for i in range(config.depth + 1)]
        self.stem = _block(config.in_channels * config.frames, chans[0])
        self.down = nn.ModuleList(nn.Conv2d(chans[i], chans[i], 2, stride=2) for i in range(config.depth))
        self.enc = nn.ModuleList(_block(chans[i], chans[i + 1]) for i in range(config.depth))
        self.up = nn.ModuleList(nn.ConvTranspose2d(chans[i + 1], chans[i], 2, stride=2) for i in range(config.depth))
        self.dec = nn.ModuleList(_block(2 * chans[i], chans[i]) for i in range(config.depth))
        self.head = nn.Conv2d(chans[0], config.out_channels * config.scale ** 2, 1)
        if config.residual:
            nn.init.zeros_(self.head.weight)  # start as the identity: output = input
            nn.init.zeros_(self.head.bias)

    @property
    def multiple(self) -> int:
        """Input height and width must be multiples of this."""
        return 2 ** self.config.depth

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """N×C×H×W, or a batch of clips N×T×C×H×W (its frames stacked in channels) → N×C×H×W (of a clip: its centre
        frame's)."""
        if x.dim() == 5:
            x = x.flatten(1, 2)
        h, w = x.shape[-2:]
        m = self.multiple
        pad_h, pad_w = (-h) % m, (-w) % m
        inp = nn.functional.pad(x, (0, pad_w, 0, pad_h), mode="replicate") if pad_h or pad_w else x
        skips = []
        y = self.stem(inp)
        for down, enc in zip(self.down, self.enc):
            skips.append(y)
            y = enc(down(y))
        for i in reversed(range(self.config.depth)):
            y = self.dec[i](torch.cat([self.up[i](y), skips[i]], dim=1))
        if not self.config.residual:
            s = self.config.scale
            return nn.functional.pixel_shuffle(self.head(y), s)[..., :h * s, :w * s]
        c, t = self.config.in_channels, self.config.frames
        out = (inp if t == 1 else inp[:, t // 2 * c:(t // 2 + 1) * c]) + self.head(y)  # over the centre frame
        return out[..., :h, :w]


def centre_frame(t: torch.Tensor) -> torch.Tensor:
    """The centre frame (T//2) of a batch of clips, N×T×C×H×W → N×C×H×W (a view); a batch of images as it is."""
    return t[:, t.shape[1] // 2] if t.dim() == 5 else t
