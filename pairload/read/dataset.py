"""One split of a shard folder or URL read through memory maps (`ShardDataset`): shard files checked against the
manifest as they are opened, remote shards made local through the node's cache around their use.

Pixels are never copied here: `ds[i]` returns views into `np.memmap`s of the tar files, so every process on a
node that opens the same shards shares one copy of them in the page cache. A split whose encoding is not plain
(`pack --compress zstd`) is the exception: `ds[i]` decodes both images of the sample with its `Encoding`, in the
process that asks (a loader's worker), from the mapped members into fresh arrays; so does an encoded split
(`pack --store encoded`) for its jpeg and tiles members, each decoded by its format (`format.imageformats`), while its
npy members are viewed as they lie. `stored_member` and `stored_members` give the stored bytes and where they lie, for a
decode stage of its own (a GPU's).
"""

from __future__ import annotations

import copy

import mmap
import os
import weakref
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .. import willneed
from ..errors import ConfigError, LoaderError, ShardError
from ..format import imageformats, schema
from ..format.encoding import FrameError
from ..format.binindex import key_hashes
from ..format.columns import paged
from ..format.crc import crc32
from ..format.stamps import Stamp, stamp, stamp_of
from ..remote import urls
from ..remote.cache import INDEX
from .ahead import merged
from .source import ShardSource, StoredMember, StoredMembers


class ShardDataset(ShardSource):
    """One split of a shard folder: `len(ds)`, `ds[i] -> (key, low, high)` with uint8 H×W×3 RGB views.
    `targets_only`: read it as targets only (`schema.SplitIndex.as_targets`): each sample's input is its stored
    target, and a pair pack's stored inputs are never read.

    The folder may be a URL (s3://, gs://, az://, http(s)://, any fsspec URL) with a `cache` (`ShardCache`): the
    manifest is read from the URL and the shards are made local in the node's cache as the loader needs them
    (`want` ahead, `acquire`/`release` around each batch; `fetch_all` for loaders that need the whole split)."""

    def __init__(self, shards_dir: str | os.PathLike, split: str = "train", *, cache=None, targets_only: bool = False):
        self.url = str(shards_dir).rstrip("/") if urls.is_url(shards_dir) else None
        if self.url is not None:
            if cache is None:
                raise ConfigError(f"{urls.redact(self.url)}: a remote source needs a node-local cache: pass "
                                  "cache_dir= (the CLI's --cache-dir), a folder with room for the shards this node "
                                  "reads")
            manifest_url = urls.join(self.url, schema.MANIFEST)
            where = urls.redact(manifest_url)
            manifest = schema.parse_manifest(cache.read_small(manifest_url), where)
            self.root = cache.root  # the shards' local copies are in the cache; messages name the URL
            index_at = self._cached_index(cache)
        else:
            self.root = Path(urls.local_path(shards_dir))
            manifest = schema.read_manifest(self.root)
            where = str(self.root / schema.MANIFEST)
            index_at = self.root
        self.index = schema.split_index(manifest, split, where, index_at)
        if targets_only:
            self.index = self.index.as_targets()
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
        self._stamps: list[Stamp | None] = [None] * len(entries)  # of each local shard when first checked
        self.check_files()
        self._maps: list[np.ndarray | None] = [None] * len(entries)
        self._mmaps: list = [None] * len(entries)
        self._mapped: list[Stamp | None] = [None] * len(entries)  # of each file when it was mapped
        self._checked = np.zeros(len(self.index), dtype=bool)

    def _cached_index(self, cache) -> schema.Locate:
        """Where a remote version-5 split's index file is: fetched once into the node's cache (verified as it
        streams in) and held there while this dataset lives, so that worker processes can map it again."""
        def locate(name: str, sha: str, size: int) -> tuple[Path, str]:
            url = urls.join(self.url, name)
            path = cache.fetch(url, sha, size, suffix=INDEX)
            weakref.finalize(self, cache.unhold, sha)
            return path, f"{urls.redact(url)} (cached as {path})"

        return locate

    def name(self, number: int) -> str:
        """Shard `number` as messages name it: its path, or its URL (redacted; with the cached copy) for a remote
        source."""
        if self.url is None:
            return str(self._paths[number])
        return f"{urls.redact(urls.join(self.url, self.index.files[number]))} (cached as {self._paths[number]})"

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
        now = stamp_of(st)
        if self._stamps[number] is None:
            self._stamps[number] = now
        elif self._stamps[number] != now:
            raise LoaderError(f"{self.name(number)}: replaced or rewritten since the loader opened {self.root} (a "
                              "re-pack into the same folder?); its batches would mix two packs: make the loader again")

    # -- remote shards: made local ahead of use, held while a batch is cut from them
    @property
    def remote(self) -> bool:
        return self._feed is not None

    @property
    def node_cache(self):
        """The node-local cache a remote split's shards are fetched into (None for a local split)."""
        return None if self._feed is None else self._feed.cache

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
            current = stamp(self._paths[number])
            # the inode alone: a cache hit touches the file (its mtime moves), a new copy is a new inode
            if current is None or current.inode != self._mapped[number].inode:
                self._maps[number] = None
                self._mmaps[number] = None  # closed when its last array view is gone

    # -- pickling: worker processes reopen the memory maps themselves (a version-5 index: its file)
    def __getstate__(self):
        state = self.__dict__.copy()
        state["_feed"] = None  # downloads stay in the loading process; workers read the cached files
        state["_maps"] = [None] * len(self._maps)
        state["_mmaps"] = [None] * len(self._maps)
        state["_checked"] = None  # made anew where it arrives: a worker checks the samples it reads itself
        return state

    def __setstate__(self, state) -> None:
        self.__dict__.update(state)
        self._checked = np.zeros(len(self.index), dtype=bool)

    @property
    def sources(self) -> list[ShardDataset]:
        return [self]

    @property
    def keys(self) -> Sequence[str]:
        return self.index.keys

    @property
    def key_hash(self) -> np.ndarray:
        return self.index.key_hash if self.index.key_hash is not None else key_hashes(self.index.keys)

    @property
    def sizes(self) -> np.ndarray:
        """(n, 2) int64 height, width of each sample."""
        return self.index.hw

    @property
    def size_bounds(self):
        """((least h, least w), (greatest h, greatest w)) of `sizes`, as the manifest records them (None: not
        recorded): what the planner checks a crop against without reading every size."""
        return self.index.size_bounds

    @property
    def files(self) -> list[Path]:
        """Each shard's local path (for a remote source: its place in the cache, present once fetched)."""
        return list(self._paths)

    @property
    def shard_samples(self) -> tuple[int, ...]:
        """Samples in each shard, in index order (shard k's samples follow shard k-1's)."""
        return tuple(int(c) for c in self.index.shard_samples)

    def shard_map(self, number: int) -> np.ndarray:
        """The whole shard file as a read-only uint8 array over its memory map (a plain ndarray: slicing it is
        cheaper than slicing an np.memmap, and it is sliced for every crop)."""
        mm = self._maps[number]
        if mm is None:
            with open(self._paths[number], "rb") as fh:
                st = os.fstat(fh.fileno())
                self._check_stamp(number, st)  # the file mapped is the one the loader opened
                mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            self._mapped[number] = stamp_of(st)
            self._mmaps[number] = mapped
            mm = self._maps[number] = np.frombuffer(mapped, dtype=np.uint8)
        return mm

    def willneed(self, indices) -> None:
        """Ask the kernel to start reading these samples' members (madvise WILLNEED), each with the .npy header in front
        of it: a split that is not in the page cache is then read ahead of the copies, instead of faulting page by
        page under them (each fault reading the device's whole read-ahead window around it)."""
        _, shard, start, end = merged(*self.spans(indices))
        for number, a, b in zip(shard.tolist(), start.tolist(), end.tolist()):
            try:
                self.shard_map(number)
            except FileNotFoundError:
                if self.url is None:
                    raise
                continue  # a remote shard not downloaded yet (or evicted): its batch fetches and holds it
            try:
                willneed.map_range(self._mmaps[number], a, b - a)
            except (OSError, ValueError):  # advice only
                return

    def spans(self, indices) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(shard, start, end) of the bytes that reading these samples reads: each member with the .npy header in front
        of it, from the page it starts in; inputs, then targets (2n rows, end excluded). What `ReadAhead` asks for."""
        shard, start, end = self._extents(indices)
        return shard, np.maximum(0, start - HEADER_ROOM) // mmap.PAGESIZE * mmap.PAGESIZE, end

    def dontneed(self, indices) -> None:
        """Drop these samples' members from the page cache (the pages wholly inside them: a page shared with a
        neighbour stays), unmapped here first, since the kernel drops no page that a process maps. For a split larger
        than the memory that could cache it: every epoch reads it from disk anyway, and pages kept once cut would
        only push out those read ahead, to be read again."""
        page = mmap.PAGESIZE
        shard, start, end = self._extents(indices)
        start, end = -(-start // page) * page, end // page * page
        keep = end > start
        _, numbers, starts, ends = merged(shard[keep], start[keep], end[keep])
        self._drop(numbers.tolist(), starts.tolist(), ends.tolist())

    def dontneed_span(self, number: int, start: int, end: int) -> None:
        page = mmap.PAGESIZE
        self._drop([number], [start // page * page], [-(-end // page) * page])

    def _drop(self, numbers: list[int], starts: list[int], ends: list[int]) -> None:
        """madvise and fadvise DONTNEED of these byte ranges of these shards (starts a multiple of the page size)."""
        opened: dict[int, int] = {}
        try:
            for number, a, b in zip(numbers, starts, ends):
                if number not in opened:
                    try:
                        opened[number] = os.open(self._paths[number], os.O_RDONLY)
                    except FileNotFoundError:  # a remote shard evicted meanwhile: its pages are gone with it
                        continue
                try:
                    if self._mmaps[number] is not None:
                        self._mmaps[number].madvise(mmap.MADV_DONTNEED, a, b - a)
                    os.posix_fadvise(opened[number], a, b - a, os.POSIX_FADV_DONTNEED)
                except (OSError, ValueError):  # advice only
                    return
        finally:
            for fd in opened.values():
                os.close(fd)

    def _extents(self, indices) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(shard, start, end) of each member these samples read, inputs then targets (end excluded)."""
        idx = self.index
        rows = np.asarray(indices, dtype=np.int64).ravel()
        # a large index's pages let go once read (`paged`): a block's rows, at random, would map it whole here
        shard = paged(idx.shard)[rows].astype(np.int64)
        start = np.concatenate([paged(idx.low)[rows], paged(idx.high)[rows]]).astype(np.int64)
        end = start + np.concatenate([paged(idx.low_bytes)[rows], paged(idx.high_bytes)[rows]]).astype(np.int64)
        return np.concatenate([shard, shard]), start, end

    def arrays(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) views of sample i. The first time a sample is read, the .npy header in front of each image
        is compared with the expected one: a cheap guard against a shard that was damaged or replaced.
        An encoding that is not plain (zstd): both images decoded into fresh read-only arrays; the first time a
        sample is decoded in this process, its headers and the CRC-32 of its pixels are checked too."""
        idx = self.index
        h, w = int(idx.hw[i, 0]), int(idx.hw[i, 1])
        mm = self.shard_map(int(idx.shard[i]))
        if idx.encoding.per_member:
            return self._formats(i, mm, h, w)
        if not idx.encoding.plain:
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
        """Sample i of a split whose encoding is not plain: each image's stored member (a zstd frame) decoded into a
        fresh .npy file, pixels viewed in it."""
        idx = self.index
        m = idx.members
        s = m.scale
        headers = self._headers(h, w)
        files = []
        for member, off, n, header, size in (
                (schema.LOW, int(idx.low[i]), int(idx.low_bytes[i]), headers[0], m.low.nbytes(h, w)),
                (schema.HIGH, int(idx.high[i]), int(idx.high_bytes[i]), headers[1], m.high.nbytes(h * s, w * s))):
            try:
                files.append(idx.encoding.decode(mm[off:off + n], len(header) + size))
            except FrameError as exc:
                raise ShardError(f"{self.root / idx.files[idx.shard[i]]}: key {idx.keys[i]}: {idx.keys[i]}."
                                 f"{schema.image_suffix(member, idx.encoding)} does not decode: {exc}; the shard "
                                 "is corrupt: run `pairload verify` and repack") from None
        if not self._checked[i]:
            self._check_decoded(i, files, headers)
        return (np.frombuffer(files[0], dtype=m.low.np_dtype, offset=len(headers[0])).reshape(h, w, m.low.channels),
                np.frombuffer(files[1], dtype=m.high.np_dtype, offset=len(headers[1])).reshape(h * s, w * s,
                                                                                              m.high.channels))

    def _check_decoded(self, i: int, files: list[bytes], headers: tuple[bytes, bytes]) -> None:
        """The first decode of a compressed sample in this process: .npy headers, and the pixels' CRC-32 (CPU on
        top of the decode, so paid once per sample and process, not on every read)."""
        idx = self.index
        for k, (member, data, header) in enumerate(zip((schema.LOW, schema.HIGH), files, headers)):
            name = f"{idx.keys[i]}.{schema.image_suffix(member, idx.encoding)}"
            where = f"{self.root / idx.files[idx.shard[i]]}: key {idx.keys[i]}: {name}"
            if data[:len(header)] != header:
                side = idx.members.side(k)
                raise ShardError(f"{where} does not hold the {side.dtype} {tuple(idx.hw[i].tolist())} ×"
                                 f"{side.channels} .npy the manifest says; the shard is corrupt: run "
                                 "`pairload verify` and repack")
            if crc32(memoryview(data)[len(header):]) != int(idx.crc[i, k]):
                raise ShardError(f"{where}: pixels do not match their checksum; the shard is corrupt: run "
                                 "`pairload verify` and repack")
        self._checked[i] = True

    # -- an encoded split (`pack --store encoded`): each image member decoded by its format
    def _formats(self, i: int, mm: np.ndarray, h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
        """Sample i of an encoded split: an npy member's pixels viewed where they lie, a jpeg or tiles member decoded
        into a fresh read-only array (once, when both sides are one stored member: targets only). The first read of a
        sample in this process checks its npy headers and the CRC-32 of what it decoded."""
        idx, m = self.index, self.index.members
        s = m.scale
        sides = ((int(idx.low[i]), int(idx.low_bytes[i]), int(idx.low_kind[i]), m.low, h, w),
                 (int(idx.high[i]), int(idx.high_bytes[i]), int(idx.high_kind[i]), m.high, h * s, w * s))
        low = self._member(i, 0, mm, *sides[0])
        high = low if sides[0][:3] == sides[1][:3] else self._member(i, 1, mm, *sides[1])
        if not self._checked[i]:
            for k, (pixels, (off, _, code, member, hh, ww)) in enumerate(zip((low, high), sides)):
                if k == 0 and high is low:
                    continue  # one stored member: checked once, as the target
                fmt = imageformats.BY_CODE[code]
                if fmt.pixels and mm[off - len(member.npy_header(hh, ww)):off].tobytes() != member.npy_header(hh, ww):
                    raise self._bad_member(i, k, fmt, "has no .npy header where the index says its pixels start")
                crc = None if fmt.pixels else crc32(pixels)
                if crc is not None and crc != int(idx.crc[i, k]):
                    raise self._bad_member(i, k, fmt, f"decodes to other pixels than when it was packed (CRC-32 "
                                           f"{crc:08x}, the index says {int(idx.crc[i, k]):08x}: damaged"
                                           f"{another_decoder(fmt)})")
            self._checked[i] = True
        return low, high

    def _member(self, i: int, k: int, mm: np.ndarray, off: int, n: int, code: int, member, h: int, w: int
                ) -> np.ndarray:
        """Side k's image member of sample i, decoded by its format (a MemberError named by key, shard and side)."""
        fmt = None
        try:
            fmt = imageformats.of_code(code)
            pixels = fmt.decode(mm[off:off + n], member, h, w)
        except imageformats.MemberError as exc:
            raise self._bad_member(i, k, fmt, str(exc)) from None
        if not fmt.pixels:
            pixels.flags.writeable = False  # as every other reader's arrays: views of the read-only shard
        return pixels

    def _bad_member(self, i: int, k: int, fmt, what: str) -> ShardError:
        idx = self.index
        key, side = idx.keys[i], "high" if idx.targets_only else ("low", "high")[k]  # targets only: one member
        name = f"{key}.{fmt.member_suffix(side) if fmt is not None else side}"
        role = "input" if k == 0 and not idx.targets_only else "target"
        return ShardError(f"{self.name(int(idx.shard[i]))}: key {key}: {name} (the {role}, a "
                          f"{fmt.name if fmt else 'stored'} member) {what}; the shard is damaged: run `pairload verify "
                          f"{self.where}` to find every damaged sample, and repack (or restore the shard from a copy)")

    # -- the stored bytes, for a decode stage of the caller's own (a GPU's): no pixel is decoded here
    def stored_member(self, i: int, side: int | str) -> StoredMember:
        """Sample i's image member on `side` (0 or "low": the input; 1 or "high": the target) as stored: its format's
        name (`imageformats.FORMATS`: "npy", the pixels themselves, H×W×C of `members.side(k)`'s dtype in C order;
        "jpeg", the file's own bytes; or "tiles", the pixels lossless in tiles, `format.tiles`) and its bytes, a
        read-only uint8 view of the shard's memory map (no copy). A decoded split's members are all "npy"; a zstd
        split's are frames, which only `arrays(i)` decodes."""
        k = _side(side)
        rows = self.stored_members([i])
        data = self.shard_map(int(rows.shard[0]))[int(rows.offset[0, k]):int(rows.offset[0, k] + rows.length[0, k])]
        return StoredMember(imageformats.BY_CODE[int(rows.format[0, k])].name, data)

    def stored_members(self, indices) -> StoredMembers:
        """Where the image members of these samples lie, gathered from the index at once (no per-sample Python):
        per sample and side (column 0: input, 1: target) its format's code (`imageformats.BY_CODE`), the offset and
        length of its stored bytes in its shard, and the shard's number (`shard_map(number)` maps it). A targets-only
        split gives its stored target on both sides."""
        idx = self.index
        if not idx.encoding.plain and not idx.encoding.per_member:
            raise ConfigError(f"{self.where}: split {self.split!r} is compressed with {idx.encoding.name}: its members "
                              "are frames that only `arrays(i)` decodes; stored members are given for decoded and "
                              "encoded splits (pack --store encoded)")
        rows = np.asarray(indices, dtype=np.int64)
        code = np.zeros((len(rows), 2), np.uint8)
        if idx.encoding.per_member:
            code[:, 0], code[:, 1] = paged(idx.low_kind)[rows], paged(idx.high_kind)[rows]
        return StoredMembers(code, np.stack([paged(idx.low)[rows], paged(idx.high)[rows]], axis=1),
                             np.stack([paged(idx.low_bytes)[rows], paged(idx.high_bytes)[rows]], axis=1),
                             paged(idx.shard)[rows])

    def tile_starts(self, indices) -> np.ndarray | None:
        """Where each tile of these samples' tiles members starts, as the index keeps it (pack writes it for members of
        at most `format.tiles.STARTS_MAX` tiles): uint32 (m, 2, W), per sample and side (0: input, 1: target) tile
        t's first byte from the member's start; 0 past its last tile, and everywhere for a member of another format or
        of more tiles. None: the index keeps none (a split packed before they were kept, or not encoded)."""
        idx = self.index
        if idx.low_tiles is None or idx.high_tiles is None:
            return None
        rows = np.asarray(indices, dtype=np.int64)
        return np.stack([paged(idx.low_tiles)[rows], paged(idx.high_tiles)[rows]], axis=1)

    @property
    def members(self):
        """The split's member types and size relation (`pairload.format.members.Members`)."""
        return self.index.members

    @property
    def sensor(self):
        return self.index.sensor

    @property
    def sequences(self):
        return self.index.sequences

    def facts(self, indices=None):
        found = self.index.facts
        return found if found is None or indices is None else found.take(indices)

    @property
    def targets_only(self) -> bool:
        return self.index.targets_only

    def as_targets(self, names: tuple[str, ...] | None = None) -> "ShardDataset":
        """This split read as targets only: the same files and maps, the index's inputs aliased to its targets."""
        if self.targets_only:
            return self
        view = copy.copy(self)
        view.index = self.index.as_targets()
        return view

    @property
    def where(self) -> str:
        return urls.redact(self.url) if self.url is not None else str(self.root)

    @property
    def groups(self) -> tuple[tuple[str, int], ...]:
        """(name, samples) of each source: one unnamed source."""
        return (("", len(self)),)


def another_decoder(fmt) -> str:
    """Besides damage, why a member of format `fmt` may decode to other pixels than pack's: for a JPEG, another
    decoder than the packing machine's (", or decoded here by another JPEG decoder: OpenCV …"); a lossless format
    decodes alike everywhere ("")."""
    return f", or decoded here by another JPEG decoder: {imageformats.decoder()}" if fmt is imageformats.JPEG else ""


def _side(side: int | str) -> int:
    """0 for the input ("low"), 1 for the target ("high")."""
    if not isinstance(side, bool) and side in (0, 1, "low", "high"):
        return side if isinstance(side, int) else ("low", "high").index(side)
    raise ConfigError(f"side {side!r}: expected 0 or 'low' (the input), 1 or 'high' (the target)")


HEADER_ROOM = 512  # bytes before a member read with it: a plain member's .npy header (128 as pack writes them)
