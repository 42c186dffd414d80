"""The on-disk shard format, versions 1 to 7: member names, sample keys, tar headers, the manifest, and each split's
per-sample index (`SplitIndex`: from the manifest's JSON, or from a version-5 split's mapped index file; any split
read as targets only, `SplitIndex.as_targets`).

This is the only module that knows these names and layouts (with `samples` and `tarblocks`, whose names it
re-exports); the packer, `open_shards`, `verify` and every loader import them from here. It imports neither torch
nor DALI.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .atomic import PARTIAL_SUFFIX, fsync_dir, write_json_atomic  # noqa: F401 - part of the schema's API
from ..errors import ShardError
from . import binindex, encoding as encodings, sensor as sensor_doc
from .encoding import Encoding
from .facts import COLUMNS as FACT_COLUMNS, NAMES as FACT_NAMES, FactsColumns
from .members import DEFAULT, Members, members_of
from .sensor import SensorRows
from . import sequences as sequences_doc
from .sequences import Sequences
from .columns import paged
from .stamps import stamp_of
# how the members' tar headers are written (`tarblocks`) and where a sample's members lie (`samples`): part of the
# schema's API
from .tarblocks import BLOCK, RECORD, TAR_MODE, TAR_MTIME, archive_end, header_size, padded, tar_header  # noqa: F401
from .samples import (HIGH, LOW, MEMBER_ORDER, META, SampleLayout, StoredImage, image_suffix,  # noqa: F401
                      layout_compressed_sample, layout_sample, member_name, member_order, npy_header, sample_end)

FORMAT = "pairload-shards"
VERSION = 2  # written when a sample shares another's target; shards without shared targets are written as 1
VERSION_COMPRESSED = 3  # written by `pack --compress`: index.low/high are then where a member's zstd frame starts
VERSION_TYPED = 4  # written when a split's members are not uint8 RGB of one size (`members.Members`)
VERSION_BINARY = 5  # written by default: each split's per-sample index in a column file beside the shards (`binindex`)
VERSION_TARGETS = 6  # written when a split holds targets only (`TARGETS_ONLY`); always with a binary index
VERSION_ENCODED = 7  # written by `pack --store encoded`: each image member in a format of its own (`imageformats`)
VERSIONS = (1, 2, 3, 4, 5, 6, 7)  # readable
MANIFEST = "manifest.json"
RAW_DIR = "raw_dir"  # manifest field: the resolved dataset folder packed; pack will not replace another folder's shards

# how a split's image members are stored is its `encoding.Encoding` (raw pixels, each .npy file as one zstd frame, or
# each member in a format of its own)
COMPRESSIONS = encodings.COMPRESSIONS  # the split field's values ("zstd")
COMPRESSION = encodings.FIELD  # split field: the encoding of its image members; absent for raw members
STORE = encodings.STORE  # split field (version 7): "encoded", each image member in a format of its own
LOW_BYTES, HIGH_BYTES = "low_bytes", "high_bytes"  # index fields of a compressed split: each frame's length
LOW_KIND, HIGH_KIND = "low_kind", "high_kind"  # index fields of an encoded split: each member's format's code
HIGH_REF = "high_ref"  # .json field of a sample whose target is another sample's `.high.npy` (version 2)
SHARES_HIGH = "shares_high"  # index field (version 2): per sample, the index in its shard whose target it uses, or -1
# split field (version 6): each sample stores its target alone (`<key>.json`, `<key>.high.npy`), for a degradation to
# make its input from; the index's low column is its high column. An older pairload refuses the version by name
# instead of training on (target, target) pairs.
TARGETS_ONLY = "targets_only"
# split field: which definition of the facts its index holds (`pairload.audit.measures.VERSION`); absent from packs
# made before it was kept (their facts are of version 3 or older). Needs no new version: older readers pass over it.
MEASURES = "measures"


_SHARD_RE = re.compile(r"^(?P<split>[A-Za-z0-9_-]+)-(?P<num>\d{6})\.tar$")
_KEY_SAFE = re.compile(r"[A-Za-z0-9_-]")
_SPLIT_SAFE = re.compile(r"^[A-Za-z0-9_-]+$")


def shard_name(split: str, number: int) -> str:
    """File name of shard `number` of `split`: `train-000000.tar`."""
    return f"{split}-{number:06d}.tar"


def is_shard_name(name: str) -> bool:
    return _SHARD_RE.match(name) is not None


def check_split_name(split: str) -> str:
    if not _SPLIT_SAFE.match(split):
        raise ShardError(
            f"split name {split!r} must contain only letters, digits, '_' and '-'; rename the folder or the "
            "split column of the pairs file"
        )
    return split


def key_from_relpath(rel: str) -> str:
    """A sample key from a path relative to the split's low folder, extension dropped.

    Letters, digits, '_' and '-' are kept, '/' becomes '+', and every other character (dots and spaces
    included) becomes '~XX' per UTF-8 byte. The mapping is injective, so distinct paths give distinct keys,
    and keys never contain a dot (WebDataset cuts keys at the first dot).
    """
    stem = rel.replace(os.sep, "/")
    stem = stem.rsplit(".", 1)[0] if "." in stem.rsplit("/", 1)[-1] else stem
    out = []
    for ch in stem:
        if _KEY_SAFE.match(ch):
            out.append(ch)
        elif ch == "/":
            out.append("+")
        else:
            # surrogateescape: a file name that is not valid UTF-8 keeps its own bytes
            out.extend(f"~{b:02X}" for b in ch.encode("utf-8", "surrogateescape"))
    return "".join(out)


def sample_meta(low_rel: str | None, high_rel: str, original_hw: tuple[int, int], stored_hw: tuple[int, int],
                high_ref: str | None = None) -> bytes:
    """The `<key>.json` member: source paths (relative to the dataset folder; a targets-only sample's `low` is null),
    original and stored [height, width], and, for a sample that shares another's target (format version 2), that
    sample's key as `high_ref`.

    Only facts known before decoding go here, so every offset in a shard is fixed before any pixel is read.
    """
    doc = {
        "low": low_rel,
        "high": high_rel,
        "original_size": [original_hw[0], original_hw[1]],
        "size": [stored_hw[0], stored_hw[1]],
    }
    if high_ref is not None:
        doc[HIGH_REF] = high_ref
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")


# ---------------------------------------------------------------- manifest

def read_manifest(shards_dir: str | os.PathLike) -> dict:
    """Load and check `manifest.json`; raises ShardError saying what is wrong and how to fix it."""
    folder = Path(shards_dir)
    path = folder / MANIFEST
    if not folder.is_dir():
        raise ShardError(f"{folder}: no such folder; pass the SHARDS_DIR that `pairload pack` wrote")
    if not path.is_file():
        raise ShardError(
            f"{folder}: no {MANIFEST} found (expected a folder written by `pairload pack`; an interrupted pack "
            "leaves none: run the same `pairload pack` command again)"
        )
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise ShardError(f"{path}: cannot be read ({exc.strerror})") from None
    return parse_manifest(text, path)


def parse_manifest(text: bytes, path: str | os.PathLike) -> dict:
    """A manifest's bytes (read from a folder or fetched from a URL, `path`) checked and parsed."""
    try:
        doc = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ShardError(f"{path}: not valid JSON ({exc}); re-run `pairload pack` to rewrite it") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise ShardError(f"{path}: expected \"format\": \"{FORMAT}\", found {found!r}")
    version = doc.get("version")
    if isinstance(version, str) and version.strip().isdigit():
        raise ShardError(f"{path}: \"version\" is the string {version!r}; it must be the number {int(version)} "
                         f"(\"version\": {int(version)}): the manifest was edited by hand or by another tool: "
                         "re-run the same `pairload pack` command to rewrite it")
    if type(version) is not int or version not in VERSIONS:
        raise ShardError(
            f"{path}: shard format version {doc.get('version')!r}, this pairload reads versions "
            f"{', '.join(map(str, VERSIONS))}; repack with this version of `pairload pack`"
        )
    if not isinstance(doc.get("splits"), dict) or not doc["splits"]:
        raise ShardError(f"{path}: expected a non-empty \"splits\" object")
    for split, entry in doc["splits"].items():
        _check_split_entry(path, split, entry, version)
    return doc


_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_INDEX_FIELDS = ("key", "hw", "low", "high", "crc32")


def _check_split_entry(path: Path, split: str, entry: Any, version: int) -> None:
    """Every field of one split of the manifest has the type and shape readers rely on; a manifest that was edited
    or damaged is refused here, with the field named, instead of failing later with a KeyError. From version 5 the
    split names its index file instead of listing an index in each shard."""
    def bad(what: str) -> ShardError:
        return ShardError(f"{path}: split {split!r}: {what}; the manifest is damaged or was edited: re-run the same "
                          "`pairload pack` command to rewrite it")

    if not isinstance(entry, dict) or not isinstance(entry.get("shards"), list) or not entry["shards"]:
        raise bad("expected an object with a non-empty \"shards\" list")
    if not _SPLIT_SAFE.match(split):
        raise bad("the split name may only hold letters, digits, '_' and '-'")
    kinds = members_of(entry, path, split)  # "compression" and "members" are checked here, with the split named
    if kinds.encoding.per_member and version < VERSION_ENCODED:
        raise bad(f"\"{STORE}\" is {entry[STORE]!r} in a version {version} manifest (encoded splits are version "
                  f"{VERSION_ENCODED})")
    sensor_doc.check_doc(entry, path, split)
    _check_targets_only(entry, kinds, version, bad)
    binary = version >= VERSION_BINARY
    if binary:
        _check_index_entry(entry.get(binindex.FIELD), split, bad)
    elif sequences_doc.in_index(entry):
        raise bad(f"\"{sequences_doc.FIELD}\" keeps its table in an index file, which a version {version} manifest "
                  "has not (binary indexes are version 5)")
    total = 0
    for k, sh in enumerate(entry["shards"]):
        where = f"shard {k}"
        if not isinstance(sh, dict):
            raise bad(f"{where} is not an object")
        name = sh.get("file")
        m = _SHARD_RE.match(name) if isinstance(name, str) else None
        if m is None or m.group("split") != split:
            raise bad(f"{where}: \"file\" is {name!r}, expected a file in the shard folder named {split}-NNNNNN.tar")
        for field, kind in (("samples", int), ("bytes", int), ("sha256", str)) + (() if binary else (("index", dict),)):
            if not isinstance(sh.get(field), kind) or isinstance(sh.get(field), bool):
                raise bad(f"{name}: \"{field}\" is {sh.get(field)!r}, expected {'an' if kind is int else 'a'} "
                          f"{kind.__name__}")
        if not _SHA256.match(sh["sha256"]):
            raise bad(f"{name}: \"sha256\" is not 64 hexadecimal digits")
        total += sh["samples"]
        if binary:
            continue
        idx = sh["index"]
        sized = (LOW_BYTES, HIGH_BYTES) if kinds.encoding.sized else ()
        extra = sized + ((SHARES_HIGH,) if SHARES_HIGH in idx else ()) + sensor_doc.index_fields(entry)
        for field in _INDEX_FIELDS + extra:
            if not isinstance(idx.get(field), list) or len(idx[field]) != sh["samples"]:
                raise bad(f"{name}: index \"{field}\" should list {sh['samples']} entries (one per sample)")
    if entry.get("samples") != total:
        raise bad(f"\"samples\" is {entry.get('samples')!r} but its shards hold {total}")


def _check_targets_only(entry: dict, kinds: Members, version: int, bad) -> None:
    """A targets-only split (version 6) stores one member type at one size, and a camera raw one keeps packed
    mosaics (whose levels the index holds for both sides)."""
    flag = entry.get(TARGETS_ONLY, False)
    if type(flag) is not bool:
        raise bad(f"\"{TARGETS_ONLY}\" is {flag!r}, expected true or false")
    if not flag:
        return
    if version < VERSION_TARGETS:
        raise bad(f"\"{TARGETS_ONLY}\" is true in a version {version} manifest (targets-only splits are version "
                  f"{VERSION_TARGETS})")
    if kinds.low != kinds.high or kinds.scale != 1:
        raise bad(f"\"{TARGETS_ONLY}\" is true but its members are {kinds.describe()} (one type at one size expected)")
    sensor = entry.get(sensor_doc.FIELD)
    if sensor is not None and sensor["high"]["kind"] != sensor_doc.PACKED:
        raise bad(f"\"{TARGETS_ONLY}\" is true but its sensor target is {sensor['high']['kind']!r} (only "
                  f"{sensor_doc.PACKED!r} keeps sensor facts)")


def _check_index_entry(ref: Any, split: str, bad) -> None:
    """A version-5 split's "index": {"file": "<split>.index", "bytes": int, "sha256": hex}."""
    want = binindex.index_name(split)
    if not isinstance(ref, dict) or ref.get("file") != want:
        found = ref.get("file") if isinstance(ref, dict) else ref
        raise bad(f"\"{binindex.FIELD}\" names {found!r}, expected an object naming its index file {want!r}")
    if not isinstance(ref.get("bytes"), int) or isinstance(ref["bytes"], bool) or ref["bytes"] < 0:
        raise bad(f"{want}: \"bytes\" is {ref.get('bytes')!r}, expected a number of bytes")
    if not isinstance(ref.get("sha256"), str) or not _SHA256.match(ref["sha256"]):
        raise bad(f"{want}: \"sha256\" is {ref.get('sha256')!r}, expected 64 hexadecimal digits")


@dataclass(frozen=True)
class MappedIndex:
    """Where a version-5 `SplitIndex` came from: its checked index file and its split's manifest entry (no
    per-sample data), all another process needs to map the same file again."""

    file: binindex.IndexFile
    entry: dict


class PixelBytes:
    """The bytes each sample's member stores in a plain split, its pixels (height × width × bytes per pixel),
    worked out for the rows asked: `pixel_bytes[i]` or `[rows]` (an array of every sample's would cost 8 bytes a
    sample of private memory on every rank)."""

    def __init__(self, hw: np.ndarray, per_pixel: int):
        self.hw, self.per_pixel = hw, per_pixel

    def __getitem__(self, rows):
        hw = np.asarray(paged(self.hw)[rows], dtype=np.int64)  # (a large index's pages let go once read)
        return hw[..., 0] * hw[..., 1] * self.per_pixel

    def __len__(self) -> int:
        return len(self.hw)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        return self[:] if dtype is None else self[:].astype(dtype)


@dataclass(frozen=True)
class SplitIndex:
    """Column arrays over one split's samples, in key order, built from the manifest (no shard is opened). Version
    5: views of the mapped index file (shared by every process of the node through the page cache, read-only);
    pickled, it is `mapped` alone and the receiving process maps the file again."""

    split: str
    files: tuple[str, ...]  # shard file names
    keys: Sequence[str]  # a tuple (versions 1-4), or `columns.Keys` over the mapped file
    shard: np.ndarray  # int32 (n,) shard number of each sample
    hw: np.ndarray  # int64 (n, 2) height, width
    low: np.ndarray  # int64 (n,) offset of low pixels in its shard (an encoding not plain: of its stored member)
    high: np.ndarray  # int64 (n,)
    crc: np.ndarray  # uint32 (n, 2) CRC-32 of low and high pixels
    shard_samples: np.ndarray  # int64 (n_shards,)
    low_bytes: np.ndarray | None = None  # int64 (n,) bytes stored at `low`: the zstd frame (`PixelBytes` for pixels)
    high_bytes: np.ndarray | None = None
    members: Members = DEFAULT  # element types, size relation (`hw` is the input's size) and encoding
    sensor: SensorRows | None = None  # camera raw splits: each sample's ratio, exposures and levels
    key_hash: np.ndarray | None = None  # uint64 (n,) the planner's hash of each key (version 5; else computed)
    shares_high: np.ndarray | None = None  # int32 (n,) version 5: the sample of its shard whose target it uses, or -1
    mapped: MappedIndex | None = None  # version 5: the file the arrays view
    # every sample's input is its stored target (a targets-only split, or any split `as_targets`): for a degradation
    # to make the input from; loaders that train on stored pairs refuse it
    targets_only: bool = False
    sequences: Sequences | None = None  # a split packed with --sequences: the frames of each video or burst
    low_kind: np.ndarray | None = None  # uint8 (n,) an encoded split: the format code of each input member
    high_kind: np.ndarray | None = None  # (`imageformats.BY_CODE`); None: every member is pixels (or a zstd frame)
    low_tiles: np.ndarray | None = None  # uint32 (n, W) each tiles member's tile starts (`binindex.TILES_AT`), or None
    high_tiles: np.ndarray | None = None
    # what pack measured of each sample (`facts.FactsColumns`); None: a pack that predates them, or a json index
    low_exact: np.ndarray | None = None  # uint64 (n,) exact hash of each input
    high_exact: np.ndarray | None = None  # uint64 (n,) and of each target
    low_fp: np.ndarray | None = None  # uint64 (n,) perceptual fingerprint of each input
    high_fp: np.ndarray | None = None  # uint64 (n,) and of each target
    shift: np.ndarray | None = None  # float32 (n, 3) dy, dx (input pixels), confidence
    luma: np.ndarray | None = None  # float32 (n, 2) mean luma of the input, of the target
    measures: int | None = None  # which version of `audit.measures` made them (the split's MEASURES; None: not kept)
    # ((least height, least width), (greatest height, greatest width)) of `hw`, as the manifest records them (checked
    # against the index when it was found whole): None where not recorded
    size_bounds: tuple[tuple[int, int], tuple[int, int]] | None = None

    def __post_init__(self) -> None:
        if self.low_bytes is None:  # raw: the pixels themselves, worked out for the rows asked
            s = self.members.scale
            object.__setattr__(self, "low_bytes", PixelBytes(self.hw, self.members.low.pixel_bytes))
            object.__setattr__(self, "high_bytes", PixelBytes(self.hw, s * s * self.members.high.pixel_bytes))

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def facts(self) -> FactsColumns | None:
        """What pack measured of each sample, as one tuple of columns (None: a pack that predates them)."""
        return FactsColumns(*(getattr(self, name) for name in FACT_NAMES)) if self.shift is not None else None

    @property
    def encoding(self) -> Encoding:
        """How the split's image members are stored (`encoding.ENCODINGS`): `encoding.plain` when the bytes at
        `low`/`high` are the pixels themselves, as a GPU kernel or a view of the page cache can read them."""
        return self.members.encoding

    @property
    def compression(self) -> str | None:
        """The manifest's "compression" value: "zstd", or None for raw pixels ("encoded" for an encoded split, whose
        manifest says "store"). Kept for readers that compare the string; ask `encoding` instead."""
        return self.members.encoding.stored

    def as_targets(self) -> "SplitIndex":
        """This split read as targets only (`targets_only`): each sample's input is its stored target, at the same
        offsets, bytes and CRC, of the target's type at its size; a packed raw target's levels become the input's (ratio
        1, both exposures the target's), a split whose target is an image keeps no sensor facts. The stored inputs are
        never read. A targets-only split is returned as it is."""
        if self.targets_only:
            return self
        s = self.members.scale
        facts = self.facts
        bounds = self.size_bounds
        if bounds is not None and s != 1:
            bounds = tuple((a * s, b * s) for a, b in bounds)
        return replace(self, hw=self.hw * s if s != 1 else self.hw, size_bounds=bounds, low=self.high,
                       low_bytes=self.high_bytes,
                       low_kind=self.high_kind, low_tiles=self.high_tiles, crc=_both_sides(self.crc[:, 1:]),
                       members=self.members.as_targets(),
                       sensor=None if self.sensor is None else self.sensor.as_targets(), targets_only=True,
                       **(facts.as_targets().columns() if facts is not None else {}))

    def __reduce_ex__(self, protocol):
        if self.mapped is None:
            return super().__reduce_ex__(protocol)
        # "map this file again": bytes independent of the samples
        return _reopened, (self.split, self.mapped, self.targets_only)


# where a version-5 split's index file is: `locate(file name, sha256, bytes) -> (local path, name for messages)`
Locate = Callable[[str, str, int], tuple[Any, str]]


def split_index(doc: dict, split: str, where: str = MANIFEST, index_at: str | os.PathLike | Locate | None = None,
                *, recheck: bool = False) -> SplitIndex:
    """The index of one split of a checked manifest (`where` names it). A version-5 split maps its index file,
    checked against the manifest's size and sha256: `index_at` is the folder beside the manifest, or a `Locate`
    that fetches it (a node cache's copy named by its sha256). A file found whole by an earlier open is not read
    again (`binindex.VERIFIED`) unless `recheck`."""
    splits = doc["splits"]
    if split not in splits:
        raise ShardError(f"{where}: no split {split!r}; this folder has {sorted(splits)}")
    entry = splits[split]
    if doc.get("version", 1) >= VERSION_BINARY:
        bind = None if recheck else entry_digest(entry)
        return _mapped_index(split, entry, _index_file(entry[binindex.FIELD], split, where, index_at, bind), bind)
    members = members_of(entry, where, split)
    fields = ("hw", "low", "high", "crc32") + ((LOW_BYTES, HIGH_BYTES) if members.encoding.sized else ())
    sensor_fields = sensor_doc.index_fields(entry)
    # what pack measured, where every shard's index has it (an older pack's has not)
    fact_fields = FACT_NAMES if all(FACT_NAMES[0] in sh.get("index", {}) for sh in entry.get("shards", [])) else ()
    files, keys, shard, counts = [], [], [], []
    values: dict[str, list] = {name: [] for name in fields + sensor_fields + fact_fields}
    try:
        for number, sh in enumerate(entry["shards"]):
            idx = sh["index"]
            n = int(sh["samples"])
            if not all(len(idx[name]) == n for name in ("key",) + fields):
                raise ShardError(f"{where}: shard {sh['file']} index lengths disagree with its sample count {n}")
            files.append(sh["file"])
            counts.append(n)
            keys.extend(idx["key"])
            shard.extend([number] * n)
            for name in fields + sensor_fields + fact_fields:
                values[name].extend(idx[name])
    except (KeyError, TypeError) as exc:
        raise ShardError(f"{where}: split {split!r} has a malformed shard entry ({exc!r}); repack") from None
    n = len(keys)
    try:
        columns = {name: _integers(values[name], name, where, split, files, counts) for name in fields}
        sensor = sensor_doc.rows_from_columns(values, n, where, split) if sensor_fields else None
        facts = {name: np.asarray(values[name], dtype=dtype).reshape((n, *shape))
                 for name, dtype, shape in FACT_COLUMNS if fact_fields}
        return replace(_split_index(split, files, keys, shard, columns, counts, n, members, sensor),
                       sequences=Sequences.from_entry(entry, n, f"{where}: split {split!r}"),
                       measures=_measures(entry, where, split), **facts)
    except (ValueError, TypeError, OverflowError) as exc:
        raise ShardError(f"{where}: split {split!r} has a malformed index ({exc}); repack") from None


def entry_digest(entry: dict) -> str:
    """The digest of a split's manifest entry that a record of its index file found whole is bound to."""
    return hashlib.sha256(json.dumps(entry, sort_keys=True).encode()).hexdigest()


def record_packed(folder: str | os.PathLike, doc: dict) -> None:
    """Record each index file a pack just wrote into `folder` (the manifest `doc`'s) as found whole, as a first open
    would after reading it all: pack computed its sha256 as it wrote it, so the first loader opens a split of a billion
    samples in a second. `pairload verify` reads it all the same."""
    if doc.get("version", 1) < VERSION_BINARY:
        return
    for entry in doc["splits"].values():
        ref = entry.get(binindex.FIELD)
        if not isinstance(ref, dict):
            continue
        path = Path(folder) / ref["file"]
        try:
            st = os.stat(path)
        except OSError:
            continue
        if st.st_size == ref["bytes"]:
            binindex.remember(binindex.IndexFile(str(path), str(path), st.st_size, ref["sha256"], stamp_of(st)),
                              entry_digest(entry))


def _integers(values: list, field: str, where: str, split: str, files: list, counts: list) -> np.ndarray:
    """`values` as an integer array; a float (1536.0) or a string among them is refused naming the shard, the field
    and the sample, instead of being truncated here or failing later as a slice index."""
    arr = np.asarray(values)
    if arr.size == 0 or arr.dtype.kind in "iu":
        return arr

    def is_int(v) -> bool:
        return all(type(x) is int for x in v) if isinstance(v, list) else type(v) is int

    k = next((k for k, v in enumerate(values) if not is_int(v)), None)
    if k is None:
        raise ValueError(f"index {field!r} holds {arr.dtype} values")
    number = int(np.searchsorted(np.cumsum(counts), k, side="right"))
    sample = k - int(sum(counts[:number]))
    raise ShardError(f"{where}: split {split!r}: {files[number]}: index \"{field}\" holds {values[k]!r} for sample "
                     f"{sample} ({'a list of integers' if isinstance(values[k], list) else 'an integer'} expected); "
                     "the manifest is damaged or was edited: re-run the same `pairload pack` command to rewrite it")


def _split_index(split, files, keys, shard, columns, counts, n, members=DEFAULT, sensor=None) -> SplitIndex:
    sized = {name: np.asarray(columns[name], dtype=np.int64).reshape(n)
             for name in (LOW_BYTES, HIGH_BYTES) if name in columns}
    return SplitIndex(
        split=split,
        files=tuple(files),
        keys=tuple(keys),
        shard=np.asarray(shard, dtype=np.int32).reshape(n),
        hw=np.asarray(columns["hw"], dtype=np.int64).reshape(n, 2),
        low=np.asarray(columns["low"], dtype=np.int64).reshape(n),
        high=np.asarray(columns["high"], dtype=np.int64).reshape(n),
        crc=np.asarray(columns["crc32"], dtype=np.uint32).reshape(n, 2),
        shard_samples=np.asarray(counts, dtype=np.int64),
        members=members,
        sensor=sensor,
        **sized,
    )


def _index_file(ref: dict, split: str, where: str, index_at, bind: str | None) -> binindex.IndexFile:
    if index_at is None:
        raise ShardError(f"{where}: split {split!r} keeps its index in {ref['file']} beside the manifest; this reader "
                         "was given the manifest alone (a pairload bug: please report it)")
    if callable(index_at):
        path, shown = index_at(ref["file"], ref["sha256"], ref["bytes"])
        return binindex.check_file(path, shown, ref, split, cached=True)
    path = Path(index_at) / ref["file"]
    return binindex.check_file(path, str(path), ref, split, bind=bind)


def _mapped_index(split: str, entry: dict, file: binindex.IndexFile, bind: str | None = None) -> SplitIndex:
    """A version-5 split's index: views of its mapped file (checked: every column's type and length, the keys,
    the shard column against the manifest's sample counts, the sensor facts' sense; recorded as checked for the
    next open where `bind` digests the manifest entry)."""
    keys, cols = binindex.open_index(file.path, entry, split, file.where, known=file.known)
    file.check_unchanged()  # the file mapped is the one whose sha256 was checked
    n = len(keys)
    sensor = None
    fields = sensor_doc.index_fields(entry)
    if fields:
        sensor_doc.rows_from_columns({name: cols[name] for name in fields}, n, file.where, split)  # the checks
        sensor = SensorRows(*(cols.get(name) for name in (sensor_doc.RATIO, sensor_doc.EXPOSURE, sensor_doc.LEVELS,
                                                          sensor_doc.LEVELS_HIGH)))  # float64 views, not copies
    if bind is not None:
        binindex.remember(file, bind)
    return SplitIndex(
        split=split,
        files=tuple(sh["file"] for sh in entry["shards"]),
        keys=keys,
        shard=cols[binindex.SHARD],
        hw=cols["hw"],
        low=cols["low"],
        high=cols["high"],
        crc=cols["crc32"],
        shard_samples=np.array([sh["samples"] for sh in entry["shards"]], dtype=np.int64),
        low_bytes=cols.get(LOW_BYTES),
        high_bytes=cols.get(HIGH_BYTES),
        members=members_of(entry, file.where, split),
        sensor=sensor,
        key_hash=cols[binindex.KEY_HASH],
        shares_high=cols.get(SHARES_HIGH),
        mapped=MappedIndex(file, entry),
        targets_only=entry.get(TARGETS_ONLY, False),
        sequences=Sequences.from_entry(entry, n, f"{file.where}: split {split!r}", cols, known=file.known),
        low_kind=cols.get(LOW_KIND),
        high_kind=cols.get(HIGH_KIND),
        low_tiles=cols.get(binindex.TILES_AT[0]),
        high_tiles=cols.get(binindex.TILES_AT[1]),
        size_bounds=size_bounds(entry),
        measures=_measures(entry, file.where, split),
        **{name: cols.get(name) for name in FACT_NAMES},
    )


def _measures(entry: dict, where: str, split: str) -> int | None:
    """The split's MEASURES field (None: absent), checked."""
    value = entry.get(MEASURES)
    if value is not None and (type(value) is not int or value < 1):
        raise ShardError(f"{where}: split {split!r} has {MEASURES!r} {value!r}, expected a positive whole number (the "
                         "version of pairload's measures); the manifest is damaged: repack")
    return value


def _both_sides(column: np.ndarray) -> np.ndarray:
    """An (n, 1) column of the target side as (n, 2), both sides the target's: a read-only view, not a copy (a mapped
    index's column stays mapped, whatever its length)."""
    return np.broadcast_to(column, (len(column), 2))


def size_bounds(entry: dict) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """A split entry's (min_size, max_size) as ((h, w), (h, w)), or None where the manifest does not record them."""
    lo, hi = entry.get("min_size"), entry.get("max_size")
    if not (isinstance(lo, list) and isinstance(hi, list) and len(lo) == len(hi) == 2):
        return None
    return (int(lo[0]), int(lo[1])), (int(hi[0]), int(hi[1]))


def _reopened(split: str, mapped: MappedIndex, targets_only: bool = False) -> SplitIndex:
    """A pickled version-5 index in the process that receives it: the same file mapped again (not re-hashed: its
    stamp shows it is the file checked), read as targets only where it was."""
    mapped.file.check_unchanged()
    index = _mapped_index(split, mapped.entry, mapped.file)
    return index.as_targets() if targets_only else index
