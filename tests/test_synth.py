import hashlib
import json

import cv2
import numpy as np
import pytest

from pairload.synth import SynthOptions, darken, linear_to_srgb, srgb_to_linear, synth

pytest.importorskip("skimage")


def tree_digest(root):
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_synth_is_deterministic_and_dark(tmp_path):
    opts = SynthOptions(pairs=3, test=2, size=(64, 48), seed=5)
    doc = synth(tmp_path / "a", opts)
    synth(tmp_path / "b", SynthOptions(pairs=3, test=2, size=(64, 48), seed=5, workers=2))  # same bytes
    assert tree_digest(tmp_path / "a") == tree_digest(tmp_path / "b")
    assert sorted(doc["pairs"]) == ["test/00000", "test/00001", "train/00000", "train/00001", "train/00002"]
    synth(tmp_path / "c", SynthOptions(pairs=3, test=2, size=(64, 48), seed=6))
    assert tree_digest(tmp_path / "a") != tree_digest(tmp_path / "c")
    low = cv2.imread(str(tmp_path / "a" / "train" / "low" / "00000.png"))
    high = cv2.imread(str(tmp_path / "a" / "train" / "high" / "00000.png"))
    assert low.shape == high.shape == (48, 64, 3)
    assert low.mean() < high.mean() * 0.8
    params = json.loads((tmp_path / "a" / "synth.json").read_text())["pairs"]["train/00000"]
    assert 0.03 <= params["exposure"] <= 0.3 and len(params["gains"]) == 3


def test_darken_follows_the_exposure_in_linear_light():
    rng = np.random.default_rng(0)
    high = np.full((64, 64, 3), 200, np.uint8)
    low, p = darken(high, rng)
    lin = srgb_to_linear(low.astype(np.float64) / 255).mean(axis=(0, 1))
    expect = srgb_to_linear(np.array(200 / 255)) * p["exposure"] * np.array(p["gains"])
    np.testing.assert_allclose(lin, expect, rtol=0.1)
    x = np.linspace(0, 1, 11)
    np.testing.assert_allclose(linear_to_srgb(srgb_to_linear(x)), x, atol=1e-9)


def test_synth_from_a_folder(tmp_path):
    src = tmp_path / "photos"
    src.mkdir()
    cv2.imwrite(str(src / "p.png"), np.random.default_rng(0).integers(0, 255, (50, 70, 3), dtype=np.uint8))
    doc = synth(tmp_path / "out", SynthOptions(pairs=2, test=0, size=(32, 32), source=str(src)))
    assert {v["source"] for v in doc["pairs"].values()} == {"p.png"}
    assert not (tmp_path / "out" / "test").exists()
