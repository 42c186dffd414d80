"""The work pack's worker processes do: the pool itself, header probes, one job per pair (decode it, then either
write its pixels in place into a planned shard or return them as zstd frames). Everything here runs in a worker,
or in the parent when there is one process."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ImageError, OutputError, PairloadError
from ..format.encoding import RAW, Encoding
from ..format.members import npy_file
from ..format.crc import crc32
from ..forking import start_method
from ..folders.decode import CROP, RESIZE, Header, decode, decode_camera, fitted, silence_cv2
from ..folders.decode import probe as probe_header
from .guard import output_error


IMAGE = "image"  # a Job's file decoded as an image or a .npy (else `decode.PACKED` / `decode.DEVELOPED`)


@dataclass(frozen=True)
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

    def __post_init__(self) -> None:
        plain = self.encoding.plain
        if plain != (self.file is not None) or plain != (self.level is None):
            raise ValueError(f"job {self.index}: give either a shard file (plain: raw) or an encoding that is not "
                             "plain and its level (zstd)")


@dataclass(frozen=True)
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


def start_pool(workers: int):
    # fork starts workers at once, where it is safe (`forking`): an OpenMP pool that torch started, for one, would
    # hang LibRaw's development in a forked worker. (A fork server started single-threaded was tried: the CLI's
    # pack was no faster, its spawned workers starting while the folders are listed.)
    return mp.get_context(start_method()).Pool(workers, initializer=_init_worker)


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
    return [h if isinstance(h, str) else canon.setdefault(h, h) for h in map(probe, paths)]


def _side(job: Job, path: Path, header, as_: str, out_hw: tuple[int, int]):
    """(pixels, notes, levels) of one file of a job."""
    if as_ == IMAGE:
        img, notes = decode(path, to_8bit=job.to_8bit, expect=header, out_hw=out_hw, fit=job.fit, npy_bgr=job.npy_bgr)
        return img, notes, None
    img, levels = decode_camera(path, header, as_)
    if job.fit == CROP:  # sensor counts are never resampled (pack refuses a camera raw resize), but may be cut
        img = fitted(img, out_hw, CROP)
    return img, [], levels


def _decode(job: Job):
    low, low_notes, levels = None, [], None
    if job.low is not None:
        low, low_notes, levels = _side(job, job.low, job.low_hw, job.low_as, job.out_hw)
    high, high_notes, levels_high = None, [], None
    if job.high is not None:
        out_hw = (job.out_hw[0] * job.scale, job.out_hw[1] * job.scale)
        high, high_notes, levels_high = _side(job, job.high, job.high_hw, job.high_as, out_hw)
    notes = tuple([f"low:{n}" for n in low_notes] + [f"high:{n}" for n in high_notes])
    return low, high, notes, levels, levels_high


def _pwrite(file: str, images: list[tuple[np.ndarray, int]]) -> None:
    fd = _fds.get(file)
    if fd is None:
        fd = _fds[file] = os.open(file, os.O_WRONLY)
    for arr, off in images:
        view = memoryview(arr).cast("B")
        written = 0
        while written < len(view):
            written += os.pwrite(fd, view[written:], off + written)


def run_job(job: Job) -> JobResult:
    """Decode one pair and store it (see `Job`); a targets-only job stores its target alone, which the index gives as
    its input too (its CRC-32 and levels). Errors come back as text so that the parent can clean up and report
    them."""
    try:
        low, high, notes, levels, levels_high = _decode(job)
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
    crc_high = crc32(high) if high is not None else None
    if low is None:  # targets only: the input is the stored target
        return JobResult(job.index, notes, crc_high, crc_high, *frames, levels=levels_high, levels_high=levels_high)
    return JobResult(job.index, notes, crc32(low), crc_high, *frames, levels=levels, levels_high=levels_high)

