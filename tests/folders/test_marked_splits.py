"""A split that something in RAW marks (a pairs list lying beside the data, SID's list files, BasicSR's meta-info
files) is never lost: given with --pairs-file it decides the split, only found it refuses the pack with the option."""

import re

import numpy as np
import pytest

from pairload.errors import PairingError
from pairload.pack import PackOptions, pack
from pairload.folders.discover import find_pairs
from pairload.read import open_shards

from conftest import make_raw, write_rgb


def lol_with_pairs_file(root):
    """LOL-style: 8 pairs in low/, high/; pairs.txt (tab-separated) marks the last two as test."""
    make_raw(root, 8)
    (root / "pairs.txt").write_text("".join(f"low/{i:05d}.png\thigh/{i:05d}.png\t{'test' if i >= 6 else 'train'}\n"
                                            for i in range(8)))
    return root


def test_a_pairs_file_marking_test_pairs_refuses_the_folder_pack_naming_them_and_the_option(tmp_path):
    raw = lol_with_pairs_file(tmp_path / "LOL")
    fix = f"--pairs-file {raw.resolve() / 'pairs.txt'}"
    with pytest.raises(PairingError, match=r"pairs.txt: lists 2 pair\(s\) as 'test' \(low/00006.png, low/00007.png\) "
                                           r"that folder discovery would pack into 'train'.*with " + re.escape(fix)):
        pack(raw, tmp_path / "out", PackOptions(workers=1))


def test_given_with_pairs_file_the_marked_test_pairs_are_the_test_split(tmp_path):
    raw = lol_with_pairs_file(tmp_path / "LOL")
    pack(raw, tmp_path / "out", PackOptions(workers=1, pairs_file=str(raw / "pairs.txt")))
    assert sorted(open_shards(tmp_path / "out", "test").keys) == ["low+00006", "low+00007"]
    assert len(open_shards(tmp_path / "out", "train").keys) == 6


def test_sid_list_files_beside_the_data_are_named_with_the_exact_options(tmp_path):
    raw = tmp_path / "SID"
    for s in range(3):
        write_rgb(raw / "Sony" / "short" / f"{s:05d}_00_0.1s.png", np.full((4, 4, 3), s, np.uint8))
        write_rgb(raw / "Sony" / "long" / f"{s:05d}_00_10s.png", np.full((4, 4, 3), 9 + s, np.uint8))
    lists = {"train": [0, 1], "test": [2]}
    for split, scenes in lists.items():
        (raw / f"Sony_{split}_list.txt").write_text(
            "".join(f"./Sony/short/{s:05d}_00_0.1s.png ./Sony/long/{s:05d}_00_10s.png ISO200 F8\n" for s in scenes))
    real = raw.resolve()
    fix = f"--pairs-file test={real / 'Sony_test_list.txt'} --pairs-file train={real / 'Sony_train_list.txt'}"
    with pytest.raises(PairingError, match=r"Sony_test_list.txt: lists 1 pair\(s\) as 'test' "
                                           r"\(Sony/short/00002_00_0.1s.png\) that folder discovery would pack into "
                                           r"'sony' \(and 2 more.*with " + re.escape(fix)):
        find_pairs(raw)
    found = find_pairs(raw, pairs_file=[f"train={raw / 'Sony_train_list.txt'}", f"test={raw / 'Sony_test_list.txt'}"])
    assert {s: len(p) for s, p in found.splits().items()} == {"test": 1, "train": 2}


def test_a_list_that_agrees_with_the_folders_is_only_reported(tmp_path):
    raw = make_raw(tmp_path / "LOL", 3, split="test")
    (raw / "test" / "meta_info_test.txt").write_text("00001.png 00001.png\n")
    found = find_pairs(raw)
    assert {s: len(p) for s, p in found.splits().items()} == {"test": 3}
    assert [u.reason for u in found.unused] == ["a pairs list not given with --pairs-file"]
