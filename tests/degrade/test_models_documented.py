"""docs/degrade.md names every model, each parameter with its default range and source."""

from pathlib import Path

import pytest

from pairload.degrade import MODELS

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "degrade.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", list(MODELS))
def test_each_model_and_its_parameters_are_on_the_page(name):
    model = MODELS[name]
    assert f"### `{name}`" in PAGE
    for p in model.params:
        assert f"`{p.name}`" in PAGE, p.name
        if p.source != "the camera profile" and p.low != p.high:
            assert f"{p.low:g}..{p.high:g}" in PAGE, (p.name, p.low, p.high)
