"""Config objects refuse values of the wrong type by field name, before anything starts: a crop of 32.5 or a batch of
True would otherwise fail deep inside torch, or be taken as a batch of 1."""

from __future__ import annotations

import re

import numpy as np
import pytest

from pairload import make_loader
from pairload.errors import ConfigError, in_cli_terms
from pairload.plan import PlanConfig


@pytest.mark.parametrize("field, value, found", [("crop", 32.5, "float"), ("batch_size", 2.0, "float"),
                                                 ("batch_size", True, "bool"), ("repeats", "2", "str"),
                                                 ("seed", 1.5, "float"), ("epoch_size", 10.0, "float")])
def test_plan_config_refuses_non_integers_naming_the_field(field, value, found):
    kwargs = {"batch_size": 2, "crop": 16, field: value}
    with pytest.raises(ConfigError, match=rf"^{field}={value!r}: expected a whole number \(int\), found {found}; "
                                          "pass an int"):
        PlanConfig(**kwargs)


def test_integers_of_any_kind_and_whole_images_are_accepted():
    cfg = PlanConfig(batch_size=np.int64(2), crop=np.int32(16), seed=np.uint8(3))
    assert (cfg.batch_size, cfg.crop, cfg.seed) == (2, 16, 3)
    assert PlanConfig(batch_size=1, crop=None).crop is None


def test_make_loader_refuses_a_float_crop_before_torch_sees_it(packed):
    with pytest.raises(ConfigError, match=r"^crop=32\.5: expected a whole number \(int\), found float; pass an int, "
                                          r"e\.g\. crop=32$") as err:
        make_loader("ram", packed, batch_size=2, crop=32.5)
    assert in_cli_terms(err.value).endswith("found float; change --crop")


def test_train_config_checks_every_field_by_its_annotation():
    from pairload.recipes.config import TrainConfig

    for field, value, expected in (("crop", 32.5, "a whole number (int)"), ("batch_size", True, "a whole number (int)"),
                                   ("epochs", "3", "a whole number (int)"), ("lr", "0.1", "a number"),
                                   ("stop_after_epoch", 2.0, "a whole number (int)")):
        with pytest.raises(ConfigError, match="^" + re.escape(f"{field}={value!r}: expected {expected}, found")):
            TrainConfig(shards="s", **{field: value})
    assert TrainConfig(shards="s", lr=1, stop_after_epoch=None).lr == 1  # an int is a number


def test_train_flags_refuse_a_float_where_a_count_is_expected(capsys):
    from pairload.recipes.train import main

    with pytest.raises(SystemExit) as stop:
        main(["--shards", "s", "--crop", "32.5"])
    assert stop.value.code == 2
    assert "error: python -m pairload.train: argument --crop: invalid int value: '32.5'" in capsys.readouterr().err
