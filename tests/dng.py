"""The DNG writer the tests use, `benchlib.rawdata.write_dng` (benchmarks/benchlib; the raw benchmark writes its
data with it): a real CFA DNG that LibRaw reads bit-exactly, so camera raw decoding is tested on files built in
tmp_path."""

from benchlib.rawdata import CFA, CFA_CODES, write_dng  # noqa: F401


def write_linear_dng(path, rgb) -> None:
    """A LinearRaw DNG (PhotometricInterpretation 34892, 3 samples a pixel, as Apple ProRAW and demosaiced DNGs
    are): `rgb` H×W×3 uint16, one uncompressed strip. No Bayer mosaic for pairload to pack."""
    import numpy as np
    import tifffile

    tags = [(271, "s", 0, "Pairload", True), (272, "s", 0, "Linear", True), (50706, "B", 4, (1, 4, 0, 0), True),
            (50707, "B", 4, (1, 1, 0, 0), True), (50708, "s", 0, "Pairload Linear", True),
            (50717, "I", 1, 65535, True), (50721, "2i", 9, (1, 1, 0, 1, 0, 1, 0, 1, 1, 1, 0, 1, 0, 1, 0, 1, 1, 1),
                                           True)]
    tifffile.imwrite(path, np.ascontiguousarray(rgb, dtype=np.uint16), photometric=34892, extratags=tags,
                     metadata=None, planarconfig="contig", compression=None)
