"""Pair discovery on folders as they are found in the wild: symlinks, loops, unreadable folders."""

import json
import os
import subprocess
import sys

import pytest

from pairload.errors import PairingError
from pairload.folders.discover import find_pairs

from conftest import make_raw, pair_pixels, write_rgb


def test_symlinked_subfolders_are_followed(tmp_path):
    elsewhere = make_raw(tmp_path / "elsewhere", 4, start=10)
    raw = make_raw(tmp_path / "raw", 1)
    for side in ("low", "high"):
        (raw / side / "more").symlink_to(elsewhere / side, target_is_directory=True)
    found = find_pairs(raw)
    assert len(found.pairs) == 5
    assert sorted(p.key for p in found.pairs)[-1] == "more+00013"


def test_a_symlinked_split_folder_is_a_split(tmp_path):
    elsewhere = make_raw(tmp_path / "elsewhere", 3, start=10)  # other images: one in both splits is a leak
    raw = tmp_path / "raw"
    make_raw(raw, 2, split="train")
    (raw / "test").symlink_to(elsewhere, target_is_directory=True)
    assert {s: len(p) for s, p in find_pairs(raw).splits().items()} == {"train": 2, "test": 3}


def test_a_symlink_loop_is_walked_once(tmp_path):
    raw = make_raw(tmp_path / "raw", 3)
    for side in ("low", "high"):
        (raw / side / "loop").symlink_to(raw / side, target_is_directory=True)
    assert len(find_pairs(raw).pairs) == 3


def _without_permission_override():
    """In the child: give up the capabilities that let root ignore file permissions (root's bounding set loses
    CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH, so the exec'd process has them in no set)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            os._exit(77)


def _with_permissions(code: str) -> subprocess.CompletedProcess:
    """Run `code` in a process for which file permissions apply, even when the tests run as root."""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         preexec_fn=_without_permission_override if os.geteuid() == 0 else None)
    if res.returncode == 77:
        pytest.skip("running as root without CAP_SETPCAP: cannot make permissions apply")
    return res


@pytest.mark.parametrize("where", ["low/sub", "high"])
def test_an_unreadable_folder_is_refused_by_name_not_skipped(tmp_path, where):
    raw = make_raw(tmp_path / "raw", 4)
    (raw / "low" / "sub").mkdir()
    (raw / where).chmod(0o000)
    try:
        res = _with_permissions("from pairload.folders.discover import find_pairs; "
                                f"find_pairs({str(raw)!r}, skip_unmatched=True)")
    finally:
        (raw / where).chmod(0o755)
    assert res.returncode != 0
    assert f"PairingError: {raw / where}: cannot be listed (Permission denied); fix its permissions" in res.stderr


def test_split_folders_beside_a_top_level_pair_are_not_ignored(tmp_path):
    raw = make_raw(tmp_path / "raw", 3)
    make_raw(raw, 2, split="test", start=50)
    assert {s: len(p) for s, p in find_pairs(raw).splits().items()} == {"train": 3, "test": 2}


# ------------------------------------------------------------------ never by elimination

def test_one_target_left_of_ten_is_refused_not_paired_by_elimination(tmp_path):
    raw = make_raw(tmp_path / "raw", 10)
    for i in range(1, 10):  # an interrupted copy: 1 of 10 targets arrived
        (raw / "high" / f"{i:05d}.png").unlink()
    with pytest.raises(PairingError, match=r"9 in low without a partner in high: low/00001.png, .*low/00009.png "
                                           r"\(no naming rule pairs them one to one, and pairload never pairs by "
                                           r"elimination: restore the missing files, list the pairs in a --pairs-file"):
        find_pairs(raw)
    found = find_pairs(raw, skip_unmatched=True)
    assert [p.key for p in found.pairs] == ["00000"]
    assert [(u.folder, u.reason, u.count) for u in found.unused] == [("low", "unmatched", 9)]


def test_one_low_beside_one_high_of_another_name_is_not_a_pair(tmp_path):
    raw = tmp_path / "raw"
    lo, hi = pair_pixels(0, 8, 8)
    write_rgb(raw / "low" / "a.png", lo)
    write_rgb(raw / "high" / "b.png", hi)
    with pytest.raises(PairingError, match=r"1 in low without a partner in high: low/a.png; 1 in high without a "
                                           r"partner in low: high/b.png \(no naming rule"):
        find_pairs(raw)


def test_a_scene_folder_whose_target_is_missing_is_refused_by_name(tmp_path):
    raw = tmp_path / "raw"
    for scene in ("s1", "s2"):
        for k in range(3):
            write_rgb(raw / "low" / scene / f"{k}.png", pair_pixels(k, 8, 8)[0])
    write_rgb(raw / "high" / "s1" / "gt.png", pair_pixels(0, 8, 8)[1])
    with pytest.raises(PairingError, match=r"3 in low without a partner in high: low/s2/0.png, low/s2/1.png, "
                                           r"low/s2/2.png \(no naming rule"):
        find_pairs(raw)
    write_rgb(raw / "high" / "s2" / "gt.png", pair_pixels(1, 8, 8)[1])
    found = find_pairs(raw)
    assert found.rules == {"train": ["one target per folder"]} and len(found.pairs) == 6
    assert {p.low_rel: p.high_rel for p in found.pairs}["low/s2/1.png"] == "high/s2/gt.png"


def test_lows_named_after_their_target_share_it_without_scene_folders(tmp_path):
    raw = tmp_path / "raw"
    for scene in ("scene7", "scene8"):
        for ev in ("ev-1", "ev-2"):
            write_rgb(raw / "low" / f"{scene}_{ev}.png", pair_pixels(0, 8, 8)[0])
        write_rgb(raw / "high" / f"{scene}.png", pair_pixels(0, 8, 8)[1])
    found = find_pairs(raw)
    assert found.rules == {"train": ["target name as prefix"]}
    assert {p.low_rel: p.high_rel for p in found.pairs} == {
        "low/scene7_ev-1.png": "high/scene7.png", "low/scene7_ev-2.png": "high/scene7.png",
        "low/scene8_ev-1.png": "high/scene8.png", "low/scene8_ev-2.png": "high/scene8.png"}


# ------------------------------------------------------------------ each real folder once

def test_a_symlink_loop_above_the_side_folders_is_walked_once(tmp_path):
    raw = tmp_path / "raw"
    make_raw(raw, 3, split="train")
    make_raw(raw, 2, split="test", start=10)
    (raw / "train" / "again").symlink_to(".", target_is_directory=True)  # `ln -s . raw/train/again`
    (raw / "up").symlink_to(raw, target_is_directory=True)
    found = find_pairs(raw)
    assert {s: [p.key for p in v] for s, v in found.splits().items()} == {
        "test": ["00010", "00011"], "train": ["00000", "00001", "00002"]}
    assert found.unused == []


def test_a_split_folder_linked_to_another_is_not_packed_twice(tmp_path):
    raw = tmp_path / "raw"
    make_raw(raw, 3, split="train")
    (raw / "a_test").symlink_to(raw / "train", target_is_directory=True)  # listed before the folder it points to
    assert {s: len(p) for s, p in find_pairs(raw).splits().items()} == {"train": 3}


def test_the_same_image_reached_through_linked_side_folders_makes_one_pair(tmp_path):
    raw = tmp_path / "raw"
    make_raw(raw, 2, split="train")
    for side in ("low", "high"):
        (raw / "extra" / side).parent.mkdir(exist_ok=True)
        (raw / "extra" / side).symlink_to(raw / "train" / side, target_is_directory=True)
    found = find_pairs(raw)
    assert [(p.split, p.low_rel) for p in found.pairs] == [("train", "train/low/00000.png"),
                                                           ("train", "train/low/00001.png")]
    assert [(u.folder, u.reason, u.names) for u in found.unused] == [
        ("extra/low", "same file as a packed image", ("00000.png", "00001.png"))]
    assert "a symlink reaches a file that is already packed; it is packed once (as train/low/00000.png)" in \
        found.unused[0].hint


# ------------------------------------------------------------------ nothing dropped in silence

def test_every_image_under_raw_is_in_a_pair_or_reported_with_its_reason(tmp_path):
    raw = tmp_path / "raw"
    make_raw(raw, 2, low="Cap-Low_train", high="Cap-Normal_train")
    make_raw(raw, 2, low="Cap-Low_part3", high="Cap-Normal_part3", start=10)  # a split word pack does not know
    make_raw(raw / "a" / "b" / "c" / "d" / "e" / "f" / "g", 1, start=20)  # side folders 8 levels down
    for ext in (".gif", ".heic", ".jxl"):
        (raw / "Cap-Low_train" / f"x{ext}").write_bytes(b"not read")
    write_rgb(raw / "extras" / "valid" / "a.png", pair_pixels(1, 8, 8)[0])
    (raw / "extras" / "readme.txt").write_text("not an image, not reported")
    found = find_pairs(raw)
    assert {s: len(p) for s, p in found.splits().items()} == {"train": 2}
    got = {(u.folder, u.reason): (u.count, u.names) for u in found.unused}
    assert got == {
        ("Cap-Low_part3", "not under a recognised split folder"): (2, ("00010.png", "00011.png")),
        ("Cap-Normal_part3", "not under a recognised split folder"): (2, ("00010.png", "00011.png")),
        ("Cap-Low_train", "unsupported extension"): (3, ("x.gif", "x.heic", "x.jxl")),
        ("a/b/c/d/e/f/g/high", "too deep"): (1, ("00020.png",)),
        ("a/b/c/d/e/f/g/low", "too deep"): (1, ("00020.png",)),
        ("extras/valid", "not in a pair of side folders"): (1, ("a.png",)),
    }
    hints = {u.folder: u.hint for u in found.unused}
    assert "pass --split-name part3=SPLIT (e.g. part3=val) to pack it" in hints["Cap-Low_part3"]
    assert f"pack a folder nearer to them, e.g. `pairload pack {raw / 'a/b/c/d/e/f/g'} SHARDS`" in \
        hints["a/b/c/d/e/f/g/low"]
    assert hints["extras/valid"].startswith("'valid' looks like a split folder, but no low|input|… folder")
    assert "convert them (e.g. to PNG)" in hints["Cap-Low_train"]
    assert found.unused[0].describe().startswith("2 file(s) in Cap-Low_part3 (not under a recognised split folder): "
                                                 "00010.png, 00011.png; ")
    again = find_pairs(raw, split_names={"part3": "val"})  # the option the report names packs them
    assert {s: len(p) for s, p in again.splits().items()} == {"train": 2, "val": 2}
    assert again.split_folders["part3"] == ("val", "--split-name")


def test_images_left_out_of_a_pairs_file_are_reported(tmp_path):
    raw = make_raw(tmp_path / "raw", 3)
    (tmp_path / "pairs.txt").write_text("low/00000.png high/00000.png\n")
    found = find_pairs(raw, pairs_file=tmp_path / "pairs.txt")
    assert [(u.folder, u.reason, u.count) for u in found.unused] == [("high", "not in the pairs file", 2),
                                                                     ("low", "not in the pairs file", 2)]


@pytest.mark.parametrize("folders,expected", [
    (("training_set", "testing_set"), {"training_set": ("train", "alias of train"),
                                       "testing_set": ("test", "alias of test")}),
    (("Train", "valid", "test"), {"Train": ("train", "alias of train"), "valid": ("val", "alias of val"),
                                  "test": ("test", "alias of test")}),  # LCDP
    (("train", "validation"), {"train": ("train", "alias of train"),
                               "validation": ("test", "alias of val, used as test: no test folder")}),
    (("train", "mini_val", "eval"), {"train": ("train", "alias of train"), "eval": ("test", "alias of test"),
                                     "mini_val": ("val", "alias of val")}),
    (("Train_Low_Light_2025", "Test_Low_Light_2025"),
     {"Train_Low_Light_2025": ("train", "alias of train, a word of its name"),
      "Test_Low_Light_2025": ("test", "alias of test, a word of its name")}),
    (("train", "part3"), {"train": ("train", "alias of train"),
                          "part3": ("part3",
                                    "name kept: not a known split name (--split-name FOLDER=SPLIT renames it)")}),
])
def test_split_folders_map_through_the_aliases_datasets_use(tmp_path, folders, expected):
    raw = tmp_path / "raw"
    for i, name in enumerate(folders):
        make_raw(raw, 1, split=name, size=(8, 8), start=i)
    found = find_pairs(raw)
    assert found.split_folders == expected
    assert sorted(found.splits()) == sorted(split for split, _ in expected.values())


def test_pack_prints_how_folders_mapped_and_what_was_not_packed(tmp_path):
    raw = tmp_path / "LCDP"
    make_raw(raw, 2, split="train", low="input", high="gt", size=(8, 8))
    make_raw(raw, 1, split="valid", low="input", high="gt", size=(8, 8), start=5)
    (raw / "train" / "input" / "x.avif").write_bytes(b"not read")
    res = subprocess.run([sys.executable, "-m", "pairload.cli", "pack", str(raw), str(tmp_path / "s"),
                          "--workers", "1"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert ("split folders: train -> train (alias of train), valid -> test (alias of val, used as test: "
            "no test folder)") in res.stdout
    assert ("not packed (unsupported extension): 1 file(s) in train/input: x.avif; pack reads .bmp, .jpeg, .jpg"
            in res.stdout)
    report = json.loads((tmp_path / "s" / "manifest.json").read_text())["report"]
    assert report["unused"] == [{"folder": "train/input", "reason": "unsupported extension", "count": 1,
                                 "names": ["x.avif"], "hint": report["unused"][0]["hint"]}]
    assert report["split_folders"]["valid"] == {"split": "test", "how": "alias of val, used as test: no test folder"}


# -------------------------------------------------------------- one image in two roles: refused, whatever the source

def test_a_test_image_copied_into_train_is_refused_from_folders(tmp_path):
    raw = tmp_path / "raw"
    make_raw(raw, 3, split="train")
    make_raw(raw, 2, split="test", start=10)
    (raw / "test" / "high" / "00011.png").write_bytes((raw / "train" / "high" / "00001.png").read_bytes())
    with pytest.raises(PairingError, match=r"raw: train/high/00001.png \(split 'train'\) holds the same bytes as "
                                           r"test/high/00011.png \(split 'test'\); an image in two splits leaks test "
                                           r"data into training: remove the copy from one split"):
        find_pairs(raw)


def test_same_sized_images_in_two_splits_that_differ_are_packed(tmp_path):
    raw = tmp_path / "raw"
    make_raw(raw, 3, split="train", ext=".bmp")  # uncompressed: every file has the same size
    make_raw(raw, 2, split="test", start=10, ext=".bmp")
    assert {s: len(p) for s, p in find_pairs(raw).splits().items()} == {"train": 3, "test": 2}


@pytest.mark.parametrize("make_low, match", ids=["symlink", "copy"], argvalues=[
    (lambda low, high: low.symlink_to(high), r"raw: the low low/00001.png and the high high/00001.png are the same "
                                             r"file \(one links to the other\); a pair needs two images"),
    (lambda low, high: low.write_bytes(high.read_bytes()),
     r"raw: the low low/00001.png and the high high/00001.png hold identical bytes; a pair needs two different images"),
])
def test_a_folder_pair_whose_two_sides_are_one_image_is_refused(tmp_path, make_low, match):
    raw = make_raw(tmp_path / "raw", 2)
    (raw / "low" / "00001.png").unlink()
    make_low(raw / "low" / "00001.png", raw / "high" / "00001.png")
    with pytest.raises(PairingError, match=match):
        find_pairs(raw)


def test_a_pairs_file_with_one_image_under_two_names_in_two_splits_is_refused(tmp_path):
    raw = make_raw(tmp_path / "raw", 3)
    (raw / "high" / "copy.png").write_bytes((raw / "high" / "00000.png").read_bytes())
    pf = tmp_path / "pairs.tsv"
    pf.write_text("low/00000.png\thigh/00000.png\ttrain\nlow/00001.png\thigh/copy.png\ttest\n")
    with pytest.raises(PairingError, match=r"pairs.tsv:2: high/copy.png \(split 'test'\) holds the same bytes as "
                                           r"high/00000.png \(split 'train', pairs.tsv:1\); an image in two splits "
                                           r"leaks test data into training: keep one line"):
        find_pairs(raw, pairs_file=pf)
    pf.write_text("low/00000.png\thigh/00000.png\nlow/00001.png\thigh/00001.png\n")
    assert len(find_pairs(raw, pairs_file=pf).pairs) == 2


def test_a_split_column_that_disagrees_with_split_equals_file_is_refused(tmp_path):
    raw = make_raw(tmp_path / "raw", 2)
    pf = tmp_path / "pairs.tsv"
    pf.write_text("low/00000.png\thigh/00000.png\ttest\nlow/00001.png\thigh/00001.png\ttrain\n")
    with pytest.raises(PairingError, match=r"pairs.tsv:2: the line's split column says 'train', but the file was given "
                                           r"as --pairs-file test=.*pairs.tsv; an option never overrides the file"):
        find_pairs(raw, pairs_file=f"test={pf}")
    assert {s: len(p) for s, p in find_pairs(raw, pairs_file=pf).splits().items()} == {"test": 1, "train": 1}


def test_a_link_to_a_packed_image_elsewhere_is_not_reported_and_a_stray_image_beside_it_is(tmp_path):
    raw = tmp_path / "raw"
    make_raw(raw, 2, split="train")
    (raw / "notes").mkdir()
    (raw / "notes" / "copy.png").symlink_to(raw / "train" / "low" / "00000.png")  # the packed file, by another path
    (raw / "notes" / "stray.png").write_bytes((raw / "train" / "high" / "00001.png").read_bytes())
    found = find_pairs(raw)
    assert len(found.pairs) == 2
    assert [(u.folder, u.names) for u in found.unused] == [("notes", ("stray.png",))]


def test_a_side_folders_stems_are_kept_as_columns_and_found_again(tmp_path):
    from pairload.folders.walk import images

    names = ["b.png", "a.png", "sub/é.jpg", "sub/e\u0301x.png", "z10.png", "z9.png"]
    for side in ("low", "high"):
        for name in names:
            (tmp_path / side / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / side / name).write_bytes(b"x")
    (tmp_path / "high" / "notes.txt").write_text("not an image")
    lows, others = images(tmp_path / "low")
    highs, high_others = images(tmp_path / "high")
    stems = [n.rsplit(".", 1)[0] for n in names]
    assert sorted(lows) == sorted(stems) and others == {} and high_others == {".txt": 1}
    assert lows["sub/é"] == (str(tmp_path / "low" / "sub/é.jpg"), "sub/é.jpg") and "c" not in lows
    assert lows.same_stems(highs)
    assert [lows.plain(r)[0] for r in lows.sorted_rows().tolist()] == sorted(stems)  # code point order
    (tmp_path / "high" / "zz.png").write_bytes(b"x")
    assert not lows.same_stems(images(tmp_path / "high")[0])


def test_two_images_of_one_stem_in_a_side_folder_are_refused_naming_both(tmp_path):
    from pairload.folders.walk import images

    for name in ("0001.png", "0002.png", "deep/0003.png", "deep/0003.jpg"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    with pytest.raises(PairingError, match=r"two files with the same stem 'deep/0003': deep/0003.jpg and "
                                           r"deep/0003.png; keep one of them"):
        images(tmp_path)
