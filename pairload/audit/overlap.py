"""`refuse_overlap`: the one check the training entry points (the reference loop, Lightning's `PairDataModule`, the
BasicSR command) run before training: a validation split whose images show scenes of any training source's images
(by content: `audit.run.matches`) is refused, unless the caller's override is given."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..errors import ConfigError, ImageError
from .facts import split_facts
from .run import AuditedSplit, is_training, matches

SHOWN = 3  # overlapping samples a refusal names
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm")


class ImageFiles:
    """The images under folders (a validation set kept as image files: BasicSR's `dataroot_gt`, `dataroot_lq`),
    read as one split of targets: each image a sample, keyed by its path."""

    targets_only = True
    sensor = None

    def __init__(self, folders, split: str = "val"):
        self.split = split
        self.where = ", ".join(str(f) for f in folders)
        found = sorted((p, f"{Path(f).name}/{p.relative_to(f).as_posix()}") for f in folders
                       for p in Path(f).rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
        self.paths = [p for p, _ in found]
        self.keys = [key for _, key in found]

    def __len__(self) -> int:
        return len(self.paths)

    def arrays(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        import cv2

        img = cv2.imread(str(self.paths[i]), cv2.IMREAD_UNCHANGED)
        if img is None:
            raise ImageError(f"{self.paths[i]}: cannot be decoded as an image; replace it or remove it from the "
                             "validation folder")
        if img.ndim == 3:
            img = np.ascontiguousarray(img[..., 2::-1]) if img.shape[2] >= 3 else img
        return img, img


def refuse_overlap(training, validation, *, split: str = "train", val_split: str, override: str,
                   remote: dict | None = None, workers: int | None = None) -> None:
    """Raise a ConfigError naming up to `SHOWN` samples of `val_split` of `validation` (a shard folder, URL or
    `ShardDataset`; or `ImageFiles`) that show a scene of the training data: `training` (a folder, URL or
    `ShardSource`, or a mix `{name: folder or (folder, split)}`) read at `split`. `override` is how the caller's
    user says to go on anyway (`--allow-overlap`, `allow_overlap=True`). Facts a pack lacks are measured now and
    kept beside its index."""
    from ..read.shards import open_shards

    remote = remote or {}
    val_ds = validation if isinstance(validation, ImageFiles) else open_shards(validation, val_split, **remote)
    val = _audited(_name(validation, val_ds), val_ds, workers)
    found: dict[int, tuple] = {}
    for name, ds in _training(training, split, remote):
        train = _audited(name, ds, workers)
        for m in matches(val, train, workers=workers):
            found.setdefault(m.a, (train, m))
    if not found:
        return
    shown = ", ".join(f"{val.ds.keys[a]!r} (= {t.pack}:{t.name} {t.ds.keys[m.b]!r})"
                      for a, (t, m) in sorted(found.items())[:SHOWN])
    more = " …" if len(found) > SHOWN else ""
    raise ConfigError(f"validation split {val_split!r} of {val_ds.where}: {len(found)} of its {len(val_ds)} samples "
                      f"show scenes of the training data: {shown}{more}; validate on a split the model does not "
                      f"train on (`pairload audit` lists every overlap), or pass {override} to train anyway",
                      option="allow_overlap")


def _audited(name: str, ds, workers: int | None) -> AuditedSplit:
    got = split_facts(ds, workers=workers)
    return AuditedSplit(name, ds.split, ds, got.facts, got.origin, is_training(ds.split), got.measures)


def _training(training, split: str, remote: dict) -> list[tuple[str, object]]:
    """(name, plain split) of each training source."""
    from ..read.shards import ShardSource, open_shards

    if isinstance(training, ShardSource):
        names = [name for name, _ in training.groups]
        return [(name or _name(training, ds), ds) for name, ds in zip(names, training.sources)]
    if isinstance(training, dict):
        out = []
        for name, where in training.items():
            folder, part_split = where if isinstance(where, tuple) else (where, split)
            out.append((str(name), open_shards(folder, part_split, **remote)))
        return out
    ds = open_shards(training, split, **remote)
    return [(_name(training, ds), ds)]


def _name(given, ds) -> str:
    """A pack as a refusal names it: its folder's name."""
    where = given if isinstance(given, (str, os.PathLike)) else ds.where
    return Path(str(where).rstrip("/")).name or str(where)
