"""Which GPU decoders an encoded split needs and whether they are here: `formats_in` (the image formats of a split's
members), `decoder_missing` (why the GPU cannot decode them here: nvImageCodec for JPEG files, nvCOMP for lossless
tiles), `gpu_decoders` (nvImageCodec's JPEG decoders in this process), and `JPEG_TOLERANCE`, how far a GPU's JPEG
decode may differ from libjpeg-turbo's."""

from __future__ import annotations

import importlib.util

import numpy as np
import torch

from ...errors import LoaderError
from ...format import imageformats
from ...workers.jpegs import JpegDecoders

# levels a GPU decode of a JPEG may differ from libjpeg-turbo's (OpenCV's); measured on an H200 (2026-11-28): the
# hardware engine at most 1 (on 0.014% of pixels), the hybrid decoder at most 3 (on 3%)
JPEG_TOLERANCE = 3


def decoder_missing(ds=None) -> str | None:
    """Why the GPU cannot decode `ds`'s encoded members here (None: it can): nvImageCodec for JPEG files (all that
    is asked where `ds` is None), nvCOMP's library for lossless tiles."""
    formats = formats_in(ds) if ds is not None else {imageformats.JPEG}
    if imageformats.TILES in formats:
        from .nvcomp import nvcomp_missing

        why = nvcomp_missing()
        if why:
            return why
    if imageformats.JPEG not in formats:
        return None
    try:  # found, not imported: the decode process imports it (1 s), this one only where it decodes itself
        found = importlib.util.find_spec("nvidia.nvimgcodec") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return ("nvImageCodec is not installed; `pip install nvidia-nvimgcodec-cu13` (or -cu12, as your CUDA) "
                "decodes the JPEG members on the GPU")
    return None


def formats_in(ds) -> set:
    """The image formats (`imageformats.FORMATS`) of the members of `ds` (a split or a mix of them)."""
    found = set()
    for part in getattr(ds, "sources", [ds]):
        idx = part.index
        if idx.encoding.per_member:  # a count per code: one pass over the index's columns, no sort
            counts = np.bincount(idx.low_kind, minlength=256) + np.bincount(idx.high_kind, minlength=256)
            found |= {imageformats.of_code(int(c)) for c in np.flatnonzero(counts)}
        else:
            found.add(imageformats.NPY)
    return found


def gpu_decoders(device: torch.device) -> JpegDecoders:
    """nvImageCodec's JPEG decoders for `device` (`JpegDecoders`), in this process."""
    try:
        from nvidia import nvimgcodec
    except Exception as exc:  # noqa: BLE001 - found (`decoder_missing`) but not loadable
        raise LoaderError(f"nvImageCodec cannot be imported ({type(exc).__name__}: {exc}); reinstall "
                          "nvidia-nvimgcodec-cu13 (or -cu12, as your CUDA)") from None
    return JpegDecoders(nvimgcodec, device.index or 0)
