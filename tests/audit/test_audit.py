"""`pairload audit` (`pairload.audit.audit`) on packs of real photographs: one pack's test scenes among another's
training pairs (renamed, re-encoded, resized, cropped, brightened) are all found and nothing else is; duplicates,
misaligned pairs and dark targets are listed; a pack without stored facts is measured once and its facts kept beside
its index; the findings are written as JSON or CSV."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest

from pairload.audit import audit
from pairload.audit.facts import SIDECAR
from pairload.audit.measures import VERSION as MEASURES, luminance
from pairload.cli import main
from pairload.errors import ConfigError
from pairload.pack import PackOptions, pack
from pairload.read.shards import ShardDataset

from audit_photos import CHANGES, darken, photos, tiles, write_pairs

LEAKED = [name for name, _ in CHANGES]


@pytest.fixture(scope="module")
def packs(tmp_path_factory) -> tuple[Path, Path]:
    """A (train 10, test 6 pairs) and B (train 10 + A's first 5 test scenes, each changed as `CHANGES` says, named
    l-<change>; test 4), of 160x240 tiles of distinct scenes."""
    root = tmp_path_factory.mktemp("audit")
    scenes = tiles(160, 240)
    write_pairs(root / "a", "train", scenes[:10], "a")
    write_pairs(root / "a", "test", scenes[10:16], "t")
    write_pairs(root / "b", "train", scenes[16:26], "b")
    for k, (name, change) in enumerate(CHANGES):
        write_pairs(root / "b", "train", [change(scenes[10 + k])], f"l-{name}-", seed=50 + k)
    write_pairs(root / "b", "test", scenes[26:30], "u")
    for name in "ab":
        pack(root / name, root / f"{name}-shards", PackOptions(workers=1))
    return root / "a-shards", root / "b-shards"


def test_one_packs_test_scenes_among_anothers_training_pairs_are_all_found(packs):
    report = audit(packs)
    found = {(f.place.split, f.place.key, f.other.split, f.other.key) for f in report.leaks}
    assert found == {("test", f"t{k:03d}", "train", f"l-{name}-000") for k, name in enumerate(LEAKED)}
    assert all(f.kind == "leak" and f.place.pack == "a-shards" and f.other.pack == "b-shards" for f in report.leaks)
    assert report.of("duplicate") == [] and report.of("misaligned") == []
    assert report.sources["a-shards"]["splits"]["test"] == {"samples": 6, "facts": "index", "measures": MEASURES,
                                                            "training": False}
    assert set(report.exposure) == {"a-shards:train", "a-shards:test", "b-shards:train", "b-shards:test"}
    assert report.exposure["a-shards:train"]["input"]["median"] < 0.2 * report.exposure["a-shards:train"]["target"][
        "median"]
    assert audit(packs[:1]).leaks == []  # each pack alone is clean


def test_shared_out_among_processes_the_audit_finds_the_same(packs, monkeypatch):
    import pairload.audit.run as run

    alone = audit(packs, workers=1)
    monkeypatch.setattr(run, "SPREAD_FROM", 1)  # every split pair forks, each process a share of the samples
    spread = audit(packs, workers=2)
    assert [f.row() for f in spread.findings] == [f.row() for f in alone.findings]
    assert len(alone.leaks) == len(LEAKED)


def test_the_command_says_each_class_in_a_line_and_exits_1_on_leaks(packs, tmp_path, capsys):
    out = tmp_path / "findings.json"
    assert main(["audit", *map(str, packs), "--out", str(out)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("leak: 5 sample(s) of an evaluation split show a scene of a training split (a-shards:test ~ "
                        "b-shards:train: 5)")
    assert lines[1] == "near-duplicate: 0 sample(s) show a scene of another split of their pack"
    assert "leak: a-shards:test/t000 ~ b-shards:train/l-renamed-000 (target~target: identical pixels)" in lines
    assert any(line.startswith("exposure: a-shards:test: median luma of the inputs ") for line in lines)
    doc = json.loads(out.read_text())
    assert doc["summary"]["leak"] == 5 and doc["settings"]["max_shift"] == 1.0
    assert {row["other_key"] for row in doc["findings"] if row["kind"] == "leak"} == {
        f"l-{name}-000" for name in LEAKED}
    table = tmp_path / "findings.csv"
    assert main(["audit", *map(str, packs), "--out", str(table)]) == 1
    rows = list(csv.DictReader(table.open()))
    assert sum(r["kind"] == "leak" for r in rows) == 5 and rows[0]["pack"] == "a-shards"
    capsys.readouterr()
    assert main(["audit", str(packs[1])]) == 0


def test_bad_options_are_refused_before_anything_is_read(packs, tmp_path, capsys):
    assert main(["audit", str(packs[0]), "--out", str(tmp_path / "f.txt")]) == 1
    assert capsys.readouterr().err == (f"error: --out {tmp_path / 'f.txt'}: expected a file name ending in .json or "
                                       ".csv, found .txt; name it FILE.json (the findings and what was read) or "
                                       "FILE.csv (one row per finding)\n")
    with pytest.raises(ConfigError, match=r"^max_shift=0: expected a positive number of pixels \(e\.g\. 1\.0\)$"):
        audit(packs, max_shift=0)
    with pytest.raises(ConfigError, match=r"a-shards is given twice: every image of it would match itself; give each "
                                          r"pack once$"):
        audit([packs[0], packs[0]])


@pytest.fixture(scope="module")
def odd(tmp_path_factory) -> Path:
    """One split of 12 pairs: 9 scenes of about one brightness, one of them again under another name (d-009), a
    pair whose input is shifted by 4 px from its target (d-010) and a target far darker than the others (d-011)."""
    root = tmp_path_factory.mktemp("odd")
    scenes = [t for t in tiles(160, 240)[16:] if 0.3 < luminance(t) < 0.6][:9]  # of one exposure
    photo = photos()[0]
    shifted_target = np.ascontiguousarray(photo[100:260, 100:340])
    dark_target = np.ascontiguousarray(scenes[1] // 12)
    write_pairs(root / "raw", "train", scenes + [scenes[0], shifted_target, dark_target], "d-",
                inputs={9: darken(scenes[0], 0), 10: darken(photo[96:256, 100:340], 10),
                        11: darken(scenes[1], 11, gain=0.008, noise=0.5)})
    pack(root / "raw", root / "shards", PackOptions(workers=1))
    return root / "shards"


def test_duplicates_misaligned_pairs_and_dark_targets_are_listed_and_are_no_leaks(odd, capsys):
    report = audit([odd], max_shift=1.0)
    assert [(f.place.key, f.other.key) for f in report.of("duplicate")] == [("d-009", "d-000")]
    [shifted] = report.of("misaligned")
    assert shifted.place.key == "d-010" and abs(shifted.shift[0] + 4) <= 0.5 and abs(shifted.shift[1]) <= 0.5
    assert [f.place.key for f in report.of("dark-target")] == ["d-011"]
    assert report.leaks == [] and audit([odd], max_shift=5.0).of("misaligned") == []
    assert main(["audit", str(odd)]) == 0
    out = capsys.readouterr().out
    assert "duplicate: shards:train/d-009 ~ shards:train/d-000 (input~input: identical pixels)" in out
    assert re.search(r"^misaligned: shards:train/d-010: shifted by (3\.[6-9]|4\.[0-4]) px \(dy -(3|4)\.\d\d, dx "
                     r"[-+]0\.\d\d; confidence (0|1)\.\d\d\)$", out, re.M)


def test_a_pack_without_facts_is_measured_once_and_they_are_kept_beside_its_index(packs, monkeypatch):
    stored = audit(packs[:1])
    monkeypatch.setattr(ShardDataset, "facts", lambda self, indices=None: None)  # as a pack made before them
    measured = audit(packs[:1])
    assert {s["facts"] for s in measured.sources["a-shards"]["splits"].values()} == {"measured"}
    assert (packs[0] / SIDECAR.format(split="train")).is_file()
    assert [f.row() for f in measured.findings] == [f.row() for f in stored.findings]
    assert measured.exposure == stored.exposure
    again = audit(packs[:1])
    assert {s["facts"] for s in again.sources["a-shards"]["splits"].values()} == {"sidecar"}
    sidecar = packs[0] / SIDECAR.format(split="test")
    with np.load(sidecar) as doc:  # another index (a repack) makes them stale
        np.savez(sidecar, **{**dict(doc), "index_sha256": np.array("another index")})
    assert audit(packs[:1]).sources["a-shards"]["splits"]["test"]["facts"] == "measured"
