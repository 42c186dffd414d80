"""Camera noise profiles (pairload.degrade.profiles): every built-in draws values inside its ranges that follow its
log-linear laws, sampling is a pure function of the uniforms, the JSON file round-trips, and a bad file is refused
naming the file and the key."""

import json
import math
import re

import numpy as np
import pytest

from pairload.errors import ConfigError, OutputError
from pairload.degrade.profiles import (COLUMNS, PROFILES, UNIFORMS, LogLinear, Profile, load_profile,
                                     save_profile)


def fitted(log_k: np.ndarray, sigma: np.ndarray) -> tuple[float, float, float]:
    """(slope, bias, residual std) of log σ regressed on log K."""
    slope, bias = np.polyfit(log_k, np.log(sigma), 1)
    return slope, bias, float(np.std(np.log(sigma) - slope * log_k - bias))


@pytest.mark.parametrize("name", list(PROFILES))
def test_each_built_in_samples_inside_its_ranges_and_follows_its_laws(name):
    profile = load_profile(name)
    assert profile is PROFILES[name] and profile.source and name in profile.describe()
    values = profile.sample(np.random.default_rng(0).uniform(size=(4000, UNIFORMS)))
    assert values.shape == (4000, len(COLUMNS)) and values.dtype == np.float64
    k, read, row, lam = values.T
    k_lo, k_hi = profile.k_range
    assert k.min() >= k_lo and k.max() <= k_hi and k.max() - k.min() > 0.9 * (k_hi - k_lo)
    lam_lo, lam_hi = profile.tukey_lambda
    assert lam.min() >= lam_lo and lam.max() <= lam_hi
    for law, sigma in ((profile.read, read), (profile.row, row)):
        slope, bias, spread = fitted(np.log(k), sigma)
        assert slope == pytest.approx(law.slope, abs=0.03)
        assert bias == pytest.approx(law.bias, abs=0.05)
        assert spread == pytest.approx(law.spread, rel=0.1, abs=0.003)


def test_the_built_ins_hold_their_sources_numbers_in_dn():
    sony = PROFILES["SonyA7S2"]  # ELD's camera_params/release/SonyA7S2_params.npy: Kmin, Kmax, G_scale at K = 1
    assert sony.k_range == pytest.approx((0.09391607086816033, 6.010628535562261))
    assert float(sony.read.at(1.0)) == pytest.approx(math.exp(0.5657147358616816))
    assert (sony.black_level, sony.white_level) == ((512.0,) * 4, 16383.0)
    # PMN calibrated the same camera on its own: at ISO 6400 (K 6.12) its Tukey-λ scale is 3.45 DN, ELD's law says
    # about as much there; a profile in units of a [0, 1] image would be thousands of times off
    assert float(sony.read.at(6.12)) == pytest.approx(3.45, rel=0.25)
    assert float(PROFILES["pmn-SonyA7S2_highISO"].read.at(6.12)) == pytest.approx(3.45, rel=0.05)


def test_sampling_is_a_pure_function_of_each_row():
    profile = PROFILES["led-virtual-2"]
    u = np.random.default_rng(1).uniform(size=(50, UNIFORMS))
    whole = profile.sample(u)
    assert np.array_equal(whole, profile.sample(u.copy()))
    assert np.array_equal(whole[7:9], profile.sample(u[7:9]))  # a sample's values do not depend on its batch
    low, high = u.copy(), u.copy()
    low[:, 0], high[:, 0] = 0.1, 0.9
    assert np.all(profile.sample(low)[:, 0] < profile.sample(high)[:, 0])  # column 0 is K
    assert np.allclose(profile.sample(low)[:, 3], profile.tukey_lambda[0])  # one λ: lo == hi


def test_sample_refuses_what_is_not_uniforms():
    profile = PROFILES["SonyA7S2"]
    with pytest.raises(ConfigError, match=r"sample\(u\) of shape \(3, 5\): expected \(n, 6\)"):
        profile.sample(np.full((3, 5), 0.5))
    with pytest.raises(ConfigError, match="strictly between 0 and 1, found 0 to 0.5"):
        profile.sample(np.array([[0.0, 0.5, 0.5, 0.5, 0.5, 0.5]]))


def test_a_gaussian_profile_needs_no_lambda_and_samples_none():
    profile = Profile(name="g", source="a test", log_k=(0.0, 0.0), read=LogLinear(slope=0.5, bias=1.0),
                      row=LogLinear(slope=0.5, bias=-1.0), read_dist="gaussian")
    values = profile.sample(np.full((2, UNIFORMS), 0.5))
    assert np.allclose(values[:, :3], [1.0, math.e, math.exp(-1.0)]) and np.isnan(values[:, 3]).all()
    with pytest.raises(ConfigError, match="profile 't': tukey_lambda: missing"):
        Profile(name="t", source="a test", log_k=(0.0, 0.0), read=profile.read, row=profile.row)


def test_the_json_file_round_trips_and_may_give_k_itself(tmp_path):
    for name in ("SonyA7S2", "pmn-SonyA7S2_lowISO"):
        save_profile(PROFILES[name], tmp_path / "p.json")
        assert load_profile(tmp_path / "p.json") == PROFILES[name]
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]  # no temporary file left beside it
    doc = {"name": "mine", "source": "my flats", "k": [0.5, 8], "read": {"slope": 0.6, "bias": 1.0},
           "row": {"slope": 0.5, "bias": -1, "spread": 0.1}, "tukey_lambda": [0.1, 0.1], "black_level": 64,
           "white_level": 1023}
    (tmp_path / "mine.json").write_text(json.dumps(doc))
    mine = load_profile(str(tmp_path / "mine.json"))
    assert mine.k_range == pytest.approx((0.5, 8.0)) and mine.read.spread == 0.0
    assert mine.black_level == (64.0,) * 4 and mine.color_bias == (0.0,) * 4


GOOD = {"name": "mine", "source": "my flats", "log_k": [-1.0, 2.0], "read": {"slope": 0.6, "bias": 1.0, "spread": 0.2},
        "row": {"slope": 0.5, "bias": -1.0}, "tukey_lambda": [-0.1, 0.1]}


DROP = object()  # a key left out


@pytest.mark.parametrize("change, message", [
    ({"gain": 2}, r"unknown key 'gain'; expected keys: name, source, log_k, k, .*; remove it"),
    ({"log_k": [2.0, 1.0]}, r"log_k=\[2.0, 1.0\]: expected \[low, high\] with low <= high .*; swap the two"),
    ({"log_k": [0.1, 6000]}, r"log_k=\[0.1, 6000\]: expected natural logs of K .*; give log K, not K"),
    ({"k": [0, 5], "log_k": DROP}, r"k=\[0, 5\]: expected K > 0"),
    ({"k": [1, 5]}, r"log_k: give K's range once"),
    ({"read": {"slope": 0.6, "bias": 1.0, "spread": -0.2}}, r"read\.spread=-0\.2: expected a number >= 0"),
    ({"read": {"slpe": 0.6, "bias": 1.0}}, r"read: unknown key 'slpe'"),
    ({"row": {"slope": float("nan"), "bias": 1.0}}, r"row\.slope=nan: expected a finite number"),
    ({"row": None}, r"row=null: expected an object"),
    ({"read_dist": "poisson"}, r'read_dist="poisson": expected one of tukey, gaussian'),
    # a shape the model would ignore: never silently
    ({"read_dist": "gaussian"}, r"tukey_lambda=\[-0\.1, 0\.1\]: a Gaussian read noise \(read_dist gaussian\) has no "
                                r"Tukey-λ shape; the model would ignore it; remove tukey_lambda, or set read_dist to "
                                r"tukey$"),
    ({"tukey_lambda": DROP}, r"tukey_lambda: missing; .*add tukey_lambda, or set read_dist to gaussian"),
    ({"color_bias": [1, 2, 3]}, r"color_bias=\[1, 2, 3\]: expected 4 numbers"),
    ({"black_level": 2000, "white_level": 1023}, r"black_level=2000: expected DN >= 0 and below white_level"),
    ({"name": ""}, r'name="": expected a non-empty string'),
])
def test_a_bad_file_is_refused_naming_it_and_the_key(tmp_path, change, message):
    doc = {k: v for k, v in {**GOOD, **change}.items() if v is not DROP}
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match=rf"^{path}: {message}"):
        load_profile(path)


def test_the_good_file_of_those_cases_loads(tmp_path):
    (tmp_path / "mine.json").write_text(json.dumps(GOOD))
    assert load_profile(tmp_path / "mine.json").read == LogLinear(slope=0.6, bias=1.0, spread=0.2)


def test_missing_keys_unreadable_files_and_unknown_names(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({k: v for k, v in GOOD.items() if k != "row"}))
    with pytest.raises(ConfigError, match=rf"^{path}: row: missing; .*; add row$"):
        load_profile(path)
    path.write_text("{'name': 1}")
    with pytest.raises(ConfigError, match=rf"^{path}: not valid JSON \(.* line 1, column 2\)"):
        load_profile(path)
    with pytest.raises(ConfigError, match=rf"^{tmp_path / 'none.json'}: no such profile file"):
        load_profile(tmp_path / "none.json")
    with pytest.raises(ConfigError, match="unknown profile 'Sony'; built-in profiles: SonyA7S2, NikonD850, .*, led-"):
        load_profile("Sony")


def test_the_documentation_shows_a_file_that_loads_and_every_built_in(tmp_path):
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "calibration.md").read_text(encoding="utf-8")
    example, = re.findall(r"^```json\n(.*?)^```", page, re.S | re.M)
    (tmp_path / "my-camera.json").write_text(example)
    assert load_profile(tmp_path / "my-camera.json").k_range == pytest.approx((0.5, 8.0))
    table = page.split("## Built-in profiles", 1)[1].split("\n## ", 1)[0]
    shown = set(re.findall(r"^\| `([\w-]+)`", table, re.M)) | {f"led-virtual-{i}" for i in range(5)}
    assert shown == set(PROFILES)


LEVELS_10BIT = {"white_level": 1023, "black_level": 64}  # white - black = 959: every noise at most 59.94 DN


@pytest.mark.parametrize("change, message", [
    ({"tukey_lambda": [-3, -3]}, r"tukey_lambda=\[-3\.0, -3\.0\]: expected Tukey-λ shapes above -0\.5 and at most 1 "
                                 r"\(at -0\.5 and below the read noise has no finite variance; ELD's and LED's cameras "
                                 r"span -0\.28 to 0\.2\); fit λ on dark frames \(`pairload calibrate`\), or set "
                                 r"read_dist to gaussian$"),
    ({"read": {"slope": 0.6, "bias": 50}}, r'read=\{"slope": 0\.6, "bias": 50\.0, "spread": 0\.0\}: the read noise\'s '
                                           r"σ reaches 3\.764e\+22 DN at K 7\.389 \(median 1\.721e\+22 DN × "
                                           r"e\^\(3·spread\) × 2\.19, the σ of a Tukey-λ of scale 1 at λ -0\.1\); "
                                           r"expected at most 4096 DN, 1/16 of white - black \(65535 - 0: no white "
                                           r"level known, a 16-bit raw's\); give σ in DN of this camera's raw"),
    ({"tukey_lambda": [-0.49, -0.45], **LEVELS_10BIT}, r"read=.*: the read noise's σ reaches 325\.2 DN at K 7\.389 "
                                                       r".*× 19\.8, the σ of a Tukey-λ of scale 1 at λ -0\.49\); "
                                                       r"expected at most 59\.94 DN, 1/16 of white - black "
                                                       r"\(1023 - 64\)"),
    ({"row": {"slope": 0.5, "bias": 4.0}, **LEVELS_10BIT}, r"row=.*: the row noise's σ reaches 148\.4 DN at K 7\.389"),
    ({"row": {"slope": 0.5, "bias": -1.0, "spread": 3}}, r"row\.spread=3: expected at most 1 \(the standard deviation"),
    ({"k": [0.5, 100], "log_k": DROP, **LEVELS_10BIT}, r"k=\[0\.5, 100\]: K 0\.5 to 100 DN per electron; expected K "
                                                       r"from 0\.0001 to 59\.94: at most 1000, and at most 1/16 of "
                                                       r"white - black \(1023 - 64\) so that 16 electrons or more "
                                                       r"fill the range; give K of this camera's raw in DN per "
                                                       r"electron$"),
    ({"log_k": [-12.0, 1.0]}, r"log_k=\[-12\.0, 1\.0\]: K 6\.144e-06 to 2\.718 DN per electron; expected K from "
                              r"0\.0001 .*\(log_k: its natural logs\)$"),
    ({"color_bias": [0, 5000, 0, 0]}, r"color_bias=\[0\.0, 5000\.0, 0\.0, 0\.0\]: expected each within ±4096 DN"),
    ({"white_level": 70000}, r"white_level=70000: expected a positive number of DN, at most 65535"),
    ({"black_level": 65535}, r"black_level=65535: expected DN >= 0 and below white_level \(65535: none given"),
])
def test_a_profile_no_camera_has_is_refused_naming_the_bound(tmp_path, change, message):
    doc = {k: v for k, v in {**GOOD, **change}.items() if v is not DROP}
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match=rf"^{path}: {message}"):
        load_profile(path)


def test_the_bounds_hold_for_profiles_made_in_python_and_for_a_degradation_s_k_range():
    from pairload.degrade.spec import Degradation

    with pytest.raises(ConfigError, match=r"^profile 'p': tukey_lambda=\[-3\.0, -3\.0\]: expected Tukey-λ shapes"):
        Profile(name="p", source="a test", log_k=(0.0, 1.0), read=LogLinear(slope=0.5, bias=1.0),
                row=LogLinear(slope=0.5, bias=-1.0), tukey_lambda=(-3, -3))
    with pytest.raises(ConfigError, match=r"^profile 'SonyA7S2': log_k=\[0\.0, 6\.9.*\]: K 1 to 1000 DN per electron; "
                                          r"expected K from 0\.0001 to 991\.9"):
        Degradation.of("raw-physics,K=1..1000")
    assert Degradation.of("raw-physics,K=1..100") is not None  # well within: the read noise stays far below white


def test_a_profile_saved_where_no_file_can_be_names_the_path_given(tmp_path):
    with pytest.raises(OutputError, match=rf"^{tmp_path}: a folder; expected the path of the profile JSON file to "
                                          "write; name a file in it$"):
        save_profile(PROFILES["SonyA7S2"], tmp_path)
    missing = tmp_path / "none" / "p.json"
    with pytest.raises(OutputError, match=rf"^{missing}: cannot write the profile \(No such file or directory\); check "
                                          rf"that {missing.parent} is a folder you can write with free space"):
        save_profile(PROFILES["SonyA7S2"], missing)
    assert list(tmp_path.iterdir()) == []  # no temporary file left


@pytest.mark.parametrize("text, message", [
    # json keeps the last of two keys: a profile file must not
    ('{"name": "a", "name": "b"}', r'key \'name\' is given twice \(name="a", then name="b"\); keep one$'),
    # the whole value is shown, not the element at fault
    (json.dumps({**GOOD, "log_k": ["-1", "2"]}), r'log_k=\["-1", "2"\]: expected \[low, high\], two finite numbers'),
    (json.dumps({**GOOD, "log_k": [True, 2]}), r"log_k=\[true, 2\]: expected \[low, high\], two finite numbers"),
    (json.dumps({**GOOD, "log_k": [-1, 10 ** 400]}), r"log_k=\[-1, 1000000000\d+\]: expected \[low, high\]"),
])
def test_a_key_given_twice_and_values_that_are_no_numbers_are_refused_whole(tmp_path, text, message):
    path = tmp_path / "mine.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=rf"^{path}: {message}"):
        load_profile(path)


def test_a_folder_or_what_is_no_name_is_refused_as_a_profile(tmp_path):
    for folder in (tmp_path, tmp_path / "cam.json"):
        folder.mkdir(exist_ok=True)
        with pytest.raises(ConfigError, match=rf"^{folder}: a folder; expected a built-in profile's name or the path "
                                              r"of a JSON profile file \(\.json\); give the file in it"):
            load_profile(folder)
    for value in (None, 5):
        with pytest.raises(ConfigError, match=rf"^profile {value} \({type(value).__name__}\): expected a built-in "
                                              r"profile's name \(SonyA7S2, .*\) or the path of a JSON profile file"):
            load_profile(value)
