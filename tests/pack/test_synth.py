import hashlib
import json

import cv2
import numpy as np
import pytest

from pairload.pack.synth import SynthOptions, darken, linear_to_srgb, srgb_to_linear, synth

pytest.importorskip("skimage")


def tree_digest(root):
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_synth_is_deterministic_and_dark(tmp_path):
    opts = SynthOptions(pairs=3, test=2, size=(64, 48), seed=5)
    doc = synth(tmp_path / "a", opts)
    synth(tmp_path / "b", SynthOptions(pairs=3, test=2, size=(64, 48), seed=5, workers=2))  # same bytes
    assert tree_digest(tmp_path / "a") == tree_digest(tmp_path / "b")
    assert doc == {"complete": True, "seed": 5, "size": [64, 48], "source": "scikit-image", "count": 5}
    assert list(pairs_of(tmp_path / "a")) == ["test/00000", "test/00001", "train/00000", "train/00001", "train/00002"]
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
    synth(tmp_path / "out", SynthOptions(pairs=2, test=0, size=(32, 32), source=str(src)))
    assert {v["source"] for v in pairs_of(tmp_path / "out").values()} == {"p.png"}
    assert not (tmp_path / "out" / "test").exists()


def test_synth_into_its_own_earlier_output_leaves_exactly_the_new_pairs(tmp_path):
    out = tmp_path / "out"
    synth(out, SynthOptions(pairs=5, test=2, size=(32, 24), seed=1))
    doc = synth(out, SynthOptions(pairs=3, test=0, size=(32, 24), seed=2))
    on_disk = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.png"))
    assert on_disk == sorted(f"train/{side}/{i:05d}.png" for i in range(3) for side in ("low", "high"))
    assert list(pairs_of(out)) == [f"train/{i:05d}" for i in range(3)] and doc["count"] == 3
    assert json.loads((out / "synth.json").read_text())["complete"] is True
    synth(tmp_path / "fresh", SynthOptions(pairs=3, test=0, size=(32, 24), seed=2))
    assert tree_digest(out / "train") == tree_digest(tmp_path / "fresh" / "train")
    assert (out / "synth.json").read_bytes() == (tmp_path / "fresh" / "synth.json").read_bytes()


def test_synth_refuses_a_folder_holding_other_files(tmp_path):
    from pairload.errors import ConfigError

    (tmp_path / "out" / "train" / "low").mkdir(parents=True)
    (tmp_path / "out" / "train" / "low" / "IMG_0001.png").write_bytes(b"a user's photo")
    with pytest.raises(ConfigError, match=r"train/low: holds 1 file\(s\) that pairload synth did not write"):
        synth(tmp_path / "out", SynthOptions(pairs=2, test=0, size=(32, 24)))
    assert (tmp_path / "out" / "train" / "low" / "IMG_0001.png").read_bytes() == b"a user's photo"


def test_synth_from_a_folder_is_the_same_with_any_number_of_workers(tmp_path):
    src = tmp_path / "photos"
    src.mkdir()
    rng = np.random.default_rng(0)
    for k in range(5):
        cv2.imwrite(str(src / f"p{k}.png"), rng.integers(0, 255, (50 + k, 70, 3), dtype=np.uint8))
    a = synth(tmp_path / "a", SynthOptions(pairs=12, test=2, size=(32, 32), source=str(src)))
    b = synth(tmp_path / "b", SynthOptions(pairs=12, test=2, size=(32, 32), source=str(src), workers=2))
    assert a == b and tree_digest(tmp_path / "a") == tree_digest(tmp_path / "b")
    assert len({v["source"] for v in pairs_of(tmp_path / "a").values()}) > 1


def pairs_of(out) -> dict:
    return json.loads((out / "synth.json").read_text())["pairs"]


def test_keys_past_99999_are_written_in_the_order_of_their_text():
    """synth.json lists its pairs sorted by key, as a dict sorted by key would: `train/100000` before
    `train/99999`, written without every key in memory."""
    from pairload.pack.synth import keys_in_order

    got = [key for key, _, _ in keys_in_order({"train": 100_012, "test": 3})]
    assert got == sorted([f"train/{i:05d}" for i in range(100_012)] + [f"test/{i:05d}" for i in range(3)])
