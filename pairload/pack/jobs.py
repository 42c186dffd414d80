"""The work pack's worker processes do (`pairload.workerpool` runs them): header probes, one job per pair (decode
it, measure it (`audit.measures.pair_facts`), then either write its pixels in place into a planned shard or return
them as zstd frames). Everything here runs in a worker, or in the parent when there is one process."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..audit.measures import PairFacts, Scan, facts_of, scan_pair
from ..errors import ImageError, OutputError, PairloadError
from ..format.encoding import RAW, Encoding
from ..format.members import npy_file
from ..format.crc import crc32
from ..folders.decode import CROP, RESIZE, Header, decode, decode_camera, fitted, silence_cv2
from ..forking import pool_context
from ..folders.decode import probe as probe_header
from .guard import output_error
from ..workerpool import WorkerPool, doing


IMAGE = "image"  # a Job's file decoded as an image or a .npy (else `decode.PACKED` / `decode.DEVELOPED`)


@dataclass(frozen=True, slots=True)  # (no dict each: a pack holds a chunk or two of jobs at once)
class Job:
    """Everything a worker needs to decode one pair and store it: written in place at `low_off`/`high_off` of the
    partial shard `file` (a plain encoding: raw members), or encoded by `encoding` at `level` and returned
    (`--compress zstd`)."""

    index: int
    low: Path | None  # None: a targets-only sample, whose target is stored alone (and is its input too)
    high: Path | None  # None: the pair shares a target that another job stores
    low_hw: Header | tuple[int, int]  # what the probe found: size and stored type (a bare (h, w): its size only)
    high_hw: Header | tuple[int, int]
    out_hw: tuple[int, int]
    to_8bit: bool
    file: str | None = None  # raw members: the partial shard the pixels go into
    low_off: int | None = None
    high_off: int | None = None
    encoding: Encoding = RAW  # how the members are stored (pickled by name)
    level: int | None = None  # an encoding that is not plain: its level
    low_as: str = IMAGE  # how each file is stored: IMAGE, or a camera raw file PACKED or DEVELOPED
    high_as: str = IMAGE
    scale: int = 1  # the target is stored at this multiple of out_hw
    fit: str = RESIZE  # how an image is brought to out_hw: resized, or its centre cropped (`decode.fitted`)
    npy_bgr: bool = False  # a .npy's first three channels are BGR: stored as RGB (`pack --npy-bgr`)
    # the pair's target when another job stores it (`high` None): decoded here only to measure the pair, unless the
    # job that stores it ran just before in this worker and kept it (`keeps_high`: later jobs share its target)
    shared_high: Path | None = None
    keeps_high: bool = False
    measure_only: bool = False  # decode and measure the pair, store nothing (`pack --skip-misaligned`'s first pass)

    def __post_init__(self) -> None:
        if self.measure_only:
            return
        plain = self.encoding.plain
        if plain != (self.file is not None) or bool(self.encoding.levels) != (self.level is not None):
            raise ValueError(f"job {self.index}: give either a shard file (plain: raw) or an encoding that is not "
                             "plain and its level where it has levels (zstd; encoded has none)")


@dataclass(frozen=True, slots=True)
class JobResult:
    """What one job did: its decode notes ('low:gray', …) and the pixels' CRC-32s, the frames of a compressed job,
    or the one-line error (`output_failed`: the output's fault, such as a full disk, not the pair's)."""

    index: int
    notes: tuple[str, ...] = ()
    crc_low: int = 0
    crc_high: int | None = None
    low_frame: bytes | None = None
    high_frame: bytes | None = None
    error: str | None = None
    output_failed: bool = False
    levels: tuple[int, ...] | None = None  # a packed camera raw input: black of each packed channel, then white
    levels_high: tuple[int, ...] | None = None  # the same for a packed raw target
    facts: PairFacts | None = None  # what was measured of the pair (`audit.measures.pair_facts`)
    # the pair's pixels passed over (`measures.scan_pair`), until `run_task` measures its task's pairs together: a
    # result leaves its worker with `facts` and no scan
    scan: Scan | None = None

    def check(self) -> "JobResult":
        """Raise the job's error (OutputError or ImageError); else the result."""
        if self.error is not None:
            raise (OutputError if self.output_failed else ImageError)(self.error)
        return self

    def without_frames(self) -> "JobResult":
        """The result kept for the manifest: the frames are written, and must not stay in memory."""
        return dataclasses.replace(self, low_frame=None, high_frame=None)


_fds: dict[str, int] = {}  # this process's open partial shards, kept open across its jobs


def close_fds() -> None:
    for fd in _fds.values():
        os.close(fd)
    _fds.clear()


def start_pool(workers: int) -> WorkerPool:
    # fork starts workers at once, where it is safe (`forking`): an OpenMP pool that torch started, for one, would
    # hang LibRaw's development in a forked worker. (A fork server started single-threaded was tried: the CLI's
    # pack was no faster, its spawned workers starting while the folders are listed.)
    return WorkerPool(workers, pool_context(), "pack", _init_worker)


def _init_worker() -> None:
    # one core per worker: OpenMP (LibRaw's development) reads this when it is first loaded, in this process
    os.environ["OMP_NUM_THREADS"] = "1"
    silence_cv2()


def probe(path: str | Path) -> Header | str:
    """The image's `Header` (size, element type, channels), or the one-line error naming it."""
    try:
        return probe_header(Path(path))
    except PairloadError as exc:
        return str(exc)


def probe_many(paths: list[str]) -> list:
    """`probe` of each path; equal headers are one object, which pickle then sends back once (the parent's cost per
    file, not the workers', bounds the probe of a large pack)."""
    canon: dict = {}
    headers = []
    for path in paths:
        doing(path)
        header = probe(path)
        headers.append(header if isinstance(header, str) else canon.setdefault(header, header))
    return headers


def _side(job: Job, path: Path, header, as_: str, out_hw: tuple[int, int], read: dict | None = None):
    """(pixels, notes, levels) of one file of a job; `read`: the bytes of files already read, by path."""
    if as_ == IMAGE:
        img, notes = decode(path, to_8bit=job.to_8bit, expect=header, out_hw=out_hw, fit=job.fit, npy_bgr=job.npy_bgr,
                            data=(read or {}).get(path))
        return img, notes, None
    img, levels = decode_camera(path, header, as_)
    if job.fit == CROP:  # sensor counts are never resampled (pack refuses a camera raw resize), but may be cut
        img = fitted(img, out_hw, CROP)
    return img, [], levels


def _decode(job: Job, read: dict | None = None):
    low, low_notes, levels = None, [], None
    if job.low is not None:
        low, low_notes, levels = _side(job, job.low, job.low_hw, job.low_as, job.out_hw, read)
    high, high_notes, levels_high = None, [], None
    if job.high is not None:
        out_hw = (job.out_hw[0] * job.scale, job.out_hw[1] * job.scale)
        high, high_notes, levels_high = _side(job, job.high, job.high_hw, job.high_as, out_hw, read)
    notes = tuple([f"low:{n}" for n in low_notes] + [f"high:{n}" for n in high_notes])
    return low, high, notes, levels, levels_high


_kept_high: tuple[Path, np.ndarray, int] | None = None  # this worker's last target that later jobs share, its CRC


def _measure(job: Job, low: np.ndarray | None, high: np.ndarray | None, crcs: tuple) -> Scan | None:
    """The pair's pixels passed over for its facts (`measures.scan_pair`, given the CRC-32s pack made of them,
    `crcs`: the input's, the target's); a pair whose target another job stores is measured against that target,
    kept by the job that decoded it when it ran just before in this worker (`run_task` keeps a target's jobs in one
    task), else decoded again (None for a job given neither its target nor the one it shares: nothing to
    compare)."""
    global _kept_high
    low_crc, high_crc = crcs
    if high is not None:
        _kept_high = (job.high, high, high_crc) if job.keeps_high else None
    elif job.shared_high is not None:
        if _kept_high is not None and _kept_high[0] == job.shared_high:
            _, high, high_crc = _kept_high
        else:
            out_hw = (job.out_hw[0] * job.scale, job.out_hw[1] * job.scale)
            high = _side(job, job.shared_high, job.high_hw, job.high_as, out_hw)[0]
    return None if high is None else scan_pair(low, high, low_crc=low_crc, high_crc=high_crc)


def run_task(work, jobs: list[Job]) -> list[JobResult]:
    """One pool task: `work` (`run_job`, or an encoded pack's job) of each job in order, in one worker, so that the
    jobs sharing a target measure their pairs against the one decode of it (kept no longer than the task); then
    the facts of the task's pairs, measured together (`measured`)."""
    global _kept_high
    try:
        done = []
        for job in jobs:
            doing(job.low, job.high)
            done.append(work(job))
    finally:
        _kept_high = None
    return measured(jobs, done)


def measured(jobs: list[Job], results: list[JobResult]) -> list[JobResult]:
    """The results with their pairs' facts in place of their scans: `measures.facts_of` of them all at once (its
    small steps, a few dozen calls a pair, cost several times less a pair in a batch); a pair's facts are what it
    gives alone. A pair whose facts cannot be measured fails as its decode would, naming its files (`jobs`: the
    results' jobs, in order)."""
    scanned = [i for i, res in enumerate(results) if res.scan is not None]
    if not scanned:
        return results
    try:
        facts = facts_of([results[i].scan for i in scanned])
    except Exception:  # noqa: BLE001 - each measured alone below, the failing one reported
        facts = None
    for n, i in enumerate(scanned):
        res = results[i]
        try:
            one = facts[n] if facts is not None else facts_of([res.scan])[0]
        except Exception as exc:  # noqa: BLE001 - reported by the parent, naming the files
            job = jobs[i]
            results[i] = JobResult(res.index, error=f"{job.low} / {job.high or job.shared_high}: measuring the pair: "
                                   f"{type(exc).__name__}: {exc}")
            continue
        results[i] = dataclasses.replace(res, facts=one, scan=None)
    return results


def _pwrite(file: str, images: list[tuple[np.ndarray, int]]) -> None:
    fd = _fds.get(file)
    if fd is None:
        fd = _fds[file] = os.open(file, os.O_WRONLY)
    for arr, off in images:
        view = memoryview(arr).cast("B")
        written = 0
        while written < len(view):
            written += os.pwrite(fd, view[written:], off + written)


def run_job(job: Job, read: dict | None = None) -> JobResult:
    """Decode one pair and store it (see `Job`); a targets-only job stores its target alone, which the index gives as
    its input too (its CRC-32 and levels). `read`: the bytes of the job's files already read, by path (an encoded
    pack's job keeps the very bytes it decoded). Errors come back as text so that the parent can clean up and report
    them."""
    try:
        low, high, notes, levels, levels_high = _decode(job, read)
        # the members' CRC-32s (what the index keeps of each; the measures' exact hashes hold them too)
        crc_low, crc_high = (None if img is None else crc32(img) for img in (low, high))
        scan = _measure(job, low, high, (crc_low, crc_high))
        if job.measure_only:
            return JobResult(job.index, scan=scan)
        frames = (None, None)
        if not job.encoding.plain:
            frames = (job.encoding.encode(npy_file(low), job.level) if low is not None else None,
                      job.encoding.encode(npy_file(high), job.level) if high is not None else None)
    except Exception as exc:  # noqa: BLE001 - reported by the parent, naming the files
        text = str(exc) if isinstance(exc, PairloadError) else f"{job.low} / {job.high}: {type(exc).__name__}: {exc}"
        return JobResult(job.index, error=text)
    if job.file is not None:
        try:
            _pwrite(job.file, ([(low, job.low_off)] if low is not None else [])
                    + ([(high, job.high_off)] if high is not None else []))
        except OSError as exc:  # the disk filled up under us: the shard is to blame, not the pair being written
            return JobResult(job.index, error=str(output_error(Path(job.file), exc)), output_failed=True)
    if low is None:  # targets only: the input is the stored target
        return JobResult(job.index, notes, crc_high, crc_high, *frames, levels=levels_high, levels_high=levels_high,
                         scan=scan)
    return JobResult(job.index, notes, crc_low, crc_high, *frames, levels=levels, levels_high=levels_high,
                     scan=scan)

