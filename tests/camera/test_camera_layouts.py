"""The dataset replicas of `rawtrees` (SID with its list files, ELD with a pairs list, SMID and SDSD `.npy` trees)
each pack with the one command a user would type, and the shards hold exactly the pairs, splits, arrays, ratios and
patterns the datasets' own loaders would form; X-Trans (SID's Fuji) is refused by name."""

import json
from pathlib import Path

import numpy as np
import pytest

from rawtrees import Tree, build_eld, build_sdsd, build_sid, build_sid_fuji, build_smid

from pairload import open_shards
from pairload.cli import main
from pairload.errors import ImageError
from pairload.format import schema
from pairload.pack.writer import PackOptions, pack
from pairload.read.shards import verify


def check(tree: Tree, out: Path, *extra: str) -> dict:
    assert main(tree.pack_argv(out) + ["--workers", "2", *extra]) in (0, None)
    verify(out)
    doc = json.loads((out / "manifest.json").read_text())
    assert {split: entry["samples"] for split, entry in doc["splits"].items()} == tree.splits
    found = {}
    for split, entry in doc["splits"].items():
        ds = open_shards(out, split)
        keys = {key: row for row, key in enumerate(ds.keys)}
        for pair in tree.split(split):
            row = keys[schema.key_from_relpath(pair.low)]
            found[pair] = (ds, row, entry)
    return found


@pytest.mark.parametrize("target", ["developed", "packed"])
def test_sid_packs_with_its_list_files_and_records_sids_ratios(tmp_path, target):
    pytest.importorskip("rawpy")
    from pairload.camera.files import develop

    tree = build_sid(tmp_path)
    found = check(tree, tmp_path / "out", "--raw-target", target)
    for pair, (ds, row, entry) in found.items():
        low, high = ds.arrays(row)
        np.testing.assert_array_equal(low, tree.files[pair.low].packed())
        want = develop(tree.root / pair.high) if target == "developed" else tree.files[pair.high].packed()
        np.testing.assert_array_equal(high, want[:2 * low.shape[0], :2 * low.shape[1]])
        assert ds.sensor.ratio[row] == pytest.approx(pair.ratio)  # min(long / short, 300), SID's
        assert pair.pattern in entry["sensor"]["low"]["patterns"]
        assert ds.sensor.levels[row].tolist() == [512.0] * 4 + [16383.0]


def test_eld_packs_raw_to_raw_from_a_pairs_list_with_the_exposure_ratio_of_its_metadata(tmp_path):
    pytest.importorskip("rawpy")
    tree = build_eld(tmp_path)
    found = check(tree, tmp_path / "out", "--raw-target", "packed", "--ratio-cap", "10000")  # ELD goes past 300
    cameras = set()
    for pair, (ds, row, entry) in found.items():
        low, high = ds.arrays(row)
        np.testing.assert_array_equal(low, tree.files[pair.low].packed())
        np.testing.assert_array_equal(high, tree.files[pair.high].packed())
        # the files carry exposure times, not ISO: the ratio recorded is the exposures' (ELD's own is ISO × time)
        assert ds.sensor.ratio[row] == pytest.approx(pair.exposure_ratio, rel=1e-5)
        black = tree.files[pair.low].black
        assert ds.sensor.levels[row].tolist() == [float(black)] * 4 + [16383.0]
        assert entry["sensor"]["exposure_from"] == ["metadata"]
        cameras.update(entry["sensor"]["low"]["cameras"])
    assert len(cameras) == len({tree.files[p.low].camera for p in tree.pairs})


def test_sid_fuji_x_trans_is_refused_by_name(tmp_path):
    pytest.importorskip("rawpy")
    tree = build_sid_fuji(tmp_path)
    with pytest.raises(ImageError, match=r"\.RAF: not a Bayer mosaic .*: Fuji X-Trans \(6×6 colour filter\) "
                                         r"is not supported yet"):
        pack(tree.root, tmp_path / "out", PackOptions(workers=1, pairs_file=tuple(tree.pack_args[1::2])))


@pytest.mark.parametrize("build", [build_smid, lambda p: build_sdsd(p, "indoor"), lambda p: build_sdsd(p, "outdoor")],
                         ids=["smid", "sdsd-indoor", "sdsd-outdoor"])
def test_smid_and_sdsd_npy_trees_pack_as_they_are_with_their_test_scenes(tmp_path, build):
    tree = build(tmp_path)
    found = check(tree, tmp_path / "out")
    for pair, (ds, row, entry) in found.items():
        low, high = ds.arrays(row)
        np.testing.assert_array_equal(low, tree.files[pair.low].array())
        np.testing.assert_array_equal(high, tree.files[pair.high].array())
        assert "sensor" not in entry
