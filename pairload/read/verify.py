"""`verify`: every shard of a folder or URL re-hashed and every sample parsed (compressed, JPEG and tiles members
decoded), shapes and checksums compared with the manifest (version 5: with its splits' index files, themselves
checked for size and sha256; a pack made with --sequences: with its sequences); the first problem is a `ShardError`
naming the shard, the key and the fix. A URL's shards are checked in the node's cache, downloaded there first."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..errors import ConfigError, ShardError
from ..format import imageformats, schema
from ..format.binindex import TILES_AT
from ..format.crc import crc32
from ..format.encoding import Encoding, FrameError
from ..format.members import DEFAULT, Members
from ..format.sequences import run_name
from ..format.tiles import tile_starts
from ..remote import urls
from .dataset import another_decoder


@dataclass(frozen=True)
class VerifyReport:
    shards: int
    samples: int
    bytes: int
    leftovers: tuple[str, ...] = ()  # temporary files of an interrupted pack, beside valid shards
    leftover_bytes: int = 0
    # per split packed with --sequences whose frame numbering breaks inside a sequence: a line saying where, what a
    # clip does there and the fix (`Sequences.gap_report`); the shards are sound, the clips may not be
    gaps: tuple[str, ...] = ()


def _check_shard(path: Path, entry: dict, kinds: Members = DEFAULT, idx: dict | None = None,
                 targets_only: bool = False) -> int:
    """Check one shard against its manifest entry; returns the number of samples, raises ShardError on the first
    problem. `kinds`: its split's members (an encoding that is not plain: every member is decoded and checked);
    `idx`: its samples' index entries (`shard_entries`; versions 1-4: the entry's "index"); `targets_only`: its
    samples store their targets alone (version 6), which the index gives as their inputs too."""
    if not path.is_file():
        raise ShardError(f"{path}: missing (listed in {schema.MANIFEST}); copy it back or repack")
    if path.stat().st_size != entry["bytes"]:
        raise ShardError(f"{path}: {path.stat().st_size} bytes, expected {entry['bytes']}; the shard is truncated or "
                         "was replaced: repack")
    idx = entry["index"] if idx is None else idx
    shares = _shares(path, idx)
    encoding = kinds.encoding
    expected = _expected_members(path, idx, shares, encoding, targets_only)
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
            _check_meta(where, member.name, data, idx, k, shares, targets_only)
        else:
            side = 0 if suffix.split(".")[0] == schema.LOW.split(".")[0] else 1
            check = _check_stored if encoding.per_member else _check_npy if encoding.plain else _check_frame
            check(where, member, data, idx, k, side, kinds)
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
        raise ShardError(f"{where}: sha256 {digest.hexdigest()[:16]}… differs from the manifest's "
                         f"{entry['sha256'][:16]}… although every sample parses (tar headers or padding changed); "
                         "repack")
    return len(idx["key"])


def shard_entries(index: schema.SplitIndex, number: int) -> dict[str, list]:
    """The index entries of shard `number`'s samples as a version 1-4 manifest lists them (key, hw, low, high,
    crc32; the frame lengths and shared targets where the split has them), from a split's index."""
    start = int(index.shard_samples[:number].sum())
    rows = slice(start, start + int(index.shard_samples[number]))
    idx = {"key": list(index.keys[rows]), "hw": index.hw[rows].tolist(), "low": index.low[rows].tolist(),
           "high": index.high[rows].tolist(), "crc32": index.crc[rows].tolist()}
    if index.encoding.sized:
        idx[schema.LOW_BYTES], idx[schema.HIGH_BYTES] = index.low_bytes[rows].tolist(), index.high_bytes[rows].tolist()
    if index.encoding.per_member:
        idx[schema.LOW_KIND], idx[schema.HIGH_KIND] = index.low_kind[rows].tolist(), index.high_kind[rows].tolist()
    if index.shares_high is not None:
        idx[schema.SHARES_HIGH] = index.shares_high[rows].tolist()
    if index.low_tiles is not None and index.high_tiles is not None:
        idx[TILES_AT[0]], idx[TILES_AT[1]] = index.low_tiles[rows], index.high_tiles[rows]
    return idx


def _shares(path: Path, idx: dict) -> list:
    shares = idx.get(schema.SHARES_HIGH) or [-1] * len(idx["key"])
    bad = next((k for k, lead in enumerate(shares) if type(lead) is not int), None)
    if bad is not None:  # split_index does not read this field; a float here would fail below as a list index
        raise ShardError(f"{path.parent / schema.MANIFEST}: {path.name}: index \"{schema.SHARES_HIGH}\" holds "
                         f"{shares[bad]!r} for sample {bad} (an integer expected); the manifest is damaged or was "
                         "edited: re-run the same `pairload pack` command to rewrite it")
    return shares


def _expected_members(path: Path, idx: dict, shares: list, encoding: Encoding, targets_only: bool = False
                      ) -> dict[str, tuple[int, str]]:
    """member name -> (sample, suffix) of every member the index promises; a shared target is checked for being a
    stored target of the same size at the same place, a targets-only sample's input for being its target."""
    sized = (schema.HIGH_BYTES,) if encoding.sized else ()
    sized += (schema.HIGH_KIND,) if encoding.per_member else ()
    expected = {}
    order = schema.member_order(encoding, targets_only)
    for k, key in enumerate(idx["key"]):
        if encoding.per_member:
            order = schema.member_order(encoding, targets_only, _formats(path, idx, k))
        if targets_only and (idx["low"][k] != idx["high"][k] or idx["crc32"][k][0] != idx["crc32"][k][1]
                             or any(idx[f.replace("high", "low")][k] != idx[f][k] for f in sized)):
            raise ShardError(f"{path.name}: key {key}: a targets-only sample's index must give its target as its input "
                             "(low and high at one offset, one CRC-32); the index is damaged: repack")
        lead = shares[k]
        if lead >= 0 and not (0 <= lead < len(idx["key"]) and shares[lead] < 0 and idx["high"][k] == idx["high"][lead]
                              and idx["hw"][k] == idx["hw"][lead]
                              and all(idx[f][k] == idx[f][lead] for f in sized)):
            raise ShardError(f"{path.name}: key {key}: its shared target (sample {lead}) is not a stored target of "
                             "the same size at the same offset; the manifest is damaged: repack")
        for suffix in order if lead < 0 else order[:2]:
            expected[schema.member_name(key, suffix)] = (k, suffix)
    return expected


def _check_meta(where: str, name: str, data: np.ndarray, idx: dict, k: int, shares: list,
                targets_only: bool = False) -> None:
    h, w = idx["hw"][k]
    try:
        doc = json.loads(bytes(data))
        lead = idx["key"][shares[k]] if shares[k] >= 0 else None
        ok = (doc.get("low") is None if targets_only else "low" in doc) and "high" in doc and \
            list(doc["size"]) == [h, w] and doc.get(schema.HIGH_REF) == lead
    except (ValueError, KeyError, TypeError, AttributeError):
        ok = False
    if not ok:
        sources = "high (and a null or absent low)" if targets_only else "low, high"
        raise ShardError(f"{where}: key {idx['key'][k]}: {name} is not the expected JSON with {sources}, "
                         f"size [{h}, {w}] and the shared target's key, if any")


def _shape(idx: dict, k: int, side: int, kinds: Members) -> tuple[int, int, int]:
    """The (height, width, channels) of sample k's image on `side` (0: input, 1: target)."""
    h, w = idx["hw"][k]
    s = kinds.scale if side else 1
    return h * s, w * s, kinds.side(side).channels


def _npy_header_size(where: str, name: str, data, idx: dict, k: int, side: int, kinds: Members) -> int:
    """The length of the .npy header at the start of `data`, once it says the member's dtype and shape in C
    order."""
    key, want = idx["key"][k], _shape(idx, k, side, kinds)
    member = kinds.side(side)
    try:
        hdr = io.BytesIO(bytes(data[:256]))
        np.lib.format.read_magic(hdr)
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(hdr)
    except Exception as exc:  # noqa: BLE001 - numpy raises ValueError, SyntaxError or TokenError here
        raise ShardError(f"{where}: key {key}: {name} is not a valid .npy ({exc})") from None
    if shape != want or fortran or dtype != member.np_dtype:
        raise ShardError(f"{where}: key {key}: {name} holds {dtype} {shape}, the manifest says {member.dtype} {want}")
    return hdr.tell()


def _check_pixels(where: str, name: str, pixels, idx: dict, k: int, side: int) -> None:
    if crc32(pixels) != idx["crc32"][k][side]:
        raise ShardError(f"{where}: key {idx['key'][k]}: {name} pixels do not match their checksum (the "
                         "shard is corrupt: restore it from a copy or repack)")


def _check_npy(where: str, member: tarfile.TarInfo, data: np.ndarray, idx: dict, k: int, side: int,
               kinds: Members = DEFAULT) -> None:
    """A raw image member: its header, where its pixels start, and their CRC-32."""
    h, w, _ = _shape(idx, k, side, kinds)
    start = member.offset_data + _npy_header_size(where, member.name, data, idx, k, side, kinds)
    off = idx["low" if side == 0 else "high"][k]
    if start != off:
        raise ShardError(f"{where}: key {idx['key'][k]}: {member.name} pixels start at byte {start}, the manifest "
                         f"index says {off}; repack")
    _check_pixels(where, member.name, data[start - member.offset_data:][:kinds.side(side).nbytes(h, w)], idx, k,
                  side)


def _check_place(where: str, member: tarfile.TarInfo, idx: dict, k: int, side: int) -> None:
    """A stored member (a zstd frame, a JPEG file) lies where the index says, at the length it says."""
    off, size = idx["low" if side == 0 else "high"][k], idx[schema.LOW_BYTES if side == 0 else schema.HIGH_BYTES][k]
    if (member.offset_data, member.size) != (off, size):
        raise ShardError(f"{where}: key {idx['key'][k]}: {member.name} is {member.size} bytes at byte "
                         f"{member.offset_data}, the manifest index says {size} bytes at byte {off}; repack")


def _check_frame(where: str, member: tarfile.TarInfo, data: np.ndarray, idx: dict, k: int, side: int,
                 kinds: Members = DEFAULT) -> None:
    """An image member of an encoding that is not plain (a zstd frame): where it lies, then decoded by its
    encoding: its header and its pixels' CRC-32."""
    key, (h, w, _) = idx["key"][k], _shape(idx, k, side, kinds)
    _check_place(where, member, idx, k, side)
    try:
        side_member = kinds.side(side)
        npy = kinds.encoding.decode(data, len(side_member.npy_header(h, w)) + side_member.nbytes(h, w))
    except FrameError as exc:
        raise ShardError(f"{where}: key {key}: {member.name} does not decode: {exc} (the shard is corrupt: restore "
                         "it from a copy or repack)") from None
    start = _npy_header_size(where, member.name, npy, idx, k, side, kinds)
    _check_pixels(where, member.name, memoryview(npy)[start:], idx, k, side)


def _formats(path: Path, idx: dict, k: int) -> tuple:
    """The formats of sample k's input and target members in an encoded split's index."""
    try:
        return tuple(imageformats.of_code(idx[f][k]) for f in (schema.LOW_KIND, schema.HIGH_KIND))
    except imageformats.MemberError as exc:
        raise ShardError(f"{path.name}: key {idx['key'][k]}: its image member {exc}; the index is damaged: repack"
                         ) from None


def _check_stored(where: str, member: tarfile.TarInfo, data: np.ndarray, idx: dict, k: int, side: int,
                  kinds: Members = DEFAULT) -> None:
    """An image member of an encoded split, by its format: an npy member as a decoded split's (header, offset,
    CRC-32), any other decoded by its format (a JPEG: its SOI and EOI markers, its size against the index; tiles:
    their header, frame table and CRC-32 of their bytes, every tile), then its pixels' CRC-32."""
    fmt = imageformats.BY_CODE[idx[schema.LOW_KIND if side == 0 else schema.HIGH_KIND][k]]
    if fmt.pixels:
        return _check_npy(where, member, data, idx, k, side, kinds)
    key, (h, w, _) = idx["key"][k], _shape(idx, k, side, kinds)
    _check_place(where, member, idx, k, side)
    try:
        pixels = fmt.decode(data, kinds.side(side), h, w)
    except imageformats.MemberError as exc:
        raise ShardError(f"{where}: key {key}: {member.name} (the {'input' if side == 0 else 'target'}, a {fmt.name} "
                         f"member) {exc} (the shard is damaged: restore it from a copy or repack)") from None
    if crc32(pixels) != idx["crc32"][k][side]:
        raise ShardError(f"{where}: key {key}: {member.name} decodes to other pixels than when it was packed (its "
                         f"CRC-32 differs from the index's): the member is damaged{another_decoder(fmt)}; restore the "
                         "shard from a copy or repack")
    kept = idx.get(TILES_AT[side])
    if fmt is imageformats.TILES and kept is not None and kept[k][0]:  # where the index says its tiles start
        starts = tile_starts(data)
        row = kept[k]
        if len(starts) > len(row) or not np.array_equal(row[:len(starts)], starts) or row[len(starts):].any():
            raise ShardError(f"{where}: key {key}: the index says {member.name}'s tiles start at bytes "
                             f"{row[:len(starts)].tolist()[:4]}…, its tables say {starts.tolist()[:4]}…: the index "
                             "belongs to another pack or is damaged; re-run the same `pairload pack` command")


def verify(shards_dir: str | os.PathLike, *, cache_dir: str | os.PathLike | None = None,
           storage_options: dict | None = None) -> VerifyReport:
    """Re-hash every shard, parse every sample (decoding compressed ones), check shapes and checksums against the
    manifest. A URL's shards are verified in `cache_dir` (downloaded there first, as a loader would; the sha256
    is checked as they stream in)."""
    if urls.is_url(shards_dir):
        return _verify_remote(str(shards_dir).rstrip("/"), cache_dir, storage_options)
    root = Path(urls.local_path(shards_dir))
    doc = schema.read_manifest(root)
    report = _verify_splits(doc, str(root / schema.MANIFEST), lambda split, k, sh: root / sh["file"], root)
    left = sorted(p for p in root.iterdir() if p.name.endswith(schema.PARTIAL_SUFFIX))
    return replace(report, leftovers=tuple(p.name for p in left), leftover_bytes=sum(p.stat().st_size for p in left))


def _verify_splits(doc: dict, where: str, local, index_at) -> VerifyReport:
    """`local(split, k, shard entry)`: shard k's local path; `index_at`: where version-5 index files are
    (`schema.split_index`)."""
    shards = samples = nbytes = 0
    gaps = []
    binary = doc["version"] >= schema.VERSION_BINARY
    for split, entry in doc["splits"].items():
        index = schema.split_index(doc, split, where, index_at, recheck=True)  # every entry's shape and type
        kinds = index.members
        kinds.encoding.require_for(where, split, "verifying it")
        if index.sequences is not None:
            _check_sequences(index, f"{where}: split {split!r}")
            gaps.append(index.sequences.gap_report(index.keys, f"split {split!r}"))
        for k, sh in enumerate(entry["shards"]):
            idx = shard_entries(index, k) if binary else None
            samples += _check_shard(local(split, k, sh), sh, kinds, idx, index.targets_only)
            shards += 1
            nbytes += sh["bytes"]
        if sum(sh["samples"] for sh in entry["shards"]) != entry["samples"]:
            raise ShardError(f"{where}: split {split!r} sample count disagrees with its shards; repack")
    return VerifyReport(shards=shards, samples=samples, bytes=nbytes, gaps=tuple(g for g in gaps if g))


def _check_sequences(index: schema.SplitIndex, where: str) -> None:
    """A split packed with --sequences (its entry's structure is checked as it is read): every sample lies in the
    sequence its key's folder names (or in a run of it that starts at its own first frame, `--sequence-gaps split`),
    the frames of a sequence have one size, and those of a sequence that shares one target ("sequence_target":
    "sequence") have one target (its CRC-32)."""
    seqs = index.sequences
    fix = "; the manifest is damaged or was edited: re-run the same `pairload pack --sequences` command to rewrite it"
    for s, name in enumerate(seqs.names):
        start = int(seqs.starts[s])
        first = index.keys[start]
        whole = first.rpartition("+")[0]
        named = whole if name in (whole, run_name(whole, first)) else name
        for k in range(start, start + int(seqs.counts[s])):
            folder = index.keys[k].rpartition("+")[0]
            if folder != named:
                raise ShardError(f"{where}: sample {index.keys[k]} lies in sequence {name!r} of the \"sequences\" "
                                 f"entry, but its key's folder is {folder!r}{fix}")
    odd = seqs.first_mismatch(index.hw)
    if odd is not None:
        k, f = odd
        raise ShardError(f"{where}: the frames of one sequence differ in size: {index.keys[k]} is "
                         f"{index.hw[k][1]}x{index.hw[k][0]} but {index.keys[f]} is {index.hw[f][1]}x{index.hw[f][0]}"
                         f"{fix}")
    odd = seqs.first_mismatch(index.crc[:, 1]) if seqs.target == "sequence" else None
    if odd is not None:
        k, f = odd
        raise ShardError(f"{where}: the frames of a sequence share one target (\"sequence_target\": \"sequence\"), but "
                         f"the target of {index.keys[k]} differs from that of {index.keys[f]}{fix}")


def _verify_remote(url: str, cache_dir, storage_options) -> VerifyReport:
    from ..remote.cache import INDEX, ShardCache

    if cache_dir is None:
        raise ConfigError(f"{urls.redact(url)}: verifying a remote folder downloads its shards: pass cache_dir= "
                          "(the CLI's --cache-dir), a local folder with room for them")
    cache = ShardCache(cache_dir, storage_options=storage_options)
    manifest_url = urls.join(url, schema.MANIFEST)
    where = urls.redact(manifest_url)
    doc = schema.parse_manifest(cache.read_small(manifest_url), where)

    def local(split, k, sh):
        path = cache.fetch(urls.join(url, sh["file"]), sh["sha256"], int(sh["bytes"]))
        cache.unhold(sh["sha256"])
        return path

    def index_at(name, sha, size):
        path = cache.fetch(urls.join(url, name), sha, size, suffix=INDEX)
        cache.unhold(sha)  # mapped by the caller: an eviction now leaves the map readable
        return path, f"{urls.redact(urls.join(url, name))} (cached as {path})"

    return _verify_splits(doc, where, local, index_at)
