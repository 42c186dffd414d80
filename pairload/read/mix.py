"""Several named splits read as one index space (`ShardMix`), for mixing datasets: keys become "name/key", and
every read, check and download goes to the `ShardDataset` its sample or shard belongs to."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import ConfigError
from ..format.binindex import source_key_hashes
from ..format.columns import paged
from ..format.facts import FactsColumns
from ..format.sensor import SensorRows
from .concat import Column, Offsets, PrefixedKeys
from .dataset import ShardDataset
from .source import ShardSource, StoredMember, StoredMembers


class ShardMix(ShardSource):
    """Several named shard splits as one index space (source after source): keys are "name/key", `groups` gives
    each source's (name, samples), `by_name` the splits by their names."""

    def __init__(self, parts: dict[str, ShardDataset]):
        if not parts:
            raise ConfigError("a mix needs at least one source: {name: shard folder, ...}")
        for name in parts:
            if not name or "/" in name:
                raise ConfigError(f"source name {name!r}: expected a non-empty name without '/' (it prefixes keys)")
        self.by_name = dict(parts)
        self.split = "+".join(f"{name}:{ds.split}" for name, ds in self.by_name.items())
        sizes = [len(ds) for ds in self.by_name.values()]
        self._rows = Offsets(sizes)  # where each source's samples lie in the mix
        self._parts = list(self.by_name.values())
        self._columns()
        kinds = {name: ds.members for name, ds in self.by_name.items()}
        first = next(iter(kinds.values()))
        odd = [name for name, m in kinds.items() if (m.low, m.high, m.scale) != (first.low, first.high, first.scale)]
        if odd:
            a = next(iter(kinds))
            raise ConfigError(f"sources {a!r} and {odd[0]!r} cannot be mixed: {a!r} holds {first.describe()}, "
                              f"{odd[0]!r} holds {kinds[odd[0]].describe()}; mix splits of one member type")
        self._members = first
        # sources of targets only (a degradation makes their inputs) mix with stored pairs of the same members
        self.targets_only_sources = tuple(name for name, ds in self.by_name.items() if ds.targets_only)
        self._targets_only = len(self.targets_only_sources) == len(self.by_name)
        rows = [ds.sensor for ds in self.by_name.values()]
        if any(r is None for r in rows) and not all(r is None for r in rows):
            raw_name = next(name for name, ds in self.by_name.items() if ds.sensor is not None)
            raise ConfigError(f"source {raw_name!r} holds camera raw samples (with ratios and levels) and others do "
                              "not; mix camera raw splits with camera raw splits")
        self._sensor = None if rows[0] is None else SensorRows.concat(rows)

    def _columns(self) -> None:
        """Per-sample columns read from the sources as rows are asked for: nothing per sample is made here."""
        names = list(self.by_name)
        self._keys = PrefixedKeys(names, [ds.keys for ds in self._parts])
        self._hw = Column([paged(ds.sizes) for ds in self._parts], dtype=np.int64)
        self._hash = Column([paged(ds.key_hash) for ds in self._parts],
                            convert=lambda s, rows: source_key_hashes(names[s], rows), dtype=np.uint64)

    def __getstate__(self):
        state = self.__dict__.copy()  # the parts pickle without their maps; the columns are made again from them
        for name in ("_keys", "_hw", "_hash"):
            state.pop(name)
        return state

    def __setstate__(self, state) -> None:
        self.__dict__.update(state)
        self._columns()

    @property
    def sources(self) -> list[ShardDataset]:
        return list(self._parts)

    @property
    def members(self):
        return self._members

    @property
    def sensor(self):
        return self._sensor

    def facts(self, indices=None) -> FactsColumns | None:
        found = FactsColumns.concat([ds.facts() for ds in self._parts])
        return found if found is None or indices is None else found.take(indices)

    @property
    def sequences(self):
        """The sources' sequences one after the other, named "source/sequence" (None unless every source has them)."""
        parts = [ds.sequences for ds in self._parts]
        if any(p is None for p in parts):
            return None
        from ..format.sequences import Sequences

        # read through the sources' tables for the sequences asked; the sources' gap policy where they share one (a
        # mix of `allow` packs stays silent about their breaks)
        return Sequences.joined(parts, list(self.by_name), self._rows.starts)

    def as_targets(self, names: tuple[str, ...] | None = None) -> "ShardMix":
        return ShardMix({name: ds.as_targets() if names is None or name in names else ds
                         for name, ds in self.by_name.items()})

    @property
    def targets_only(self) -> bool:
        """Every source holds targets only (`targets_only_sources`: which do)."""
        return self._targets_only

    @property
    def where(self) -> str:
        return " + ".join(f"{name}={ds.where}" for name, ds in self.by_name.items())

    @property
    def keys(self) -> PrefixedKeys:
        return self._keys

    @property
    def key_hash(self) -> Column:
        return self._hash  # a mix is planned as one split of "name/key" samples (`format.binindex.source_key_hashes`)

    @property
    def sizes(self) -> Column:
        return self._hw

    @property
    def size_bounds(self):
        bounds = [ds.size_bounds for ds in self._parts]
        if any(b is None for b in bounds):
            return None
        return (tuple(min(b[0][k] for b in bounds) for k in range(2)),
                tuple(max(b[1][k] for b in bounds) for k in range(2)))

    @property
    def groups(self) -> tuple[tuple[str, int], ...]:
        return tuple((name, len(ds)) for name, ds in self.by_name.items())

    @property
    def files(self) -> list[Path]:
        return [f for ds in self._parts for f in ds.files]

    @property
    def shard_bytes(self) -> list[int]:
        return [b for ds in self._parts for b in ds.shard_bytes]

    @property
    def shard_samples(self) -> tuple[int, ...]:
        return tuple(c for ds in self._parts for c in ds.shard_samples)

    # ------------------------------------------------------------------ shards and samples to their split

    def _shard(self, number: int) -> tuple[ShardDataset, int]:
        """The split holding shard `number` of the mix, and its number there."""
        for ds in self._parts:
            if number < len(ds.files):
                return ds, number
            number -= len(ds.files)
        raise IndexError(f"shard number past the last shard of the mix {self.where}")

    def _sources(self, idx: np.ndarray) -> np.ndarray:
        """The source (its number) of each of these samples of the mix."""
        return self._rows.of(idx)

    def _part(self, i: int) -> tuple[ShardDataset, int]:
        s = int(self._sources(np.array([i]))[0])
        return self._parts[s], i - int(self._rows.starts[s])

    def _by_part(self, indices):
        """(part, its sample indices) for the parts these samples of the mix come from, in order of first use."""
        idx = np.asarray(indices, dtype=np.int64)
        source = self._sources(idx)
        _, first = np.unique(source, return_index=True)
        for s in source[np.sort(first)].tolist():
            yield self._parts[s], idx[source == s] - self._rows.starts[s]

    def name(self, number: int) -> str:
        ds, n = self._shard(number)
        return ds.name(n)

    def shard_map(self, number: int) -> np.ndarray:
        """Shard `number` of the mix (its sources' shards numbered one source after the other)."""
        ds, n = self._shard(number)
        return ds.shard_map(n)

    def arrays(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        ds, j = self._part(i)
        return ds.arrays(j)

    def stored_member(self, i: int, side: int | str) -> StoredMember:
        ds, j = self._part(i)
        return ds.stored_member(j, side)

    def stored_members(self, indices) -> StoredMembers:
        """Each source's `stored_members`, their shards numbered as the mix numbers them (source after source)."""
        idx = np.asarray(indices, dtype=np.int64)
        source = self._sources(idx)
        out = StoredMembers(np.zeros((len(idx), 2), np.uint8), np.zeros((len(idx), 2), np.int64),
                            np.zeros((len(idx), 2), np.int64), np.zeros(len(idx), np.int32))
        first = np.cumsum([0] + [len(ds.files) for ds in self._parts])
        for s in np.unique(source).tolist():
            rows = source == s
            part = self._parts[s].stored_members(idx[rows] - self._rows.starts[s])
            for name, column in zip(out._fields, part):
                getattr(out, name)[rows] = column + (first[s] if name == "shard" else 0)
        return out

    def tile_starts(self, indices) -> np.ndarray | None:
        """Each source's `tile_starts`, zeros where a source keeps none, in rows as wide as the widest (None where
        no source keeps any)."""
        idx = np.asarray(indices, dtype=np.int64)
        source = self._sources(idx)
        parts = {s: self._parts[s].tile_starts(idx[source == s] - self._rows.starts[s])
                 for s in np.unique(source).tolist()}
        width = max((p.shape[2] for p in parts.values() if p is not None), default=0)
        if not width:
            return None
        out = np.zeros((len(idx), 2, width), np.uint32)
        for s, part in parts.items():
            if part is not None:
                out[source == s, :, :part.shape[2]] = part
        return out

    def willneed(self, indices) -> None:
        for ds, idx in self._by_part(indices):
            ds.willneed(idx)

    def spans(self, indices) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each source's `spans`, their shards numbered as the mix numbers them (source after source)."""
        idx = np.asarray(indices, dtype=np.int64).ravel()
        source = self._sources(idx)
        out = np.zeros((3, 2, len(idx)), np.int64)
        first = np.cumsum([0] + [len(ds.files) for ds in self._parts])
        for s in np.unique(source).tolist():
            rows = source == s
            part = self._parts[s].spans(idx[rows] - self._rows.starts[s])
            for k, column in enumerate(part):
                out[k][:, rows] = column.reshape(2, -1) + (first[s] if k == 0 else 0)
        return out[0].ravel(), out[1].ravel(), out[2].ravel()

    def dontneed(self, indices) -> None:
        for ds, idx in self._by_part(indices):
            ds.dontneed(idx)

    def dontneed_span(self, number: int, start: int, end: int) -> None:
        ds, n = self._shard(number)
        ds.dontneed_span(n, start, end)

    def check_files(self) -> None:
        for ds in self._parts:
            ds.check_files()

    def check_shards(self, indices) -> None:
        for ds, idx in self._by_part(indices):
            ds.check_shards(idx)

    # ------------------------------------------------------------------ remote parts

    @property
    def remote(self) -> bool:
        return any(ds.remote for ds in self._parts)

    @property
    def transient(self) -> bool:
        return any(ds.transient for ds in self._parts)

    @transient.setter
    def transient(self, value: bool) -> None:
        for ds in self._parts:
            ds.transient = value and ds.remote

    def want(self, indices) -> None:
        for ds, idx in self._by_part(indices):
            ds.want(idx)

    def acquire(self, indices):
        return [(ds, ds.acquire(idx)) for ds, idx in self._by_part(indices) if ds.remote]

    def release(self, token) -> None:
        for ds, part_token in token or ():
            ds.release(part_token)

    def fetch_all(self) -> None:
        for ds in self._parts:
            ds.want(np.arange(len(ds)))
        for ds in self._parts:
            ds.fetch_all()

    def close_remote(self) -> None:
        for ds in self._parts:
            ds.close_remote()

    def drop_evicted(self) -> None:
        for ds in self._parts:
            ds.drop_evicted()
