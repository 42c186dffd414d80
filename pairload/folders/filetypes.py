"""Which files under RAW pack reads, by extension: the images it decodes (`.npy` arrays among them, packed as they
are, and camera raw files, read through LibRaw), arrays it cannot, other image formats it does not, and text files
that may list pairs; and how to convert the arrays it cannot read.
"""

from __future__ import annotations

NUMPY_EXTS = frozenset({".npy"})  # H×W×C uint8/uint16 arrays (SMID/SDSD `_np` releases), stored as they are
# LibRaw's common raw formats (its own list is far longer; these are the ones cameras write today), read with rawpy
CAMERA_RAW_EXTS = frozenset({".arw", ".srf", ".sr2", ".nef", ".nrw", ".cr2", ".cr3", ".crw", ".raf", ".dng", ".orf",
                             ".rw2", ".raw", ".pef", ".srw", ".3fr", ".fff", ".iiq", ".erf", ".kdc", ".dcr", ".mef",
                             ".mos", ".mrw", ".rwl", ".x3f", ".gpr"})
IMAGE_EXTS = (frozenset({".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".pnm"})
              | NUMPY_EXTS | CAMERA_RAW_EXTS)
# what pack reads, for messages: the image and array extensions, and camera raw as a family
READABLE = (", ".join(sorted(IMAGE_EXTS - CAMERA_RAW_EXTS)) + " and camera raw files (.arw, .cr2, .dng, .nef, .orf, "
            ".raf, .rw2, … through LibRaw)")
ARRAY_EXTS = frozenset({".mat"})  # arrays pack cannot read (MATLAB files): save them as .npy
# image files pack does not read: never dropped in silence, reported with the reason
OTHER_IMAGE_EXTS = frozenset({".gif", ".heic", ".heif", ".avif", ".jxl", ".jp2", ".j2k", ".jpx", ".jpe", ".jfif",
                              ".exr", ".hdr", ".pfm", ".pbm", ".tga", ".psd", ".ico", ".svg", ".qoi", ".dds",
                              ".sr", ".ras", ".pxm", ".xcf"})
IMAGE_LIKE_EXTS = IMAGE_EXTS | ARRAY_EXTS | OTHER_IMAGE_EXTS
LIST_EXTS = frozenset({".txt", ".tsv", ".csv", ".lst", ".list"})


def is_camera_raw(path) -> bool:
    return str(path).lower().endswith(tuple(CAMERA_RAW_EXTS))


def conversion(exts) -> str:
    """How to turn array files with these extensions into images pack reads."""
    arrays = sorted(e for e in exts if e in ARRAY_EXTS)
    return (f"{', '.join(arrays)}: arrays, one image each: save each as .npy, which pack stores as it is "
            "(`np.save(name + '.npy', scipy.io.loadmat(f)[KEY])` for an H×W×C uint8 or uint16 array; floats in 0..1: "
            "`(a * 255).round().astype(np.uint8)` first), keeping the low/high folders")
