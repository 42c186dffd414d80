"""What pack measures of every pair and what it concludes (#58): each pair's shift, hashes, fingerprints and brightness
in the index; `--max-shift` refusing (or, with `--skip-misaligned`, leaving out) pairs shifted beyond it, each named;
swapped sides refused, exposure brackets accepted; dark targets listed; `info`'s statistics. Real photographs
(scikit-image's), the input a darkened noisy copy of the target shifted by a known amount."""

from __future__ import annotations

import json
import re
from pathlib import Path

import cv2
import numpy as np
import pytest

from conftest import write_rgb
from pairload import open_shards
from pairload.audit.measures import VERSION, exact_hash, perceptual_hash
from pairload.audit.packing import MisalignedPairs, SwappedSides
from pairload.cli import main
from pairload.errors import ConfigError, ShardError
from pairload.format.columns import ColumnFile, write_columns
from pairload.pack import PackOptions, pack
from pairload.read.info import checks_line
from pairload.read.mix import ShardMix
from pairload.read.shards import info

data = pytest.importorskip("skimage.data")
PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "cat", "immunohistochemistry")
SHIFTS = ((0, 0), (1, 0), (0, 2), (4, 0), (0, 0), (-2, 1))  # (dy, dx) of each pair's target against its input
H, W = 112, 160


def photo(k: int) -> np.ndarray:
    """A crop of real photograph k, with room around it for shifting."""
    img = getattr(data, PHOTOS[k % len(PHOTOS)])()[..., :3]
    y, x = img.shape[0] // 2 - H // 2 - 8, img.shape[1] // 2 - W // 2 - 8
    return np.ascontiguousarray(img[y:y + H + 16, x:x + W + 16])


def pair(k: int, shift=(0, 0), gain: float = 0.15) -> tuple[np.ndarray, np.ndarray]:
    """(input, target): the target is the photo moved by `shift` (its content at (y + dy, x + dx)), the input the
    unmoved photo darkened by `gain` with noise."""
    big = photo(k)
    moved = cv2.warpAffine(big, np.float32([[1, 0, shift[1]], [0, 1, shift[0]]]), big.shape[1::-1],
                           borderMode=cv2.BORDER_REFLECT)
    rng = np.random.default_rng(k)
    low = np.clip(big * gain + rng.normal(0, 3, big.shape), 0, 255).astype(np.uint8)
    return low[8:8 + H, 8:8 + W], moved[8:8 + H, 8:8 + W]


def dataset(root: Path, shifts=SHIFTS, low: str = "low", high: str = "high") -> Path:
    for k, shift in enumerate(shifts):
        lo, hi = pair(k, shift)
        write_rgb(root / low / f"{k:03d}.png", lo)
        write_rgb(root / high / f"{k:03d}.png", hi)
    return root


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    root = tmp_path_factory.mktemp("trust")
    report = pack(dataset(root / "raw"), root / "shards", PackOptions(workers=1))
    return root, report


def test_each_pairs_shift_is_stored_within_half_a_pixel_with_its_hashes_and_brightness(packed):
    root, _ = packed
    ds = open_shards(root / "shards")
    facts = ds.facts()
    for i, key in enumerate(ds.keys):
        dy, dx, confidence = facts.shift[i]
        assert confidence >= 0.3 and abs(dy - SHIFTS[int(key)][0]) <= 0.5 and abs(dx - SHIFTS[int(key)][1]) <= 0.5, key
        low, high = ds.arrays(i)
        assert (facts.low_exact[i], facts.high_exact[i]) == (exact_hash(low), exact_hash(high))
        assert (facts.low_fp[i], facts.high_fp[i]) == (perceptual_hash(low), perceptual_hash(high))
        assert facts.luma[i, 0] < facts.luma[i, 1] / 3  # a darkened input
    assert ds.facts([4, 1]).shift.tolist() == facts.shift[[4, 1]].tolist()
    # which definition of the measures made them, for an audit to tell (`audit.measures.VERSION`)
    manifest = json.loads((root / "shards" / "manifest.json").read_text())
    assert manifest["splits"]["train"]["measures"] == ds.index.measures == VERSION


def test_a_damaged_measures_version_is_refused_by_name(packed, tmp_path):
    root, _ = packed
    doc = json.loads((root / "shards" / "manifest.json").read_text())
    doc["splits"]["train"]["measures"] = "4"
    copy = tmp_path / "shards"
    copy.mkdir()
    for f in (root / "shards").iterdir():
        if f.is_file() and f.name != "manifest.json":
            (copy / f.name).symlink_to(f)
    (copy / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(ShardError, match=r"split 'train' has 'measures' '4', expected a positive whole number"):
        open_shards(copy)


def test_the_summary_counts_the_pairs_shifted_by_a_pixel_and_names_the_largest(packed):
    _, report = packed
    line = next(line for line in report.lines(PackOptions()) if line.startswith("alignment:"))
    assert re.match(r"alignment: 4 of 6 pairs shifted by 1 px or more \(the largest: low/003\.png ↔ high/003\.png: "
                    r"shifted by 4\.\d px \(dy \+[34]\.\d\d, dx [+-]0\.\d\d; confidence [01]\.\d\d\)\)", line), line


def test_info_shows_each_splits_shifts_and_brightness(packed):
    root, _ = packed
    got = info(root / "shards")["train"]
    assert got["shift"]["shifted"] == 4 and got["shift"]["measured"] == 6 and 3.5 < got["shift"]["max"] < 4.5
    assert got["exposure"]["brighter_inputs"] == 0 and got["exposure"]["input"]["median"] < 0.15
    assert re.match(r"train: shift median [\d.]+ px, 95th percentile [\d.]+ px, largest 4\.\d+ px; 4 of 6 pairs "
                    r"shifted by 1 px or more; luma of the inputs 0\.\d\d \(", checks_line("train", got))


def test_max_shift_refuses_naming_every_pair_beyond_it_and_writes_nothing(tmp_path):
    raw = dataset(tmp_path / "raw")
    with pytest.raises(MisalignedPairs, match=r"^3 pairs are shifted by more than --max-shift 1\.5 px \(listed "
                       r"above; the largest: low/003\.png ↔ high/003\.png: shifted by 4\.\d px .*\); align or replace "
                       r"them, raise --max-shift, or pass --skip-misaligned to pack the others") as caught:
        pack(raw, tmp_path / "out", PackOptions(workers=1, max_shift=1.5))
    assert [line.split(":")[1].strip() for line in caught.value.lines] == [
        "low/002.png ↔ high/002.png", "low/003.png ↔ high/003.png", "low/005.png ↔ high/005.png"]
    assert not (tmp_path / "out" / "manifest.json").exists() and not list((tmp_path / "out").glob("*.tar*"))


def test_the_cli_prints_a_line_per_misaligned_pair_then_the_error(tmp_path, capsys):
    raw = dataset(tmp_path / "raw", SHIFTS[:4])
    assert main(["pack", str(raw), str(tmp_path / "out"), "--workers", "1", "--max-shift", "3"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0].startswith("misaligned: low/003.png ↔ high/003.png: shifted by 4.")
    assert err[1].startswith("error: 1 pair is shifted by more than --max-shift 3 px (listed above;")


def test_skip_misaligned_packs_the_others_and_lists_every_one_left_out(tmp_path):
    report = pack(dataset(tmp_path / "raw"), tmp_path / "out", PackOptions(workers=1, max_shift=1.5,
                                                                           skip_misaligned=True))
    assert list(open_shards(tmp_path / "out").keys) == ["000", "001", "004"]
    doc = json.loads((tmp_path / "out" / "manifest.json").read_text())
    left = doc["report"]["misaligned"]
    assert [(m["key"], m["low"], m["high"]) for m in left] == [
        ("002", "low/002.png", "high/002.png"), ("003", "low/003.png", "high/003.png"),
        ("005", "low/005.png", "high/005.png")]
    assert abs(left[1]["dy"] - 4) <= 0.5 and doc["options"]["max_shift"] == 1.5
    lines = report.lines(PackOptions())
    at = lines.index("skipped 3 misaligned pairs (shifted by more than --max-shift 1.5 px; --skip-misaligned):")
    assert lines[at + 2].startswith("  train: low/003.png ↔ high/003.png: shifted by 4.")


def test_swapped_sides_are_refused_naming_the_fix_and_the_option_that_accepts_them(tmp_path):
    raw = dataset(tmp_path / "raw", SHIFTS[:3], low="input", high="target")
    swapped = PackOptions(workers=1, low_dir="target", high_dir="input")
    with pytest.raises(SwappedSides, match=r"^split 'train': 3 of the 3 pairs whose sides differ clearly in "
                       r"brightness have the brighter image as input \(median luma 0\.\d\d for the inputs, 0\.0\d for "
                       r"the targets\), e\.g\. target/\d+\.png ↔ input/\d+\.png: the input and target sides look "
                       r"swapped .*; swap --low-dir and --high-dir \(or the columns of --pairs-file\), or pass "
                       r"--allow-bright-inputs if this dataset's inputs really are brighter"):
        pack(raw, tmp_path / "out", swapped)
    assert not (tmp_path / "out" / "manifest.json").exists()
    report = pack(raw, tmp_path / "out", PackOptions(workers=1, low_dir="target", high_dir="input",
                                                     allow_bright_inputs=True))
    assert any(line.startswith("bright inputs: split 'train': 3 of the 3 pairs") and
               line.endswith("accepted: --allow-bright-inputs given") for line in report.lines(swapped))


def test_exposure_brackets_sharing_a_target_are_accepted_and_measured_against_it(tmp_path):
    # SICE's layout: <seq>/<k>.JPG, several exposures, over-exposed ones brighter than Label/<seq>.JPG
    root = tmp_path / "SICE" / "Dataset_Part1"
    for seq in (1, 2):
        _, target = pair(seq)
        write_rgb(root / "Label" / f"{seq}.png", target)
        for k, gain in enumerate((0.3, 2.0, 2.6, 3.2)):
            write_rgb(root / str(seq) / f"{k}.png", np.clip(target * gain, 0, 255).astype(np.uint8))
    report = pack(tmp_path / "SICE", tmp_path / "out", PackOptions(workers=1))
    assert any("accepted: paired by 'sequence to label'" in line for line in report.lines(PackOptions()))
    facts = open_shards(tmp_path / "out").facts()
    # each exposure measured against its scene's one target (the over-exposed ones' clipping blurs it by up to 1 px)
    assert (facts.shift[:, 2] >= 0.3).all() and np.abs(facts.shift[[0, 4], :2]).max() <= 0.5
    assert len(set(facts.high_exact.tolist())) == 2 and (facts.luma[:, 0] > facts.luma[:, 1]).sum() == 6


def test_targets_far_darker_than_the_others_are_listed_not_refused(tmp_path):
    raw = tmp_path / "raw"
    for k in range(9):
        low, high = pair(k % len(PHOTOS), gain=0.1)
        if k >= len(PHOTOS):  # the photos again, mirrored: no two pairs alike
            low, high = np.ascontiguousarray(low[:, ::-1]), np.ascontiguousarray(high[:, ::-1])
        if k == 7:
            high = (high * 0.15).astype(np.uint8)  # one dark target, as LOL's our485/high holds four
            low = (low * 0.15).astype(np.uint8)
        write_rgb(raw / "low" / f"{k:03d}.png", low)
        write_rgb(raw / "high" / f"{k:03d}.png", high)
    report = pack(raw, tmp_path / "out", PackOptions(workers=1))
    warning = [line for line in report.lines(PackOptions()) if line.startswith("warning:")]
    assert len(warning) == 1 and re.match(r"warning: split 'train': 1 target is far darker than the split's others "
                                          r"\(mean luma under 0\.\d+; the split's median 0\.\d\d\): high/007\.png "
                                          r"\(0\.0\d\d\); look at it", warning[0]), warning
    assert info(tmp_path / "out")["train"]["exposure"]["dark_targets"] == ["007"]


def test_frames_of_a_sequence_sharing_one_target_are_each_measured(tmp_path):
    # SMID's layout: every frame of a scene against its one long exposure
    shifts = ((0, 0), (2, 0), (0, -3))
    _, target = pair(1)
    write_rgb(tmp_path / "raw" / "high" / "scene" / "long.png", target)
    for f, shift in enumerate(shifts):
        moved = cv2.warpAffine(target, np.float32([[1, 0, -shift[1]], [0, 1, -shift[0]]]), (W, H),
                               borderMode=cv2.BORDER_REFLECT)  # the input moved back: the target is it moved by shift
        write_rgb(tmp_path / "raw" / "low" / "scene" / f"{f:04d}.png", (moved * 0.2).astype(np.uint8))
    pack(tmp_path / "raw", tmp_path / "out", PackOptions(workers=2, sequences=True))
    ds = open_shards(tmp_path / "out")
    assert ds.sequences.target == "sequence"
    np.testing.assert_allclose(ds.facts().shift[:, :2], shifts, atol=0.5)


def test_a_pack_written_before_the_measures_loads_without_them(packed, tmp_path):
    root, _ = packed
    old = tmp_path / "old"
    old.mkdir()
    index = ColumnFile(root / "shards" / "train.index")
    measured = ("low_exact", "high_exact", "low_fp", "high_fp", "shift", "luma")
    sha, size = write_columns(old / "train.index", {k: v for k, v in index.columns.items() if k not in measured})
    doc = json.loads((root / "shards" / "manifest.json").read_text())
    doc["splits"]["train"]["index"].update(sha256=sha, bytes=size)
    (old / "manifest.json").write_text(json.dumps(doc))
    for tar in (root / "shards").glob("*.tar"):
        (old / tar.name).write_bytes(tar.read_bytes())
    ds = open_shards(old)
    assert ds.facts() is None and ds.index.shift is None and "shift" not in info(old)["train"]
    assert ShardMix({"a": ds, "b": open_shards(root / "shards")}).facts() is None
    mix = ShardMix({"a": open_shards(root / "shards"), "b": open_shards(root / "shards").as_targets()})
    assert mix.facts().shift.shape == (12, 3) and (mix.facts().shift[6:] == 0).all()


@pytest.mark.parametrize("opts, match", [
    (dict(max_shift=0), r"^--max-shift 0: expected a positive number of pixels"),
    (dict(skip_misaligned=True), r"^--skip-misaligned: give --max-shift PX too"),
    (dict(max_shift=2, skip_misaligned=True, sequences=True), r"^--skip-misaligned with --sequences: a frame left "
                                                              r"out breaks its sequence's frame numbers"),
    (dict(targets_only=True, allow_bright_inputs=True), r"^--allow-bright-inputs: compares each input with its "
                                                        r"target, and --targets-only stores targets alone"),
])
def test_trust_options_that_cannot_work_are_refused(opts, match):
    with pytest.raises(ConfigError, match=match):
        PackOptions(**opts)
