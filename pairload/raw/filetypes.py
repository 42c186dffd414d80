"""Which files under RAW pack reads, by extension: the images it decodes (`.npy` arrays among them, packed as they
are), raw sensor files and arrays it cannot, other image formats it does not, and text files that may list pairs;
and how to convert the ones it cannot read.
"""

from __future__ import annotations

NUMPY_EXTS = frozenset({".npy"})  # H×W×C uint8/uint16 arrays (SMID/SDSD `_np` releases), stored as they are
IMAGE_EXTS = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".pnm"}) | NUMPY_EXTS
SENSOR_EXTS = frozenset({".arw", ".raf", ".cr2", ".cr3", ".nef", ".dng", ".rw2", ".orf", ".mat", ".raw"})
ARRAY_EXTS = frozenset({".mat"})
# image files pack does not read: never dropped in silence, reported with the reason
OTHER_IMAGE_EXTS = frozenset({".gif", ".heic", ".heif", ".avif", ".jxl", ".jp2", ".j2k", ".jpx", ".jpe", ".jfif",
                              ".exr", ".hdr", ".pfm", ".pbm", ".tga", ".psd", ".ico", ".svg", ".qoi", ".dds",
                              ".sr", ".ras", ".pxm", ".xcf"})
IMAGE_LIKE_EXTS = IMAGE_EXTS | SENSOR_EXTS | OTHER_IMAGE_EXTS
LIST_EXTS = frozenset({".txt", ".tsv", ".csv", ".lst", ".list"})


def conversion(exts) -> str:
    """How to turn raw sensor files or arrays with these extensions into images pack reads."""
    arrays = sorted(e for e in exts if e in ARRAY_EXTS)
    sensor = sorted(e for e in exts if e not in ARRAY_EXTS)
    how = []
    if sensor:
        how.append(f"{', '.join(sensor)}: raw sensor files must be converted to RGB images first, e.g. with rawpy "
                   "(`rawpy.imread(f).postprocess(output_bps=16)`, written as 16-bit PNG) or dcraw (`dcraw -T -6`), "
                   "and then paired")
    if arrays:
        how.append(f"{', '.join(arrays)}: arrays, one image each: save each as .npy, which pack stores as it is "
                   "(`np.save(name + '.npy', scipy.io.loadmat(f)[KEY])` for an H×W×C uint8 or uint16 array; floats "
                   "in 0..1: `(a * 255).round().astype(np.uint8)` first), keeping the low/high folders")
    return "; ".join(how)
