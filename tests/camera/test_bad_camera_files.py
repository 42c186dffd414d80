"""Bad camera raw files are refused by name, never half-read (#46): truncated, stripped or zeroed image data, a
LinearRaw DNG, a JPEG renamed to a raw extension and an empty file, each through the header probe or the decode and
through a real `pairload pack` (exit 1, one line naming the file); a dark frame still packs; the probe decodes
nothing. Real DNG bytes in tmp_path, read by rawpy/LibRaw."""

import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("rawpy")
tifffile = pytest.importorskip("tifffile")

from dng import write_dng, write_linear_dng  # noqa: E402
from test_camera import coded_mosaic  # noqa: E402

from pairload.errors import ImageError  # noqa: E402
from pairload.pack.writer import PackOptions, pack  # noqa: E402
from pairload.camera.files import develop, probe, read_mosaic  # noqa: E402

SENSOR = (24, 40)
SHORT, LONG = "00001_00_0.1s", "00001_00_10s"


def good_dng(path, size=SENSOR):
    write_dng(path, coded_mosaic(0, *size), "RGGB", black=512, exposure=0.1)
    return path.read_bytes()


def strip_counts(path):
    with tifffile.TiffFile(path) as tif:
        tag = tif.pages[0].tags["StripByteCounts"]
        return tag.valueoffset, tif.pages[0].dataoffsets[0], tif.pages[0].databytecounts[0]


def cut(tmp_path, name, fraction):
    good = good_dng(tmp_path / "good.dng")
    path = tmp_path / name
    path.write_bytes(good[:int(len(good) * fraction)])
    return path


def after_header(tmp_path, name):
    good = good_dng(tmp_path / "good.dng")
    _, data_at, _ = strip_counts(tmp_path / "good.dng")
    (tmp_path / name).write_bytes(good[:data_at])
    return tmp_path / name


def zeroed(tmp_path, name):
    good = bytearray(good_dng(tmp_path / "good.dng"))
    _, data_at, count = strip_counts(tmp_path / "good.dng")
    good[data_at:data_at + count] = bytes(count)
    (tmp_path / name).write_bytes(bytes(good))
    return tmp_path / name


def no_strip_bytes(tmp_path, name):
    good = bytearray(good_dng(tmp_path / "good.dng"))
    at, _, _ = strip_counts(tmp_path / "good.dng")
    good[at:at + 4] = bytes(4)  # StripByteCounts = 0: the data stripped, the header kept
    (tmp_path / name).write_bytes(bytes(good))
    return tmp_path / name


def zero_tail(tmp_path, name):
    mosaic = coded_mosaic(0, *SENSOR)
    mosaic[12:] = 0  # LibRaw's padding of a file cut short: the last rows zero
    write_dng(tmp_path / name, mosaic, "RGGB", black=512)
    return tmp_path / name


def constant(tmp_path, name):
    write_dng(tmp_path / name, np.full(SENSOR, 1234, np.uint16), "RGGB", black=512)
    return tmp_path / name


def linear(tmp_path, name):
    write_linear_dng(tmp_path / name, coded_mosaic(0, 24, 120).reshape(24, 40, 3))
    return tmp_path / name


def jpeg(tmp_path, name):
    from PIL import Image

    Image.fromarray(np.zeros((24, 40, 3), np.uint8)).save(tmp_path / name, format="JPEG")
    return tmp_path / name


def empty(tmp_path, name):
    (tmp_path / name).write_bytes(b"")
    return tmp_path / name


TRUNCATED = r"truncated or unreadable: (LibRaw says '.+'|its header puts image data up to byte [\d,]+ but the file " \
            r"holds [\d,]+ bytes); re-copy the file"
MISSING = r"image data missing or cut short: "
BAD = [
    ("cut at 10%", lambda p, n: cut(p, n, 0.1), ".dng", TRUNCATED),
    ("cut at 50%", lambda p, n: cut(p, n, 0.5), ".dng", TRUNCATED),
    ("cut at 90%", lambda p, n: cut(p, n, 0.9), ".dng", TRUNCATED),
    ("cut after the header", after_header, ".dng", TRUNCATED),
    ("strip data zeroed", zeroed, ".dng", MISSING + r"24 of 24 rows are zero"),
    ("strip byte count 0", no_strip_bytes, ".dng", MISSING + r"its 40x24 image of 16 bits a pixel needs 1,920 bytes "
                                                             r"but its strips hold 0"),
    ("last rows zero", zero_tail, ".dng", MISSING + r"12 of 24 rows are zero \(the first is row 12\)"),
    ("constant frame", constant, ".dng", r"image data missing or overwritten: every value of its 40x24 mosaic is "
                                         r"1234, and a sensor never records a frame without noise"),
    ("LinearRaw", linear, ".dng", r"not a Bayer mosaic \(LinearRaw / 3-channel / X-Trans / Foveon\): .*export it to "
                                  r"DNG with a Bayer CFA"),
    ("JPEG as .dng", jpeg, ".dng", r"LibRaw cannot read it as a camera raw file: unsupported by LibRaw"),
    ("JPEG as .ARW", jpeg, ".ARW", r"LibRaw cannot read it as a camera raw file: unsupported by LibRaw"),
    ("empty .NEF", empty, ".NEF", r"file is empty \(0 bytes\); re-copy the file"),
]


@pytest.mark.parametrize("kind, make, ext, message", BAD, ids=[b[0] for b in BAD])
def test_a_bad_raw_file_is_refused_by_name_when_read(tmp_path, kind, make, ext, message):
    path = make(tmp_path, SHORT + ext)
    with pytest.raises(ImageError, match=rf"{SHORT}\{ext}: {message}"):
        probe(path)
        read_mosaic(path)  # what the header cannot tell, the decode does
    with pytest.raises(ImageError, match=rf"{SHORT}\{ext}: {message}"):
        develop(path)  # never a developed target from it either


@pytest.mark.parametrize("kind, make, ext, message", BAD, ids=[b[0] for b in BAD])
def test_pack_refuses_a_bad_raw_file_in_one_line(tmp_path, kind, make, ext, message):
    for side in ("short", "long"):
        (tmp_path / "r" / side).mkdir(parents=True)
    good_dng(tmp_path / "r" / "long" / f"{LONG}.dng")
    make(tmp_path, SHORT + ext).rename(tmp_path / "r" / "short" / (SHORT + ext))
    res = subprocess.run([sys.executable, "-m", "pairload.cli", "pack", tmp_path / "r", tmp_path / "out",
                          "--workers", "1"], capture_output=True, text=True)
    assert res.returncode == 1, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and f"short/{SHORT}{ext}: " in lines[0], res.stderr
    assert "Traceback" not in res.stderr and "please report" not in res.stderr
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_a_dark_frame_still_packs(tmp_path):
    """A lens-cap frame: the black level and read noise, no signal; nothing about it is missing."""
    rng = np.random.default_rng(0)
    dark = np.clip(np.rint(512 + 3.0 * rng.standard_normal((64, 40))), 0, 16383).astype(np.uint16)
    for side in ("short", "long"):
        (tmp_path / "r" / side).mkdir(parents=True)
    write_dng(tmp_path / "r" / "short" / f"{SHORT}.dng", dark, "RGGB", black=512, exposure=0.1)
    good_dng(tmp_path / "r" / "long" / f"{LONG}.dng", size=(64, 40))
    np.testing.assert_array_equal(read_mosaic(tmp_path / "r" / "short" / f"{SHORT}.dng").packed[..., 0],
                                  dark[0::2, 0::2])
    pack(tmp_path / "r", tmp_path / "out", PackOptions(workers=1))
    assert (tmp_path / "out" / "manifest.json").exists()


def test_the_probe_reads_the_header_only(tmp_path):
    """The probe answers what the decode answers (size, pattern, exposure) at a small fraction of its cost."""
    path = tmp_path / "big.dng"
    write_dng(path, coded_mosaic(0, 2000, 3000), "GBRG", black=512, exposure=0.1)

    def best(fn):
        times = []
        for _ in range(3):
            start = time.perf_counter()
            fn(path)
            times.append(time.perf_counter() - start)
        return min(times)

    info, mosaic = probe(path), read_mosaic(path)
    assert (info.pattern, info.exposure, info.packed_hw) == (mosaic.pattern, mosaic.exposure, mosaic.packed.shape[:2])
    assert best(probe) < 0.2 * best(read_mosaic)
