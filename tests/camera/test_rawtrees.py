"""The dataset replicas of tests/rawtrees.py say what they hold: SID's list files in SID's format, ELD's pairing and
ratios by ELD's own rule, every raw file read back by LibRaw as described, and the `.npy` trees paired by
pairload exactly as their descriptions say."""

import re

import numpy as np
import pytest

from rawtrees import (ELD_CAMERAS, PATTERNS, SMID_TEST, build_eld, build_sdsd, build_sid, build_sid_fuji,
                      build_smid)

from pairload.folders.discover import find_pairs
from pairload.folders.pairsfile import is_pairs_list

SID_LINE = re.compile(r"\./Sony/short/(\d)(\d{4})_(\d\d)_(0\.1|0\.04|0\.033)s\.ARW "
                      r"\./Sony/long/\1\2_00_(10|30)s\.ARW ISO\d+ F\d+(\.\d)?")


def test_sid_tree_lists_and_files_are_sids(tmp_path):
    pytest.importorskip("rawpy")
    from pairload.camera.files import develop, exposure_from_name, read_mosaic

    tree = build_sid(tmp_path)
    assert tree.splits == {"train": 6, "val": 2, "test": 2}
    for split, digit in (("train", "0"), ("val", "2"), ("test", "1")):
        listing = tree.root / f"Sony_{split}_list.txt"
        text = listing.read_text()
        assert text.endswith("\n") and "\r" not in text and is_pairs_list(listing)
        found = [SID_LINE.fullmatch(line) for line in text.splitlines()]
        assert all(m and m.group(1) == digit for m in found), text
        assert [line.split()[:2] for line in text.splitlines()] == [[f"./{p.low}", f"./{p.high}"]
                                                                   for p in tree.split(split)]
        assert f"--pairs-file {split}={listing}" in " ".join(tree.pack_argv("out"))
    assert sorted({round(p.ratio) for p in tree.pairs}) == [100, 250, 300]
    assert {p.pattern for p in tree.pairs} == set(PATTERNS)
    for rel, spec in tree.files.items():
        got = read_mosaic(tree.root / rel)
        np.testing.assert_array_equal(got.packed, spec.packed())
        assert (got.pattern, got.black, got.white) == (spec.pattern, (512,) * 4, 16383)
        assert got.exposure == exposure_from_name(rel) == spec.exposure and got.camera == "SONY ILCE-7SM2"
    high = tree.files[tree.pairs[0].high]
    assert develop(tree.root / high.rel).shape == (*high.shape, 3)  # the target: 2x the packed input's sides


def test_sid_fuji_x_trans_files_are_refused_by_name(tmp_path):
    pytest.importorskip("rawpy")
    from pairload.errors import ImageError
    from pairload.camera.files import read_mosaic

    tree = build_sid_fuji(tmp_path)
    assert tree.refused and tree.splits == {"train": 1, "test": 1}
    for rel in tree.files:
        assert rel.endswith(".RAF")
        with pytest.raises(ImageError, match=r"Fuji X-Trans"):
            read_mosaic(tree.root / rel)


def test_eld_pairs_follow_elds_nearest_reference_and_iso_exposure_ratio(tmp_path):
    pytest.importorskip("rawpy")
    from pairload.camera.files import read_mosaic

    tree = build_eld(tmp_path, cameras=("SonyA7S2", "NikonD850", "CanonEOS700D"), scenes=(3,))
    assert len(tree.files) == 3 * 16 and tree.splits == {"test": 3 * 6}
    references = np.array([1, 6, 11, 16])
    isos = {4: 800, 5: 800, 9: 1600, 10: 1600, 14: 3200, 15: 3200}
    for pair in tree.pairs:
        low_id, high_id = (int(re.search(r"IMG_(\d{4})\.", p).group(1)) for p in (pair.low, pair.high))
        assert high_id == references[np.argmin(np.abs(low_id - references))] and pair.split == "test"
        low, high = read_mosaic(tree.root / pair.low), read_mosaic(tree.root / pair.high)
        # ELD's metainfo ratio, ISO from the protocol (references at ISO 100)
        assert pair.ratio == pytest.approx((100 * high.exposure) / (isos[low_id] * low.exposure))
        assert pair.ratio == (100 if low_id in (4, 9, 14) else 200)
        assert pair.exposure_ratio == pytest.approx(high.exposure / low.exposure)
        camera = pair.low.split("/")[0]
        ext, model, black = ELD_CAMERAS[camera]
        assert pair.low.endswith(ext) and low.camera == model and low.black == (black,) * 4
        assert low.pattern == high.pattern == pair.pattern
        np.testing.assert_array_equal(low.packed, tree.files[pair.low].packed())
        np.testing.assert_array_equal(high.packed, tree.files[pair.high].packed())
    listed = (tmp_path / "ELD_pairs.txt").read_text().splitlines()
    assert [ln.split()[:2] for ln in listed if not ln.startswith("#")] == [[p.low, p.high] for p in tree.pairs]


def _found(raw, **options):
    return sorted((p.low_rel, p.high_rel, p.split) for p in find_pairs(raw, **options).pairs)


def test_smid_and_sdsd_pairs_are_what_pairload_finds(tmp_path):
    smid = build_smid(tmp_path / "a")
    assert smid.splits == {"train": 5, "test": 2} and len((smid.root / "test_list.txt").read_text().split()) == 49
    assert all(("/0013/" in p.low) == (p.split == "test") for p in smid.pairs) and "0013" in SMID_TEST
    expected = sorted((p.low, p.high, p.split) for p in smid.pairs)
    assert _found(smid.root, pairs_file=smid.pack_args[1]) == expected
    by_folders = _found(smid.root, low_dir="SMID_LQ_np", high_dir="SMID_Long_np")
    assert [(lo, hi) for lo, hi, _ in by_folders] == [(lo, hi) for lo, hi, _ in expected]
    for part, test_scene in (("indoor", "pair1/"), ("outdoor", "MVI_0898/")):
        sdsd = build_sdsd(tmp_path / part, part)
        assert sdsd.splits == {"train": 4, "test": 2}
        assert all((test_scene in p.low) == (p.split == "test") for p in sdsd.pairs)
        expected = sorted((p.low, p.high, p.split) for p in sdsd.pairs)
        assert _found(sdsd.root, pairs_file=sdsd.pack_args[1]) == expected
        assert [(lo, hi) for lo, hi, _ in _found(sdsd.root)] == [(lo, hi) for lo, hi, _ in expected]
    arrays = [np.load(smid.root / rel) for rel in smid.files]
    for rel, array in zip(smid.files, arrays):
        np.testing.assert_array_equal(array, smid.files[rel].array())
        assert array.dtype == np.uint8 and array.shape == (20, 26, 3)
    assert len({a.tobytes() for a in arrays}) == len(arrays)  # no two files alike: a mis-pairing shows
