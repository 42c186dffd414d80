"""Sequences in a manifest: a split's `"sequences"` entry, the frames of each video or burst (`Sequences`). The frames
of one sequence are consecutive samples of the split in key order, in frame order; every sample belongs to exactly
one sequence. The packer writes the entry, every reader takes it from here. Numpy only."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ShardError

FIELD = "sequences"  # split field: {"names": [...], "starts": [...], "counts": [...]}
TARGET = "sequence_target"  # split field: "frame" (each frame its own target) or "sequence" (one target per sequence)
TARGETS = ("frame", "sequence")


@dataclass(frozen=True)
class Sequences:
    """The sequences of a split, in index order: sequence s holds the samples `starts[s] .. starts[s] + counts[s] - 1`,
    its frames in order. `target`: "frame" when each frame has its own target, "sequence" when the frames share
    one (SMID's long exposure)."""

    names: tuple[str, ...]
    starts: np.ndarray  # int64 (S,)
    counts: np.ndarray  # int64 (S,)
    target: str = "frame"

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", tuple(self.names))
        object.__setattr__(self, "starts", np.asarray(self.starts, dtype=np.int64))
        object.__setattr__(self, "counts", np.asarray(self.counts, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.names)

    @property
    def frames(self) -> int:
        """Samples (frames) the sequences cover."""
        return int(self.counts.sum())

    def of_samples(self) -> np.ndarray:
        """int64 (frames,): the sequence of every sample."""
        return np.repeat(np.arange(len(self), dtype=np.int64), self.counts)

    def first_mismatch(self, values) -> tuple[int, int] | None:
        """(sample, its sequence's first frame) of the first sample whose row of `values` (one per sample: a size, a
        CRC) differs from its sequence's first frame's; None when every sequence's rows agree."""
        values = np.asarray(values)
        first = self.starts[self.of_samples()]
        differ = (values != values[first]).reshape(len(values), -1).any(axis=1)
        odd = np.flatnonzero(differ)
        return (int(odd[0]), int(first[odd[0]])) if len(odd) else None

    def check(self, samples: int, where: str) -> "Sequences":
        """These sequences, once they cover `samples` samples exactly, one after the other, each non-empty; a
        ShardError naming `where` otherwise."""
        def bad(what: str) -> ShardError:
            return ShardError(f"{where}: the \"{FIELD}\" entry {what}; the manifest is damaged or from another tool: "
                              "pack the folder again with --sequences")

        if not (len(self.names) == len(self.starts) == len(self.counts)):
            raise bad(f"has {len(self.names)} names, {len(self.starts)} starts and {len(self.counts)} counts")
        if self.target not in TARGETS:
            raise bad(f"says the target is {self.target!r}, not one of {', '.join(TARGETS)}")
        if len(set(self.names)) != len(self.names):
            raise bad("names a sequence twice")
        if len(self) and (self.counts.min() < 1):
            raise bad("holds an empty sequence")
        ends = np.cumsum(self.counts)
        if len(self) and (self.starts[0] != 0 or np.any(self.starts[1:] != ends[:-1])):
            raise bad("has sequences that do not follow one another")
        if self.frames != samples:
            raise bad(f"covers {self.frames} frames but the split has {samples} samples")
        return self

    def to_doc(self) -> dict:
        return {"names": list(self.names), "starts": self.starts.tolist(), "counts": self.counts.tolist()}

    @staticmethod
    def from_entry(entry: dict, samples: int, where: str) -> "Sequences | None":
        """A split entry's sequences (checked against its `samples`), or None when it has none."""
        doc = entry.get(FIELD)
        if doc is None:
            return None
        try:
            seqs = Sequences(doc["names"], doc["starts"], doc["counts"], entry.get(TARGET, "frame"))
        except (KeyError, TypeError, ValueError) as e:
            raise ShardError(f"{where}: the \"{FIELD}\" entry is not names/starts/counts lists ({e}); pack the "
                             "folder again with --sequences") from None
        return seqs.check(samples, where)
