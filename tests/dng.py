"""The DNG writer the tests use, `benchlib.rawdata.write_dng` (benchmarks/benchlib; the raw benchmark writes its
data with it): a real CFA DNG that LibRaw reads bit-exactly, so camera raw decoding is tested on files built in
tmp_path."""

from benchlib.rawdata import CFA, CFA_CODES, write_dng  # noqa: F401
