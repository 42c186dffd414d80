"""The grammar of a degradation spec (`degrade="lowlight,gamma=2..3"`, a dict, or `Degradation(...)`): each
malformed spec is refused in one line naming the model, the option, the value, what was expected and an example;
whitespace around names and values is dropped; nothing is silently overridden or clamped. Numpy only, no loader."""

from __future__ import annotations

import re

import numpy as np
import pytest

from pairload import ConfigError
from pairload.degrade import Degradation

LL = "degradation 'lowlight': "
PARAMS = "its parameters are alpha, beta, gamma, gain_r, gain_b, shot, e.g. lowlight,alpha=0.9..1"


@pytest.mark.parametrize("spec, message", [
    # a key given twice: never "the last one wins"
    ("lowlight,gamma=2,gamma=3", LL + "gamma is given twice (gamma=2, then gamma=3); give it once, as one value or "
                                      "one range, e.g. lowlight,gamma=1.5..5"),
    ("lowlight,gamma=2, gamma = 2", LL + "gamma is given twice (gamma=2, then gamma=2); give it once, as one value or "
                                         "one range, e.g. lowlight,gamma=1.5..5"),
    ("raw-physics,profile=SonyA7S2,profile=NikonD850",
     "degradation 'raw-physics': profile is given twice (profile=SonyA7S2, then profile=NikonD850); give it once, as "
     "one value or one range, e.g. raw-physics,profile=SonyA7S2"),
    # the items of the list
    ("lowlight,,gamma=2", LL + "an empty option in 'lowlight,,gamma=2' (two commas in a row, or one at an end); "
                               "expected name=value options after single commas, e.g. lowlight,alpha=0.9..1"),
    ("lowlight, ,gamma=2", LL + "an empty option in 'lowlight, ,gamma=2' (two commas in a row, or one at an end); "
                                "expected name=value options after single commas, e.g. lowlight,alpha=0.9..1"),
    ("lowlight,", LL + "an empty option in 'lowlight,' (two commas in a row, or one at an end); expected name=value "
                       "options after single commas, e.g. lowlight,alpha=0.9..1"),
    ("lowlight,gamma", LL + "option 'gamma' has no '='; expected name=value or name=low..high, e.g. "
                            "lowlight,gamma=1.5..5"),
    ("lowlight,=2", LL + "option '=2' has no name before '='; expected name=value, e.g. lowlight,alpha=0.9..1"),
    ("lowlight,gamma=", LL + "gamma= has no value; expected a number or a range low..high, e.g. lowlight,gamma=1.5..5"),
    ("raw-physics,profile=", "degradation 'raw-physics': profile= has no value; expected the name or .json file of a "
                             "camera profile, e.g. raw-physics,profile=SonyA7S2"),
    # models and keys
    ("darken", "degradation 'darken': expected one of lowlight, unprocess, raw-physics, then its options after "
               "commas, e.g. lowlight,gamma=2..3 (see docs/degrade.md)"),
    (" ", "degradation '': expected one of lowlight, unprocess, raw-physics, then its options after commas, e.g. "
          "lowlight,gamma=2..3 (see docs/degrade.md)"),
    ("lowlight gamma=2", "degradation 'lowlight gamma=2': expected one of lowlight, unprocess, raw-physics, then its "
                         "options after commas, e.g. lowlight,gamma=2..3 (see docs/degrade.md)"),
    ("lowlight,gama=2", LL + "no parameter 'gama'; " + PARAMS),
    ("lowlight,ratio=100", LL + "no parameter 'ratio' (that is a parameter of raw-physics); " + PARAMS),
    ("lowlight,profile=SonyA7S2", LL + "profile='SonyA7S2' is raw-physics' option (a camera noise profile); leave it "
                                       "out"),
    # values
    ("lowlight,gamma=abc", LL + "gamma='abc': expected a number or a range low..high (two dots), e.g. gamma=1.5..5"),
    ("lowlight,gamma=2...3", LL + "gamma='2...3': expected a number or a range low..high (two dots), e.g. "
                                  "gamma=1.5..5"),
    ("lowlight,gamma=2..3..4", LL + "gamma='2..3..4': expected a number or a range low..high (two dots), e.g. "
                                    "gamma=1.5..5"),
    ("lowlight,gamma=..3", LL + "gamma='..3': expected a number or a range low..high (two dots), e.g. gamma=1.5..5"),
    ("lowlight,gamma=2 3", LL + "gamma='2 3': expected a number or a range low..high (two dots), e.g. gamma=1.5..5"),
    ("lowlight,gamma=1_0", LL + "gamma='1_0': expected a number or a range low..high (two dots), e.g. gamma=1.5..5"),
    ("lowlight,gamma=nan", LL + "gamma=nan: expected finite numbers, e.g. gamma=1.5..5"),
    ("lowlight,gamma=2..inf", LL + "gamma=2..inf: expected finite numbers, e.g. gamma=1.5..5"),
    ("lowlight,gamma=1e400", LL + "gamma=inf: expected finite numbers, e.g. gamma=1.5..5"),
    ("lowlight,gamma=3..2", LL + "gamma=3..2: its low end is above its high end; expected low <= high, e.g. "
                                 "gamma=2..3"),
    ("lowlight,gamma=-1", LL + "gamma=-1: outside gamma's bounds; expected a range low <= high within [0.1, 20] (no "
                               "unit), e.g. gamma=1.5..5"),
    ("lowlight,alpha=0.5..1.5", LL + "alpha=0.5..1.5: outside alpha's bounds; expected a range low <= high within "
                                     "[0, 1] (no unit), e.g. alpha=0.9..1"),
    ("lowlight,shot=0..0.01", LL + "shot=0..0.01: expected values above 0 (shot is drawn log-uniformly), e.g. "
                                   "shot=0.0001..0.012"),
    # the dict form and the constructor
    ({"model": "lowlight", "gamma": [3, 2]}, LL + "gamma=3..2: its low end is above its high end; expected low <= "
                                                  "high, e.g. gamma=2..3"),
    ({"model": "lowlight", "gamma": True}, LL + "gamma=True: expected a number or a (low, high) range, e.g. "
                                                "gamma=1.5..5"),
    ({"model": "raw-physics", "profile": ""}, "degradation 'raw-physics': profile='': expected the name of a built-in "
                                              "camera profile or the path of a .json profile, e.g. "
                                              "raw-physics,profile=SonyA7S2"),
    (Degradation, LL + "gamma is given twice (gamma=2, then gamma=3); give it once, as one value or one range, e.g. "
                       "lowlight,gamma=1.5..5"),
])
def test_a_malformed_spec_is_refused_in_one_line(spec, message):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        if spec is Degradation:
            Degradation("lowlight", (("gamma", 2), ("gamma", 3)))
        else:
            Degradation.of(spec)


@pytest.mark.parametrize("spec, canonical", [
    (" lowlight , gamma = 2 .. 3 ", "lowlight,gamma=2..3"),
    ("lowlight,gamma=.5..1e1,shot=0.001", "lowlight,gamma=0.5..10,shot=0.001"),
    ("raw-physics, profile = NikonD850 , ratio=50", "raw-physics,ratio=50,profile=NikonD850"),
    ({"model": "lowlight", "gamma": np.float32(2)}, "lowlight,gamma=2"),
])
def test_well_formed_specs_read_back_in_their_canonical_form(spec, canonical):
    assert Degradation.of(spec).describe() == canonical
    assert Degradation.of(canonical).describe() == canonical  # the canonical form reads back as itself


@pytest.mark.parametrize("spec, message", [
    ({"model": "lowlight", "gamma": 10 ** 400}, LL + "gamma=inf: expected finite numbers, e.g. gamma=1.5..5"),
    ({"model": "lowlight", "gamma": (2, -10 ** 400)}, LL + "gamma=2..-inf: expected finite numbers, e.g. gamma=1.5..5"),
    # float() reads other scripts' digits: a spec does not
    ("lowlight,gamma=٢", LL + "gamma='٢': expected a number or a range low..high (two dots), e.g. gamma=1.5..5"),
    ({"model": "raw-physics", "profile": "/data/a,b.json"},
     "degradation 'raw-physics': profile='/data/a,b.json': a comma in the path; a spec string (what loader states and "
     "configs record) cannot hold it; rename or move the profile file to a path without commas"),
])
def test_huge_ints_other_digits_and_a_comma_in_a_profile_path_are_refused(spec, message):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        Degradation.of(spec)


def test_the_canonical_string_keeps_every_digit_and_a_profile_path_may_be_a_path(tmp_path):
    exact = Degradation.of("lowlight,gamma=0.1234567891..2")
    assert exact.describe() == "lowlight,gamma=0.1234567891..2"  # not 0.123457: states and digests tell them apart
    assert Degradation.of(exact.describe()) == exact != Degradation.of("lowlight,gamma=0.123457..2")
    from pairload.degrade.profiles import PROFILES, save_profile

    save_profile(PROFILES["NikonD850"], tmp_path / "cam.json")
    made = Degradation.of({"model": "raw-physics", "profile": tmp_path / "cam.json"})
    assert made.profile == str(tmp_path / "cam.json") and made.extra == PROFILES["NikonD850"]
