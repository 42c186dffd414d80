"""`PlanConfig`'s checks: malformed mixing weights are refused in one line, numpy integers pass, and of several
mistakes the first in the order of the checks is the one reported."""

import numpy as np
import pytest

from pairload.errors import ConfigError
from pairload.plan import PlanConfig


@pytest.mark.parametrize("weights", [{"real": "many"}, (("real",),), 5, "real"])
def test_malformed_weights_are_refused_naming_the_value_and_the_form_expected(weights):
    with pytest.raises(ConfigError, match=r"^weights=.*: expected \{source: weight\} or \(source, weight\) pairs with "
                                          r"numbers for weights; e\.g\. weights=\{'real': 1, 'made': 3\}$"):
        PlanConfig(batch_size=4, crop=8, weights=weights)


def test_a_numpy_integer_is_a_whole_number_of_repeats():
    cfg = PlanConfig(batch_size=4, crop=8, repeats=np.int64(3))
    assert cfg.repeats == 3 and type(cfg.repeats) is int
    assert cfg.epoch_length(10) == 30


def test_of_several_mistakes_the_first_checked_is_reported():
    with pytest.raises(ConfigError, match=r"^degrade_sources=\['a'\]: there is no degradation"):
        PlanConfig(batch_size=0, crop=8, degrade_sources=("a",), world_size=0)
    with pytest.raises(ConfigError, match=r"^batch_size=0: expected at least 1"):
        PlanConfig(batch_size=0, crop=8, world_size=0, repeats=0)
    with pytest.raises(ConfigError, match=r"^rank=0, world_size=0: expected 0 <= rank < world_size"):
        PlanConfig(batch_size=4, crop=8, world_size=0, repeats=0)
    with pytest.raises(ConfigError, match=r"^repeats=0: expected a whole number of passes"):
        PlanConfig(batch_size=4, crop=8, repeats=0, weights={"a": -1})


@pytest.mark.parametrize("given, expected", [
    (5, r"degrade_sources=5: expected the names of mixed sources, a name or a list of names, e\.g\. "
        r"degrade_sources=\('made',\)$"),
    (b"ab", r"degrade_sources=b'ab': expected the names of mixed sources"),
    ([None], r"degrade_sources=\[None\]: expected the names"),
    (["", "x"], r"degrade_sources=\['', 'x'\]: expected the names"),
    (("a", "a"), r"degrade_sources=\('a', 'a'\): a named twice; name each source once$"),
])
def test_odd_degrade_sources_are_refused_by_name(given, expected):
    with pytest.raises(ConfigError, match=expected):
        PlanConfig(batch_size=2, crop=8, degrade="lowlight", degrade_sources=given)
    assert PlanConfig(batch_size=2, crop=8, degrade="lowlight", degrade_sources="made").degrade_sources == ("made",)
