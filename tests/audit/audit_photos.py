"""Real photographs for the audit's tests (scikit-image's sample images), and what a dataset does to them: tiles that
show distinct scenes, low-light inputs made from them (darker, noisier), and the same scene renamed, re-encoded,
resized, cropped or brightened. Pairs are written as PNG folders for `pairload pack`."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

# scikit-image's photographs of real scenes (not its textures, microscopy or drawings)
PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "stereo_motorcycle", "hubble_deep_field", "camera",
          "immunohistochemistry")


def photos() -> list[np.ndarray]:
    data = pytest.importorskip("skimage.data")
    out = []
    for name in PHOTOS:
        img = getattr(data, name)()
        img = img[0] if isinstance(img, tuple) else img
        out.append(np.ascontiguousarray(np.repeat(img[..., None], 3, 2) if img.ndim == 2 else img[..., :3]))
    return out


def tiles(h: int, w: int) -> list[np.ndarray]:
    """Non-overlapping h×w tiles of the photographs, each a scene of its own, in a fixed shuffled order."""
    out = [p[y:y + h, x:x + w] for p in photos() for y in range(0, p.shape[0] - h + 1, h)
           for x in range(0, p.shape[1] - w + 1, w)]
    order = np.random.default_rng(58).permutation(len(out))
    return [np.ascontiguousarray(out[i]) for i in order]


def darken(img: np.ndarray, seed: int = 0, gain: float = 0.1, noise: float = 1.5) -> np.ndarray:
    """A low-light input of the scene: a tenth of the light, with sensor noise."""
    rng = np.random.default_rng(seed)
    return np.clip(np.round(img * gain + rng.normal(0, noise, img.shape)), 0, 255).astype(np.uint8)


def jpeg(img: np.ndarray, quality: int = 75) -> np.ndarray:
    ok, buf = cv2.imencode(".jpg", np.ascontiguousarray(img[..., ::-1]), [cv2.IMWRITE_JPEG_QUALITY, quality])
    return cv2.imdecode(buf, cv2.IMREAD_COLOR)[..., ::-1]


def resized(img: np.ndarray, f: float = 0.6) -> np.ndarray:
    return cv2.resize(img, None, fx=f, fy=f, interpolation=cv2.INTER_AREA)


def cropped(img: np.ndarray, fraction: float = 0.03) -> np.ndarray:
    dy, dx = int(img.shape[0] * fraction), int(img.shape[1] * fraction)
    return img[dy:img.shape[0] - dy, dx:img.shape[1] - dx]


def brightened(img: np.ndarray) -> np.ndarray:
    return np.clip(img.astype(np.float32) * 1.3 + 12, 0, 255).astype(np.uint8)


# the same scene as a dataset may hold it again: (name, change)
CHANGES = (("renamed", lambda img: img), ("jpeg75", jpeg), ("resized", resized), ("cropped", cropped),
           ("brightened", brightened))


def write_pairs(folder: Path, split: str, targets: list[np.ndarray], prefix: str = "", seed: int = 0,
                inputs: dict[int, np.ndarray] | None = None) -> list[str]:
    """targets[i] and its darkened input (or inputs[i]) as folder/split/{low,high}/<prefix><i>.png; returns the
    keys."""
    keys = []
    for i, high in enumerate(targets):
        key = f"{prefix}{i:03d}"
        low = (inputs or {}).get(i)
        for side, img in (("low", darken(high, seed + i) if low is None else low), ("high", high)):
            path = folder / split / side / f"{key}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            assert cv2.imwrite(str(path), np.ascontiguousarray(img[..., ::-1]))
        keys.append(key)
    return keys
