"""Display transforms: how one side's stored pixels (uint8 or uint16, any channel count, a packed Bayer mosaic)
become the 8-bit RGB a preview sheet shows, and the sentence that states the transform on the sheet. Numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..format.members import Member

RANGE, STRETCH = "range", "stretch"
MODES = (RANGE, STRETCH)
GAMMA = 2.2  # packed raw is linear in sensor counts; every other member is shown as stored (already display-encoded)
PERCENTILES = (0.5, 99.5)  # `stretch`: these percentiles of each image go to 0 and 255


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ConfigError.for_value("display", mode, f"expected {' or '.join(MODES)}")
    return mode


@dataclass(frozen=True)
class Display:
    """One side's transform. `packed`: the 4 channels are a Bayer mosaic packed as R, G, B, G planes (shown as RGB
    at the planes' size: G is the mean of both greens), scaled by black and white levels (`levels`: the recorded
    ones; else 0 and the type's maximum), multiplied by the pair's ratio when `amplify`, then gamma 1/2.2. Other
    members: divided by the type's maximum (uint8 is then exactly as stored). `mode` STRETCH: each image's
    PERCENTILES are stretched to the full range at the end."""

    member: Member
    packed: bool = False
    amplify: bool = False
    levels: bool = False  # whether black/white levels are recorded (else the type's range stands in)
    mode: str = RANGE

    def __post_init__(self) -> None:
        check_mode(self.mode)
        if self.packed and self.member.channels != 4:
            raise ConfigError(f"a packed Bayer display needs 4 channels, the member has {self.member.channels}")

    def describe(self) -> str:
        m = self.member
        top = int(np.iinfo(m.np_dtype).max)
        if self.packed:
            scale = "(v - black)/(white - black) with the recorded levels" if self.levels else f"v/{top}"
            text = (f"{m.dtype} packed Bayer R,G,B,G planes as RGB at the planes' size (G: mean of both): {scale}"
                    + (" x the pair's ratio" if self.amplify else "") + f", clipped, gamma 1/{GAMMA:g}")
        elif m.dtype == "uint8" and m.channels in (1, 3):
            text = "uint8 as stored" + (" (gray as RGB)" if m.channels == 1 else "")
        elif m.channels in (1, 3):
            text = f"{m.dtype} v x 255/{top} (the type's range), no gamma" + (" (gray as RGB)" if m.channels == 1
                                                                                 else "")
        else:
            text = f"{m.dtype} channel 0 of {m.channels} as gray, v x 255/{top}"
        if self.mode == STRETCH:
            text += f"; then each image's {PERCENTILES[0]:g}th-{PERCENTILES[1]:g}th percentiles stretched to 0-255"
        return text

    def __call__(self, pixels: np.ndarray, levels: np.ndarray | None = None, ratio: float | None = None
                 ) -> np.ndarray:
        """`pixels` (H×W×C of the member's type) as H×W×3 uint8 RGB. `levels`: the image's 4 black levels and its
        white level (packed members); `ratio`: its amplification (when `amplify`)."""
        m = self.member
        if pixels.ndim != 3 or pixels.shape[2] != m.channels:
            raise ConfigError(f"an image of shape {pixels.shape}: expected H×W×{m.channels} ({m.describe()})")
        top = float(np.iinfo(m.np_dtype).max)
        x = pixels.astype(np.float64)
        if self.packed:
            known = self.levels and levels is not None
            black, white = (np.asarray(levels[:4], np.float64), float(levels[4])) if known else (np.zeros(4), top)
            planes = (x - black) / (white - black)
            x = np.stack([planes[..., 0], (planes[..., 1] + planes[..., 3]) / 2, planes[..., 2]], axis=-1)
            if self.amplify and ratio is not None:
                x = x * float(ratio)
            x = np.clip(x, 0.0, 1.0) ** (1.0 / GAMMA)
        else:
            x = x[..., :3] / top if m.channels == 3 else np.repeat(x[..., :1] / top, 3, axis=-1)
        if self.mode == STRETCH:
            lo, hi = np.percentile(x, PERCENTILES)
            if hi > lo:
                x = np.clip((x - lo) / (hi - lo), 0.0, 1.0)
        return np.rint(x * 255.0).astype(np.uint8)


def displays(members, sensor, mode: str = RANGE) -> tuple[Display, Display]:
    """The (input, target) transforms of a split: its members (`pairload.format.members.Members`) and sensor rows
    (`pairload.format.sensor.SensorRows` or None). A camera raw input is packed with recorded levels and amplified
    by its ratio; a raw-to-raw target is packed with its own levels; a 4-channel member of another split is taken
    as packed Bayer planes without levels."""
    check_mode(mode)
    low = Display(members.low, packed=members.low.channels == 4, amplify=sensor is not None,
                  levels=sensor is not None, mode=mode)
    packed_high = sensor is not None and sensor.levels_high is not None
    high = Display(members.high, packed=members.high.channels == 4, levels=packed_high, mode=mode)
    return low, high
