"""Video splits for the clip tests: sequences of frames whose pixels encode (sequence, frame, row, column), and an
independent numpy reference that reads a delivered clip back.

Frame f of sequence s has low pixel (y, x) = (32·s + f, y, x) and high = 255 - low. So a clip's frames name their
sequence and frame in channel 0, and channels 1 and 2 hold the window's rows and columns after its orientation:
every frame of a clip must hold the same rows and columns, on both sides."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from conftest import write_rgb


def frame_pixels(s: int, f: int, h: int, w: int) -> np.ndarray:
    yy, xx = np.mgrid[0:h, 0:w]
    return np.stack([np.full_like(yy, 32 * s + f), yy, xx], axis=-1).astype(np.uint8)


def make_video_raw(root: Path, counts: list[int], size: tuple[int, int] = (40, 56), split: str = "train") -> Path:
    """root/split/{low,high}/sceneSS/FFFF.png: len(counts) sequences of counts[s] frames."""
    h, w = size
    for s, n in enumerate(counts):
        for f in range(n):
            lo = frame_pixels(s, f, h, w)
            write_rgb(root / split / "low" / f"scene{s:02d}" / f"{f:04d}.png", lo)
            write_rgb(root / split / "high" / f"scene{s:02d}" / f"{f:04d}.png", 255 - lo)
    return root


def pack_video(raw: Path, out: Path, shard_size: int = 64 * 1024) -> Path:
    """`pairload pack RAW OUT --sequences`."""
    from pairload.pack import PackOptions, pack

    pack(raw, out, PackOptions(workers=1, shard_size=shard_size, sequences=True))
    return out


# the dihedral codes (`pairload.dihedral`): transpose, then vertical flip, then horizontal flip
def orient(a: np.ndarray, code: int) -> np.ndarray:
    """(H, W, ...) oriented by code, as the planner defines it."""
    if code & 4:
        a = np.swapaxes(a, 0, 1)
    if code & 2:
        a = a[::-1]
    if code & 1:
        a = a[:, ::-1]
    return a


def read_clip(low: np.ndarray, high: np.ndarray) -> tuple[int, int, int, int, int]:
    """(sequence, first frame, y, x, code) of one delivered clip (T, C, H, W) uint8 of both sides, once every check
    of the reference holds: consecutive frames of one sequence, high = 255 - low, every frame the same window and
    orientation (found by trying the eight codes on the first frame)."""
    assert np.array_equal(high, 255 - low), "the target is not the input's own frame"
    t, _, h, w = low.shape
    ident = low[:, 0, 0, 0].astype(int)
    assert np.all(low[:, 0] == ident[:, None, None]), "a frame mixes pixels of several frames"
    seq, first = ident[0] // 32, ident[0] % 32
    steps = np.diff(ident)
    repeats = np.flatnonzero(steps == 0)  # short="pad": the last frame repeats, at the end only
    assert np.all((steps == 1) | (steps == 0)) and (not len(repeats) or np.all(steps[repeats[0]:] == 0)), \
        f"frames {ident} are not consecutive frames of one sequence"
    rows_cols = low[:, 1:].transpose(0, 2, 3, 1)  # (T, H, W, 2)
    assert np.all(rows_cols == rows_cols[:1]), "frames of one clip have different windows or orientations"
    for code in range(8):
        back = orient(rows_cols[0], code)  # the code that undoes the clip's orientation
        y0, x0 = int(back[0, 0, 0]), int(back[0, 0, 1])
        hh, ww = back.shape[:2]
        yy, xx = np.mgrid[y0:y0 + hh, x0:x0 + ww]
        if np.array_equal(back[..., 0], yy) and np.array_equal(back[..., 1], xx):
            return int(seq), int(first), y0, x0, code
    raise AssertionError("the window is not an oriented rectangle of the frame")
