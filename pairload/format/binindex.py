"""A split's binary index (format version 5): the per-sample columns that versions 1-4 keep in `manifest.json` (key,
size, offsets, CRC-32s, shared targets, frame lengths, sensor facts), an encoded split's member formats (version 7),
what pack measured of each sample (`facts`: hashes, fingerprints, shift, brightness; absent from older packs) and
each key's planner hash (and a split packed with --sequences, its sequence table: `sequences.TABLE`), in one column
file `<split>.index` beside the shards, which readers memory-map instead of parsing. The manifest's split entry
names it with its size and sha256 (`"index"`); its shards are listed without their per-sample index."""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import re
from dataclasses import dataclass

import numpy as np

from ..errors import LoaderError, ShardError
from ..splitmix import splitmix
from . import columns as columns_doc, encoding, facts as facts_doc, sensor as sensor_doc, sequences as sequences_doc
from .columns import ColumnFile, Keys, Pieces
from .stamps import Stamp, stamp, stamp_of

FIELD = "index"  # split field of a version-5 manifest: {"file", "bytes", "sha256"}
SUFFIX = ".index"
KEY_BYTES, KEY_END, KEY_HASH, SHARD = "key_bytes", "key_end", "key_hash", "shard"
# the columns every index holds, as (name, dtype, trailing shape); the others depend on the split
COMMON = ((KEY_END, "<i8", ()), (KEY_HASH, "<u8", ()), (SHARD, "<i4", ()), ("hw", "<i8", (2,)), ("low", "<i8", ()),
          ("high", "<i8", ()), ("crc32", "<u4", (2,)))
SIZED = (("low_bytes", "<i8", ()), ("high_bytes", "<i8", ()))  # an encoding that is not plain: each member's length
SHARES = (("shares_high", "<i4", ()),)  # a pack where some sample shares another's target
KINDS = (("low_kind", "|u1", ()), ("high_kind", "|u1", ()))  # an encoding of per-member formats: each one's code
FACTS = facts_doc.COLUMNS  # what pack measured of each sample (absent from an index written before them)
# an encoded split's tiles members: where each of a member's tiles starts (uint32 from the member's start, tile t in
# column t; 0 past its last tile, and everywhere for a member of another format or of more tiles than a row holds),
# so that a reader knows which bytes a crop's tiles are without reading the member's header; the split field
# TILE_STARTS says how many a row holds (absent: no such columns, as in an index written before them)
TILE_STARTS = "tile_starts"
TILES_AT = ("low_tiles", "high_tiles")
SENSOR = {sensor_doc.RATIO: ("<f8", ()), sensor_doc.EXPOSURE: ("<f8", (2,)), sensor_doc.LEVELS: ("<f8", (5,)),
          sensor_doc.LEVELS_HIGH: ("<f8", (5,))}


def index_name(split: str) -> str:
    return f"{split}{SUFFIX}"


def is_index_name(name: str) -> bool:
    """Whether `name` is a split's index file name (`train.index`)."""
    return name.endswith(SUFFIX) and re.fullmatch(r"[A-Za-z0-9_-]+", name[:-len(SUFFIX)]) is not None


def pack_files(doc: dict) -> list[dict]:
    """Every file a manifest lists, as {"file", "bytes", "sha256"} entries: each split's shards, then its index
    file (version 5)."""
    out = []
    for entry in doc["splits"].values():
        out += entry["shards"]
        if isinstance(entry.get(FIELD), dict):
            out.append(entry[FIELD])
    return out


def key_hashes(keys) -> np.ndarray:
    """The planner's stable 64-bit hash of each key (uint64 array; `plan.draws.key_hashes` is this function): stored
    in the index, so that readers of a version-5 split never hash its keys."""
    return np.fromiter((int.from_bytes(hashlib.blake2b(k.encode(), digest_size=8).digest(), "little") for k in keys),
                       dtype=np.uint64, count=len(keys) if hasattr(keys, "__len__") else -1)


def source_key_hashes(source: str, key_hash: np.ndarray) -> np.ndarray:
    """The planner's hashes of a mixed source's samples ("source/key"): each key's own hash mixed with the source
    name's, so that the same key in two sources draws differently, worked out for the rows asked (no key is hashed
    again)."""
    salt = np.uint64(key_hashes([f"{source}/"])[0])
    return splitmix(np.asarray(key_hash, dtype=np.uint64) ^ salt)


def spec(entry: dict, sized: bool, shares: bool, kinds: bool = False, facts: bool = False
         ) -> list[tuple[str, str, tuple]]:
    """The columns of a split's index, (name, dtype, trailing shape) in file order; `sized`: its encoding records
    each member's stored length (`Encoding.sized`); `kinds`: and each member's format (`Encoding.per_member`);
    `facts`: what pack measured of each sample (`format.facts`; last, so that a reader that does not know them finds
    every other column where it was: they need no new format version); then the tiles members' tile starts (TILES_AT,
    where the entry says how many a row keeps: TILE_STARTS; a reader that does not know them reads on without)."""
    cols = list(COMMON) + (list(SIZED) if sized else []) + (list(KINDS) if kinds else []) + (
        list(SHARES) if shares else [])
    width = tiles_kept(entry)
    return (cols + [(name, *SENSOR[name]) for name in sensor_doc.index_fields(entry)]
            + (list(FACTS) if facts else []) + [(name, "<u4", (width,)) for name in TILES_AT if width])


def tiles_kept(entry: dict, where: str = "the manifest") -> int:
    """How many tile starts a row of the split's index keeps (its TILE_STARTS field; 0: none), checked (`where`: the
    manifest and split, for the message)."""
    from .tiles import STARTS_MAX

    width = entry.get(TILE_STARTS, 0)
    if type(width) is not int or not 0 <= width <= STARTS_MAX:
        raise ShardError(f"{where}: {TILE_STARTS!r} is {width!r}, expected a whole number from 1 to {STARTS_MAX} (how "
                         "many tile starts a row of the index keeps); the manifest is damaged: re-run `pairload pack`")
    return width


def index_columns(keys, columns: dict[str, np.ndarray], entry: dict, sized: bool, shares: bool, kinds: bool = False,
                  facts: bool = False) -> dict[str, np.ndarray]:
    """The arrays of a split's index file, in `spec` order and dtypes: `keys` (strings, or a `Keys` of their bytes),
    `columns` by name (the key hashes computed where absent; a column may be `Pieces`, joined as it is written)."""
    blob, ends = (keys.blob, keys.ends) if isinstance(keys, Keys) else Keys.encode(keys)
    out = {KEY_BYTES: blob}
    columns = dict(columns)
    if KEY_HASH not in columns:
        columns[KEY_HASH] = key_hashes(keys)
    columns[KEY_END] = ends
    n = len(ends)
    for name, dtype, shape in spec(entry, sized, shares, kinds, facts):
        column = columns[name]
        if isinstance(column, Pieces):
            if column.shape != (n, *shape):
                raise ValueError(f"index column {name!r}: {column.shape}, expected {(n, *shape)}")
            out[name] = Pieces(dtype, column.shape, column.pieces)
        else:
            out[name] = np.ascontiguousarray(np.asarray(column).astype(dtype, copy=False).reshape((n, *shape)))
    return out


def open_index(path: str | os.PathLike, entry: dict, split: str, where: str, *, known: bool = False
               ) -> tuple[Keys, dict[str, np.ndarray]]:
    """The mapped index of one split (`entry`: its manifest entry): its keys and its columns by name, each checked
    for dtype and length against the manifest (the facts where the index has them); the keys' ends and the shard
    column too, unless `known` (an earlier open checked this very file: `check_file`), which reads them whole."""
    f = ColumnFile(path, where)
    n = int(entry["samples"])
    shares = "shares_high" in f.columns
    facts = any(name in f.columns for name in facts_doc.NAMES)  # then all of them: a missing one is named
    out = {}
    stored = encoding.of_entry(entry, where, split)
    tiles_kept(entry, f"{where}: split {split!r}")
    for name, dtype, shape in spec(entry, stored.sized, shares, stored.per_member, facts):
        out[name] = f.column(name, dtype, (n, *shape))
    if sequences_doc.in_index(entry):  # a split packed with --sequences: its table (checked by `Sequences.from_entry`)
        count = entry[sequences_doc.FIELD].get("count")
        count = count if type(count) is int and count >= 0 else -1
        out[sequences_doc.START] = f.column(sequences_doc.START, "<i8", (count,))
        out[sequences_doc.NAME_END] = f.column(sequences_doc.NAME_END, "<i8", (count,))
        out[sequences_doc.NAME_BYTES] = f.column(sequences_doc.NAME_BYTES, "u1", (-1,))
    blob = f.column(KEY_BYTES, "u1", (-1,))
    ends = f.column(KEY_END, "<i8", (n,))
    if known:
        return _read_at_random(f, Keys(blob, ends), out)
    if n and (int(ends[-1]) != len(blob) or (np.diff(ends) < 0).any() or int(ends[0]) < 0):
        raise ShardError(f"{where}: split {split!r}: its keys do not fit their bytes; re-run the same `pairload "
                         "pack` command to rewrite the index")
    counts = np.array([int(sh["samples"]) for sh in entry["shards"]], dtype=np.int64)
    shard = out[SHARD]
    if n and (np.diff(shard) < 0).any() or not np.array_equal(np.bincount(shard, minlength=len(counts))
                                                              if n else np.zeros(len(counts), np.int64), counts):
        raise ShardError(f"{where}: split {split!r}: its shard column disagrees with the manifest's sample counts "
                         f"{counts.tolist()[:8]}; the index belongs to another pack: re-run `pairload pack`")
    hw = out["hw"]
    for name, found in (("min_size", hw.min(axis=0) if n else None), ("max_size", hw.max(axis=0) if n else None)):
        said = entry.get(name)  # loaders trust these bounds instead of scanning every size: they must be the index's
        if said is not None and (found is None or list(map(int, found)) != list(said)):
            raise ShardError(f"{where}: split {split!r}: the manifest's {name} {said} is not its index's "
                             f"{None if found is None else list(map(int, found))}; the manifest was edited or belongs "
                             "to another pack: re-run `pairload pack`")
    return _read_at_random(f, Keys(blob, ends), out)


def _read_at_random(f: ColumnFile, keys: Keys, out: dict) -> tuple[Keys, dict[str, np.ndarray]]:
    """A large index (over `columns.PAGED_ABOVE`), checked: from here on its readers read a row here and there (a
    block's rows, a batch's offsets), so its pages are read without read-ahead (`columns.read_at_random`), which
    would read megabytes around each row of an index bigger than memory."""
    if f.size > columns_doc.PAGED_ABOVE:
        for arr in (keys.blob, keys.ends, *out.values()):
            columns_doc.read_at_random(arr)
    return keys, out


_REPACK = "copy the pack's own file back beside the shards, or re-run the same `pairload pack` command"


@dataclass(frozen=True)
class IndexFile:
    """A split's index file as a process found it: `path` (`where` names it in messages), its size and sha256 (the
    manifest's), and its stamp then (None for a copy named by its sha256 in the node's cache: never rewritten, but
    touched on every use). What a pickled `SplitIndex` carries to another process, which maps the file again."""

    path: str
    where: str
    bytes: int
    sha256: str
    stamp: Stamp | None
    known: bool = False  # found whole and consistent by an earlier open (`VERIFIED`): not hashed nor checked again

    def check_unchanged(self) -> None:
        """Raise if the file is gone or is another file than the one this index was built from."""
        now = stamp(self.path)
        if now is None:
            raise ShardError(f"{self.where}: missing (it is listed in the manifest, and was there when the loader "
                             f"opened it); {_REPACK}")
        if now.size != self.bytes or (self.stamp is not None and now != self.stamp):
            raise LoaderError(f"{self.where}: replaced or rewritten since the loader opened it (a re-pack into the "
                              "same folder?); its batches would mix two packs: make the loader again")


VERIFIED = ".verified"  # beside an index file: the stamp of the file an open found whole (its sha256 the manifest's)
# and consistent with its manifest entry, so that later opens of that very file (same device, inode, size and
# modification time) need not read it all again: at a billion samples it is tens of gigabytes


def record_of(path: str) -> str:
    """The path (or name) of the record, beside an index file, that an open found the file whole (`VERIFIED`)."""
    return f"{path}{VERIFIED}"


def check_file(path: str | os.PathLike, where: str, ref: dict, split: str, *, cached: bool = False,
               bind: str | None = None) -> IndexFile:
    """The index file of `split` at `path`, once its size and sha256 are the manifest's (`ref`: the split's
    "index" entry); else a ShardError naming the file and the fix. `cached`: a node cache's copy named by its
    sha256. `bind`: the digest of the split's manifest entry; a file an earlier open recorded as checked against
    the same entry (`remember`) is not hashed again (None: always hashed, as `pairload verify` does)."""
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        raise ShardError(f"{where}: missing; it is split {split!r}'s index, listed in the manifest: {_REPACK}"
                         ) from None
    except OSError as exc:
        raise ShardError(f"{where}: cannot be read ({exc.strerror}); it is split {split!r}'s index") from None
    with fh:
        st = os.fstat(fh.fileno())
        if st.st_size != ref["bytes"]:
            raise ShardError(f"{where}: {st.st_size} bytes, the manifest says {ref['bytes']}; the index is truncated "
                             f"or belongs to another pack: {_REPACK}")
        if bind is not None and not cached and _recorded(path) == _record(ref["sha256"], bind, stamp_of(st)):
            return IndexFile(str(path), where, st.st_size, ref["sha256"], stamp_of(st), known=True)
        digest = sha256_of(fh, st.st_size)
    if digest != ref["sha256"]:
        raise ShardError(f"{where}: sha256 {digest[:16]}… differs from the manifest's "
                         f"{ref['sha256'][:16]}…; the index was changed or belongs to another pack: {_REPACK}")
    return IndexFile(str(path), where, st.st_size, ref["sha256"], None if cached else stamp_of(st))


def sha256_of(fh, size: int) -> str:
    """The sha256 of an open file of `size` bytes, read through its memory map."""
    digest = hashlib.sha256()
    if size:
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:  # hashed from the page cache, no copy
            digest.update(mm)
    return digest.hexdigest()


def remember(file: IndexFile, bind: str) -> None:
    """Record that `file` (as it was stamped when hashed) was found whole and consistent with the manifest entry
    `bind` digests; nothing is recorded for a node cache's copy, or where the folder is not ours to write."""
    if file.stamp is None or file.known:
        return
    from .atomic import write_json_atomic

    try:
        write_json_atomic(record_of(file.path), _record(file.sha256, bind, file.stamp))
    except OSError:
        pass


def _record(sha256: str, bind: str, st: Stamp) -> dict:
    return {"sha256": sha256, "entry": bind, "stamp": list(st)}


def _recorded(path) -> dict | None:
    try:
        with open(record_of(path), encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None
