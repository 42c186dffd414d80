"""What a loader reads from: `ShardSource`, the interface both one split (`ShardDataset`) and a mix of named
splits (`ShardMix`) implement, so loaders never ask which of the two they hold. `sources` gives the plain
datasets behind either."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..format.facts import FactsColumns
from ..format.members import Members
from ..format.sensor import SensorRows


class StoredMember(NamedTuple):
    """One image member as stored: its format's name (`pairload.format.imageformats.FORMATS`: "npy", the pixels
    themselves; "jpeg", a JPEG file's bytes; "tiles", a lossless image, `pairload.format.tiles`) and its bytes, a
    read-only uint8 view of the shard's memory map."""

    format: str
    data: np.ndarray


class StoredMembers(NamedTuple):
    """Where the image members of a block of m samples lie, as arrays: per sample and side (column 0: input, 1:
    target) `format`, uint8 (m, 2), its format's code (`imageformats.BY_CODE`); `offset` and `length`, int64 (m, 2),
    its stored bytes in its shard; `shard`, int32 (m,), the shard's number in the source (`shard_map(number)`)."""

    format: np.ndarray
    offset: np.ndarray
    length: np.ndarray
    shard: np.ndarray


class ShardSource(ABC):
    """Samples `0..len-1` of packed shards: `src[i] -> (key, low, high)` with views of the split's member types
    (`members`: uint8 H×W×3 RGB by default).

    Shards are numbered `0..len(files)-1` (a mix numbers its sources' shards one source after the other).
    Remote shards are made local around their use: `want` ahead, `acquire`/`release` around each batch,
    `fetch_all` for loaders that need the whole split, `close_remote` at the end. Attributes every source has:
    `split` (a name for messages), `shard_bytes` (bytes of each shard), `transient` (settable: remote shards may
    be evicted once released, so workers unmap them after each batch)."""

    split: str
    shard_bytes: list[int]
    transient: bool

    # ------------------------------------------------------------------ what is in it

    @property
    @abstractmethod
    def sources(self) -> list:
        """The plain `ShardDataset`s behind this source, in index order (one split: itself)."""

    @property
    @abstractmethod
    def keys(self) -> Sequence[str]:
        """Each sample's key (a version-5 split: decoded from the mapped index as asked for, not a tuple)."""

    @property
    @abstractmethod
    def key_hash(self) -> np.ndarray:
        """uint64 (n,): the planner's hash of each key (a version-5 split: read from its index, never computed)."""

    @property
    @abstractmethod
    def members(self) -> Members:
        """What the samples' images are (`pairload.format.members`): dtype, channels, the target's scale."""

    @property
    @abstractmethod
    def sensor(self) -> SensorRows | None:
        """Camera raw splits: each sample's ratio, exposures and black/white levels (`format.sensor`); else None."""

    @abstractmethod
    def facts(self, indices=None) -> FactsColumns | None:
        """What `pairload pack` measured of these samples (None: every one), in this source's numbering: each
        image's exact hash and perceptual fingerprint, each input's shift against its target, each side's mean luma
        (`pairload.format.facts.FactsColumns`); None for a pack written before pack measured them (a mix: when one
        of its sources was; `sources[k].facts()` gives each source's in its own numbering)."""

    @property
    def sequences(self):
        """A split packed with --sequences: its videos' or bursts' frames (`format.sequences.Sequences`, over this
        source's index space); else None."""
        return None

    def as_targets(self, names: tuple[str, ...] | None = None) -> "ShardSource":
        """This source read as targets only (`open_shards(..., targets_only=True)`); for a mix, only the sources
        `names` (None: all)."""
        raise NotImplementedError

    @property
    @abstractmethod
    def targets_only(self) -> bool:
        """Every sample's input is its stored target (`low` the same pixels as `high`): a targets-only pack, or any
        pack opened with `open_shards(..., targets_only=True)`. Its inputs are for a degradation to make; a loader
        that trains on the stored pairs refuses such a source."""

    @property
    @abstractmethod
    def sizes(self) -> np.ndarray:
        """(n, 2) int64 height, width of each sample."""

    @property
    def size_bounds(self) -> tuple[tuple[int, int], tuple[int, int]] | None:
        """((least h, least w), (greatest h, greatest w)) of `sizes` when known without reading them (None: not)."""
        return None

    @property
    @abstractmethod
    def groups(self) -> tuple[tuple[str, int], ...]:
        """(name, samples) of each named source, in index order ("" for a single split)."""

    @property
    @abstractmethod
    def files(self) -> list[Path]:
        """Each shard's local path (a remote shard: its place in the cache, present once fetched)."""

    @property
    @abstractmethod
    def shard_samples(self) -> tuple[int, ...]:
        """Samples in each shard, in index order (shard k's samples follow shard k-1's)."""

    @property
    @abstractmethod
    def where(self) -> str:
        """The place for messages: a folder, or a URL with any secret in it redacted."""

    @property
    @abstractmethod
    def remote(self) -> bool:
        """Some shards come from a URL through the node's cache."""

    @abstractmethod
    def name(self, number: int) -> str:
        """Shard `number` as messages name it."""

    # ------------------------------------------------------------------ reading

    @abstractmethod
    def arrays(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) of sample i: views into the memory-mapped shard (decoded arrays for a compressed split)."""

    @abstractmethod
    def stored_member(self, i: int, side: int | str) -> StoredMember:
        """Sample i's image member on `side` (0 or "low", 1 or "high") as stored: its format and a view of its bytes
        (no copy, nothing decoded); see `ShardDataset.stored_member`."""

    @abstractmethod
    def stored_members(self, indices) -> StoredMembers:
        """Where the image members of these samples lie (formats, offsets, lengths, shards) as arrays gathered at
        once; see `ShardDataset.stored_members`."""

    def tile_starts(self, indices) -> np.ndarray | None:
        """Where each tile of these samples' tiles members starts, as the index keeps it: uint32 (m, 2, W), per sample
        and side (0: input, 1: target) tile t's first byte from the member's start, 0 past its last tile and for a
        member the index keeps none of; None where the source keeps none (see `ShardDataset.tile_starts`)."""
        return None

    @abstractmethod
    def shard_map(self, number: int) -> np.ndarray:
        """The whole shard file `number` as a read-only uint8 array over its memory map."""

    @abstractmethod
    def willneed(self, indices) -> None:
        """Ask the kernel to read these samples' pixels ahead (advice only)."""

    @abstractmethod
    def spans(self, indices) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(shard, start, end) of the bytes reading these samples reads, shards numbered as `files` numbers them;
        inputs, then targets (see `ShardDataset.spans`)."""

    @abstractmethod
    def dontneed(self, indices) -> None:
        """Drop these samples' pages from the page cache (advice only; see `ShardDataset.dontneed`)."""

    @abstractmethod
    def dontneed_span(self, number: int, start: int, end: int) -> None:
        """Drop bytes [start, end) of shard `number` from the page cache, unmapped here first (advice only): a
        stretch of a shard that a run read whole (`read.streamed`)."""

    @abstractmethod
    def check_files(self) -> None:
        """Raise if a shard is missing, truncated, or replaced since it was opened."""

    @abstractmethod
    def check_shards(self, indices) -> None:
        """`check_files` for the shards holding these samples only."""

    # ------------------------------------------------------------------ remote shards

    @abstractmethod
    def want(self, indices) -> None:
        """Start downloading the shards of these samples (in this order) ahead of use."""

    @abstractmethod
    def acquire(self, indices):
        """Make the shards of these samples local and hold them; returns the token `release` takes."""

    @abstractmethod
    def release(self, token) -> None: ...

    @abstractmethod
    def fetch_all(self) -> None:
        """Make every shard local and hold it for as long as this source lives."""

    @abstractmethod
    def close_remote(self) -> None:
        """Stop downloading ahead and give back every hold."""

    @abstractmethod
    def drop_evicted(self) -> None:
        """Drop the memory maps of cached shards evicted since they were mapped."""

    # ------------------------------------------------------------------ shared

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, i: int) -> tuple[str, np.ndarray, np.ndarray]:
        if not -len(self) <= i < len(self):
            raise IndexError(f"sample {i} out of range for split {self.split!r} of {len(self)} samples")
        i %= len(self)
        low, high = self.arrays(i)
        return self.keys[i], low, high

