"""The one planner of randomness: sample order, rank shares, crop windows and dihedral augmentation.

Everything is a pure function of (seed, epoch, rank, world_size) and of each sample's key, so every backend
(ram, GPU-resident, WebDataset, DALI) executes the same plan, and input and target always receive the same
window and the same transform. Numpy only.

Augmentation code (one per sample, applied to both images after cropping, in this order):
bit 2 (4): transpose H and W (square crops only), bit 1 (2): flip vertically, bit 0 (1): flip horizontally.
The eight codes are the eight symmetries of the square (flips and 90° rotations).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from .errors import ConfigError

LAST_BATCH = ("drop", "pad", "partial")
HFLIP, VFLIP, TRANSPOSE = 1, 2, 4

def key_hashes(keys) -> np.ndarray:
    """A stable 64-bit hash of each sample key (uint64 array); the planner's handle on a sample."""
    return np.array([int.from_bytes(hashlib.blake2b(k.encode(), digest_size=8).digest(), "little") for k in keys],
                    dtype=np.uint64)


def _splitmix(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _stream(key_hash: np.ndarray, seed: int, epoch: int, stream: int) -> np.ndarray:
    salt = _splitmix(np.array([(seed & 0xFFFFFFFF) << 32 | (epoch & 0xFFFFFF) << 8 | stream], dtype=np.uint64))
    return _splitmix(np.asarray(key_hash, dtype=np.uint64) ^ salt)


def sample_params(key_hash: np.ndarray, hw: np.ndarray, *, seed: int, epoch: int, crop: int | None,
                  augment: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Crop corner (y, x) and augmentation code for each sample, from its key alone: (y, x, code) int64 arrays."""
    key_hash = np.atleast_1d(np.asarray(key_hash, dtype=np.uint64))
    hw = np.asarray(hw, dtype=np.int64).reshape(-1, 2)
    n = len(key_hash)
    if crop is None:
        y = x = np.zeros(n, dtype=np.int64)
    else:
        y = (_stream(key_hash, seed, epoch, 1) % (hw[:, 0] - crop + 1).astype(np.uint64)).astype(np.int64)
        x = (_stream(key_hash, seed, epoch, 2) % (hw[:, 1] - crop + 1).astype(np.uint64)).astype(np.int64)
    if not augment:
        return y, x, np.zeros(n, dtype=np.int64)
    code = (_stream(key_hash, seed, epoch, 3) & np.uint64(7)).astype(np.int64)
    if crop is None:
        code[hw[:, 0] != hw[:, 1]] &= HFLIP | VFLIP  # a non-square image cannot be transposed in place
    return y, x, code


def epoch_order(n: int, *, seed: int, epoch: int, shuffle: bool = True) -> np.ndarray:
    """The epoch's permutation of a split's sample indices, the same on every rank."""
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    return np.random.default_rng([seed & 0xFFFFFFFF, epoch, 0x5EED]).permutation(n).astype(np.int64)


def epoch_stream(n: int, *, seed: int, epoch: int, world_size: int, batch_size: int, last_batch: str,
                 shuffle: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(indices, padded) of the whole epoch, before it is dealt to ranks: the epoch's order, wrapped around for
    'pad' until every rank gets the same number of whole batches (repeats flagged)."""
    order = epoch_order(n, seed=seed, epoch=epoch, shuffle=shuffle)
    if last_batch == "pad":
        total = -(-n // (world_size * batch_size)) * world_size * batch_size
        return np.resize(order, total), np.arange(total) >= n
    if last_batch not in LAST_BATCH:
        raise ConfigError(f"last_batch={last_batch!r}: expected one of {', '.join(LAST_BATCH)}")
    return order, np.zeros(n, dtype=bool)


def _even(idx: np.ndarray, pad: np.ndarray, world_size: int, batch_size: int, last_batch: str,
          resumed: bool) -> tuple[np.ndarray, np.ndarray]:
    """The stream cut (drop) or wrapped (pad) so that every rank gets the same number of batches.

    drop: floor(n / world_size) samples per rank, rounded down to whole batches; in an epoch resumed mid-way the
    rest is only cut to equal shares, so each rank's last batch may be short (never more than world_size - 1
    samples are skipped beyond what the uninterrupted epoch skipped). pad: a resumed epoch wraps its rest again."""
    if last_batch == "drop":
        per = len(idx) // world_size if resumed else (len(idx) // world_size) // batch_size * batch_size
        return idx[: per * world_size], pad[: per * world_size]
    if last_batch == "pad" and resumed:
        total = -(-len(idx) // (world_size * batch_size)) * world_size * batch_size
        if total > len(idx) and len(idx):
            return np.resize(idx, total), np.concatenate([pad, np.ones(total - len(idx), dtype=bool)])
    return idx, pad


def _bounds(length: int, rank: int, world_size: int) -> tuple[int, int]:
    return rank * length // world_size, (rank + 1) * length // world_size


def _take(idx: np.ndarray, pad: np.ndarray, rank: int, world_size: int, deal: str) -> tuple[np.ndarray, np.ndarray]:
    if deal == "strided":
        return idx[rank::world_size], pad[rank::world_size]
    lo, hi = _bounds(len(idx), rank, world_size)
    return idx[lo:hi], pad[lo:hi]


def _after(idx: np.ndarray, pad: np.ndarray, world_size: int, taken: int, deal: str) -> tuple[np.ndarray, np.ndarray]:
    """What is left of an evenly dealt stream once every rank has taken `taken` samples of its share."""
    if deal == "strided":  # rank r's j-th sample sits at j * world_size + r
        return idx[taken * world_size:], pad[taken * world_size:]
    keep = np.concatenate([np.arange(lo + min(taken, hi - lo), hi) for lo, hi in
                           (_bounds(len(idx), r, world_size) for r in range(world_size))]).astype(np.int64)
    return idx[keep], pad[keep]


DEALS = ("strided", "contiguous")


def rank_share(n: int, *, seed: int, epoch: int, rank: int, world_size: int, batch_size: int, last_batch: str,
               shuffle: bool = True, deal: str = "strided",
               consumed: tuple[tuple[int, int], ...] = ()) -> tuple[np.ndarray, np.ndarray]:
    """(indices, padded) for this rank's part of the epoch, batch-aligned according to `last_batch`.

    drop: every rank gets floor(n / world_size) samples rounded down to whole batches; the rest is skipped.
    pad: the order wraps around until every rank has the same number of whole batches; repeats are flagged.
    partial: every sample exactly once; ranks differ by at most one sample and the last batch may be short.
    deal: "strided" (rank r takes every world_size-th sample) or "contiguous" (rank r takes one block, as
    DALI's sharded readers read).
    consumed: ((world_size, batches), …): the epoch was started before, by that many ranks each delivering that
    many batches (then by the next entry's ranks, …); this rank's share is then of the rest of the epoch, which
    is dealt again over `world_size` ranks. With the same world size the rest is exactly the uninterrupted tail.
    """
    if deal not in DEALS:
        raise ConfigError(f"deal={deal!r}: expected one of {', '.join(DEALS)}")
    idx, pad = epoch_stream(n, seed=seed, epoch=epoch, world_size=world_size if not consumed else consumed[0][0],
                            batch_size=batch_size, last_batch=last_batch, shuffle=shuffle)
    resumed = False
    for ws, batches in consumed:
        idx, pad = _even(idx, pad, ws, batch_size, last_batch, resumed)
        idx, pad = _after(idx, pad, ws, batches * batch_size, deal)
        resumed = True
    idx, pad = _even(idx, pad, world_size, batch_size, last_batch, resumed)
    return _take(idx, pad, rank, world_size, deal)


@dataclass(frozen=True)
class BatchPlan:
    """One batch: sample indices, crop corners, augmentation codes and padding flags (numpy arrays)."""

    index: np.ndarray
    y: np.ndarray
    x: np.ndarray
    code: np.ndarray
    padded: np.ndarray

    def __len__(self) -> int:
        return len(self.index)


@dataclass(frozen=True, kw_only=True)
class PlanConfig:
    batch_size: int
    crop: int | None
    seed: int = 0
    rank: int = 0
    world_size: int = 1
    last_batch: str = "drop"
    augment: bool = True
    shuffle: bool = True

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError(f"batch_size={self.batch_size}: expected at least 1")
        if self.crop is not None and self.crop < 1:
            raise ConfigError(f"crop={self.crop}: expected a positive size in pixels, or None for whole images")
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ConfigError(f"rank={self.rank}, world_size={self.world_size}: expected 0 <= rank < world_size")
        if self.last_batch not in LAST_BATCH:
            raise ConfigError(f"last_batch={self.last_batch!r}: expected one of {', '.join(LAST_BATCH)}")


def check_split(cfg: PlanConfig, keys, hw: np.ndarray, split: str) -> None:
    """Refuse a crop larger than the smallest image, mixed sizes without a crop, and a batch larger than a rank's share."""
    n = len(keys)
    if n == 0:
        raise ConfigError(f"split {split!r} is empty")
    if cfg.crop is not None:
        small = np.flatnonzero((hw[:, 0] < cfg.crop) | (hw[:, 1] < cfg.crop))
        if len(small):
            i = int(small[np.argmin(hw[small].min(axis=1))])
            raise ConfigError(f"crop {cfg.crop} is larger than sample {keys[i]!r} of split {split!r}, which is "
                              f"{hw[i, 1]}x{hw[i, 0]} (crop {cfg.crop}x{cfg.crop}); use crop <= {int(hw.min())} or repack "
                              "without that image")
    elif cfg.batch_size > 1 and len(np.unique(hw, axis=0)) > 1:
        raise ConfigError(f"split {split!r} has images of {len(np.unique(hw, axis=0))} different sizes, so whole images "
                          "(crop=None) cannot be batched; use batch_size=1 or a crop")
    share = n // cfg.world_size if cfg.last_batch == "drop" else -(-n // cfg.world_size)
    if cfg.last_batch == "drop" and share < cfg.batch_size:
        raise ConfigError(f"batch_size {cfg.batch_size} is larger than a rank's share of split {split!r} ({n} samples / "
                          f"{cfg.world_size} ranks = {share}); lower batch_size, or use last_batch='pad' or 'partial'")


def plan_epoch(cfg: PlanConfig, key_hash: np.ndarray, hw: np.ndarray, epoch: int, *, deal: str = "strided",
               consumed: tuple[tuple[int, int], ...] = ()) -> list[BatchPlan]:
    """This rank's batches for `epoch` (for the rest of it, when `consumed` says how it was started before)."""
    idx, padded = rank_share(len(key_hash), seed=cfg.seed, epoch=epoch, rank=cfg.rank, world_size=cfg.world_size,
                             batch_size=cfg.batch_size, last_batch=cfg.last_batch, shuffle=cfg.shuffle, deal=deal,
                             consumed=consumed)
    return cut_batches(cfg, key_hash, hw, epoch, idx, padded)


def cut_batches(cfg: PlanConfig, key_hash: np.ndarray, hw: np.ndarray, epoch: int, idx: np.ndarray,
                padded: np.ndarray) -> list[BatchPlan]:
    """Batches of `batch_size` over a rank's share, each sample with its crop window and augmentation code."""
    y, x, code = sample_params(key_hash[idx], hw[idx], seed=cfg.seed, epoch=epoch, crop=cfg.crop, augment=cfg.augment)
    bs = cfg.batch_size
    return [BatchPlan(idx[s:s + bs], y[s:s + bs], x[s:s + bs], code[s:s + bs], padded[s:s + bs])
            for s in range(0, len(idx), bs)]


def num_batches(cfg: PlanConfig, n: int) -> int:
    """Batches per epoch on this rank (the same for every epoch)."""
    if cfg.last_batch == "drop":
        return (n // cfg.world_size) // cfg.batch_size
    if cfg.last_batch == "pad":
        return -(-n // (cfg.world_size * cfg.batch_size))
    return -(-len(range(cfg.rank, n, cfg.world_size)) // cfg.batch_size)
