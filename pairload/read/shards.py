"""Reading packed shards: random access through memory maps (`open_shards`), `verify` and `info`.

Pixels are never copied here: `ds[i]` returns views into `np.memmap`s of the tar files, so every process on a
node that opens the same shards shares one copy of them in the page cache. A compressed split (`pack --compress
zstd`) is the exception: `ds[i]` decodes both images of the sample, in the process that asks (a loader's worker),
from the mapped frames into fresh arrays.
"""

from __future__ import annotations

import hashlib
import io
import json
import mmap
import os
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..format import codec, schema
from ..errors import ConfigError, LoaderError, ShardError
from ..remote import urls


class ShardDataset:
    """One split of a shard folder: `len(ds)`, `ds[i] -> (key, low, high)` with uint8 H×W×3 RGB views.

    The folder may be a URL (s3://, gs://, az://, http(s)://, any fsspec URL) with a `cache` (`ShardCache`): the
    manifest is read from the URL and the shards are made local in the node's cache as the loader needs them
    (`want` ahead, `acquire`/`release` around each batch; `fetch_all` for loaders that need the whole split)."""

    def __init__(self, shards_dir: str | os.PathLike, split: str = "train", *, cache=None):
        self.url = str(shards_dir).rstrip("/") if urls.is_url(shards_dir) else None
        if self.url is not None:
            if cache is None:
                raise ConfigError(f"{self.url}: a remote source needs a node-local cache: pass cache_dir= (the CLI's "
                                  "--cache-dir), a folder with room for the shards this node reads")
            where = urls.join(self.url, schema.MANIFEST)
            manifest = schema.parse_manifest(cache.read_small(where), where)
            self.root = cache.root  # the shards' local copies are in the cache; messages name the URL
        else:
            self.root = Path(urls.local_path(shards_dir))
            manifest = schema.read_manifest(self.root)
            where = str(self.root / schema.MANIFEST)
        self.index = schema.split_index(manifest, split, where)
        self.split = split
        entries = manifest["splits"][split]["shards"]  # (kept out of the object: workers receive it pickled)
        self.shard_bytes = [int(entry["bytes"]) for entry in entries]
        if self.url is None:
            self._paths = [self.root / f for f in self.index.files]
            self._feed = None
        else:
            from ..remote.feed import ShardFeed

            shas = [entry["sha256"] for entry in entries]
            self._paths = [cache.path(sha) for sha in shas]
            self._feed = ShardFeed(cache, [urls.join(self.url, f) for f in self.index.files], shas, self.shard_bytes)
        self.transient = False  # remote shards may be evicted once released: workers unmap them after each batch
        self._stamps: list[tuple[int, int, int] | None] = [None] * len(entries)  # (device, inode, mtime) when opened
        self.check_files()
        self._maps: list[np.ndarray | None] = [None] * len(entries)
        self._mmaps: list = [None] * len(entries)
        self._inodes: list[int | None] = [None] * len(entries)  # of each mapped file
        self._checked = np.zeros(len(self.index), dtype=bool)

    def name(self, number: int) -> str:
        """Shard `number` as messages name it: its path, or its URL (with the cached copy) for a remote source."""
        if self.url is None:
            return str(self._paths[number])
        return f"{urls.join(self.url, self.index.files[number])} (cached as {self._paths[number]})"

    def check_files(self) -> None:
        """Raise if a shard is missing, its size differs from the manifest (truncated), or it is another file than
        the one this dataset opened (replaced, e.g. by a re-pack into the same folder: batches would mix two packs).
        Remote sources: only the shards already in the cache (the others are checked as they download)."""
        self._check_numbers(range(len(self.shard_bytes)))

    def check_shards(self, indices) -> None:
        """`check_files` for the shards holding these samples only (before a batch is copied in this process, where
        a shard truncated under its memory map would end the process with SIGBUS instead of an error)."""
        self._check_numbers(np.unique(self.index.shard[np.asarray(indices, dtype=np.int64)]).tolist())

    def _check_numbers(self, numbers) -> None:
        for number in numbers:
            try:
                st = self._paths[number].stat()
            except FileNotFoundError:
                if self.url is not None:
                    continue  # not downloaded yet (or evicted): fetched and verified when a batch needs it
                raise ShardError(f"{self.name(number)}: shard listed in {schema.MANIFEST} is missing; copy it back or "
                                 "repack") from None
            self._check_stamp(number, st)

    def _check_stamp(self, number: int, st: os.stat_result) -> None:
        size = self.shard_bytes[number]
        if st.st_size != size:
            fix = ("delete the cached file (it is fetched again)" if self.url is not None else
                   "repack, or run `pairload verify`")
            raise ShardError(f"{self.name(number)}: {st.st_size} bytes, the manifest says {size}; the shard is "
                             f"truncated or was replaced: {fix}")
        if self.url is not None:
            return  # a cached shard is named by its sha256 and never rewritten: a new copy holds the same bytes
        stamp = (st.st_dev, st.st_ino, st.st_mtime_ns)
        if self._stamps[number] is None:
            self._stamps[number] = stamp
        elif self._stamps[number] != stamp:
            raise LoaderError(f"{self.name(number)}: replaced or rewritten since the loader opened {self.root} (a "
                              "re-pack into the same folder?); its batches would mix two packs: make the loader again")

    # -- remote shards: made local ahead of use, held while a batch is cut from them
    @property
    def remote(self) -> bool:
        return self._feed is not None

    def _numbers(self, indices) -> list[int]:
        """The shards of these samples, in order of first use."""
        shard = self.index.shard[np.asarray(indices, dtype=np.int64)]
        _, first = np.unique(shard, return_index=True)
        return shard[np.sort(first)].tolist()

    def want(self, indices) -> None:
        """Start downloading the shards of these samples (in this order) ahead of use."""
        if self._feed is not None and len(indices):
            self._feed.want(self._numbers(indices))

    def acquire(self, indices):
        """Make the shards of these samples local and hold them until `release(token)` (local sources: nothing)."""
        if self._feed is None:
            return None
        numbers = self._numbers(indices)
        self._feed.ensure(numbers)
        return numbers

    def release(self, token) -> None:
        if token is not None and self._feed is not None:
            self._feed.release(token)

    def fetch_all(self) -> None:
        """Make the whole split local and hold it for as long as this dataset lives (ram, dali-external)."""
        if self._feed is not None:
            everything = np.arange(len(self))
            self.want(everything)
            self.acquire(everything)

    def close_remote(self) -> None:
        if self._feed is not None:
            self._feed.close()

    def drop_evicted(self) -> None:
        """Drop the memory maps of cached shards evicted (or fetched again) since they were mapped, so that an
        evicted file's space goes back to the disk; maps of shards still in the cache are kept."""
        for number, mm in enumerate(self._mmaps):
            if mm is None:
                continue
            try:
                current = self._paths[number].stat().st_ino
            except FileNotFoundError:
                current = None
            if current != self._inodes[number]:
                self._maps[number] = None
                self._mmaps[number] = None  # closed when its last array view is gone

    # -- pickling: worker processes reopen the memory maps themselves
    def __getstate__(self):
        state = self.__dict__.copy()
        state["_feed"] = None  # downloads stay in the loading process; workers read the cached files
        state["_maps"] = [None] * len(self._maps)
        state["_mmaps"] = [None] * len(self._maps)
        state["_checked"] = np.zeros(len(self.index), dtype=bool)
        return state

    def __len__(self) -> int:
        return len(self.index)

    @property
    def keys(self) -> tuple[str, ...]:
        return self.index.keys

    @property
    def sizes(self) -> np.ndarray:
        """(n, 2) int64 height, width of each sample."""
        return self.index.hw

    @property
    def files(self) -> list[Path]:
        """Each shard's local path (for a remote source: its place in the cache, present once fetched)."""
        return list(self._paths)

    @property
    def shard_samples(self) -> tuple[int, ...]:
        """Samples in each shard, in index order (shard k's samples follow shard k-1's)."""
        return tuple(int(c) for c in self.index.shard_samples)

    @property
    def nbytes(self) -> int:
        """Bytes of pixels (low and high) in this split."""
        m = self.index.members
        area = int((self.index.hw[:, 0] * self.index.hw[:, 1]).sum())
        return area * (m.low.pixel_bytes + m.scale * m.scale * m.high.pixel_bytes)

    def shard_map(self, number: int) -> np.ndarray:
        """The whole shard file as a read-only uint8 array over its memory map (a plain ndarray: slicing it is
        several times cheaper than slicing an np.memmap, which matters at tens of thousands of crops a second)."""
        mm = self._maps[number]
        if mm is None:
            with open(self._paths[number], "rb") as fh:
                st = os.fstat(fh.fileno())
                self._check_stamp(number, st)  # the file mapped is the one the loader opened
                mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            self._inodes[number] = st.st_ino
            self._mmaps[number] = mapped
            mm = self._maps[number] = np.frombuffer(mapped, dtype=np.uint8)
        return mm

    def willneed(self, indices) -> None:
        """Ask the kernel to start reading these samples' pixels (madvise WILLNEED): a split that is not in the page
        cache is then read ahead of the copies, instead of faulting page by page under them."""
        idx, page = self.index, mmap.PAGESIZE
        for i in indices:
            number = int(idx.shard[i])
            try:
                self.shard_map(number)
            except FileNotFoundError:
                if self.url is None:
                    raise
                continue  # a remote shard not downloaded yet (or evicted): its batch fetches and holds it
            for off, n in ((int(idx.low[i]), int(idx.low_bytes[i])), (int(idx.high[i]), int(idx.high_bytes[i]))):
                start = off - off % page
                try:
                    self._mmaps[number].madvise(mmap.MADV_WILLNEED, start, off + n - start)
                except (OSError, ValueError):  # advice only
                    return

    def arrays(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) views of sample i. The first time a sample is read, the .npy header in front of each image
        is compared with the expected one: a cheap guard against a shard that was damaged or replaced.
        A compressed split: both images decoded into fresh read-only arrays; the first time a sample is decoded in
        this process, its headers and the CRC-32 of its pixels are checked too."""
        idx = self.index
        h, w = int(idx.hw[i, 0]), int(idx.hw[i, 1])
        mm = self.shard_map(int(idx.shard[i]))
        if idx.compression:
            return self._decoded(i, mm, h, w)
        m = idx.members
        s = m.scale
        lo, hi = int(idx.low[i]), int(idx.high[i])
        if not self._checked[i]:
            self._check_headers(i, mm, h, w)
        low = mm[lo:lo + h * w * m.low.pixel_bytes]
        high = mm[hi:hi + h * w * s * s * m.high.pixel_bytes]
        if m.low.dtype != "uint8":
            low = low.view(m.low.np_dtype)
        if m.high.dtype != "uint8":
            high = high.view(m.high.np_dtype)
        return low.reshape(h, w, m.low.channels), high.reshape(h * s, w * s, m.high.channels)

    def _headers(self, h: int, w: int) -> tuple[bytes, bytes]:
        """The .npy headers of sample images whose input is h×w: input's, target's."""
        m = self.index.members
        return m.low.npy_header(h, w), m.high.npy_header(h * m.scale, w * m.scale)

    def _check_headers(self, i: int, mm: np.ndarray, h: int, w: int) -> None:
        idx = self.index
        for member, off, header in zip((schema.LOW, schema.HIGH), (int(idx.low[i]), int(idx.high[i])),
                                       self._headers(h, w)):
            if mm[off - len(header):off].tobytes() != header:
                raise ShardError(f"{self.name(int(idx.shard[i]))}: key {idx.keys[i]}: the .npy header of "
                                 f"{idx.keys[i]}.{member} is not where the manifest says or is damaged; the shard is "
                                 "corrupt: run `pairload verify` and repack")
        self._checked[i] = True

    def _decoded(self, i: int, mm: np.ndarray, h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
        """Sample i of a compressed split: each image's frame decoded into a fresh .npy file, pixels viewed in it."""
        idx = self.index
        m = idx.members
        s = m.scale
        headers = self._headers(h, w)
        files = []
        for member, off, n, header, size in (
                (schema.LOW, int(idx.low[i]), int(idx.low_bytes[i]), headers[0], m.low.nbytes(h, w)),
                (schema.HIGH, int(idx.high[i]), int(idx.high_bytes[i]), headers[1], m.high.nbytes(h * s, w * s))):
            try:
                files.append(codec.decompress(mm[off:off + n], len(header) + size))
            except codec.FrameError as exc:
                raise ShardError(f"{self.root / idx.files[idx.shard[i]]}: key {idx.keys[i]}: {idx.keys[i]}."
                                 f"{schema.image_suffix(member, idx.compression)} does not decode: {exc}; the shard "
                                 "is corrupt: run `pairload verify` and repack") from None
        if not self._checked[i]:
            self._check_decoded(i, files, headers)
        return (np.frombuffer(files[0], dtype=m.low.np_dtype, offset=len(headers[0])).reshape(h, w, m.low.channels),
                np.frombuffer(files[1], dtype=m.high.np_dtype, offset=len(headers[1])).reshape(h * s, w * s,
                                                                                              m.high.channels))

    def _check_decoded(self, i: int, files: list[bytes], headers: tuple[bytes, bytes]) -> None:
        """The first decode of a compressed sample in this process: .npy headers, and the pixels' CRC-32 (measured:
        about a quarter more CPU than the decode alone, paid once per sample and process)."""
        idx = self.index
        for k, (member, data, header) in enumerate(zip((schema.LOW, schema.HIGH), files, headers)):
            name = f"{idx.keys[i]}.{schema.image_suffix(member, idx.compression)}"
            where = f"{self.root / idx.files[idx.shard[i]]}: key {idx.keys[i]}: {name}"
            if data[:len(header)] != header:
                side = idx.members.side(k)
                raise ShardError(f"{where} does not hold the {side.dtype} {tuple(idx.hw[i].tolist())} ×"
                                 f"{side.channels} .npy the manifest says; the shard is corrupt: run "
                                 "`pairload verify` and repack")
            if zlib.crc32(memoryview(data)[len(header):]) != int(idx.crc[i, k]):
                raise ShardError(f"{where}: pixels do not match their checksum; the shard is corrupt: run "
                                 "`pairload verify` and repack")
        self._checked[i] = True

    @property
    def where(self) -> str:
        return self.url or str(self.root)

    @property
    def members(self):
        """The split's member types and size relation (`pairload.format.members.Members`)."""
        return self.index.members

    @property
    def groups(self) -> tuple[tuple[str, int], ...]:
        """(name, samples) of each source: one unnamed source."""
        return (("", len(self)),)

    def __getitem__(self, i: int) -> tuple[str, np.ndarray, np.ndarray]:
        if not -len(self) <= i < len(self):
            raise IndexError(f"sample {i} out of range for split {self.split!r} of {len(self)} samples")
        i %= len(self)
        low, high = self.arrays(i)
        return self.keys[i], low, high


class ShardMix(ShardDataset):
    """Several named shard splits as one index space (source after source), for mixing: keys are "name/key",
    `groups` gives each source's (name, samples); every read goes to the source's own `ShardDataset`."""

    def __init__(self, parts: dict[str, ShardDataset]):
        if not parts:
            raise ConfigError("a mix needs at least one source: {name: shard folder, ...}")
        for name in parts:
            if not name or "/" in name:
                raise ConfigError(f"source name {name!r}: expected a non-empty name without '/' (it prefixes keys)")
        self.parts = dict(parts)
        self.split = "+".join(f"{name}:{ds.split}" for name, ds in self.parts.items())
        sizes = [len(ds) for ds in self.parts.values()]
        self._offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self._keys = tuple(f"{name}/{k}" for name, ds in self.parts.items() for k in ds.keys)
        self._hw = np.concatenate([ds.sizes for ds in self.parts.values()]).astype(np.int64).reshape(-1, 2)
        self._names = list(self.parts)
        self._source = np.repeat(np.arange(len(sizes)), sizes)
        kinds = {name: ds.members for name, ds in self.parts.items()}
        first = next(iter(kinds.values()))
        odd = [name for name, m in kinds.items() if (m.low, m.high, m.scale) != (first.low, first.high, first.scale)]
        if odd:
            a = next(iter(kinds))
            raise ConfigError(f"sources {a!r} and {odd[0]!r} cannot be mixed: {a!r} holds {first.describe()}, "
                              f"{odd[0]!r} holds {kinds[odd[0]].describe()}; mix splits of one member type")
        self._members = first

    @property
    def members(self):
        return self._members

    def __getstate__(self):
        return self.__dict__.copy()  # the parts pickle without their maps

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def where(self) -> str:
        return " + ".join(f"{name}={ds.root}" for name, ds in self.parts.items())

    @property
    def root(self) -> Path:  # for messages that name a place
        return Path(self.where)

    @property
    def keys(self) -> tuple[str, ...]:
        return self._keys

    @property
    def sizes(self) -> np.ndarray:
        return self._hw

    @property
    def groups(self) -> tuple[tuple[str, int], ...]:
        return tuple((name, len(ds)) for name, ds in self.parts.items())

    @property
    def files(self) -> list[Path]:
        return [f for ds in self.parts.values() for f in ds.files]

    @property
    def shard_bytes(self) -> list[int]:
        return [b for ds in self.parts.values() for b in ds.shard_bytes]

    @property
    def shard_samples(self) -> tuple[int, ...]:
        return tuple(c for ds in self.parts.values() for c in ds.shard_samples)

    def shard_map(self, number: int) -> np.ndarray:
        """Shard `number` of the mix (its sources' shards numbered one source after the other)."""
        for ds in self.parts.values():
            if number < len(ds.files):
                return ds.shard_map(number)
            number -= len(ds.files)
        raise IndexError(f"shard number past the last shard of the mix {self.where}")

    @property
    def nbytes(self) -> int:
        return sum(ds.nbytes for ds in self.parts.values())

    def check_files(self) -> None:
        for ds in self.parts.values():
            ds.check_files()

    def _part(self, i: int) -> tuple[ShardDataset, int]:
        s = int(self._source[i])
        return self.parts[self._names[s]], i - int(self._offsets[s])

    def arrays(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        ds, j = self._part(i)
        return ds.arrays(j)

    def willneed(self, indices) -> None:
        for i in indices:
            ds, j = self._part(int(i))
            ds.willneed([j])

    def _by_part(self, indices):
        """(part, its sample indices) for the parts these samples of the mix come from, in order of first use."""
        idx = np.asarray(indices, dtype=np.int64)
        source = self._source[idx]
        _, first = np.unique(source, return_index=True)
        for s in source[np.sort(first)].tolist():
            yield self.parts[self._names[s]], idx[source == s] - self._offsets[s]

    def check_shards(self, indices) -> None:
        for ds, idx in self._by_part(indices):
            ds.check_shards(idx)

    @property
    def remote(self) -> bool:
        return any(ds.remote for ds in self.parts.values())

    @property
    def transient(self) -> bool:
        return any(ds.transient for ds in self.parts.values())

    @transient.setter
    def transient(self, value: bool) -> None:
        for ds in self.parts.values():
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
        for ds in self.parts.values():
            ds.want(np.arange(len(ds)))
        for ds in self.parts.values():
            ds.fetch_all()

    def close_remote(self) -> None:
        for ds in self.parts.values():
            ds.close_remote()

    def drop_evicted(self) -> None:
        for ds in self.parts.values():
            ds.drop_evicted()


def open_shards(path, split: str = "train", *, cache_dir: str | os.PathLike | None = None,
                cache_limit: int | None = None, storage_options: dict | None = None) -> ShardDataset:
    """Random access over one split of a folder written by `pairload pack`; or, for mixing, several named ones as
    one index space: `{name: folder or (folder, split)}` (`ShardMix`; keys become "name/key"). A `ShardDataset`
    is returned as it is. A folder may be a URL (s3://bucket/shards, https://host/shards, any fsspec URL): its
    shards are cached in `cache_dir`, at most `cache_limit` bytes of them, shared by every process of the node
    that uses the same folder; `storage_options` go to the fsspec backend (credentials, endpoint_url, ...)."""
    if isinstance(path, ShardDataset):
        return path
    cache = None
    places = [where[0] if isinstance(where, tuple) else where for where in path.values()] \
        if isinstance(path, dict) else [path]
    if any(urls.is_url(p) for p in places) and cache_dir is not None:
        from ..remote.cache import ShardCache

        cache = ShardCache(cache_dir, cache_limit, storage_options=storage_options)
    if isinstance(path, dict):
        parts = {}
        for name, where in path.items():
            folder, part_split = where if isinstance(where, tuple) else (where, split)
            parts[str(name)] = _readable(ShardDataset(folder, part_split, cache=cache))
        return ShardMix(parts)
    return _readable(ShardDataset(path, split, cache=cache))


def _readable(ds: ShardDataset) -> ShardDataset:
    """`ds`, once the package its compression needs is known to be installed (before any loader worker starts)."""
    codec.require(ds.index.compression, f"{ds.where}: split {ds.split!r} is compressed with zstd; reading it")
    return ds


@dataclass(frozen=True)
class VerifyReport:
    shards: int
    samples: int
    bytes: int
    leftovers: tuple[str, ...] = ()  # temporary files of an interrupted pack, beside valid shards
    leftover_bytes: int = 0


def _check_shard(path: Path, entry: dict, compression: str | None = None) -> int:
    """Check one shard against its manifest entry; returns the number of samples, raises ShardError on the first
    problem. `compression`: its split's (every compressed member is decoded and checked)."""
    if not path.is_file():
        raise ShardError(f"{path}: missing (listed in {schema.MANIFEST}); copy it back or repack")
    if path.stat().st_size != entry["bytes"]:
        raise ShardError(f"{path}: {path.stat().st_size} bytes, expected {entry['bytes']}; the shard is truncated or "
                         "was replaced: repack")
    idx = entry["index"]
    shares = _shares(path, idx)
    expected = _expected_members(path, idx, shares, compression)
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    where = f"{path.name}"
    seen: set[str] = set()
    try:
        with tarfile.open(path, "r:") as tf:
            members = list(tf)  # a damaged header ends the listing early; the missing members are named below
    except tarfile.TarError as exc:
        raise ShardError(f"{where}: not a readable tar ({exc}); the shard is corrupt: repack") from None
    for member in members:
        if member.name not in expected:
            raise ShardError(f"{where}: unexpected member {member.name!r} (the manifest lists no such sample); repack")
        k, suffix = expected[member.name]
        data = mm[member.offset_data:member.offset_data + member.size]
        if suffix == schema.META:
            _check_meta(where, member.name, data, idx, k, shares)
        else:
            side = 0 if suffix == schema.image_suffix(schema.LOW, compression) else 1
            (_check_frame if compression else _check_npy)(where, member, data, idx, k, side)
        seen.add(member.name)
    missing = sorted(set(expected) - seen)
    if missing:
        raise ShardError(f"{where}: key {missing[0].split('.')[0]}: member {missing[0]} "
                         f"is missing ({len(missing)} members missing in all); repack")
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            digest.update(chunk)
    if digest.hexdigest() != entry["sha256"]:
        raise ShardError(f"{where}: sha256 {digest.hexdigest()[:16]}… differs from the manifest's {entry['sha256'][:16]}… "
                         "although every sample parses (tar headers or padding changed); repack")
    return len(idx["key"])


def _shares(path: Path, idx: dict) -> list:
    shares = idx.get(schema.SHARES_HIGH) or [-1] * len(idx["key"])
    bad = next((k for k, lead in enumerate(shares) if type(lead) is not int), None)
    if bad is not None:  # split_index does not read this field; a float here would fail below as a list index
        raise ShardError(f"{path.parent / schema.MANIFEST}: {path.name}: index \"{schema.SHARES_HIGH}\" holds "
                         f"{shares[bad]!r} for sample {bad} (an integer expected); the manifest is damaged or was "
                         "edited: re-run the same `pairload pack` command to rewrite it")
    return shares


def _expected_members(path: Path, idx: dict, shares: list, compression: str | None) -> dict[str, tuple[int, str]]:
    """member name -> (sample, suffix) of every member the index promises; a shared target is checked for being a
    stored target of the same size at the same place."""
    sized = (schema.HIGH_BYTES,) if compression else ()
    expected = {}
    order = schema.member_order(compression)
    for k, key in enumerate(idx["key"]):
        lead = shares[k]
        if lead >= 0 and not (0 <= lead < len(idx["key"]) and shares[lead] < 0 and idx["high"][k] == idx["high"][lead]
                              and idx["hw"][k] == idx["hw"][lead]
                              and all(idx[f][k] == idx[f][lead] for f in sized)):
            raise ShardError(f"{path.name}: key {key}: its shared target (sample {lead}) is not a stored target of "
                             "the same size at the same offset; the manifest is damaged: repack")
        for suffix in order if lead < 0 else order[:2]:
            expected[schema.member_name(key, suffix)] = (k, suffix)
    return expected


def _check_meta(where: str, name: str, data: np.ndarray, idx: dict, k: int, shares: list) -> None:
    h, w = idx["hw"][k]
    try:
        doc = json.loads(bytes(data))
        ok = "low" in doc and "high" in doc and list(doc["size"]) == [h, w] and \
            doc.get(schema.HIGH_REF) == (idx["key"][shares[k]] if shares[k] >= 0 else None)
    except (ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        raise ShardError(f"{where}: key {idx['key'][k]}: {name} is not the expected JSON with low, high, "
                         f"size [{h}, {w}] and the shared target's key, if any")


def _npy_header_size(where: str, name: str, data, idx: dict, k: int) -> int:
    """The length of the .npy header at the start of `data`, once it says uint8 (h, w, 3) in C order."""
    key, (h, w) = idx["key"][k], idx["hw"][k]
    try:
        hdr = io.BytesIO(bytes(data[:256]))
        np.lib.format.read_magic(hdr)
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(hdr)
    except Exception as exc:  # noqa: BLE001 - numpy raises ValueError, SyntaxError or TokenError here
        raise ShardError(f"{where}: key {key}: {name} is not a valid .npy ({exc})") from None
    if shape != (h, w, schema.CHANNELS) or fortran or dtype != schema.DTYPE:
        raise ShardError(f"{where}: key {key}: {name} holds {dtype} {shape}, the manifest says uint8 ({h}, {w}, 3)")
    return hdr.tell()


def _check_pixels(where: str, name: str, pixels, idx: dict, k: int, side: int) -> None:
    if zlib.crc32(pixels) != idx["crc32"][k][side]:
        raise ShardError(f"{where}: key {idx['key'][k]}: {name} pixels do not match their checksum (the "
                         "shard is corrupt: restore it from a copy or repack)")


def _check_npy(where: str, member: tarfile.TarInfo, data: np.ndarray, idx: dict, k: int, side: int) -> None:
    """A raw image member: its header, where its pixels start, and their CRC-32."""
    h, w = idx["hw"][k]
    start = member.offset_data + _npy_header_size(where, member.name, data, idx, k)
    off = idx["low" if side == 0 else "high"][k]
    if start != off:
        raise ShardError(f"{where}: key {idx['key'][k]}: {member.name} pixels start at byte {start}, the manifest "
                         f"index says {off}; repack")
    _check_pixels(where, member.name, data[start - member.offset_data:][:h * w * schema.CHANNELS], idx, k, side)


def _check_frame(where: str, member: tarfile.TarInfo, data: np.ndarray, idx: dict, k: int, side: int) -> None:
    """A compressed image member: where it lies, then decoded: its header and its pixels' CRC-32."""
    key, (h, w) = idx["key"][k], idx["hw"][k]
    off, size = idx["low" if side == 0 else "high"][k], idx[schema.LOW_BYTES if side == 0 else schema.HIGH_BYTES][k]
    if (member.offset_data, member.size) != (off, size):
        raise ShardError(f"{where}: key {key}: {member.name} is {member.size} bytes at byte {member.offset_data}, the "
                         f"manifest index says {size} bytes at byte {off}; repack")
    try:
        npy = codec.decompress(data, len(schema.npy_header(h, w)) + h * w * schema.CHANNELS)
    except codec.FrameError as exc:
        raise ShardError(f"{where}: key {key}: {member.name} does not decode: {exc} (the shard is corrupt: restore "
                         "it from a copy or repack)") from None
    start = _npy_header_size(where, member.name, npy, idx, k)
    _check_pixels(where, member.name, memoryview(npy)[start:], idx, k, side)


def read_manifest_at(source: str | os.PathLike, storage_options: dict | None = None) -> dict:
    """The checked manifest of a shard folder or URL."""
    if urls.is_url(source):
        from ..remote.cache import read_object

        where = urls.join(str(source).rstrip("/"), schema.MANIFEST)
        return schema.parse_manifest(read_object(where, storage_options), where)
    return schema.read_manifest(urls.local_path(source))


def verify(shards_dir: str | os.PathLike, *, cache_dir: str | os.PathLike | None = None,
           storage_options: dict | None = None) -> VerifyReport:
    """Re-hash every shard, parse every sample (decoding compressed ones), check shapes and checksums against the
    manifest. A URL's shards
    are verified in `cache_dir` (downloaded there first, as a loader would; the sha256 is checked as they
    stream in)."""
    if urls.is_url(shards_dir):
        return _verify_remote(str(shards_dir).rstrip("/"), cache_dir, storage_options)
    root = Path(urls.local_path(shards_dir))
    doc = schema.read_manifest(root)
    report = _verify_splits(doc, str(root / schema.MANIFEST), lambda split, k, sh: root / sh["file"])
    left = sorted(p for p in root.iterdir() if p.name.endswith(schema.PARTIAL_SUFFIX))
    return VerifyReport(shards=report.shards, samples=report.samples, bytes=report.bytes,
                        leftovers=tuple(p.name for p in left), leftover_bytes=sum(p.stat().st_size for p in left))


def _verify_splits(doc: dict, where: str, local) -> VerifyReport:
    shards = samples = nbytes = 0
    for split, entry in doc["splits"].items():
        schema.split_index(doc, split, where)  # every index entry has its shape and type
        compression = entry.get(schema.COMPRESSION)
        codec.require(compression, f"{where}: split {split!r} is compressed with zstd; verifying it")
        for k, sh in enumerate(entry["shards"]):
            samples += _check_shard(local(split, k, sh), sh, compression)
            shards += 1
            nbytes += sh["bytes"]
        if sum(sh["samples"] for sh in entry["shards"]) != entry["samples"]:
            raise ShardError(f"{where}: split {split!r} sample count disagrees with its shards; repack")
    return VerifyReport(shards=shards, samples=samples, bytes=nbytes)


def _verify_remote(url: str, cache_dir, storage_options) -> VerifyReport:
    from ..remote.cache import ShardCache

    if cache_dir is None:
        raise ConfigError(f"{url}: verifying a remote folder downloads its shards: pass cache_dir= (the CLI's "
                          "--cache-dir), a local folder with room for them")
    cache = ShardCache(cache_dir, storage_options=storage_options)
    where = urls.join(url, schema.MANIFEST)
    doc = schema.parse_manifest(cache.read_small(where), where)

    def local(split, k, sh):
        path = cache.fetch(urls.join(url, sh["file"]), sh["sha256"], int(sh["bytes"]))
        cache.unhold(sh["sha256"])
        return path

    return _verify_splits(doc, where, local)


def info(shards_dir: str | os.PathLike, *, storage_options: dict | None = None) -> dict[str, dict]:
    """Per split: samples, shards, bytes, compression ("zstd" or "none") and the bytes of its pixels decoded, and
    the distinct image sizes (a URL: read from its manifest alone)."""
    doc = read_manifest_at(shards_dir, storage_options)
    out = {}
    for split in doc["splits"]:
        idx = schema.split_index(doc, split)
        sizes, counts = np.unique(idx.hw, axis=0, return_counts=True)
        out[split] = {
            "samples": len(idx),
            "shards": len(idx.files),
            "bytes": int(sum(sh["bytes"] for sh in doc["splits"][split]["shards"])),
            "compression": idx.compression or "none",
            "pixel_bytes": int((idx.hw[:, 0] * idx.hw[:, 1]).sum()) * schema.CHANNELS * 2,
            "sizes": {f"{w}x{h}": int(c) for (h, w), c in zip(sizes.tolist(), counts.tolist())},
        }
    return out
