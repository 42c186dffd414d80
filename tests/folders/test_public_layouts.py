"""Replicas of public low-light and exposure datasets' folder layouts, as their official repositories and loaders
describe them (tiny images, same folder and file names): each packs into the pairs its authors train on, or is
refused with a message that names what was found and what would work; nothing is dropped silently.

Sources: UHD-LL (Li-Chongyi/UHDFour_code: training_set|testing_set/{input,gt}, data_list.txt), NTIRE 2024 LLIE as
Retinexformer reorganises it (train|mini_val/{input,target}), NTIRE 2025 (Train_Low_Light_2025/{Input,GT}), LOM
(cuiziteng/Aleth-NeRF: LOM_full/<scene>/{low,high,over_exp}), LCDP (onpix/LCDPNet: adobe5k/{input,gt,test-input,
test-gt}), LOL-v2 as the DRBN code reads it (Our_low, Our_normal, Our_low_test, Our_normal_test), MSEC
(mahmoudnafifi/Exposure_Correction: training|validation/{INPUT_IMAGES,GT_IMAGES}, five exposures per target,
testing/{INPUT_IMAGES,expert_[a-e]_testing_set}), SMID/SDSD as SNR-Aware reads them (.npy arrays), SID (camera raw,
paired by scene number), ExDark (class folders, no targets) and DICM (one folder, no targets)."""

from pathlib import Path

import numpy as np
import pytest

from pairload.errors import PairingError
from pairload.folders.discover import find_pairs

from conftest import pair_pixels, write_rgb


SIDES = {"input", "low", "our_low", "our_low_test", "test-input", "input_images", "short"}


def img(path: Path, index: int) -> None:
    """Pair `index`'s input in an input-side folder, its target (255 - input) anywhere else."""
    low, high = pair_pixels(index, 24, 32)
    write_rgb(path, low if path.parent.name.lower() in SIDES else high)


def pairs(found, split: str) -> list[tuple[str, str]]:
    return sorted((p.low_rel, p.high_rel) for p in found.splits()[split])


def unused_folders(found) -> set[str]:
    return {u.folder for u in found.unused}


def test_uhd_ll_packs_train_and_test_by_name_and_names_its_list_files(tmp_path):
    for split, names in (("training_set", [2, 3, 5]), ("testing_set", [1, 7])):
        for n in names:
            img(tmp_path / split / "input" / f"{n}_UHD_LL.JPG", n)
            img(tmp_path / split / "gt" / f"{n}_UHD_LL.JPG", n)
        (tmp_path / split / "data_list.txt").write_text("".join(f"{n}_UHD_LL.JPG\n" for n in names))
    found = find_pairs(tmp_path)
    assert {k: len(v) for k, v in found.splits().items()} == {"train": 3, "test": 2}
    assert pairs(found, "test") == [("testing_set/input/1_UHD_LL.JPG", "testing_set/gt/1_UHD_LL.JPG"),
                                    ("testing_set/input/7_UHD_LL.JPG", "testing_set/gt/7_UHD_LL.JPG")]


@pytest.mark.parametrize("year", [2024, 2025])
def test_ntire_low_light_challenges_pack_by_name(tmp_path, year):
    if year == 2024:
        layout = {"train": [1, 3, 4], "mini_val": [31, 32]}
        sides = ("input", "target")
    else:
        layout = {"Train_Low_Light_2025": [1, 2, 3]}
        sides = ("Input", "GT")
    for split, names in layout.items():
        for n in names:
            img(tmp_path / split / sides[0] / f"{n}.png", n)
            img(tmp_path / split / sides[1] / f"{n}.png", n)
    found = find_pairs(tmp_path)
    got = {k: len(v) for k, v in found.splits().items()}
    assert got == ({"train": 3, "test": 2} if year == 2024 else {"train": 3})  # mini_val: the set held out to test
    assert all(p.low_rel.split("/")[-1] == p.high_rel.split("/")[-1] for v in found.splits().values() for p in v)


def test_lom_scenes_pack_low_with_high_and_report_the_over_exposed_views(tmp_path):
    for scene in ("buu", "chair"):
        for n in range(3):
            for side in ("low", "high", "over_exp"):
                img(tmp_path / "LOM_full" / scene / side / f"{scene}_{n}.JPG", n)
        (tmp_path / "LOM_full" / scene / "transforms_train.json").write_text("{}")
    found = find_pairs(tmp_path)
    packed = [p for v in found.splits().values() for p in v]
    assert len(packed) == 6 and all("/low/" in p.low_rel and "/high/" in p.high_rel for p in packed)
    assert {"LOM_full/buu/over_exp", "LOM_full/chair/over_exp"} <= unused_folders(found)


def test_lcdp_packs_its_test_folders_beside_the_training_ones(tmp_path):
    for n in range(3):
        img(tmp_path / "adobe5k" / "input" / f"a{n:04d}-IMG_{n}.png", n)
        img(tmp_path / "adobe5k" / "gt" / f"a{n:04d}-IMG_{n}.png", n)
    for n in range(3, 5):
        img(tmp_path / "adobe5k" / "test-input" / f"a{n:04d}-IMG_{n}.png", n)
        img(tmp_path / "adobe5k" / "test-gt" / f"a{n:04d}-IMG_{n}.png", n)
    found = find_pairs(tmp_path)
    assert len(found.splits()["test"]) == 2
    assert sum(len(v) for v in found.splits().values()) == 5 and not unused_folders(found)


def test_lol_v2_as_drbn_reads_it_packs_train_and_test(tmp_path):
    for n in range(1, 4):
        img(tmp_path / "Our_low" / f"low{n:05d}.png", n)
        img(tmp_path / "Our_normal" / f"normal{n:05d}.png", n)
    for n in range(690, 692):
        img(tmp_path / "Our_low_test" / f"low{n:05d}.png", n)
        img(tmp_path / "Our_normal_test" / f"normal{n:05d}.png", n)
    found = find_pairs(tmp_path)
    assert {k: len(v) for k, v in found.splits().items()} == {"train": 3, "test": 2}
    assert ("Our_low/low00002.png", "Our_normal/normal00002.png") in pairs(found, "train")


def test_msec_packs_five_exposures_per_target_and_reports_the_expert_test_sets(tmp_path):
    targets = ("a0001-jmac_DSC1459", "a0002-dgw_005")
    exposures = ("_N1.5", "_N1", "_0", "_P1", "_P1.5")
    for s, split in enumerate(("training", "validation")):
        for t, name in enumerate(targets):
            for k, e in enumerate(exposures):
                img(tmp_path / split / "INPUT_IMAGES" / f"{name}{e}.JPG", 100 * s + 10 * t + k)
            img(tmp_path / split / "GT_IMAGES" / f"{name}.jpg", 100 * s + 10 * t + 9)
    for k, e in enumerate(exposures):
        img(tmp_path / "testing" / "INPUT_IMAGES" / f"{targets[0]}{e}.JPG", 200 + k)
    for x, expert in enumerate("ac"):
        img(tmp_path / "testing" / f"expert_{expert}_testing_set" / f"{targets[0]}.jpg", 210 + x)
    found = find_pairs(tmp_path)
    train = pairs(found, "train")
    assert len(train) == 10 and (f"training/INPUT_IMAGES/{targets[0]}_P1.5.JPG",
                                 f"training/GT_IMAGES/{targets[0]}.jpg") in train
    assert sum(len(v) for v in found.splits().values()) == 20  # training and validation
    assert {"testing/INPUT_IMAGES"} <= unused_folders(found)  # five expert targets: the user picks one


def test_npy_releases_sid_names_and_unpaired_sets_pair_or_are_refused_with_what_would_work(tmp_path):
    smid = tmp_path / "smid"
    for value, side in enumerate(("SMID_LQ_np", "SMID_Long_np")):
        (smid / side / "0001").mkdir(parents=True)
        np.save(smid / side / "0001" / "0001.npy", np.full((4, 4, 3), value, np.uint8))
    with pytest.raises(PairingError, match=r"no pairs found; .*--low-dir/--high-dir.*\(SMID_LQ_np/0001, "
                                           r"SMID_Long_np/0001\)"):
        find_pairs(smid)  # .npy arrays are images now; SMID's side folders are named by the user
    assert pairs(find_pairs(smid, low_dir="SMID_LQ_np", high_dir="SMID_Long_np"), "train") == [
        ("SMID_LQ_np/0001/0001.npy", "SMID_Long_np/0001/0001.npy")]
    sid = tmp_path / "sid"
    for side in ("short", "long"):
        (sid / "Sony" / side).mkdir(parents=True)
        name = f"00001_00_{'0.1' if side == 'short' else '10'}s.ARW"
        (sid / "Sony" / side / name).write_bytes(b"II*\x00" + side.encode())
    assert pairs(find_pairs(sid), "sony") == [("Sony/short/00001_00_0.1s.ARW", "Sony/long/00001_00_10s.ARW")]
    exdark = tmp_path / "exdark"
    for k, c in enumerate(("Bicycle", "Boat")):
        for n in range(2):
            img(exdark / "ExDark" / c / f"2015_{10 * k + n:05d}.jpg", 10 * k + n)  # names run on across classes
    with pytest.raises(PairingError, match=r"no targets"):
        find_pairs(exdark)
    dicm = tmp_path / "dicm"
    for n in range(1, 4):
        img(dicm / "DICM" / f"{n:02d}.jpg", n)
    with pytest.raises(PairingError, match=r"no targets"):
        find_pairs(dicm)
