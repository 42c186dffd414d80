"""`pack --sequences`: tiny replicas of the video and burst datasets' layouts (SDSD `.npy`, SMID with DRV's copies
beside its targets, DID, BVI-RLV), packed by the commands docs/datasets.md gives, as written. Every frame's pixels
encode its sequence and its frame (red = the sequence's number, green = the frame's, blue = (row + column) % 251), a
frame's target is 255 minus it, and a SMID sequence's one target is 255 minus its frame 0; so a frame packed in the
wrong sequence or order, a colour swap and a wrong target each fail one comparison."""

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from pairload.errors import ConfigError, PairingError, ShardError
from pairload.format.sequences import Sequences
from pairload.pack import PackOptions, pack
from pairload.read.shards import info, open_shards, verify

from conftest import write_rgb
from test_cli import run

ROOT = Path(__file__).resolve().parents[2]
H, W = 12, 16


def frame(sequence: int, number: int, height: int = H, width: int = W) -> np.ndarray:
    """RGB uint8 frame `number` of sequence `sequence`."""
    yy, xx = np.mgrid[0:height, 0:width]
    return np.stack([np.full_like(yy, sequence), np.full_like(yy, number), (yy + xx) % 251], -1).astype(np.uint8)


def save_bgr(path: Path, rgb: np.ndarray) -> None:
    """An `.npy` frame as SDSD and SMID store them: H×W×3 uint8, BGR."""
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, np.ascontiguousarray(rgb[..., ::-1]))


def build_sdsd(root: Path, low: str = "input") -> dict[str, int]:
    """`SDSD/indoor_np/{input,GT}/pair<N>/<NNNN>.npy`: pair1, pair2 and pair10 (which name order puts second)."""
    ids = {"pair1": 1, "pair2": 2, "pair10": 10}
    for name, s in ids.items():
        for f in range(1, 4):
            save_bgr(root / "SDSD/indoor_np" / low / name / f"{f:04d}.npy", frame(s, f))
            save_bgr(root / "SDSD/indoor_np/GT" / name / f"{f:04d}.npy", 255 - frame(s, f))
    return ids


def build_smid(root: Path) -> dict[str, int]:
    """`SMID/SMID_LQ_np/<id>/<NNNN>.npy` and one target per sequence in `SMID_Long_np/<id>/`, beside DRV's raw long
    exposure and its half-size development, which SMID's loader skips; and `test_list.txt`."""
    ids = {"0001": 1, "0002": 2}
    for name, s in ids.items():
        for f in range(1, 3 + s):
            save_bgr(root / "SMID/SMID_LQ_np" / name / f"{f:04d}.npy", frame(s, f))
        long = root / "SMID/SMID_Long_np" / name
        save_bgr(long / "0001.npy", 255 - frame(s, 0))
        write_rgb(long / "half0001_00_10s.png", frame(s, 0))
        (long / "0001_00_10s.ARW").write_bytes(b"DRV's raw long exposure")
    (root / "SMID/test_list.txt").write_text("0002\n")
    return ids


def build_did(root: Path) -> dict[str, int]:
    """`DID_1080/{input,GT}/video<N>/<NNN>.jpg` with the split lists (CRLF, video names)."""
    ids = {"video1": 1, "video7": 7}
    for name, s in ids.items():
        for f in range(1, 3):
            write_rgb(root / "DID_1080/input" / name / f"{f:03d}.jpg", frame(s, f))
            write_rgb(root / "DID_1080/GT" / name / f"{f:03d}.jpg", 255 - frame(s, f))
    (root / "DID_1080/train_list.txt").write_bytes(b"video1\r\n")
    (root / "DID_1080/test_list.txt").write_bytes(b"video7\r\n")
    return ids


def build_bvi(root: Path) -> dict[str, int]:
    """`BVI-RLV dataset/input/S<xx>/low_light_{10,20}/<NNNNN>.png` ↔ `gt/S<xx>/normal_light_{10,20}/<NNNNN>.png`:
    each light level of a scene is a sequence."""
    ids = {}
    for scene in ("S01", "S02"):
        for level in ("10", "20"):
            s = ids.setdefault(f"{scene}+low_light_{level}", len(ids) + 1)
            for f in range(1, 5):
                write_rgb(root / "BVI-RLV dataset/input" / scene / f"low_light_{level}" / f"{f:05d}.png", frame(s, f))
                write_rgb(root / "BVI-RLV dataset/gt" / scene / f"normal_light_{level}" / f"{f:05d}.png",
                          255 - frame(s, f))
    return ids


def documented_commands() -> dict[str, str]:
    """The commands of docs/datasets.md's "Video and burst datasets", by the folder each packs."""
    text = (ROOT / "docs/datasets.md").read_text(encoding="utf-8")
    section = text.split("## Video and burst datasets", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return {shlex.split(line)[2]: line for line in block.splitlines() if line.startswith("pairload pack ")}


def pack_as_documented(tmp_path: Path, folder: str) -> tuple[Path, str]:
    """Run the documented command that packs `folder` in `tmp_path`, as written; (its shards, its output)."""
    line = documented_commands()[folder]
    res = run(*shlex.split(line)[1:], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    return tmp_path / shlex.split(line)[3], res.stdout


def check_frames(shards: Path, ids: dict[str, int], shared_target: bool = False) -> Sequences:
    """Every sample's pixels are frame (its sequence, its number), in order, its target 255 minus it (or its
    sequence's frame 0 with `shared_target`); returns the split's sequences."""
    ds = open_shards(shards)
    seqs = ds.index.sequences
    assert sorted(seqs.names) == sorted(ids) and seqs.target == ("sequence" if shared_target else "frame")
    of = seqs.of_samples()
    for i in range(len(ds)):
        key, low, high = ds[i]
        name, _, number = key.rpartition("+")
        assert name == seqs.names[of[i]]
        np.testing.assert_array_equal(low, frame(ids[name], int(number)))
        np.testing.assert_array_equal(high, 255 - frame(ids[name], 0 if shared_target else int(number)))
    return seqs


def test_the_documented_commands_are_one_per_layout():
    assert set(documented_commands()) == {"SDSD/indoor_np", "SMID", "DID_1080", "BVI-RLV dataset"}


def test_sdsd_npy_packs_each_pair_folder_as_a_sequence_in_name_order_and_rgb(tmp_path):
    ids = build_sdsd(tmp_path)
    shards, out = pack_as_documented(tmp_path, "SDSD/indoor_np")
    assert "3 sequences of 3 frames, one target per frame" in out
    seqs = check_frames(shards, ids)
    # pair1+… all come before pair10+…, which come before pair2+…: name order
    assert seqs.names == ("pair1", "pair10", "pair2") and seqs.starts.tolist() == [0, 3, 6]
    assert seqs.counts.tolist() == [3, 3, 3]
    doc = json.loads((shards / "manifest.json").read_text())
    assert doc["options"]["sequences"] is True and doc["options"]["npy_bgr"] is True
    assert doc["splits"]["train"]["sequence_target"] == "frame"
    assert verify(shards).samples == 9


def test_smid_frames_share_their_sequences_one_target_and_drvs_copies_are_reported(tmp_path):
    ids = build_smid(tmp_path)
    shards, out = pack_as_documented(tmp_path, "SMID")
    assert "2 sequences of 3 to 4 frames, one target per sequence" in out
    assert re.search(r"not packed \(not the scene's target\): 2 file\(s\) in SMID_Long_np/0001: 0001_00_10s.ARW, "
                     r"half0001_00_10s.png; DRV's raw long exposure", out)
    seqs = check_frames(shards, ids, shared_target=True)
    assert seqs.starts.tolist() == [0, 3] and seqs.counts.tolist() == [3, 4]
    index = open_shards(shards).index
    # the target is stored once per sequence: the other frames point at their first frame's
    assert index.shares_high.tolist() == [-1, 0, 0, -1, 3, 3, 3]
    assert len(set(index.high[:3].tolist())) == 1 and index.as_targets().sequences is index.sequences
    assert info(shards)["train"]["sequences"] == {"count": 2, "frames": [3, 4], "target": "sequence",
                                                  "first": {"0001": 3, "0002": 4}}


def test_did_and_bvi_rlv_pack_each_video_and_light_level_as_a_sequence(tmp_path):
    did = build_did(tmp_path)
    shards, _ = pack_as_documented(tmp_path, "DID_1080")
    seqs = open_shards(shards).index.sequences
    assert seqs.names == ("video1", "video7") and seqs.counts.tolist() == [2, 2]  # JPEG: names and counts
    assert set(did) == set(seqs.names)
    ids = build_bvi(tmp_path)
    shards, out = pack_as_documented(tmp_path, "BVI-RLV dataset")
    assert "paired by side word swapped in folders" in out
    check_frames(shards, ids)


def test_sequences_round_trip_both_indexes_cut_across_shards_and_a_plain_pack_has_none(tmp_path):
    ids = build_bvi(tmp_path)
    raw = tmp_path / "BVI-RLV dataset"
    small = dict(workers=1, shard_size=64 * 1024)
    for index in ("binary", "json"):
        pack(raw, tmp_path / index, PackOptions(sequences=True, index=index, **small))
        seqs = check_frames(tmp_path / index, ids)
        assert seqs.names == ("S01+low_light_10", "S01+low_light_20", "S02+low_light_10", "S02+low_light_20")
        shard = open_shards(tmp_path / index).index.shard
        assert shard.max() >= 1 and (np.diff(shard) >= 0).all()  # a sequence may span two shards, in order
    pack(raw, tmp_path / "plain", PackOptions(**small))
    doc = json.loads((tmp_path / "plain/manifest.json").read_text())
    assert "sequences" not in doc["splits"]["train"] and "sequences" not in doc["options"]
    assert open_shards(tmp_path / "plain").index.sequences is None


def test_verify_refuses_sequences_that_do_not_match_the_keys(tmp_path):
    build_sdsd(tmp_path, low="LQ")  # SDSD's README names the input folder LQ
    pack(tmp_path / "SDSD/indoor_np", tmp_path / "s", PackOptions(workers=1, sequences=True, index="json"))
    path = tmp_path / "s/manifest.json"
    doc = json.loads(path.read_text())
    doc["splits"]["train"]["sequences"]["names"] = ["pair1", "pair2", "pair10"]
    path.write_text(json.dumps(doc))
    with pytest.raises(ShardError, match=r"split 'train': sample pair10\+0001 lies in sequence 'pair2' of the "
                                         r"\"sequences\" entry, but its key's folder is 'pair10'"):
        verify(tmp_path / "s")


def refused(tmp_path: Path, root: Path) -> str:
    res = run("pack", root, tmp_path / "out", "--sequences", "--workers", "1")
    assert res.returncode == 1 and res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    return res.stderr


def test_frames_numbered_without_zero_padding_are_refused_naming_two_of_them(tmp_path):
    for f in (1, 2, 10):
        write_rgb(tmp_path / "v/input/video1" / f"{f}.png", frame(1, f))
        write_rgb(tmp_path / "v/GT/video1" / f"{f}.png", 255 - frame(1, f))
    assert re.search(r"error: input/video1: frames 10\.png and 2\.png are numbered without zero padding, so name "
                     r"order .* puts 10 before 2; rename the frames with zero-padded numbers", refused(tmp_path,
                                                                                                      tmp_path / "v"))


def test_a_sequence_of_two_sizes_is_refused_naming_both(tmp_path):
    for f, h in ((1, H), (2, H - 2)):
        write_rgb(tmp_path / "v/input/video1" / f"{f:03d}.png", frame(1, f, height=h))
        write_rgb(tmp_path / "v/GT/video1" / f"{f:03d}.png", 255 - frame(1, f, height=h))
    assert re.search(r"error: input/video1: the frames of one sequence differ in size: input/video1/001\.png is "
                     rf"{W}x{H} but input/video1/002\.png is {W}x{H - 2}; .* or pack with --resize WxH",
                     refused(tmp_path, tmp_path / "v"))


def test_a_frame_in_no_sequence_folder_is_refused_by_name(tmp_path):
    write_rgb(tmp_path / "v/input/video1/001.png", frame(1, 1))
    write_rgb(tmp_path / "v/GT/video1/001.png", 255 - frame(1, 1))
    write_rgb(tmp_path / "v/input/stray.png", frame(2, 1))
    write_rgb(tmp_path / "v/GT/stray.png", 255 - frame(2, 1))
    assert re.search(r"error: input/stray\.png: not inside a sequence folder; with --sequences each frame lies in",
                     refused(tmp_path, tmp_path / "v"))


def test_a_folder_holding_frames_and_sequence_folders_is_refused(tmp_path):
    for rel in ("S01/00001.png", "S01/low_light_10/00001.png"):
        write_rgb(tmp_path / "v/input" / rel, frame(1, 1))
        write_rgb(tmp_path / "v/gt" / rel, 255 - frame(1, 1))
    with pytest.raises(PairingError, match=r"input/S01: holds frames and also sequence folders "
                                           r"\(input/S01/low_light_10\)"):
        pack(tmp_path / "v", tmp_path / "out", PackOptions(workers=1, sequences=True))


@pytest.mark.parametrize("a, b, wrong", [("10", "2", True), ("10", "1a", True), ("frame1", "frame10", False),
                                         ("x_10_a", "x_9_a", True), ("0001", "0002", False),
                                         ("00001_00_0.04s", "00001_00_0.1s", False)])
def test_name_order_against_number_order(a, b, wrong):
    from pairload.pack.sequences import misnumbered

    assert misnumbered(a, b) is wrong



def test_a_frame_on_one_side_only_is_an_unmatched_file(tmp_path):
    build_sdsd(tmp_path)
    save_bgr(tmp_path / "SDSD/indoor_np/input/pair2/0004.npy", frame(2, 4))
    with pytest.raises(PairingError, match=r"unmatched images, split 'train': 1 in input without a partner in GT: "
                                           r"input/pair2/0004\.npy"):
        pack(tmp_path / "SDSD/indoor_np", tmp_path / "out", PackOptions(workers=1, sequences=True))
    report = pack(tmp_path / "SDSD/indoor_np", tmp_path / "out", PackOptions(workers=1, sequences=True,
                                                                             skip_unmatched=True))
    assert report.skipped == ["input/pair2/0004.npy"] and report.sequences["train"].startswith("3 sequences of 3 ")


def build_gapped(root: Path, numbers=(1, 2, 3, 7, 8, 9), high_numbers=None) -> Path:
    """`low/vidA/<NNNN>.png` ↔ `high/vidA/<NNNN>.png` numbered `numbers` (frames 0004-0006 lost, as after an
    interrupted copy), and `vidB` of four evenly numbered frames; frame f of vidA holds `frame(1, f)`."""
    for f in numbers:
        write_rgb(root / "low/vidA" / f"{f:04d}.png", frame(1, f))
        write_rgb(root / "high/vidA" / f"{f:04d}.png", 255 - frame(1, f))
    for f in range(4):
        write_rgb(root / "low/vidB" / f"{f:04d}.png", frame(2, f))
        write_rgb(root / "high/vidB" / f"{f:04d}.png", 255 - frame(2, f))
    return root


def test_a_gap_in_the_frame_numbers_is_refused_naming_the_sequence_the_frames_and_the_option(tmp_path):
    build_gapped(tmp_path / "v", numbers=(1, 2, 3, 7, 8, 9, 12))
    assert re.fullmatch(r"error: low/vidA: the frame numbers break, frames 0003 → 0007, step 1 elsewhere \(and 1 more "
                        r"break\(s\)\), so a clip would join 0003 and 0007 as consecutive frames; copy any missing "
                        r"frames back and pack again, or pass --sequence-gaps split \(each evenly numbered run its "
                        r"own sequence: no clip crosses a break\) or --sequence-gaps allow \(keep the sequence whole: "
                        r"clips cross the break\)\n", refused(tmp_path, tmp_path / "v"))
    assert not (tmp_path / "out/manifest.json").exists()


def test_every_tenth_frame_is_evenly_numbered_and_packs(tmp_path):
    build_gapped(tmp_path / "v", numbers=(10, 20, 30, 40))
    report = pack(tmp_path / "v", tmp_path / "out", PackOptions(workers=1, sequences=True))
    assert report.sequences["train"] == "2 sequences of 4 frames, one target per frame"


def test_a_gap_in_the_targets_numbering_is_refused_naming_the_target_folder(tmp_path):
    """A pairs file pairs evenly numbered inputs with targets whose numbers skip (the targets' copy was cut)."""
    raw = tmp_path / "v"
    rows = []
    for k, f in enumerate((1, 2, 3, 7)):
        write_rgb(raw / "low/vidA" / f"{k + 1:04d}.png", frame(1, k))
        write_rgb(raw / "high/vidA" / f"{f:04d}.png", 255 - frame(1, k))
        rows.append(f"low/vidA/{k + 1:04d}.png\thigh/vidA/{f:04d}.png")
    (tmp_path / "pairs.tsv").write_text("\n".join(rows) + "\n")
    with pytest.raises(PairingError, match=r"^high/vidA: the frame numbers break, frames 0003 → 0007, step 1 "
                                           r"elsewhere, so a clip"):
        pack(raw, tmp_path / "out", PackOptions(workers=1, sequences=True, pairs_file=str(tmp_path / "pairs.tsv")))


def test_split_packs_each_evenly_numbered_run_as_a_sequence_and_no_clip_crosses_a_gap(tmp_path):
    from pairload import make_loader

    raw = build_gapped(tmp_path / "v")
    report = pack(raw, tmp_path / "s", PackOptions(workers=1, sequences=True, sequence_gaps="split"))
    assert report.sequences["train"] == ("3 sequences of 3 to 4 frames, one target per frame; 1 sequence cut into 2 "
                                         "runs where the frame numbers break (--sequence-gaps split): vidA@0001, "
                                         "vidA@0007")
    seqs = open_shards(tmp_path / "s").index.sequences
    assert seqs.names == ("vidA@0001", "vidA@0007", "vidB") and seqs.counts.tolist() == [3, 3, 4]
    assert seqs.gaps == "split" and verify(tmp_path / "s").gaps == ()
    q = info(tmp_path / "s")["train"]["sequences"]
    assert q["sequence_gaps"] == "split" and "gaps" not in q
    grid = make_loader("ram", tmp_path / "s", batch_size=1, crop=8, clips="3,start=grid", augment=False,
                       shuffle=False, last_batch="partial")
    assert [tuple(b.keys[0]) for b in grid][:3] == [("vidA+0001", "vidA+0002", "vidA+0003"),
                                                    ("vidA+0007", "vidA+0008", "vidA+0009"),
                                                    ("vidB+0000", "vidB+0001", "vidB+0002")]


def test_allow_keeps_the_sequence_whole_and_every_reader_says_so(tmp_path, capsys):
    import warnings

    from pairload import make_loader
    from pairload.cli import main

    raw = build_gapped(tmp_path / "v")
    report = pack(raw, tmp_path / "s", PackOptions(workers=1, sequences=True, sequence_gaps="allow"))
    assert report.sequences["train"].endswith("; 1 break(s) in the frame numbers kept (--sequence-gaps allow), the "
                                              "first in vidA: frames 0003 → 0007, step 1 elsewhere")
    said = ("split 'train': sequence 'vidA': frames 0003 → 0007, step 1 elsewhere: a clip that crosses it joins 0003 "
            "and 0007 as consecutive frames")
    assert verify(tmp_path / "s").gaps == (f"{said}, as packed with --sequence-gaps allow",)
    assert info(tmp_path / "s")["train"]["sequences"]["gaps"] == f"{said}, as packed with --sequence-gaps allow"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the pack was told: no warning each time a loader is made
        make_loader("ram", tmp_path / "s", batch_size=1, crop=8, clips=3)
        make_loader("ram", {"a": tmp_path / "s", "b": tmp_path / "s"}, batch_size=1, crop=8, clips=3)  # a mix too
    assert main(["info", str(tmp_path / "s")]) == 0
    assert capsys.readouterr().err == f"warning: {said}, as packed with --sequence-gaps allow\n"


def test_a_pack_made_before_gaps_were_checked_is_reported_by_verify_info_and_the_loader(tmp_path, capsys):
    from pairload import make_loader
    from pairload.cli import main

    raw = build_gapped(tmp_path / "v")
    pack(raw, tmp_path / "s", PackOptions(workers=1, sequences=True, sequence_gaps="allow", index="json"))
    path = tmp_path / "s/manifest.json"
    doc = json.loads(path.read_text())
    del doc["splits"]["train"]["sequence_gaps"]  # as an older pairload wrote it
    path.write_text(json.dumps(doc))
    said = ("split 'train': sequence 'vidA': frames 0003 → 0007, step 1 elsewhere: a clip that crosses it joins 0003 "
            "and 0007 as consecutive frames; copy any missing frames back and pack again, or pack again with "
            "--sequence-gaps split (no clip crosses a break) or --sequence-gaps allow (clips cross it)")
    assert main(["verify", str(tmp_path / "s")]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("ok: 1 shards, 10 samples") and err == f"warning: {said}\n"
    assert info(tmp_path / "s")["train"]["sequences"]["gaps"] == said
    with pytest.warns(UserWarning) as caught:
        make_loader("ram", tmp_path / "s", batch_size=1, crop=8, clips=3)
    assert [str(w.message) for w in caught] == [said]


def test_sequence_gaps_takes_three_values_and_only_with_sequences():
    with pytest.raises(ConfigError, match=r"^--sequence-gaps skip: expected refuse, split or allow \(what pack "):
        PackOptions(sequences=True, sequence_gaps="skip")
    with pytest.raises(ConfigError, match=r"^--sequence-gaps split: only with --sequences .*; add --sequences, or "
                                          r"leave --sequence-gaps out$"):
        PackOptions(sequence_gaps="split")


def test_info_names_the_first_sequences_and_counts_the_rest(tmp_path):
    from pairload.read.info import sequences_cell

    for s in range(7):
        for f in range(2):
            write_rgb(tmp_path / "v/low" / f"clip{s}" / f"{f:02d}.png", frame(s, f))
            write_rgb(tmp_path / "v/high" / f"clip{s}" / f"{f:02d}.png", 255 - frame(s, f))
    pack(tmp_path / "v", tmp_path / "s", PackOptions(workers=1, sequences=True))
    q = info(tmp_path / "s")["train"]["sequences"]
    assert q["first"] == {f"clip{s}": 2 for s in range(5)} and q["count"] == 7
    assert sequences_cell(q) == ("7 of 2-2 frames, target per frame: clip0 (2), clip1 (2), clip2 (2), clip3 (2), "
                                 "clip4 (2), … and 2 more")


@pytest.mark.parametrize("names, said", [
    (["f1x", "f2x", "f5x"], ["frames f2x → f5x, step 1 elsewhere"]),  # the number in the middle of the names
    (["f0001_x2", "f0002_x2", "f0003_x2"], []),  # a number every name shares is not the frame number
    (["\u0661", "\u0662", "\u0665"], ["frames \u0662 → \u0665, step 1 elsewhere"]),  # Arabic-Indic digits
    (["\uff11", "\uff12", "\uff13"], []),  # full-width digits, evenly numbered
    (["s1_0001", "s1_0002", "s2_0001"], ["frames s1_0002 → s2_0001, numbered backwards"]),
    (["x2a", "x2b"], []),  # the names differ in letters, not numbers
])
def test_the_frame_number_is_the_number_that_changes_wherever_it_stands(names, said):
    from pairload.format.sequences import numbering_breaks

    assert [b.words() for b in numbering_breaks(names)] == said


def test_a_gap_in_numbers_inside_the_names_is_refused_and_reported_in_an_older_pack(tmp_path):
    for f in (1, 2, 3, 7):
        write_rgb(tmp_path / "v/low/vidA" / f"frame{f}_low.png", frame(1, f))
        write_rgb(tmp_path / "v/high/vidA" / f"frame{f}_low.png", 255 - frame(1, f))
    with pytest.raises(PairingError, match=r"^low/vidA: the frame numbers break, frames frame3_low → frame7_low, step "
                                           r"1 elsewhere, so a clip would join"):
        pack(tmp_path / "v", tmp_path / "s", PackOptions(workers=1, sequences=True))
    pack(tmp_path / "v", tmp_path / "s", PackOptions(workers=1, sequences=True, sequence_gaps="allow"))
    manifest = tmp_path / "s/manifest.json"
    doc = json.loads(manifest.read_text())
    del doc["splits"]["train"]["sequence_gaps"]  # as packed before pairload read numbers inside names
    manifest.write_text(json.dumps(doc))
    assert verify(tmp_path / "s").gaps[0].startswith("split 'train': sequence 'vidA': frames frame3_low → frame7_low")


@pytest.mark.parametrize("field, value, said", [
    ("counts", ["2", "2"], r"counts is \['2', '2'\], not a list of whole numbers"),  # numpy would read them
    ("counts", [2.0, 2.0], r"counts is \[2\.0, 2\.0\], not a list of whole numbers"),
    ("counts", [[2], [2]], r"counts is \[\[2\], \[2\]\], not a list of whole numbers"),  # was a TypeError
    ("counts", [2, 2 ** 70], r"counts is \[2, 1180591620717411303424\], not a list of whole numbers"),  # overflowed
    ("starts", 0, r"starts is 0, not a list of whole numbers"),  # was a TypeError
    ("names", [1, 2], r"names is \[1, 2\], not a list of names"),
    (None, [1, 2], r"it is a list"),
])
def test_a_sequences_entry_of_other_types_is_refused_in_one_line(field, value, said):
    entry = Sequences(["a", "b"], [0, 2], [2, 2]).to_entry()
    if field is None:
        entry["sequences"] = value
    else:
        entry["sequences"][field] = value
    with pytest.raises(ShardError, match=rf"^w: the \"sequences\" entry is not names/starts/counts lists \({said}\); "
                                         r"pack the folder again with --sequences$"):
        Sequences.from_entry(entry, 4, "w")
