"""`pairload make-pairs`: pairs written from photos whose inputs are the loaders' own degradation model applied to
the targets with the recorded parameters and noise key; the same bytes for a seed, whatever the workers or parts;
refusals in one line; `pairload synth` kept as a deprecated alias."""

import hashlib
import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from pairload.cli import main
from pairload.errors import ConfigError
from pairload.makepairs import MakePairsOptions, keys_in_order, make_pairs
from pairload.pack.parts import Part
from pairload.degrade.models import MODELS

pytest.importorskip("skimage")


def tree_digest(root):
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def pairs_of(out) -> dict:
    return json.loads((out / "synth.json").read_text())["pairs"]


def rgb(path):
    return cv2.imread(str(path))[..., ::-1]


@pytest.fixture
def photos(tmp_path):
    src = tmp_path / "photos"
    src.mkdir()
    for k in range(3):
        cv2.imwrite(str(src / f"p{k}.png"), np.random.default_rng(k).integers(0, 255, (50, 70, 3), dtype=np.uint8))
    return str(src)


def test_the_same_seed_gives_the_same_bytes_with_any_number_of_workers(tmp_path, photos):
    doc = make_pairs(tmp_path / "a", MakePairsOptions(pairs=4, test=2, size=(64, 48), seed=5, source=photos))
    make_pairs(tmp_path / "b", MakePairsOptions(pairs=4, test=2, size=(64, 48), seed=5, source=photos, workers=2))
    assert tree_digest(tmp_path / "a") == tree_digest(tmp_path / "b")
    assert list(pairs_of(tmp_path / "a")) == ["test/00000", "test/00001"] + [f"train/{i:05d}" for i in range(4)]
    assert {k: doc[k] for k in ("complete", "seed", "size", "source", "count")} == {
        "complete": True, "seed": 5, "size": [64, 48], "source": photos, "count": 6}
    assert 1 < len({v["source"] for v in pairs_of(tmp_path / "a").values()} & {"p0.png", "p1.png", "p2.png"})
    make_pairs(tmp_path / "c", MakePairsOptions(pairs=4, test=2, size=(64, 48), seed=6, source=photos))
    assert tree_digest(tmp_path / "a") != tree_digest(tmp_path / "c")
    low, high = (rgb(tmp_path / "a" / "train" / side / "00000.png") for side in ("low", "high"))
    assert low.shape == high.shape == (48, 64, 3) and low.mean() < high.mean() * 0.8


def test_each_input_is_the_loaders_model_applied_to_its_target_with_the_recorded_parameters_and_key(tmp_path,
                                                                                                       photos):
    model, out = MODELS["lowlight"], tmp_path / "out"
    make_pairs(out, MakePairsOptions(pairs=3, test=1, size=(40, 32), seed=2, source=photos,
                                     degrade="lowlight,gamma=2..3"))
    doc = json.loads((out / "synth.json").read_text())
    assert doc["degrade"]["spec"] == "lowlight,gamma=2..3" and doc["degrade"]["columns"] == list(model.columns)
    assert doc["degrade"]["ranges"]["gamma"] == [2.0, 3.0] and doc["degrade"]["ranges"]["alpha"] == [0.9, 1.0]
    keys = set()
    for key, rec in doc["pairs"].items():
        split, stem = key.split("/")
        high, low = (rgb(out / split / side / f"{stem}.png") for side in ("high", "low"))
        table = np.array([[rec["degradation"][c] for c in model.columns]], np.float32)
        noise_key = np.array([int(rec["noise_key"], 16)], np.uint64)
        np.testing.assert_array_equal(low, model.numpy(high[None], table, noise_key, np.zeros(1, np.int32))[0])
        assert 2 <= rec["degradation"]["gamma"] <= 3
        keys.add(rec["noise_key"])
    assert len(keys) == 4  # a key per pair


@pytest.mark.parametrize("spec, message", [
    ("raw-physics", "--degrade raw-physics: make-pairs writes 8-bit RGB photos and raw-physics cannot make their "
                    "inputs: it takes camera raw targets kept as packed Bayer mosaics"),
    ("lowlight,gamma=99", "--degrade lowlight,gamma=99: degradation 'lowlight': gamma=99: outside gamma's bounds"),
    ("fog", "--degrade fog: degradation 'fog': expected one of lowlight, unprocess, raw-physics"),
])
def test_a_degradation_that_cannot_make_8_bit_rgb_inputs_is_refused_in_one_line(tmp_path, capsys, spec, message):
    assert main(["make-pairs", str(tmp_path / "out"), "--pairs", "1", "--test", "0", "--degrade", spec]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()
    if spec == "raw-physics":
        assert err.rstrip().endswith("; use one of lowlight, unprocess")


def test_bad_options_are_refused_in_one_line(tmp_path, capsys):
    for args, message in ((["--seed", "-1"], "--seed -1: expected a whole number, 0 or more"),
                          (["--pairs", "0"], "--pairs 0: expected a whole number, 1 or more"),
                          (["--size", "4x40"], "--size 4x40: expected WIDTHxHEIGHT of at least 8x8, e.g. 600x400")):
        assert main(["make-pairs", str(tmp_path / "out"), *args]) == 1
        assert capsys.readouterr().err == f"error: {message}\n"
    assert not (tmp_path / "out").exists()
    with pytest.raises(ConfigError, match=r"^--workers 1\.5: expected a whole number, 1 or more$"):
        MakePairsOptions(workers=1.5)
    assert MakePairsOptions(source=tmp_path).source == str(tmp_path)  # a Path is recorded as text in synth.json


def test_the_deprecated_synth_command_says_so_once_and_writes_the_same_files(tmp_path, photos, capsys):
    args = [str(tmp_path / "{}"), "--from", photos, "--pairs", "2", "--test", "1", "--size", "32x24", "--seed", "4",
            "--degrade", "lowlight,shot=0.001"]
    assert main(["make-pairs", *(a.format("new") for a in args)]) == 0
    assert capsys.readouterr().err == ""
    assert main(["synth", *(a.format("old") for a in args)]) == 0
    assert capsys.readouterr().err == ("warning: `pairload synth` is deprecated and will be removed in the next "
                                       "release; use `pairload make-pairs` (the same options)\n")
    assert tree_digest(tmp_path / "old") == tree_digest(tmp_path / "new")


def test_make_pairs_into_its_own_earlier_output_leaves_exactly_the_new_pairs(tmp_path, photos):
    out = tmp_path / "out"
    make_pairs(out, MakePairsOptions(pairs=5, test=2, size=(32, 24), source=photos, seed=1))
    doc = make_pairs(out, MakePairsOptions(pairs=3, test=0, size=(32, 24), source=photos, seed=2))
    on_disk = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.png"))
    assert on_disk == sorted(f"train/{side}/{i:05d}.png" for i in range(3) for side in ("low", "high"))
    assert list(pairs_of(out)) == [f"train/{i:05d}" for i in range(3)] and doc["count"] == 3
    make_pairs(tmp_path / "fresh", MakePairsOptions(pairs=3, test=0, size=(32, 24), source=photos, seed=2))
    assert tree_digest(out) == tree_digest(tmp_path / "fresh")


def test_make_pairs_refuses_a_folder_holding_other_files(tmp_path):
    (tmp_path / "out" / "train" / "low").mkdir(parents=True)
    (tmp_path / "out" / "train" / "low" / "IMG_0001.png").write_bytes(b"a user's photo")
    with pytest.raises(ConfigError, match=r"train/low: holds 1 file\(s\) that pairload make-pairs did not write"):
        make_pairs(tmp_path / "out", MakePairsOptions(pairs=2, test=0, size=(32, 24)))
    assert (tmp_path / "out" / "train" / "low" / "IMG_0001.png").read_bytes() == b"a user's photo"


def test_make_pairs_in_parts_writes_the_files_and_the_record_of_one_run(tmp_path):
    opts = MakePairsOptions(pairs=9, test=2, size=(16, 12), seed=3)
    whole = make_pairs(tmp_path / "one", opts)
    docs = [make_pairs(tmp_path / "parts", opts, part=Part(i, 3)) for i in (2, 0, 1)]
    assert [d["complete"] for d in docs] == [False, False, True] and whole["complete"]
    assert sum(d["count"] for d in docs) == whole["count"] == 11
    one, parts = (sorted(p.relative_to(d) for p in d.rglob("*") if p.is_file() and not p.name.startswith("."))
                  for d in (tmp_path / "one", tmp_path / "parts"))
    assert one == parts and all((tmp_path / "one" / p).read_bytes() == (tmp_path / "parts" / p).read_bytes()
                                for p in one)
    assert not list((tmp_path / "parts").glob(".make-pairs-part-*"))


@pytest.mark.parametrize("change", [{"degrade": "lowlight,gamma=2"}, {"pairs": 2, "test": 2}])
def test_parts_of_two_runs_are_refused_naming_the_record(tmp_path, change):
    """Another degradation, or the same number of pairs split otherwise between train and test (whose records are
    as long), is another run: its synth.json would list files no part wrote."""
    make_pairs(tmp_path, MakePairsOptions(pairs=4, test=0, size=(16, 12), seed=3), part=Part(0, 2))
    other = MakePairsOptions(**{"pairs": 4, "test": 0, "size": (16, 12), "seed": 3, **change})
    with pytest.raises(ConfigError, match=r"\.make-pairs-part-0000-of-0002\.npz: a part of another make-pairs run "
                                          r"\(seed, size, source, pairs or degrade differ\)"):
        make_pairs(tmp_path, other, part=Part(1, 2))
    assert not (tmp_path / "synth.json").read_text().startswith('{"complete":true')


def test_odd_source_folders_are_refused_by_name(tmp_path, photos):
    """--from a file, a folder holding camera raw files (which would fail to decode as photos) or a paired dataset
    (whose dark inputs would be darkened again), and a size pack could not decode: one line each, before any work."""
    opts = {"pairs": 1, "test": 0, "size": (16, 12)}
    with pytest.raises(ConfigError, match=r"^--from .*p0\.png: a file, not a folder; pass the folder that holds"):
        make_pairs(tmp_path / "o", MakePairsOptions(**opts, source=f"{photos}/p0.png"))
    (Path(photos) / "raw").mkdir()
    (Path(photos) / "raw" / "IMG_1.DNG").write_bytes(b"II*")
    with pytest.raises(ConfigError, match=r"^--from .*: raw/IMG_1\.DNG is camera raw, which make-pairs cannot darken "
                                          r"\(it reads developed 8-bit or 16-bit photos\); develop them"):
        make_pairs(tmp_path / "o", MakePairsOptions(**opts, source=photos))
    for side in ("low", "high"):
        (tmp_path / "lol" / "train" / side).mkdir(parents=True)
        cv2.imwrite(str(tmp_path / "lol" / "train" / side / "1.png"), np.zeros((20, 20, 3), np.uint8))
    with pytest.raises(ConfigError, match=r"^--from .*lol: train/low/ holds low-light images beside train/high/ \(a "
                                          r"paired dataset\), and make-pairs would darken them again; pass the "
                                          r"normal-light folder alone, e\.g\. --from .*lol/train/high$"):
        make_pairs(tmp_path / "o", MakePairsOptions(**opts, source=tmp_path / "lol"))
    with pytest.raises(ConfigError, match=r"^--size 40000x40000: 1,600,000,000 pixels a pair; expected at most "
                                          r"1,073,741,824 pixels"):  # was OpenCV running out of memory
        MakePairsOptions(size=(40000, 40000))
    assert not (tmp_path / "o").exists()


def test_keys_past_99999_are_written_in_the_order_of_their_text():
    """synth.json lists its pairs sorted by key, as a dict sorted by key would: `train/100000` before
    `train/99999`, written without every key in memory."""
    got = [key for key, _, _ in keys_in_order({"train": 100_012, "test": 3})]
    assert got == sorted([f"train/{i:05d}" for i in range(100_012)] + [f"test/{i:05d}" for i in range(3)])
