"""Camera raw decoding (pairload.camera.files) on real DNG files written in tmp_path: the packed mosaic bit-exact in
every Bayer offset, the levels and metadata, LibRaw's development, the refusals, and SID's exposures and ratio."""

import sys

import numpy as np
import pytest

pytest.importorskip("rawpy")
pytest.importorskip("tifffile")

from dng import write_dng  # noqa: E402

from pairload.errors import ConfigError, ImageError, MissingDependencyError  # noqa: E402
from pairload.camera.files import develop, exposure_from_name, ratio, read_mosaic  # noqa: E402

BLACKS = (500, 510, 520, 530)  # one per 2×2 site, row by row: a channel given another's level shows
WHITE = 16383


def coded_mosaic(pair: int, height: int, width: int) -> np.ndarray:
    """Every sample says where it came from: its pair, row, column and site in the 2×2 cell."""
    row, col = np.mgrid[:height, :width]
    site = (row % 2) * 2 + col % 2
    return (max(BLACKS) + (((pair * 64 + row) * 64 + col) * 4 + site) % (WHITE - max(BLACKS))).astype(np.uint16)


def sid_pack(mosaic: np.ndarray, pattern: str) -> tuple[np.ndarray, list[int]]:
    """SID's packing written out for the test: channels R, G of R's row, B, G of B's row; with each one's site."""
    cells = {(r, c): pattern[r * 2 + c] for r in (0, 1) for c in (0, 1)}
    (r_row, r_col), = [s for s, letter in cells.items() if letter == "R"]
    sites = [(r_row, r_col), (r_row, 1 - r_col), (1 - r_row, 1 - r_col), (1 - r_row, r_col)]
    assert [cells[s] for s in sites] == list("RGBG")
    h, w = mosaic.shape[0] // 2 * 2, mosaic.shape[1] // 2 * 2
    packed = np.stack([mosaic[r:h:2, c:w:2] for r, c in sites], axis=-1)
    return packed, [r * 2 + c for r, c in sites]


@pytest.mark.parametrize("pair, pattern, shape", [(0, "RGGB", (24, 32)), (1, "BGGR", (23, 33)),
                                                  (2, "GRBG", (25, 32)), (3, "GBRG", (24, 35))])
def test_the_mosaic_is_packed_r_g_b_g_bit_exactly_in_every_bayer_offset(tmp_path, pair, pattern, shape):
    import rawpy

    mosaic = coded_mosaic(pair, *shape)
    path = tmp_path / f"{pair:05d}_00_0.04s.dng"
    write_dng(path, mosaic, pattern, black=BLACKS, white=WHITE, exposure=0.04, make="Sony", model="ILCE-7S")
    got = read_mosaic(path)
    expected, sites = sid_pack(mosaic, pattern)
    assert got.packed.dtype == np.uint16 and got.packed.shape == (shape[0] // 2, shape[1] // 2, 4)
    np.testing.assert_array_equal(got.packed, expected)
    assert got.black == tuple(BLACKS[s] for s in sites) and got.white == WHITE
    assert got.pattern == pattern and got.camera == "Sony ILCE-7S" and got.exposure == 0.04
    assert got.libraw == ".".join(map(str, rawpy.libraw_version))


def test_a_file_without_exposure_or_make_says_none(tmp_path):
    write_dng(tmp_path / "a.dng", coded_mosaic(0, 24, 24), "RGGB", black=512, make="", model="")
    got = read_mosaic(tmp_path / "a.dng")
    assert got.exposure is None and got.black == (512,) * 4
    assert got.camera is None


def _flat(tmp_path, level: int, neutral=(0.5, 1.0, 0.5)) -> np.ndarray:
    path = tmp_path / f"flat{level}_{neutral[0]}.dng"
    mosaic = np.full((24, 32), level, np.uint16)
    mosaic[-2:, -2:] -= 1  # one cell off the level: a constant frame is refused as data missing
    write_dng(path, mosaic, "RGGB", black=512, white=WHITE, neutral=neutral)
    rgb = develop(path)
    assert rgb.dtype == np.uint16 and rgb.shape == (24, 32, 3)
    top = rgb[:12, :16]  # away from the odd cell
    assert all(np.unique(top[..., k]).size == 1 for k in range(3)), "a flat mosaic develops flat in each channel"
    return rgb[0, 0].astype(int)


def test_develop_keeps_the_levels_no_auto_brightness_and_uses_the_camera_white_balance(tmp_path):
    assert _flat(tmp_path, WHITE).tolist() == [65535] * 3
    assert _flat(tmp_path, 512).tolist() == [0] * 3
    dim, dimmer = _flat(tmp_path, 4000), _flat(tmp_path, 2000)
    # auto-brightness would stretch both to the same picture (its red saturated); here darker stays darker
    assert (dimmer < dim).all() and dim.max() < 65535
    # AsShotNeutral (0.5, 1, 0.5) means red and blue gain 2x over a neutral camera's: the camera's balance is used
    plain = _flat(tmp_path, 2000, neutral=(1.0, 1.0, 1.0))
    assert dimmer[0] > plain[0] and dimmer[2] > plain[2]


def test_x_trans_is_refused_by_name(tmp_path):
    xtrans = "GGRGGB" "GGBGGR" "BRGRBG" "GGBGGR" "GGRGGB" "RBGBRG"
    path = tmp_path / "DSCF0001.dng"
    write_dng(path, coded_mosaic(0, 36, 36), xtrans)
    with pytest.raises(ImageError, match=r"DSCF0001\.dng: not a Bayer mosaic .*: Fuji X-Trans .* not supported yet"):
        read_mosaic(path)


def test_files_libraw_cannot_read_are_named(tmp_path):
    from PIL import Image

    png = tmp_path / "00001_00_10s.ARW"
    Image.fromarray(np.zeros((24, 24, 3), np.uint8)).save(png, format="PNG")
    with pytest.raises(ImageError, match=r"00001_00_10s\.ARW: LibRaw cannot read it as a camera raw file: "
                                         r"unsupported by LibRaw .* \(LibRaw says .+\)"):
        read_mosaic(png)
    good = tmp_path / "whole.dng"
    write_dng(good, coded_mosaic(0, 24, 32))
    cut = tmp_path / "cut.dng"
    cut.write_bytes(good.read_bytes()[:-700])
    with pytest.raises(ImageError, match=r"cut\.dng: truncated or unreadable"):
        read_mosaic(cut)
    with pytest.raises(ImageError, match=r"cut\.dng: truncated or unreadable"):
        develop(cut)
    with pytest.raises(ImageError, match=r"gone\.dng: no such file"):
        read_mosaic(tmp_path / "gone.dng")


def test_a_missing_rawpy_names_the_extra(tmp_path, monkeypatch):
    write_dng(tmp_path / "a.dng", coded_mosaic(0, 24, 32))
    monkeypatch.setitem(sys.modules, "rawpy", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'pairload\[raw\]'"):
        read_mosaic(tmp_path / "a.dng")


@pytest.mark.parametrize("name, seconds", [("00001_00_0.04s.ARW", 0.04), ("00001_00_10s.ARW", 10.0),
                                           ("/data/Sony/short/10003_07_0.1s.ARW", 0.1), ("20208_00_0.033s.RAF", 0.033),
                                           ("00001_00_10s", 10.0), ("00001_00_10.ARW", None), ("IMG_0001.CR2", None),
                                           ("00001_00_0.04s_x.ARW", None)])
def test_sid_names_give_exposures(name, seconds):
    assert exposure_from_name(name) == seconds


def test_the_ratio_is_target_over_input_capped_at_300():
    assert ratio(0.1, 10) == 100.0 and ratio(0.04, 10) == pytest.approx(250.0)
    assert ratio(0.033, 10) == 300.0 and ratio(0.1, 30, cap=250) == 250.0
    with pytest.raises(ConfigError, match=r"input_s=0: expected a positive number of seconds"):
        ratio(0, 10)
