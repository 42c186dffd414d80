"""One pair's job in an encoded pack (`pack --store encoded`, shard format version 7). The pair is decoded as a
decoded pack decodes it (`jobs.run_job`: the same pixels, CRC-32s and notes); then each image whose file is a JPEG
that every decoder reads to h×w×3 (`imageformats.jpeg_refusal`) and whose file bytes the readers' own `decode_jpeg`
turns into exactly those pixels is kept as its bytes (a `jpeg` member); every other image is stored lossless as
those pixels' tiles (a `tiles` member, `format.tiles`), or as the pixels themselves (an `npy` member) where its
tiles would not be smaller; a note says which and why, for pack's report ("tiles:PNG", "decoded:incompressible"), and
of a kept file what a user should know ("kept:progressive": the GPU's hardware decoder does not take it).
Runs in a pack worker, like `run_job`: the tiles cost CPU where the decodes do."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import numpy as np

from ..format.crc import crc32
from ..format.imageformats import JPEG, NPY, TILES, MemberError, jpeg_frame, jpeg_refusal
from ..format.members import Member
from ..format.samples import StoredImage
from ..format.tiles import encode_tiles
from ..folders.decode import CROP, Header, is_array, quiet_stderr
from .jobs import IMAGE, Job, JobResult, run_job

TILED = "tiles:"  # a note's prefix: the image was stored as tiles; what follows says why its file was not kept
DECODED = "decoded:"  # a note's prefix: the image was stored as pixels, for the reason that follows
KEPT = "kept:"  # a note's prefix: the JPEG file was kept as it is, and what follows is worth knowing of it
PROGRESSIVE = "progressive"  # that: a progressive JPEG, which a GPU's hardware decoder does not take
INCOMPRESSIBLE = "incompressible"  # the reason: its tiles were no smaller than its pixels (noise, say)
_MAGIC = ((b"\x89PNG", "PNG"), (b"II*\0", "TIFF"), (b"MM\0*", "TIFF"), (b"BM", "BMP"), (b"GIF8", "GIF"))


def file_kind(path: Path, head: bytes) -> str:
    """What a file that is not a JPEG is, in the report's words, from its first bytes (`head`)."""
    if is_array(path):
        return ".npy"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WebP"
    if head[:1] == b"P" and head[1:2] in (b"1", b"2", b"3", b"4", b"5", b"6"):
        return "PNM"
    return next((name for magic, name in _MAGIC if head.startswith(magic)), path.suffix.lstrip(".").upper() or "image")


def _kept(path: Path, hw: tuple[int, int], crc: int) -> tuple[StoredImage | None, str | None]:
    """(member, note): the JPEG file at `path` as a `jpeg` member, once its bytes decode through the readers'
    `decode_jpeg` to the pixels whose CRC-32 is `crc` (what the decoded pack stores), with what a user should know of
    it ("kept:progressive") or None; else (None, why it is not kept as its file)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(16)
            data = head + fh.read() if head.startswith(b"\xff\xd8\xff") else None
    except OSError:
        return None, "unreadable"
    if data is None:
        return None, file_kind(path, head)
    frame = jpeg_frame(data)
    why = jpeg_refusal(data, hw, frame)
    if why is not None:
        return None, why
    try:
        with quiet_stderr:  # libjpeg's warnings on a damaged stream, as in a decoded pack
            pixels = JPEG.decode(np.frombuffer(data, np.uint8), Member(), *hw)
    except MemberError:
        return None, "JPEG that does not decode"
    # the file read here is the file the decoded pixels came from, decoded alike (not changed since, say)
    if crc32(pixels) != crc:
        return None, "JPEG whose decode differs from pack's"
    return StoredImage(JPEG, data), (KEPT + PROGRESSIVE if frame.progressive else None)


def _lossless(npy: bytes, why: str) -> tuple[StoredImage, str]:
    """(member, note) of an image not kept as its file (`why`), from the .npy file a decoded pack stores: its tiles
    (decoded exactly, so they need no check here: readers compare the decode with the index's CRC-32), or that .npy
    where the tiles are no smaller."""
    pixels = np.load(io.BytesIO(npy), allow_pickle=False)
    tiles = encode_tiles(pixels)
    if len(tiles) < pixels.nbytes:
        return StoredImage(TILES, tiles), TILED + why
    return StoredImage(NPY, npy), DECODED + INCOMPRESSIBLE


def _member(job: Job, path: Path | None, header, as_: str, scale: int, frame, crc: int):
    """(StoredImage, note) of one side's image (None, None for a side the job does not store)."""
    if path is None:
        return None, None
    hw = header.hw if isinstance(header, Header) else tuple(header)
    out_hw = (job.out_hw[0] * scale, job.out_hw[1] * scale)
    if as_ != IMAGE or out_hw != hw:
        return _lossless(frame, "camera raw" if as_ != IMAGE else "cropped" if job.fit == CROP else "resized")
    member, note = _kept(path, hw, crc)
    return (member, note) if member is not None else _lossless(frame, note)


def run_encoded_job(job: Job) -> JobResult:
    """Store one pair of an encoded pack (see the module): its frames are `StoredImage`s, its notes those of
    `run_job` and how an image not kept as its file was stored, and why ("low:tiles:PNG"). Errors come back as from
    `run_job`."""
    res = run_job(job)
    if res.error is not None:
        return res
    low, low_why = _member(job, job.low, job.low_hw, job.low_as, 1, res.low_frame, res.crc_low)
    high, high_why = _member(job, job.high, job.high_hw, job.high_as, job.scale, res.high_frame, res.crc_high)
    notes = res.notes + tuple(f"{side}:{why}" for side, why in (("low", low_why), ("high", high_why)) if why)
    return dataclasses.replace(res, low_frame=low, high_frame=high, notes=notes)
