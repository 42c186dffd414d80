"""Calibration (pairload.camera.calibrate, `pairload calibrate`) on frames made from a known noise model: packed
mosaics with Poisson shot noise of gain K, Tukey-λ read noise, row noise, a fixed pattern, unequal pixel
sensitivity, a colour bias and the black level, at three ISOs, as .npy files and as real DNG files read through
LibRaw. The fit must give the model back; frames of another gain must not pass for it; bad frames are refused by
name."""

import errno
import json
import math
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest

stats = pytest.importorskip("scipy.stats")

from pairload.cli import CALIBRATE_FLAGS, main  # noqa: E402
from pairload.errors import ConfigError, ImageError, OutputError, in_cli_terms  # noqa: E402
from pairload.camera.calibrate import (Frame, calibrate, check_measured, dark_noise, fit_profile,  # noqa: E402
                                      read_frame, save)
from pairload.degrade.profiles import load_profile  # noqa: E402

BLACK, WHITE = 512, 16383
BIAS = (0.3, -0.2, 0.5, 0.1)  # colour bias of channels R, G, B, G, DN
SIZE = 128  # packed side
LEVELS = (400, 1500, 4000)  # DN above black of the flats, two frames each


@dataclass(frozen=True)
class Model:
    """One ISO's noise: gain K (DN per electron), Tukey-λ read noise (shape lam, scale in DN), row σ (DN)."""

    iso: int
    k: float
    lam: float
    scale: float
    row: float

    @property
    def read_sigma(self) -> float:
        """σ of the read noise as stored in integer counts (Tukey-λ plus rounding)."""
        return math.sqrt(stats.tukeylambda.var(self.lam) * self.scale ** 2 + 1 / 12)


def model(iso: int, k: float, lam: float) -> Model:
    """The test camera: log read = 0.6 log K + 1.5, log row = 0.5 log K - 1 (natural logs, DN)."""
    return Model(iso=iso, k=k, lam=lam, scale=math.exp(0.6 * math.log(k) + 1.5), row=math.exp(0.5 * math.log(k) - 1))


CAMERA = (model(100, 0.5, -0.1), model(800, 2.0, 0.05), model(3200, 8.0, 0.14))


def frames(m: Model, *, darks: int = 16, levels=LEVELS, size: int = SIZE, seed: int = 0) -> tuple[list, list]:
    """(flats, darks) of one ISO: H×W×4 uint16 packed mosaics in sensor counts."""
    rng = np.random.default_rng([seed, m.iso])
    fixed = np.random.default_rng(99).normal(0, 2.0, (size, size, 4))  # fixed pattern: the same in every frame
    sensitivity = np.random.default_rng(98).normal(1, 0.01, (size, size, 4))

    def noise():
        read = stats.tukeylambda.rvs(m.lam, scale=m.scale, size=(size, size, 4), random_state=rng)
        rows = np.repeat(rng.normal(0, m.row, (size, 2)), 2, axis=1)  # one offset per sensor row: R G | B G
        return read + rows[:, None, :] + fixed + np.asarray(BIAS)

    def counts(signal):
        return np.clip(np.round(BLACK + signal + noise()), 0, WHITE).astype(np.uint16)

    flats = [counts(rng.poisson(level * sensitivity / m.k) * m.k) for level in levels for _ in range(2)]
    return flats, [counts(0.0) for _ in range(darks)]


def write_npy(root, m: Model, **kwargs):
    flats, darks = frames(m, **kwargs)
    for kind, images in (("flats", flats), ("darks", darks)):
        (root / kind).mkdir(parents=True, exist_ok=True)
        for i, image in enumerate(images):
            np.save(root / kind / f"{kind[:-1]}_iso{m.iso}_{i:02d}.npy", image)
    return root


def mismatches(report: dict, camera) -> list[str]:
    """Where the calibrated numbers are off the model's: K by 3%, read σ and Tukey-λ scale by 5%, λ by 0.05, row σ
    by 10%, colour bias by 0.2 DN."""
    wrong = []
    for got, m in zip(report["isos"], camera):
        for key, want, rel in (("K", m.k, 0.03), ("read_sigma", m.read_sigma, 0.05), ("read_scale", m.scale, 0.05),
                               ("row_sigma", m.row, 0.1)):
            if abs(got[key] / want - 1) > rel:
                wrong.append(f"ISO {m.iso}: {key} {got[key]:.4g}, model {want:.4g}")
        if abs(got["tukey_lambda"] - m.lam) > 0.05:
            wrong.append(f"ISO {m.iso}: tukey_lambda {got['tukey_lambda']:.3f}, model {m.lam}")
        if not np.allclose(got["color_bias"], BIAS, atol=0.2):
            wrong.append(f"ISO {m.iso}: color_bias {got['color_bias']}, model {BIAS}")
    return wrong


@pytest.fixture(scope="module")
def three_isos(tmp_path_factory):
    root = tmp_path_factory.mktemp("calibration")
    for m in CAMERA:
        write_npy(root, m)
    return root


def test_the_model_the_frames_were_made_from_comes_back(three_isos):
    profile, report = calibrate([three_isos / "flats"], [three_isos / "darks"], name="test", black=BLACK,
                                white=WHITE)
    assert [r["iso"] for r in report["isos"]] == [100, 800, 3200]
    assert mismatches(report, CAMERA) == []
    assert all(r["r2"] > 0.99 and r["pairs"] == 3 and r["black"] == [BLACK] * 4 for r in report["isos"])
    # the laws across ISOs: the model's slopes (0.6 and 0.5) and biases (1.5 and -1)
    assert profile.read.slope == pytest.approx(0.6, abs=0.05) and profile.read.bias == pytest.approx(1.5, abs=0.1)
    assert profile.row.slope == pytest.approx(0.5, abs=0.1) and profile.row.bias == pytest.approx(-1.0, abs=0.15)
    assert profile.k_range == pytest.approx((0.5, 8.0), rel=0.03)
    assert profile.tukey_lambda == pytest.approx((-0.1, 0.14), abs=0.05)
    assert profile.color_bias == pytest.approx(BIAS, abs=0.2)
    assert (profile.black_level, profile.white_level, profile.read_dist) == ((BLACK,) * 4, WHITE, "tukey")
    gaussian = fit_profile(report["isos"], name="g", read_dist="gaussian", camera=None, white=None)
    assert gaussian.tukey_lambda is None and float(gaussian.read.at(2.0)) == pytest.approx(CAMERA[1].read_sigma, 0.05)


def test_frames_of_twice_the_gain_do_not_pass_for_the_model(tmp_path):
    m = CAMERA[1]
    twice = Model(iso=m.iso, k=2 * m.k, lam=m.lam, scale=m.scale, row=m.row)
    write_npy(tmp_path, twice)
    profile, report = calibrate(tmp_path / "flats", tmp_path / "darks", name="one", black=BLACK, white=WHITE)
    assert [w.split(" ", 2)[2] for w in mismatches(report, [m])] == [f"K {report['isos'][0]['K']:.4g}, model 2"]
    assert report["isos"][0]["K"] == pytest.approx(4.0, rel=0.03)
    # one ISO: no slope to fit, the law is its value
    assert profile.log_k[0] == profile.log_k[1] and profile.read.slope == 0 and profile.read.spread == 0
    assert float(profile.read.at(1.0)) == pytest.approx(report["isos"][0]["read_scale"])


def test_real_dng_files_through_libraw(tmp_path):
    pytest.importorskip("rawpy")
    pytest.importorskip("tifffile")
    from dng import write_dng

    blacks = (500, 510, 520, 530)  # DNG order, row by row of RGGB: R, G of R's row, G of B's row, B
    m = CAMERA[1]
    flats, darks = frames(m)
    for kind, images in (("flats", flats), ("darks", darks)):
        (tmp_path / kind).mkdir()
        for i, image in enumerate(images):
            packed = image.astype(np.int32) - BLACK + np.array([500, 510, 530, 520])  # R, G, B, G
            mosaic = np.empty((2 * image.shape[0], 2 * image.shape[1]), np.uint16)
            mosaic[0::2, 0::2], mosaic[0::2, 1::2] = packed[..., 0], packed[..., 1]
            mosaic[1::2, 1::2], mosaic[1::2, 0::2] = packed[..., 2], packed[..., 3]
            write_dng(tmp_path / kind / f"{kind}_ISO800_{i}.dng", mosaic, "RGGB", black=blacks, white=WHITE,
                      fsync=False)
    profile, report = calibrate(tmp_path / "flats", tmp_path / "darks", name="dng")  # levels from the files
    assert report["camera"] == "Pairload Synthetic CFA" and report["isos"][0]["iso"] == 800
    assert report["isos"][0]["black"] == [500, 510, 530, 520]  # packed R, G, B, G
    assert mismatches(report, [m]) == []
    assert profile.black_level == (500, 510, 530, 520) and profile.white_level == WHITE
    other = tmp_path / "darks" / "darks_ISO800_other.dng"
    write_dng(other, mosaic, "RGGB", black=blacks, white=WHITE, model="Other CFA", fsync=False)
    with pytest.raises(ImageError, match=rf"^{other}: shot with 'Pairload Other CFA', but .* with 'Pairload Synthetic "
                                         "CFA'; calibrate one camera at a time"):
        calibrate(tmp_path / "flats", tmp_path / "darks", name="dng")


@pytest.fixture
def one_iso(tmp_path):
    return write_npy(tmp_path, CAMERA[1], darks=2, levels=(1500,))


def test_bad_frames_are_refused_naming_them(one_iso):
    flat = one_iso / "flats" / "flat_iso800_01.npy"
    np.save(flat, np.full((SIZE, SIZE, 4), WHITE, np.uint16))
    with pytest.raises(ImageError, match=rf"^{flat}: a saturated flat frame \(100.0% of its pixels at saturation\)"):
        calibrate(one_iso / "flats", one_iso / "darks", name="x", black=BLACK, white=WHITE)
    with pytest.raises(ImageError, match=rf"^{flat}: a saturated flat frame \(100.0% .*: shorten the exposure"):
        calibrate(one_iso / "flats", one_iso / "darks", name="x")  # no white level: piled on the maximum
    np.save(flat, np.load(one_iso / "darks" / "dark_iso800_00.npy"))
    with pytest.raises(ImageError, match=rf"^{flat}: too dark for a flat frame \(signal .* DN above the darks"):
        calibrate(one_iso / "flats", one_iso / "darks", name="x")
    np.save(flat, np.zeros((SIZE, SIZE - 2, 4), np.uint16))
    with pytest.raises(ImageError, match=rf"^{flat}: a packed mosaic of 126x128, but .*flat_iso800_00.npy is 128x128"):
        calibrate(one_iso / "flats", one_iso / "darks", name="x")
    np.save(flat, np.zeros((SIZE, SIZE, 3), np.uint16))
    with pytest.raises(ImageError, match=rf"^{flat}: a .npy of uint16 \(128, 128, 3\); calibrate reads packed mosaics"):
        calibrate(one_iso / "flats", one_iso / "darks", name="x")


def test_too_few_frames_or_a_curve_that_is_no_line_are_refused(one_iso, tmp_path):
    with pytest.raises(ConfigError, match=r"^ISO 800: 1 dark frame\(s\) \(.*dark_iso800_00.npy\); calibrate needs at "
                                          r"least 2 flat and 2 dark frames per ISO"):
        calibrate(one_iso / "flats", one_iso / "darks" / "dark_iso800_00.npy", name="x")
    # a brighter pair with less noise than the darker one: the curve goes down
    flats, _ = frames(CAMERA[1], darks=0, levels=(1500,))
    _, quiet = frames(Model(iso=800, k=2.0, lam=0.1, scale=0.5, row=0.0), darks=2)
    for i, image in enumerate([*flats, *(q + 6000 for q in quiet)]):
        np.save(one_iso / "flats" / f"flat_iso800_{i:02d}.npy", image)
    with pytest.raises(ImageError, match=r"flat_iso800_00.npy: the photon transfer curve of ISO 800 is not an "
                                         r"increasing line \(slope -"):
        calibrate(one_iso / "flats", one_iso / "darks", name="x")
    with pytest.raises(ConfigError, match=r"no ISO in its metadata or name; .*give one for all frames with iso="):
        np.save(tmp_path / "a.npy", flats[0])
        calibrate([tmp_path / "a.npy"], one_iso / "darks", name="x")


def test_the_iso_comes_from_the_name_the_folders_or_the_option(tmp_path):
    frame = tmp_path / "cam" / "ISO-1600" / "dark" / "0001.npy"
    frame.parent.mkdir(parents=True)
    np.save(frame, np.zeros((8, 8, 4), np.uint16))
    assert read_frame(frame, where=tmp_path / "cam" / "ISO-1600").iso == 1600  # the folder given
    assert read_frame(frame, where=tmp_path / "cam").iso == 1600  # a folder under it
    assert read_frame(frame, iso=200).iso == 200  # a file given itself: its own folder only, then the option
    named = frame.rename(frame.with_name("dark_iso400_1.npy"))
    assert read_frame(named, where=tmp_path, iso=200).iso == 400  # the name first


def run(capsys, *args):
    """`pairload ARGS` in this process, through the command's own error boundary: (exit code, stdout, stderr)."""
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_command_prints_the_table_and_writes_the_profile(three_isos, tmp_path, capsys):
    code, out, err = run(capsys, "calibrate", "--flats", three_isos / "flats", "--darks", three_isos / "darks", "-o",
                         tmp_path / "c.json", "--black", BLACK, "--white", WHITE, "--report", tmp_path / "r.json")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["ISO", "K", "DN/e-"] and [line.split()[0] for line in lines[1:4]] == \
        ["100", "800", "3200"]
    assert lines[-1].startswith(f"wrote {tmp_path / 'c.json'}: c: K 0.5")
    profile = load_profile(tmp_path / "c.json")
    assert profile.name == "c" and profile.read.slope == pytest.approx(0.6, abs=0.05)
    assert [r["iso"] for r in json.loads((tmp_path / "r.json").read_text())["isos"]] == [100, 800, 3200]


def test_the_command_refuses_bad_frames_in_one_line(one_iso, tmp_path, capsys):
    flat = one_iso / "flats" / "flat_iso800_00.npy"
    np.save(flat, np.full((SIZE, SIZE, 4), WHITE, np.uint16))
    code, out, err = run(capsys, "calibrate", "--flats", one_iso / "flats", "--darks", one_iso / "darks", "-o",
                         tmp_path / "c.json", "--white", WHITE)
    assert code == 1 and err.startswith(f"error: {flat}: a saturated flat frame") and len(err.splitlines()) == 1
    assert not (tmp_path / "c.json").exists()
    code, out, err = run(capsys, "calibrate", "--flats", tmp_path / "nothing", "--darks", one_iso / "darks", "-o",
                         tmp_path / "c.json")
    assert code == 1 and err == f"error: --flats {tmp_path / 'nothing'}: no such file or folder; check the path\n"


def test_flats_and_darks_given_the_wrong_way_round_are_named_as_such(one_iso, tmp_path, capsys):
    flats, darks = one_iso / "flats", one_iso / "darks"
    with pytest.raises(ConfigError, match=rf"^the darks look like flats \(darks={flats}: mean 2012\.\d+ DN; "
                                          rf"flats={darks}: mean 512\.\d+ DN\) — did you swap flats and darks\?; give "
                                          "the lens-capped frames as darks and the lit ones as flats$"):
        calibrate(darks, flats, name="x")
    code, out, err = run(capsys, "calibrate", "--flats", darks, "--darks", flats, "-o", tmp_path / "c.json")
    assert code == 1 and len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"error: the darks look like flats (--darks {flats}: mean 2012.") and \
        f"; --flats {darks}: mean 512." in err and err.endswith(") — did you swap --flats and --darks?; give the "
                                                                "lens-capped frames as --darks and the lit ones as "
                                                                "--flats\n")
    twice = flats / "flat_iso800_00.npy"
    with pytest.raises(ConfigError, match=rf"^{twice.resolve()}: given as a flat frame and as a dark frame \(1 "
                                          r"file\(s\) are among both\); give each frame once; lit frames as flats"):
        calibrate(flats, [darks, twice], name="x")
    for i in range(2):  # darks far above a known black level, though below the flats
        np.save(darks / f"dark_iso800_{i:02d}.npy", np.load(darks / f"dark_iso800_{i:02d}.npy") + 1200)
    with pytest.raises(ConfigError, match=r"^the darks look like flats \(darks=.*: mean 1712\.\d+ DN, 1200 DN above "
                                          r"the black level, more than 1/16 of white - black \(16383 - 512\); "):
        calibrate(flats, darks, name="x", black=BLACK, white=WHITE)


def test_a_lit_frame_among_the_darks_is_named(one_iso):
    lit = one_iso / "darks" / "dark_iso800_09.npy"
    lit.write_bytes((one_iso / "flats" / "flat_iso800_00.npy").read_bytes())
    with pytest.raises(ImageError, match=rf"^{lit}: a dark frame 1500 DN brighter than the darks' median \(512\.\d+ "
                                         r"DN\), over 10 times their noise \(.* DN\): a lit frame; .*pass it as a flat "
                                         "if it is one, or leave it out$"):
        calibrate(one_iso / "flats", one_iso / "darks", name="x")


def frame(name: str) -> Frame:
    return Frame(path=Path(name), window=np.zeros((8, 8, 4), np.uint16), iso=800, black=None, white=WHITE,
                 camera=None, size=(8, 8))


MEASURED = {"iso": 800, "K": 2.0, "tukey_lambda": 0.05, "read_sigma": 11.0, "row_sigma": 0.5,
            "color_bias": [0.3, -0.2, 0.5, 0.1], "black": [BLACK] * 4}


@pytest.mark.parametrize("change, error, message", [
    ({"tukey_lambda": -0.7}, ConfigError, r"d0\.npy and the other 1 dark frame\(s\) of ISO 800: their read noise fits "
                                          r"a Tukey-λ shape of -0\.7; expected Tukey-λ shapes above -0\.5 and at most "
                                          r"1 .*; check them for light leaks and hot pixels, or fit a Gaussian read "
                                          r"noise \(read_dist='gaussian'\)$"),
    ({"read_sigma": 2000.0}, ImageError, r"d0\.npy and the other 1 dark frame\(s\) of ISO 800: their read noise σ is "
                                         r"2000 DN; a camera's is at most 991\.9 DN, 1/16 of white - black \(16383 - "
                                         r"512\); shoot darks"),
    ({"row_sigma": 1500.0}, ImageError, r"d0\.npy .*: their row noise σ is 1500 DN"),
    ({"K": 5000.0}, ImageError, r"f0\.npy and the other 1 flat frame\(s\) of ISO 800: their photon transfer gives K "
                                r"5000 DN per electron; a camera's is from 0\.0001 to 991\.9"),
    ({"color_bias": [0.3, 3000.0, 0.5, 0.1]}, ConfigError, r"d0\.npy .*: their mean is 3000 DN from the black level "
                                                           r"\(512, 512, 512, 512\); a camera's dark signal is "
                                                           r"within ±991\.9 DN of it, .*; give the black level of "
                                                           r"these frames \(black=\), or shoot darks"),
])
def test_measured_numbers_no_camera_has_are_refused_naming_them(change, error, message):
    flats, darks = [frame("f0.npy"), frame("f1.npy")], [frame("d0.npy"), frame("d1.npy")]
    check_measured(MEASURED, flats, darks, "tukey")  # a camera's numbers pass
    with pytest.raises(error, match=f"^{message}") as caught:
        check_measured({**MEASURED, **change}, flats, darks, "tukey")
    if error is ConfigError:  # on the command line: the flag
        said = in_cli_terms(caught.value, CALIBRATE_FLAGS)
        assert re.search(r"\((--read-dist gaussian|--black N, or R,G,B,G)\)", said), said
    check_measured({**MEASURED, "tukey_lambda": -0.7}, flats, darks, "gaussian")  # λ is not in a Gaussian profile


def test_a_fit_across_isos_that_no_camera_has_is_refused_naming_them():
    rows = [{**MEASURED, "iso": iso, "K": k, "read_scale": scale, "flats": 2, "darks": 2}
            for iso, k, scale in ((100, 0.5, 3.0), (800, 2.0, 200.0), (3200, 8.0, 3.0))]
    with pytest.raises(ImageError, match=r"^the frames of ISO 100, 800, 3200 give a profile no camera has: profile "
                                         r"'x': read\.spread=3\.429\d*: expected at most 1 .*; calibrate the ISOs "
                                         r"apart \(the frames of each alone\), or leave out the one whose numbers "
                                         "stand out$"):
        fit_profile(rows, name="x", read_dist="tukey", camera=None, white=WHITE)


@pytest.mark.parametrize("args, message", [
    (["-o", "{tmp}"], "-o {tmp}: a folder; expected the path of the profile JSON file to write; name a file in it, "
                      "e.g. {tmp}/my-camera.json"),
    (["-o", "{tmp}/none/c.json"], "-o {tmp}/none/c.json: the folder {tmp}/none does not exist; expected a file path in "
                                  "an existing folder; create the folder (mkdir -p {tmp}/none) or write the profile "
                                  "elsewhere"),
    (["-o", "{tmp}/notes.txt/c.json"], "-o {tmp}/notes.txt/c.json: {tmp}/notes.txt is a file, not a folder; expected "
                                       "a file path in an existing folder; write the profile in a folder"),
    (["-o", "{tmp}/notes.txt"], "-o {tmp}/notes.txt: an existing file that is not a profile JSON file as calibrate "
                                "writes; calibrate replaces only its own outputs; give another path, or delete the "
                                "file first if it is not needed"),
    (["-o", "{tmp}/c.json", "--report", "{tmp}"], "--report {tmp}: a folder; expected the path of the report JSON "
                                                  "file to write; name a file in it, e.g. {tmp}/report.json"),
    (["-o", "{tmp}/c.json", "--report", "{tmp}/c.json"], "--report {tmp}/c.json: the same path as the profile's; give "
                                                         "the report its own file"),
])
def test_an_output_calibrate_cannot_write_is_refused_before_a_frame_is_read(tmp_path, capsys, args, message):
    (tmp_path / "notes.txt").write_text("mine")
    code, out, err = run(capsys, "calibrate", "--flats", tmp_path / "no-flats", "--darks", tmp_path / "no-darks",
                         *(a.format(tmp=tmp_path) for a in args))
    assert (code, err) == (1, f"error: {message.format(tmp=tmp_path)}\n")
    assert (tmp_path / "notes.txt").read_text() == "mine" and not (tmp_path / "c.json").exists()


def test_a_read_only_folder_is_refused_by_its_path(tmp_path):
    from test_discover import _with_permissions

    folder = tmp_path / "ro"
    folder.mkdir(mode=0o555)
    res = _with_permissions(f"from pairload.camera.calibrate import check_outputs; check_outputs({str(folder)!r} + "
                            "'/c.json')")
    assert res.returncode != 0 and res.stderr.endswith(
        f"ConfigError: out={folder}/c.json: the folder {folder} cannot be written (permission denied or a read-only "
        "file system); write the profile in a folder of yours\n")


def test_calibrate_replaces_its_own_outputs_and_a_failed_write_names_the_path_given(tmp_path, monkeypatch):
    profile = load_profile("SonyA7S2")
    for _ in range(2):
        save(profile, {"isos": []}, tmp_path / "p.json", tmp_path / "r.json")
    assert load_profile(tmp_path / "p.json") == profile

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OutputError, match=rf"^{tmp_path / 'q.json'}: cannot write the profile \(No space left on "
                                          rf"device\); check that {tmp_path} is a folder you can write with free "
                                          "space, or write it elsewhere$"):
        save(profile, {"isos": []}, tmp_path / "q.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json", "r.json"]  # no temporary file left


@pytest.mark.parametrize("options, message", [
    ({"white": float("nan")}, "white=nan: expected the white level (saturation) in DN, above 0 and at most 65535"),
    ({"white": "16383"}, "white='16383': expected the white level (saturation) in DN, above 0 and at most 65535"),
    ({"white": True}, "white=True: expected the white level (saturation) in DN, above 0 and at most 65535"),
    ({"white": 1e9}, "white=1000000000.0: expected the white level (saturation) in DN, above 0 and at most 65535"),
    ({"white": 16383, "black": 20000}, "white=16383: expected a white level above the black level (20000 DN); give "
                                       "the levels of these frames (white, black)"),
    ({"black": True}, "black=True: expected one black level (DN >= 0) or 4, one per channel R, G, B, G"),
    ({"black": float("inf")}, "black=inf: expected one black level (DN >= 0) or 4, one per channel R, G, B, G"),
    ({"black": "512"}, "black='512': expected one black level (DN >= 0) or 4, one per channel R, G, B, G"),
    ({"iso": True}, "iso=True: expected a positive whole ISO number"),
    ({"flats": None}, "flats=None: expected flats frames: a path, or a list of paths of files or folders"),
])
def test_options_that_cannot_work_are_refused_before_a_frame_is_read(tmp_path, options, message):
    options = {"flats": tmp_path / "no-flats", "darks": tmp_path / "no-darks", "name": "x", **options}
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        calibrate(options.pop("flats"), options.pop("darks"), **options)


def test_numpy_whole_numbers_are_whole_numbers(tmp_path):
    with pytest.raises(ConfigError, match="^flats=.*no-flats: no such file or folder"):  # past the option checks
        calibrate(tmp_path / "no-flats", tmp_path / "no-darks", name="x", iso=np.int64(800), window=np.int64(64))


@pytest.mark.parametrize("args, message", [
    (["--name", ""], "--name '': expected a non-empty profile name"),  # not the output's name in its place
    (["--black", "1,2,3,4,5"], "--black 1,2,3,4,5: expected a number of DN, or four separated by commas (R,G,B,G)"),
    (["--white", "nan"], "--white nan: expected the white level (saturation) in DN, above 0 and at most 65535"),
    (["--black", "512", "--white", "100"], "--white 100.0: expected a white level above the black level (512 DN); "
                                           "give the levels of these frames (--white, --black)"),
])
def test_the_command_refuses_bad_options_in_one_line(tmp_path, capsys, args, message):
    code, out, err = run(capsys, "calibrate", "--flats", tmp_path / "no-flats", "--darks", tmp_path / "no-darks",
                         "-o", tmp_path / "c.json", *args)
    assert (code, err) == (1, f"error: {message}\n")


def test_darks_of_one_iso_with_and_without_a_black_level_are_named(one_iso):
    a, b = (replace(read_frame(one_iso / "darks" / f"dark_iso800_0{i}.npy"), black=black)
            for i, black in ((0, None), (1, (512.0,) * 4)))
    with pytest.raises(ImageError, match=rf"^{re.escape(str(b.path))}: black level \(512\.0, 512\.0, 512\.0, 512\.0\), "
                                         rf"but {re.escape(str(a.path))} has none \(a \.npy mosaic, no black= or "
                                         r"--black given\); the dark frames of one ISO must share their levels"):
        dark_noise([a, b])
