"""Refusals and report lines of `pairload.folders` that once said too little: each names the file, what was found and
the fix. Data is built in tmp_path; every check runs the real discovery, decode or pack."""

import os
import re
import unicodedata

import numpy as np
import pytest
from PIL import Image

from pairload.cli import main
from pairload.errors import PairingError
from pairload.pack import PackOptions, pack
from pairload.folders.decode import decode_rgb, orientation_hint, probe_size
from pairload.folders.discover import find_pairs

from conftest import make_raw, pair_pixels


# ------------------------------------------------------------------ decode: gray+alpha

def test_a_gray_alpha_png_is_reported_as_grayscale_with_alpha(tmp_path):
    raw = make_raw(tmp_path / "raw", 2, size=(8, 12))
    gray = (np.arange(8 * 12).reshape(8, 12) * 2).astype(np.uint8)
    la = np.stack([gray, np.full_like(gray, 77)], axis=-1)
    Image.fromarray(la, "LA").save(raw / "low" / "00001.png")
    rgba = np.concatenate([pair_pixels(0, 8, 12)[0], np.full((8, 12, 1), 77, np.uint8)], axis=-1)
    Image.fromarray(rgba, "RGBA").save(raw / "low" / "00000.png")

    img, notes = decode_rgb(raw / "low" / "00001.png", to_8bit=False)
    assert notes == ["gray", "alpha"]  # what it is: grayscale, replicated to RGB, and alpha, dropped
    assert (img == gray[..., None]).all()
    assert decode_rgb(raw / "low" / "00000.png", to_8bit=False)[1] == ["alpha"]  # colour with alpha: alpha only

    report = pack(raw, tmp_path / "out", PackOptions(workers=1))
    assert (report.gray, report.alpha) == (["low/00001.png"], ["low/00000.png", "low/00001.png"])


# ------------------------------------------------------------------ decode: EXIF rotation behind a size mismatch

def _save_with_orientation(path, rgb, orientation):
    exif = Image.Exif()
    exif[0x0112] = orientation
    Image.fromarray(rgb).save(path, exif=exif)


@pytest.mark.parametrize("tag", [6, 8])
def test_a_size_mismatch_from_an_exif_rotation_gets_the_fix(tmp_path, tag):
    raw = make_raw(tmp_path / "raw", 1, size=(40, 56))
    low, high = raw / "low" / "00000.png", raw / "high" / "00000.png"
    _save_with_orientation(low, np.ascontiguousarray(np.rot90(pair_pixels(0, 40, 56)[0])), tag)  # stored 56 high
    low_hw, high_hw = probe_size(low), probe_size(high)
    assert (low_hw, high_hw) == ((56, 40), (40, 56))
    shown = {6: "rotated 90° clockwise", 8: "rotated 90° counter-clockwise"}[tag]
    assert orientation_hint(low, high, low_hw, high_hw) == (
        f"{low} carries EXIF Orientation {tag} (to be shown {shown}), which pack ignores: pixels are packed as "
        "stored, so its width and height are swapped against its partner's; apply the rotation to the pixels and "
        "re-save without the tag, e.g. `ImageOps.exif_transpose(Image.open(f)).save(f)` in Pillow, "
        "`mogrify -auto-orient f` (ImageMagick) or `exiftran -ai f` (JPEG)")
    assert orientation_hint(high, low, high_hw, low_hw).startswith(f"{low} carries EXIF Orientation {tag}")


def test_no_exif_hint_without_a_transposing_tag_or_transposed_sizes(tmp_path):
    raw = make_raw(tmp_path / "raw", 1, size=(40, 56))
    low, high = raw / "low" / "00000.png", raw / "high" / "00000.png"
    rotated = np.ascontiguousarray(np.rot90(pair_pixels(0, 40, 56)[0]))
    _save_with_orientation(low, rotated, 3)  # 180°: sizes stay, so it cannot be the cause
    assert orientation_hint(low, high, (56, 40), (40, 56)) == ""
    _save_with_orientation(low, rotated, 6)
    assert orientation_hint(low, high, (56, 40), (40, 60)) == ""  # not a transposition: another cause
    Image.fromarray(rotated).save(low)  # no tag at all
    assert orientation_hint(low, high, (56, 40), (40, 56)) == ""


# ------------------------------------------------------------------ discovery: names in two Unicode spellings

@pytest.mark.parametrize("skip_unmatched", [False, True])
def test_names_that_differ_only_in_unicode_normalisation_are_refused_naming_both(tmp_path, skip_unmatched):
    raw = make_raw(tmp_path / "raw", 1)
    nfc, nfd = unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café")
    assert nfc != nfd
    lo, hi = pair_pixels(5, 8, 8)
    Image.fromarray(lo).save(raw / "low" / f"{nfc}.png")
    Image.fromarray(hi).save(raw / "high" / f"{nfd}.png")
    match = (re.escape(f"raw: low/{nfc}.png and high/{nfd}.png differ only in Unicode normalisation (NFC/NFD, typical "
                       r"of files copied from macOS): the low is spelled 'caf\u00e9', the high 'cafe\u0301'; pairload "
                       "does not pair them silently: rename one so that both are spelled alike, e.g. `convmv -r -f "
                       f"utf8 -t utf8 --nfc --notest {raw}`") + "$")
    with pytest.raises(PairingError, match=match):
        find_pairs(raw, skip_unmatched=skip_unmatched)
    os.rename(raw / "high" / f"{nfd}.png", raw / "high" / f"{nfc}.png")  # the fix the message gives
    assert [p.low_rel for p in find_pairs(raw).pairs] == ["low/00000.png", f"low/{nfc}.png"]


# ------------------------------------------------------------------ discovery: a test pair linked to a train pair

def test_a_test_pair_of_symlinks_to_a_train_pair_is_refused_naming_both_pairs(tmp_path, capsys):
    raw = tmp_path / "raw"
    make_raw(raw, 2, split="train")
    make_raw(raw, 1, split="test", start=10)
    for side in ("low", "high"):
        (raw / "test" / side / "00000.png").symlink_to(f"../../train/{side}/00000.png")
    match = (r"raw: the 'test' pair test/low/00000.png \+ test/high/00000.png and the 'train' pair "
             r"train/low/00000.png \+ train/high/00000.png are the same files \(symlinks\); an image in two splits "
             r"leaks test data into training: remove the copy from one split")
    with pytest.raises(PairingError, match=match):
        find_pairs(raw)
    assert main(["pack", str(raw), str(tmp_path / "out"), "--workers", "1"]) == 1
    assert re.search(match, capsys.readouterr().err)
    assert not (tmp_path / "out" / "manifest.json").exists()
    (raw / "test" / "high" / "00000.png").unlink()  # only the low linked: still one image in two splits
    (raw / "test" / "high" / "00000.png").write_bytes((raw / "test" / "high" / "00010.png").read_bytes())
    with pytest.raises(PairingError, match=r"'test' pair test/low/00000.png \+ test/high/00000.png and the 'train' "
                                           r"pair train/low/00000.png \+ train/high/00000.png share one low file"):
        find_pairs(raw)


# ------------------------------------------------------------------ pairs files

def test_a_repeated_line_of_a_pairs_file_is_named_with_both_line_numbers(tmp_path):
    raw = make_raw(tmp_path / "raw", 3)
    pf = tmp_path / "pairs.txt"
    pf.write_text("low/00000.png high/00000.png\n# a comment\nlow/00001.png high/00001.png\n"
                  "low/00000.png\thigh/00000.png\n")
    match = (rf"^{re.escape(str(pf))}:4: repeats line 1 of {re.escape(str(pf))} \(the same pair low/00000.png \+ "
             r"high/00000.png\); a pair is listed once: delete the repeated line 4$")
    with pytest.raises(PairingError, match=match):
        find_pairs(raw, pairs_file=pf)


def test_a_pairs_file_may_start_with_a_bom(tmp_path):
    raw = make_raw(tmp_path / "raw", 2)
    pf = tmp_path / "pairs.txt"
    pf.write_text("low/00000.png high/00000.png\nlow/00001.png high/00001.png\n", encoding="utf-8-sig")
    assert pf.read_bytes().startswith(b"\xef\xbb\xbf")
    assert [p.low_rel for p in find_pairs(raw, pairs_file=pf).pairs] == ["low/00000.png", "low/00001.png"]


def test_an_invisible_character_in_a_pairs_file_name_is_shown_escaped(tmp_path):
    raw = make_raw(tmp_path / "raw", 2)
    pf = tmp_path / "pairs.txt"
    pf.write_text("low/00000.png high/00000.png\nlow/\u200b00001.png high/00001.png\n", encoding="utf-8-sig")
    match = (rf"^{re.escape(str(pf))}:2: 'low/\\u200b00001.png' does not exist under {re.escape(str(raw))}: the "
             r"name holds invisible characters \(U\+200B ZERO WIDTH SPACE\), and the line is not a pair of names in "
             r"the side folders either \(low/low/\\u200b00001.png \+ high/high/00001.png\); delete them from the line "
             r"\(low/00001.png exists\)$")
    with pytest.raises(PairingError, match=match):
        find_pairs(raw, pairs_file=pf)


def test_pack_refuses_the_rotated_pair_naming_the_exif_tag(tmp_path):
    from pairload import ImageError
    from pairload.pack import PackOptions, pack

    raw = make_raw(tmp_path / "raw", 2, size=(40, 56))
    _save_with_orientation(raw / "low" / "00001.png", np.ascontiguousarray(np.rot90(pair_pixels(1, 40, 56)[0])), 6)
    with pytest.raises(ImageError, match=r"00001.png is 40x56 but .*00001.png is 56x40; a pair must have one size .*"
                                         r"carries EXIF Orientation 6 .*exif_transpose"):
        pack(raw, tmp_path / "shards", PackOptions(workers=1))


def test_packing_the_low_folder_itself_points_at_the_folder_that_holds_both_sides(tmp_path):
    raw = make_raw(tmp_path / "LOL", 2)
    with pytest.raises(PairingError, match=r"LOL/low: is the low side of a dataset, and its high side high/ sits "
                                           r"beside it; pack the folder that holds both: `pairload pack .*LOL SHARDS`"):
        find_pairs(raw / "low")
