"""`pairload pack`: decode every pair once into uint8 WebDataset tar shards plus `manifest.json`.

How: pairs are found and every header is probed first (sizes mismatches and unreadable files are refused
before anything is written); then every member's byte offset is planned, each shard is created at its final
size under a temporary name, and worker processes decode pairs and write their pixels in place with
`pwrite`. Output therefore does not depend on the number of workers. Shards are hashed, fsynced and renamed;
the manifest comes last. With `compress="zstd"` (format version 3) the workers return each image's .npy as a
zstd frame instead, and the parent appends the frames in key order to the shards the raw plan would have made
(`_write_compressed`). This module imports neither torch nor DALI (nor zstandard, until a compressed pack).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import multiprocessing as mp
import os
import re
import shutil
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from ..format import codec, schema
from ..format.atomic import is_temp_of, write_json_atomic
from ..units import parse_bytes
from ..raw.decode import silence_cv2, decode_rgb, probe_size, target_size
from ..raw.discover import Pair, find_pairs
from ..errors import ConfigError, ImageError, OutputError, PairloadError
from ..units import human_bytes

if TYPE_CHECKING:
    from .upload import UploadReport

DEFAULT_SHARD_SIZE = 256 * 1024**2
MAX_RESIZE_PIXELS = 8192 * 8192  # a --resize target beyond this (192 MB per image) is a typo, not a training size


def parse_size(text: str | int) -> int:
    """A shard size ('256MB'; `pairload.units.parse_bytes`) of at least 64 KB."""
    value = parse_bytes(text, "shard size")
    if value < 64 * 1024:
        raise ConfigError(f"shard size {text!r} is too small: use at least 64KB")
    return value


def parse_split_names(items) -> tuple[tuple[str, str], ...]:
    """['Dataset_Part1=train', …] → (('Dataset_Part1', 'train'), …)."""
    out = []
    for item in items:
        old, sep, new = item.partition("=")
        if not sep or not old.strip() or not new.strip():
            raise ConfigError(f"--split-name {item!r}: expected FOLDER=SPLIT, e.g. our485=train")
        out.append((old.strip(), new.strip()))
    return tuple(out)


def parse_wxh(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*[xX×]\s*(\d+)\s*", text)
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise ConfigError(f"size {text!r}: expected WIDTHxHEIGHT, e.g. 600x400")
    return int(m.group(1)), int(m.group(2))


@dataclass(frozen=True, kw_only=True)
class PackOptions:
    low_dir: str | None = None
    high_dir: str | None = None
    pairs_file: str | tuple[str, ...] | None = None  # a path, or `split=path` entries
    skip_unmatched: bool = False
    split_names: tuple[tuple[str, str], ...] = ()  # (folder name, split name) overrides
    name_template: str | None = None  # BasicSR filename_tmpl: the low stem from the high stem, e.g. '{}x4'

    to_8bit: bool = False
    resize: tuple[int, int] | None = None  # (width, height)
    max_side: int | None = None
    shard_size: int = DEFAULT_SHARD_SIZE
    workers: int = 0  # 0: all cores
    overwrite: bool = False  # replace a manifest.json that is not this RAW's pack (another pack's, or a user's file)
    compress: str | None = None  # "zstd": each image member as one zstd frame (format version 3); None: raw
    compress_level: int = codec.DEFAULT_LEVEL

    def __post_init__(self) -> None:
        if self.compress is not None and self.compress not in schema.COMPRESSIONS:
            raise ConfigError(f"--compress {self.compress}: expected {' or '.join(schema.COMPRESSIONS)} (leave it out "
                              "for raw members)")
        if self.compress_level not in codec.LEVELS:
            raise ConfigError(f"--compress-level {self.compress_level}: expected {codec.LEVELS.start} to "
                              f"{codec.LEVELS.stop - 1} (default {codec.DEFAULT_LEVEL}; higher is smaller and slower)")
        codec.require(self.compress, "--compress zstd")
        if self.resize is not None and self.max_side is not None:
            raise ConfigError("--resize and --max-side cannot be used together; pick one")
        if self.resize is not None and self.resize[0] * self.resize[1] > MAX_RESIZE_PIXELS:
            w, h = self.resize
            raise ConfigError(f"--resize {w}x{h}: {w * h:,} pixels per image ({human_bytes(6 * w * h)} per pair) is "
                              f"more than pack stores (at most {MAX_RESIZE_PIXELS:,} pixels, e.g. 8192x8192); check "
                              "the size, given as WIDTHxHEIGHT (e.g. 600x400)")
        if self.max_side is not None and self.max_side < 1:
            raise ConfigError(f"--max-side {self.max_side}: expected a positive number of pixels")
        if self.workers < 0:
            raise ConfigError(f"--workers {self.workers}: expected 0 (all cores) or a positive number")
        if self.shard_size < 64 * 1024:
            raise ConfigError(f"shard size {self.shard_size} bytes is too small: use at least 64KB")


@dataclass
class PackReport:
    shards_dir: Path
    splits: dict[str, dict] = field(default_factory=dict)  # split -> {"samples", "shards", "bytes"}
    gray: list[str] = field(default_factory=list)
    alpha: list[str] = field(default_factory=list)
    converted_16bit: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    skipped_per_split: dict[str, int] = field(default_factory=dict)
    layout: dict[str, dict] = field(default_factory=dict)  # split -> folders it came from and the pairing rule(s)
    unused: list[dict] = field(default_factory=list)  # image-like files in no pair: folder, reason, count, names, hint
    split_folders: dict[str, dict] = field(default_factory=dict)  # folder name -> {"split", "how"}
    seconds: float = 0.0
    workers: int = 1
    phases: dict[str, float] = field(default_factory=dict)  # seconds spent probing, decoding, hashing+fsync
    compression: str | None = None
    url: str | None = None  # a pack into a URL: where (shards_dir is then its local staging folder)
    upload: "UploadReport | None" = None  # a pack into a URL: what was uploaded, skipped and deleted

    @property
    def pairs(self) -> int:
        return sum(s["samples"] for s in self.splits.values())


@dataclass(frozen=True)
class _Job:
    """Everything a worker needs to decode one pair and write its pixels in place."""

    index: int
    low: Path
    high: Path | None  # None: the pair shares a target that another job writes
    low_hw: tuple[int, int]  # header sizes
    high_hw: tuple[int, int]
    out_hw: tuple[int, int]
    to_8bit: bool
    file: str  # partial shard path
    low_off: int
    high_off: int | None


_fds: dict[str, int] = {}


def _worker_init() -> None:
    silence_cv2()


def _decode_pair(job) -> tuple[np.ndarray, np.ndarray | None, list[str]]:
    """The job's low image and, unless it shares another job's target, its high image, with their notes."""
    low, low_notes = decode_rgb(job.low, to_8bit=job.to_8bit, expect_hw=job.low_hw, out_hw=job.out_hw)
    high, high_notes = None, []
    if job.high is not None:
        high, high_notes = decode_rgb(job.high, to_8bit=job.to_8bit, expect_hw=job.high_hw, out_hw=job.out_hw)
    return low, high, [f"low:{n}" for n in low_notes] + [f"high:{n}" for n in high_notes]


def _input_error(job, exc: Exception) -> tuple[int, str, bool]:
    if isinstance(exc, PairloadError):
        return job.index, str(exc), False
    return job.index, f"{job.low} / {job.high}: {type(exc).__name__}: {exc}", False  # still names the files


def _run_job(job: _Job) -> tuple[int, list[str], int, int] | tuple[int, str, bool]:
    """Decode and write one pair. Errors come back as text (and whether writing the output failed, not reading the
    input) so the parent can clean up and report them."""
    try:
        low, high, notes = _decode_pair(job)
    except Exception as exc:  # noqa: BLE001 - reported by the parent, naming the files
        return _input_error(job, exc)
    images = [(low, job.low_off)] + ([(high, job.high_off)] if high is not None else [])
    try:
        fd = _fds.get(job.file)
        if fd is None:
            fd = _fds[job.file] = os.open(job.file, os.O_WRONLY)
        for arr, off in images:
            view = memoryview(arr).cast("B")
            written = 0
            while written < len(view):
                written += os.pwrite(fd, view[written:], off + written)
    except OSError as exc:  # the disk filled up under us: the shard is to blame, not the pair being written
        return job.index, str(_output_error(Path(job.file), exc)), True
    return job.index, notes, zlib.crc32(low), zlib.crc32(high) if high is not None else None


@dataclass(frozen=True)
class _ZJob:
    """Everything a worker needs to decode one pair and compress its images (`--compress`)."""

    index: int
    low: Path
    high: Path | None  # None: the pair shares a target that another job compresses
    low_hw: tuple[int, int]
    high_hw: tuple[int, int]
    out_hw: tuple[int, int]
    to_8bit: bool
    level: int


def _run_zjob(job: _ZJob) -> tuple[int, list[str], int, int | None, bytes, bytes | None] | tuple[int, str, bool]:
    """Decode one pair and return each image's .npy file as a zstd frame, with the pixels' CRC-32."""
    try:
        low, high, notes = _decode_pair(job)
        low_frame = codec.compress_npy(low, job.level)
        high_frame = codec.compress_npy(high, job.level) if high is not None else None
    except Exception as exc:  # noqa: BLE001 - reported by the parent, naming the files
        return _input_error(job, exc)
    return (job.index, notes, zlib.crc32(low), zlib.crc32(high) if high is not None else None, low_frame,
            high_frame)


def _output_error(path: Path, exc: OSError) -> OutputError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return OutputError(f"{path}: the disk is full ({exc.strerror or exc}) while writing this file; free some "
                           "space or pack into a folder on a larger disk, then run the same `pairload pack` again")
    return OutputError(f"{path}: cannot write this file ({exc.strerror or exc}); check the folder's permissions and "
                       "free space, then run the same `pairload pack` again")


@contextlib.contextmanager
def _writing(path: Path):
    """An OSError while writing `path` becomes an OutputError naming it (a full disk says so)."""
    try:
        yield
    except OSError as exc:
        raise _output_error(path, exc) from None


def _close_fds() -> None:
    for fd in _fds.values():
        os.close(fd)
    _fds.clear()


def _hash_file(path: str) -> str:
    h = hashlib.sha256()
    with _writing(Path(path)), open(path, "rb") as fh:  # fsync is where a delayed write finds the disk full
        while chunk := fh.read(1 << 22):
            h.update(chunk)
        os.fsync(fh.fileno())
    return h.hexdigest()


def _probe(path: Path) -> tuple[int, int] | str:
    try:
        return probe_size(path)
    except PairloadError as exc:
        return str(exc)


@dataclass
class _ShardPlan:
    split: str
    number: int
    samples: list[tuple[Pair, schema.SampleLayout, int]] = field(default_factory=list)  # (pair, layout, shares_high)
    pieces: list[tuple[int, bytes]] = field(default_factory=list)
    end: int = 0

    @property
    def name(self) -> str:
        return schema.shard_name(self.split, self.number)


def _target_groups(pairs: list[Pair]) -> list[Pair]:
    """Pairs in (split, key) order, except that pairs sharing one target (SID's exposures of a scene, SICE's
    sequence, a pairs file naming one high for several lows) follow the first of them, which stores the target."""
    leader: dict[tuple[str, Path], str] = {}
    for p in pairs:
        leader.setdefault((p.split, p.high), p.key)
    return sorted(pairs, key=lambda p: (p.split, leader[(p.split, p.high)], p.key != leader[(p.split, p.high)], p.key))


def _plan_shards(pairs: list[Pair], sizes: list[tuple[int, int]], out_sizes: list[tuple[int, int]],
                 shard_size: int) -> list[_ShardPlan]:
    plans: list[_ShardPlan] = []
    current: _ShardPlan | None = None
    leaders: dict[tuple[str, Path], int] = {}  # (split, high file) -> index in the current shard of its first pair
    for pair, hw, out_hw in zip(pairs, sizes, out_sizes):
        lead = leaders.get((pair.split, pair.high)) if current is not None and current.split == pair.split else None
        if current is None or current.split != pair.split:
            current = _ShardPlan(pair.split, 0 if current is None or current.split != pair.split else current.number + 1)
            plans.append(current)
            leaders = {}
        shared = None if lead is None else current.samples[lead][1].high_data
        ref = None if lead is None else current.samples[lead][0].key
        meta = schema.sample_meta(pair.low_rel, pair.high_rel, hw, out_hw, high_ref=ref)
        layout, pieces = schema.layout_sample(pair.key, out_hw[0], out_hw[1], meta, current.end, shared)
        if lead is None and current.samples and schema.archive_end(layout.end) > shard_size:  # cut between groups only
            current = _ShardPlan(pair.split, current.number + 1)
            plans.append(current)
            leaders = {}
            layout, pieces = schema.layout_sample(pair.key, out_hw[0], out_hw[1], meta, 0)
        if lead is None:
            leaders[(pair.split, pair.high)] = len(current.samples)
        current.samples.append((pair, layout, -1 if lead is None else lead))
        current.pieces.extend(pieces)
        current.end = layout.end
    return plans


def _pool(workers: int):
    # fork starts workers at once; it is only safe while this process runs no other thread (a lock held by
    # another thread at fork time would never be released in the child), so otherwise spawn.
    method = "fork" if "fork" in mp.get_all_start_methods() and threading.active_count() == 1 else "spawn"
    return mp.get_context(method).Pool(workers, initializer=_worker_init)


JOURNAL = ".pairload-pack.json"  # the shard files a pack is replacing, written before it touches any of them
LOCK = ".pairload-pack.lock"


def _read_journal(folder: Path) -> dict:
    """The journal a killed pack left ({"owned": [...], "partials": [...]}), or {} when there is none."""
    try:
        doc = json.loads((folder / JOURNAL).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _journal_names(journal: dict, field: str) -> set[str]:
    names = journal.get(field)
    return {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()


def _remove_partials(folder: Path, journal: dict) -> None:
    """Delete what a killed pack left under pack's own temporary names: the partial shards its journal lists (it is
    written before they are created) and the atomic writer's temporary manifest and journal. A `*.tar.partial` the
    journal does not list is not pack's, and stays."""
    listed = _journal_names(journal, "partials")
    for p in folder.glob(f"*{schema.PARTIAL_SUFFIX}"):
        if (p.name in listed and schema.is_shard_name(p.name[: -len(schema.PARTIAL_SUFFIX)])) \
                or is_temp_of(p.name, schema.MANIFEST) or is_temp_of(p.name, JOURNAL):
            p.unlink(missing_ok=True)


def _owned(folder: Path, journal: dict) -> set[str]:
    """Shard files pack may replace or delete: those the current manifest lists and those a killed pack's journal
    lists. Any other file, even one named like a shard (`imagenet-000000.tar`), is the user's and stays."""
    owned: set[str] = set()
    try:
        owned.update(sh["file"] for entry in schema.read_manifest(folder)["splits"].values() for sh in entry["shards"])
    except (PairloadError, KeyError, TypeError):
        pass
    owned.update(_journal_names(journal, "owned"))
    return {name for name in owned if schema.is_shard_name(name)}


def manifest_refusal(doc, where: str, raw: Path, elsewhere: str = "another folder") -> str | None:
    """Why pack will not replace the manifest `doc` found at `where` (None: it may): it is not a pairload manifest
    (anything but a JSON object with pairload's "format"), or it records another RAW folder. The local and the
    remote packer share these rules; `elsewhere` is where else to pack ("another folder", "another URL")."""
    if not isinstance(doc, dict) or doc.get("format") != schema.FORMAT:
        return (f"{where}: not a pairload manifest (expected JSON with \"format\": \"{schema.FORMAT}\"), so "
                f"`pairload pack` will not replace it; move it away or pack into {elsewhere}, or pass --overwrite to "
                "replace it")
    theirs = doc.get(schema.RAW_DIR)
    if isinstance(theirs, str) and theirs != str(raw.resolve()):
        return (f"{where}: the manifest of a pack of {theirs}, not of {raw}; pack into {elsewhere}, or pass "
                "--overwrite to replace those shards")
    return None


def parse_manifest_bytes(data: bytes):
    """The JSON document in `data`, or None when it is not JSON (which `manifest_refusal` refuses)."""
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None


def _check_manifest_replaceable(out: Path, raw: Path) -> None:
    """Refuse to replace a manifest.json that is not a pairload manifest, or that records another RAW folder."""
    path = out / schema.MANIFEST
    if not (path.exists() or path.is_symlink()):
        return
    try:
        doc = parse_manifest_bytes(path.read_bytes())
    except OSError:
        doc = None
    refusal = manifest_refusal(doc, str(path), raw)
    if refusal:
        raise OutputError(refusal)


def _check_partials_free(out: Path, names: list[str]) -> None:
    """A file under one of the temporary names this pack is about to create was not written by pack (its own were
    removed above): refuse, naming it, instead of truncating it."""
    taken = [n for n in names if (out / n).exists() or (out / n).is_symlink()]
    if taken:
        raise OutputError(_in_the_way(out / taken[0], len(taken) - 1))


def _in_the_way(path: Path, more: int = 0) -> str:
    return (f"{path}: this pack would write its temporary shard under this name, and the file there was not written "
            f"by `pairload pack` (no pack's journal {JOURNAL} lists it){f' (and {more} more such files)' if more else ''}"
            "; move or delete it, or pack into another folder")


def _check_free_space(out: Path, plans: list, out_sizes: list[tuple[int, int]]) -> None:
    """Refuse a pack whose shards cannot fit on the output disk (a mistyped --resize can ask for terabytes): the
    partial shards are sparse, so nothing else would notice before the disk fills."""
    need = sum(schema.archive_end(plan.end) for plan in plans)
    free = shutil.disk_usage(out).free
    if need > free:
        h, w = max(out_sizes, key=lambda hw: hw[0] * hw[1])
        raise OutputError(f"{out}: the shards would take about {human_bytes(need)} ({len(out_sizes)} pairs, images "
                          f"up to {w}x{h}) but the disk holding this folder has {human_bytes(free)} free; free some "
                          "space, pack into a folder on a larger disk, or store smaller images (--max-side N, "
                          "--resize WxH)")


@contextlib.contextmanager
def exclusive(lock: Path, busy: PairloadError):
    """Hold the advisory lock file `lock` (the kernel drops it when the process dies); raise `busy` if another
    process holds it."""
    import fcntl

    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise busy from None
        yield
    finally:
        os.close(fd)


def _folder_lock(folder: Path):
    """One pack at a time per output folder."""
    return exclusive(folder / LOCK, ConfigError(f"{folder}: another `pairload pack` is writing into this folder (it "
                                                f"holds {LOCK}); wait for it to finish, or pack into another folder"))


def _check_output_outside_raw(raw: Path, out: Path) -> None:
    """The shards may not live in RAW: a later pack of RAW would walk into them (and its own partial files)."""
    raw_real, out_real = raw.resolve(), out.resolve()
    hint = f"e.g. `pairload pack {raw} {raw_real.name}-shards`"
    if out_real == raw_real:
        raise ConfigError(f"{out}: the output folder is the raw folder; write the shards elsewhere, {hint}")
    if out_real.is_relative_to(raw_real):
        raise ConfigError(f"{out}: the output folder is inside the raw folder {raw} (a later pack of {raw} would walk "
                          f"into its own shards); write the shards outside it, {hint}")


def pack(raw_dir: str | os.PathLike, shards_dir: str | os.PathLike, options: PackOptions = PackOptions(),
         on_progress: Callable[[int, int], None] | None = None, *, staging: str | os.PathLike | None = None,
         storage_options: dict | None = None, keep_staging: bool = True,
         on_upload: Callable[[str, str], None] | None = None) -> PackReport:
    """Pack the pairs under `raw_dir` into `shards_dir`. Raises a PairloadError (and writes no manifest) on bad input.

    `shards_dir` may be a URL (s3://, gs://, az://, any writable fsspec URL): the shards are packed into the local
    `staging` folder, each uploaded once it is finished, and the manifest uploaded last (see `pack.upload`);
    `storage_options` go to the fsspec backend, `on_upload(event, name)` reports each "uploaded", "skipped" or
    "deleted" object in order."""
    from ..remote.urls import is_url, local_path

    if is_url(shards_dir):
        from .upload import pack_to_url

        return pack_to_url(raw_dir, os.fspath(shards_dir), options, on_progress, staging=staging,
                           storage_options=storage_options, keep_staging=keep_staging, on_upload=on_upload)
    if staging is not None or storage_options:
        raise ConfigError(f"{shards_dir}: a local folder; staging and storage_options (--staging, --storage-option) "
                          "apply to URL destinations only (s3://, gs://, az://…): drop them")
    return pack_folder(raw_dir, local_path(shards_dir), options, on_progress)


ShardDone = Callable[[str, str, str, int], None]  # (shard name, partial file, sha256, bytes)


def pack_folder(raw_dir: str | os.PathLike, shards_dir: str | os.PathLike, options: PackOptions = PackOptions(),
                on_progress: Callable[[int, int], None] | None = None, *, on_start: Callable[[], None] | None = None,
                on_shard: ShardDone | None = None) -> PackReport:
    """`pack` into a local folder. `on_start()` runs once the folder is locked and the pairs are found, before
    anything is written; `on_shard(name, partial, sha256, bytes)` as soon as a shard is written, hashed and fsynced
    (under its temporary name `partial`, renamed to `name` beside it once every shard is done). `on_shard` may run
    on another thread, and must not raise."""
    start = time.perf_counter()
    workers = options.workers or os.cpu_count() or 1
    pool = _pool(workers) if workers > 1 else None  # workers start while the folders are being listed
    try:
        out = Path(shards_dir)
        _check_output_outside_raw(Path(raw_dir), out)
        discovery = find_pairs(raw_dir, low_dir=options.low_dir, high_dir=options.high_dir,
                               pairs_file=options.pairs_file, skip_unmatched=options.skip_unmatched,
                               split_names=dict(options.split_names), name_template=options.name_template)
        out.mkdir(parents=True, exist_ok=True)
        with _folder_lock(out):
            if on_start:
                on_start()
            return _pack_locked(discovery, Path(raw_dir), out, options, pool, workers, start, on_progress, on_shard)
    except BaseException:
        if pool:
            pool.terminate()
        raise


def _pack_locked(discovery, raw: Path, out: Path, options: PackOptions, pool, workers: int, start: float,
                 on_progress, on_shard: ShardDone | None = None) -> PackReport:
    if not options.overwrite:
        _check_manifest_replaceable(out, raw)
    pairs = _target_groups(discovery.pairs)
    journal = _read_journal(out)
    _remove_partials(out, journal)  # left by a killed run
    report = PackReport(shards_dir=out, workers=workers, compression=options.compress)
    report.skipped = discovery.skipped_low + discovery.skipped_high
    report.skipped_per_split = dict(discovery.skipped_per_split)
    report.layout = discovery.layout()
    report.unused = [u.as_dict() for u in discovery.unused]
    report.split_folders = {k: {"split": v[0], "how": v[1]} for k, v in sorted(discovery.split_folders.items())}
    run = _Run(out=out, options=options, pool=pool, journal=journal, report=report, on_progress=on_progress,
               on_shard=on_shard)
    try:
        paths = [p for pair in pairs for p in (pair.low, pair.high)]
        probes = pool.map(_probe, paths, chunksize=64) if pool else [_probe(p) for p in paths]
        errors = [r for r in probes if isinstance(r, str)]
        if errors:
            raise ImageError(errors[0] + (f" (and {len(errors) - 1} more unreadable files)" if len(errors) > 1 else ""))
        mismatched = [(pair, probes[2 * i], probes[2 * i + 1]) for i, pair in enumerate(pairs)
                      if probes[2 * i] != probes[2 * i + 1]]
        if mismatched and options.resize is None:  # --resize brings both images of every pair to one size
            pair, lo, hi = mismatched[0]
            more = f" (and {len(mismatched) - 1} more pairs)" if len(mismatched) > 1 else ""
            raise ImageError(f"{pair.low_rel} is {lo[1]}x{lo[0]} but {pair.high_rel} is {hi[1]}x{hi[0]}; a pair must "
                             f"have one size (fix the files, or pack with --resize WxH to resize both){more}")
        report.phases["probe"] = time.perf_counter() - start
        sizes = [probes[2 * i] for i in range(len(pairs))]
        out_sizes = [target_size(h, w, options.resize, options.max_side) for h, w in sizes]
        write = _write_compressed if options.compress else _write_raw
        plans, results, digests = write(run, pairs, probes, sizes, out_sizes)
    except BaseException:
        if pool:
            pool.terminate()
            pool.join()
        _close_fds()
        run.close_files()
        for part in run.partial_files:
            Path(part).unlink(missing_ok=True)
        _forget_partials(out, journal)
        raise
    if pool:
        pool.close()
        pool.join()

    partial_names = [plan.name + schema.PARTIAL_SUFFIX for plan in plans]
    manifest = _manifest(plans, results, digests, discovery, raw, options, report)
    keep = {plan.name for plan in plans}
    owned = _owned(out, journal) | keep
    with _writing(out / JOURNAL):  # a kill from here on still knows what is ours
        write_json_atomic(out / JOURNAL, {"owned": sorted(owned), "partials": partial_names})
    (out / schema.MANIFEST).unlink(missing_ok=True)  # its shards are about to be replaced
    for plan, part in zip(plans, run.partial_files):
        with _writing(out / plan.name):
            os.replace(part, out / plan.name)
    for stale in sorted(owned - keep):
        (out / stale).unlink(missing_ok=True)
    schema.fsync_dir(out)
    with _writing(out / schema.MANIFEST):
        write_json_atomic(out / schema.MANIFEST, manifest)
    (out / JOURNAL).unlink(missing_ok=True)
    report.seconds = time.perf_counter() - start
    return report


@dataclass
class _Run:
    """One pack's output side: what the writers need, and the partial shards created so far (removed on failure)."""

    out: Path
    options: PackOptions
    pool: object
    journal: dict
    report: PackReport
    on_progress: Callable[[int, int], None] | None
    on_shard: "ShardDone | None" = None
    partial_files: list[str] = field(default_factory=list)
    open_files: list = field(default_factory=list)

    def close_files(self) -> None:
        for fh in self.open_files:
            fh.close()
        self.open_files.clear()


def _write_raw(run: _Run, pairs: list[Pair], probes: list, sizes: list, out_sizes: list):
    """Raw members: every offset planned first, each shard created at its final size, pixels written in place by the
    workers. Returns (plans, per-job (notes, crc low, crc high), shard digests)."""
    out, options, pool = run.out, run.options, run.pool
    plans = _plan_shards(pairs, sizes, out_sizes, options.shard_size)
    _check_free_space(out, plans, out_sizes)
    partial_names = [plan.name + schema.PARTIAL_SUFFIX for plan in plans]
    _check_partials_free(out, partial_names)
    with _writing(out / JOURNAL):  # before any partial exists: a killed run's successor knows they are ours
        write_json_atomic(out / JOURNAL, {"owned": sorted(_owned(out, run.journal)), "partials": partial_names})

    jobs: list[_Job] = []
    shard_of: list[int] = []
    for number, plan in enumerate(plans):
        part = str(out / partial_names[number])
        try:
            fh = open(part, "xb")
        except FileExistsError:  # appeared since the check
            raise OutputError(_in_the_way(Path(part))) from None
        except OSError as exc:
            raise _output_error(Path(part), exc) from None
        run.partial_files.append(part)
        with _writing(Path(part)), fh:
            fh.truncate(schema.archive_end(plan.end))
            for off, data in plan.pieces:
                fh.seek(off)
                fh.write(data)
        for pair, lay, lead in plan.samples:
            idx = len(jobs)  # plans follow the order of `pairs`
            own = lead < 0
            jobs.append(_Job(idx, pair.low, pair.high if own else None, probes[2 * idx], probes[2 * idx + 1],
                             (lay.height, lay.width), options.to_8bit, part, lay.low_data,
                             lay.high_data if own else None))
            shard_of.append(number)

    t_decode = time.perf_counter()
    results: list[tuple[list[str], int, int] | None] = [None] * len(jobs)
    remaining = [len(plan.samples) for plan in plans]
    hashing: list = [None] * len(plans)
    finished = _on_hashed(plans, run.partial_files, run.on_shard)
    done = 0
    stream = pool.imap_unordered(_run_job, jobs, chunksize=2) if pool else map(_run_job, jobs)
    for res in stream:
        if isinstance(res[1], str):
            raise (OutputError if res[2] else ImageError)(res[1])
        results[res[0]] = res[1:]
        number = shard_of[res[0]]
        remaining[number] -= 1
        if remaining[number] == 0 and pool:  # hash and fsync a finished shard while later ones decode
            hashing[number] = pool.apply_async(_hash_file, (run.partial_files[number],),
                                               callback=functools.partial(finished, number))
        elif remaining[number] == 0:  # one process: hash it now, so that on_shard hears of it at once
            hashing[number] = _hash_file(run.partial_files[number])
            finished(number, hashing[number])
        done += 1
        if run.on_progress:
            run.on_progress(done, len(jobs))
    _close_fds()  # pwrite has put every pixel in the page cache; fsync flushes them whoever wrote them
    t_finish = time.perf_counter()
    run.report.phases["decode"] = t_finish - t_decode
    digests = [h.get() for h in hashing] if pool else hashing
    run.report.phases["hash_fsync_tail"] = time.perf_counter() - t_finish
    return plans, results, digests


def _write_compressed(run: _Run, pairs: list[Pair], probes: list, sizes: list, out_sizes: list):
    """Compressed members (`--compress zstd`): the workers decode and compress each pair; the frames come back in key
    order and are appended to the shards one after the other (a frame's size is known only once it is compressed).
    Each shard holds the samples the raw pack's would (`--shard-size` is counted in raw bytes), so every loader,
    wds's shard-by-shard order included, yields the same batches from both packs. The bytes do not depend on the
    number of workers. Returns what `_write_raw` returns."""
    out, options, pool = run.out, run.options, run.pool
    plans = _plan_shards(pairs, sizes, out_sizes, options.shard_size)  # which samples each shard holds
    slots = [(plan, lead) for plan in plans for _, _, lead in plan.samples]  # per job, in the order of `pairs`
    partial_names = [plan.name + schema.PARTIAL_SUFFIX for plan in plans]
    _check_partials_free(out, partial_names)
    with _writing(out / JOURNAL):  # before any partial exists: a killed run's successor knows they are ours
        write_json_atomic(out / JOURNAL, {"owned": sorted(_owned(out, run.journal)), "partials": partial_names})
    jobs = [_ZJob(k, pair.low, pair.high if slots[k][1] < 0 else None, probes[2 * k], probes[2 * k + 1],
                  out_sizes[k], options.to_8bit, options.compress_level) for k, pair in enumerate(pairs)]
    t_decode = time.perf_counter()
    shards = _ZShards(run)
    results: list[tuple[list[str], int, int | None] | None] = [None] * len(jobs)
    stream = pool.imap(_run_zjob, jobs, chunksize=2) if pool else map(_run_zjob, jobs)
    for done, res in enumerate(stream, 1):  # in job order
        if isinstance(res[1], str):
            raise ImageError(res[1])
        k, notes, crc_low, crc_high, low, high = res
        results[k] = (notes, crc_low, crc_high)
        plan, lead = slots[k]
        ref = plan.samples[lead][0].key if lead >= 0 else None
        meta = schema.sample_meta(pairs[k].low_rel, pairs[k].high_rel, sizes[k], out_sizes[k], high_ref=ref)
        shards.add(plan, pairs[k], out_sizes[k], meta, low, high, lead)
        if run.on_progress:
            run.on_progress(done, len(jobs))
    shards.close()
    run.report.phases["decode_compress_write"] = time.perf_counter() - t_decode
    return shards.plans, results, shards.digests


class _ZShards:
    """Compressed samples appended in key order to `*.tar.partial` shards, one shard after the other (each holding
    the samples of one raw plan), hashed as they are written, then fsynced."""

    def __init__(self, run: _Run):
        self.run = run
        self.plans: list[_ShardPlan] = []
        self.digests: list[str] = []
        self.fh = self.hash = None
        self.pos = 0
        self.finished = _on_hashed(self.plans, run.partial_files, run.on_shard)  # sees the plans as they are added

    def add(self, raw_plan: _ShardPlan, pair: Pair, hw: tuple[int, int], meta: bytes, low: bytes,
            high: bytes | None, lead: int) -> None:
        """Append one sample to the shard of `raw_plan` (opened when its first sample comes); `lead` >= 0: the
        sample of that shard whose target frame it shares."""
        if not self.plans or self.plans[-1].name != raw_plan.name:
            self._open(raw_plan.split, raw_plan.number)
        plan = self.plans[-1]
        shared = None
        if lead >= 0:
            lay = plan.samples[lead][1]
            shared = (lay.high_data, lay.high_bytes)
        layout, pieces = schema.layout_compressed_sample(pair.key, hw[0], hw[1], meta, low, high, plan.end, shared)
        self._write(pieces)
        plan.samples.append((pair, layout, lead))
        plan.end = layout.end

    def _open(self, split: str, number: int) -> None:
        self.close()
        plan = _ShardPlan(split, number)
        part = self.run.out / (plan.name + schema.PARTIAL_SUFFIX)
        try:
            self.fh = open(part, "xb")
        except FileExistsError:  # appeared since the check
            raise OutputError(_in_the_way(part)) from None
        except OSError as exc:
            raise _output_error(part, exc) from None
        self.run.open_files.append(self.fh)
        self.run.partial_files.append(str(part))
        self.plans.append(plan)
        self.hash, self.pos = hashlib.sha256(), 0

    def _write(self, pieces: list[tuple[int, bytes]]) -> None:
        with _writing(Path(self.fh.name)):
            for off, data in pieces:
                if off > self.pos:  # tar's zero padding up to the next 512-byte block
                    self._put(bytes(off - self.pos))
                self._put(data)

    def _put(self, data: bytes) -> None:
        self.fh.write(data)
        self.hash.update(data)
        self.pos += len(data)

    def close(self) -> None:
        """Finish the current shard, if one is open: the archive's end blocks, then fsync."""
        if self.fh is None:
            return
        with _writing(Path(self.fh.name)):
            self._put(bytes(schema.archive_end(self.plans[-1].end) - self.pos))
            self.fh.flush()
            os.fsync(self.fh.fileno())
            self.fh.close()
        self.run.open_files.remove(self.fh)
        self.digests.append(self.hash.hexdigest())
        self.fh = None
        self.finished(len(self.plans) - 1, self.digests[-1])


def _on_hashed(plans: list[_ShardPlan], partial_files: list[str], on_shard: ShardDone | None):
    """finished(number, sha256): tell `on_shard` that shard `number` is complete. It runs on the pool's result thread,
    which must never raise (the pool would hang), so a failing hook is swallowed here; the hook owns its errors."""
    def finished(number: int, digest: str) -> None:
        if on_shard is None:
            return
        try:
            on_shard(plans[number].name, partial_files[number], digest, schema.archive_end(plans[number].end))
        except Exception:  # noqa: BLE001 - see above
            pass

    return finished


def _forget_partials(out: Path, journal: dict) -> None:
    """After a failed run removed its partial shards: the journal as it was before the run (or none)."""
    try:
        if journal:
            write_json_atomic(out / JOURNAL, {"owned": sorted(_journal_names(journal, "owned"))})
        else:
            (out / JOURNAL).unlink(missing_ok=True)
    except OSError:  # a full disk: the partials it lists are gone, and a later run ignores missing ones
        pass


def _manifest(plans, results, digests, discovery, raw: Path, options: PackOptions, report: PackReport) -> dict:
    splits: dict[str, dict] = {}
    j = 0
    shared = any(lead >= 0 for plan in plans for _, _, lead in plan.samples)
    compressed = options.compress is not None
    for plan, digest in zip(plans, digests):
        entry = splits.setdefault(plan.split, {"samples": 0, "bytes": 0, "min_size": None, "max_size": None,
                                               "folders": discovery.sources.get(plan.split, []),
                                               "pairing": discovery.rules.get(plan.split, []), "shards": []})
        if compressed:
            entry[schema.COMPRESSION] = options.compress
        index = {"key": [], "hw": [], "low": [], "high": [], "crc32": []}
        if compressed:
            index[schema.LOW_BYTES], index[schema.HIGH_BYTES] = [], []
        if shared:
            index[schema.SHARES_HIGH] = []
        for pair, lay, lead in plan.samples:
            notes, crc_low, crc_high = results[j]
            j += 1
            index["key"].append(lay.key)
            index["hw"].append([lay.height, lay.width])
            index["low"].append(lay.low_data)
            index["high"].append(lay.high_data)
            index["crc32"].append([crc_low, crc_high if lead < 0 else index["crc32"][lead][1]])
            if compressed:
                index[schema.LOW_BYTES].append(lay.low_bytes)
                index[schema.HIGH_BYTES].append(lay.high_bytes)
            if shared:
                index[schema.SHARES_HIGH].append(lead)
            for note in notes:
                side, what = note.split(":")
                rel = pair.low_rel if side == "low" else pair.high_rel
                {"gray": report.gray, "alpha": report.alpha, "16bit": report.converted_16bit}[what].append(rel)
            hw = [lay.height, lay.width]
            entry["min_size"] = hw if entry["min_size"] is None else [min(a, b) for a, b in zip(entry["min_size"], hw)]
            entry["max_size"] = hw if entry["max_size"] is None else [max(a, b) for a, b in zip(entry["max_size"], hw)]
        size = schema.archive_end(plan.end)
        entry["samples"] += len(plan.samples)
        entry["bytes"] += size
        entry["shards"].append({"file": plan.name, "samples": len(plan.samples), "bytes": size, "sha256": digest,
                                "index": index})
    for name, entry in splits.items():
        pixels = sum(h * w for sh in entry["shards"] for h, w in sh["index"]["hw"]) * schema.CHANNELS * 2
        report.splits[name] = {"samples": entry["samples"], "shards": len(entry["shards"]), "bytes": entry["bytes"],
                               "pixel_bytes": pixels}
    from .. import __version__

    # versions: 1 without shared targets (readable by every pairload), 2 with them, 3 compressed (older readers
    # refuse it by its version instead of taking the offsets of its frames for offsets of pixels)
    version = schema.VERSION_COMPRESSED if compressed else schema.VERSION if shared else 1
    options_doc = {"resize": list(options.resize) if options.resize else None, "max_side": options.max_side,
                   "to_8bit": options.to_8bit, "shard_size": options.shard_size}
    if compressed:
        options_doc.update(compress=options.compress, compress_level=options.compress_level)
    return {
        "format": schema.FORMAT,
        "version": version,
        "created_by": f"pairload {__version__}",
        schema.RAW_DIR: str(raw.resolve()),
        "layout": _layout_doc(options.compress),
        "options": options_doc,
        "report": {"gray_replicated": report.gray, "alpha_dropped": report.alpha,
                   "converted_16bit": report.converted_16bit, "skipped_unmatched": report.skipped,
                   "skipped_per_split": discovery.skipped_per_split, "unused": report.unused,
                   "split_folders": report.split_folders},
        "splits": splits,
    }


def _layout_doc(compression: str | None) -> dict:
    doc = {"members": list(schema.member_order(compression)), "dtype": "uint8", "channels": "RGB", "shape": "HxWx3",
           "index_offsets": "byte offset of each array's pixels in its tar"}
    if compression:
        doc["index_offsets"] = ("byte offset of each image member's data (one zstd frame holding the .npy file) in "
                                f"its tar; index.{schema.LOW_BYTES}/{schema.HIGH_BYTES}: the frame's length")
    return doc
