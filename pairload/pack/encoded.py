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

from ..format.imageformats import JPEG, NPY, TILES, jpeg_frame, jpeg_refusal
from ..format.samples import StoredImage
from ..format.tiles import encode_tiles
from ..errors import ImageError
from ..folders.decode import CROP, Header, is_array, read_bytes
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


def _kept(path: Path, data: np.ndarray | None, hw: tuple[int, int],
          converted: bool) -> tuple[StoredImage | None, str | None]:
    """(member, note): the JPEG file at `path` as a `jpeg` member, with what a user should know of it
    ("kept:progressive") or None; else (None, why it is not kept as its file). `data`: its bytes (uint8), those pack
    decoded (None: a .npy array, which pack loads, not decodes); `converted`: that decode converted the pixels (grey,
    alpha, 16-bit).

    A JPEG that `jpeg_refusal` takes decodes through the readers' `decode_jpeg` to the very pixels pack stored for
    it, unconverted: both are OpenCV's decode of the same bytes, as stored (EXIF orientation ignored), BGR to RGB. So
    they are not decoded again here."""
    if data is None:
        return None, file_kind(path, b"")
    head = bytes(data[:16])
    if not head.startswith(b"\xff\xd8\xff"):
        return None, file_kind(path, head)
    raw = data.tobytes()  # (the frame's parser reads bytes)
    frame = jpeg_frame(raw)
    why = jpeg_refusal(raw, hw, frame)
    if why is not None:
        return None, why
    if converted:  # not reached: a JPEG that jpeg_refusal takes decodes to 8-bit colour
        return None, "JPEG whose decode differs from pack's"
    return StoredImage(JPEG, raw), (KEPT + PROGRESSIVE if frame.progressive else None)


def _lossless(npy: bytes, why: str) -> tuple[StoredImage, str]:
    """(member, note) of an image not kept as its file (`why`), from the .npy file a decoded pack stores: its tiles
    (decoded exactly, so they need no check here: readers compare the decode with the index's CRC-32), or that .npy
    where the tiles are no smaller."""
    pixels = np.load(io.BytesIO(npy), allow_pickle=False)
    tiles = encode_tiles(pixels)
    if len(tiles) < pixels.nbytes:
        return StoredImage(TILES, tiles), TILED + why
    return StoredImage(NPY, npy), DECODED + INCOMPRESSIBLE


def _member(job: Job, path: Path | None, header, as_: str, scale: int, frame, read: dict, converted: bool):
    """(StoredImage, note) of one side's image (None, None for a side the job does not store); `read`: the bytes of
    the job's files pack decoded, by path; `converted`: the side's decode converted its pixels."""
    if path is None:
        return None, None
    hw = header.hw if isinstance(header, Header) else tuple(header)
    out_hw = (job.out_hw[0] * scale, job.out_hw[1] * scale)
    if as_ != IMAGE or out_hw != hw:
        return _lossless(frame, "camera raw" if as_ != IMAGE else "cropped" if job.fit == CROP else "resized")
    member, note = _kept(path, read.get(path), hw, converted)
    return (member, note) if member is not None else _lossless(frame, note)


def _read(job: Job) -> dict:
    """The bytes of the job's image files that could be kept as they are (decoded as images at their own size), by
    path: read once, decoded by `run_job` and kept from the same bytes. A file that cannot be read here is left to
    `run_job`, which names it."""
    out = {}
    for path, as_ in ((job.low, job.low_as), (job.high, job.high_as)):
        if path is not None and as_ == IMAGE and not is_array(path):
            try:
                out[path] = read_bytes(path)
            except ImageError:
                pass
    return out


def run_encoded_job(job: Job) -> JobResult:
    """Store one pair of an encoded pack (see the module): its frames are `StoredImage`s, its notes those of
    `run_job` and how an image not kept as its file was stored, and why ("low:tiles:PNG"). Errors come back as from
    `run_job`."""
    read = _read(job)
    res = run_job(job, read)
    if res.error is not None:
        return res
    low, low_why = _member(job, job.low, job.low_hw, job.low_as, 1, res.low_frame, read, _converted(res, "low"))
    high, high_why = _member(job, job.high, job.high_hw, job.high_as, job.scale, res.high_frame, read,
                             _converted(res, "high"))
    notes = res.notes + tuple(f"{side}:{why}" for side, why in (("low", low_why), ("high", high_why)) if why)
    return dataclasses.replace(res, low_frame=low, high_frame=high, notes=notes)


def _converted(res: JobResult, side: str) -> bool:
    """The side's decode converted its pixels (`decode_rgb`'s notes: grey to RGB, alpha dropped, 16-bit to 8)."""
    return any(note in res.notes for note in (f"{side}:gray", f"{side}:alpha", f"{side}:16bit"))
