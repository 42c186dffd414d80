"""A pack made in parts (`pack --part I/N`): the same bytes as a one-machine pack, whatever process runs which part
and in which order; a killed part run again alone completes it; refusals name the missing or foreign part."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pairload.errors import ConfigError, OutputError
from pairload.format.binindex import VERIFIED
from pairload.pack.parts import Part
from pairload.pack.writer import PackOptions, finish_parts, pack

from conftest import kill_when_written

PAIRS = 30


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    """Pairs whose pixels encode the pair: low = (split * 100 + k, row, col), high = low + 1; a few of another
    size."""
    root = tmp_path_factory.mktemp("parts") / "raw"
    for s, (split, count) in enumerate((("train", PAIRS), ("test", 6))):
        for k in range(count):
            h, w = (48, 64) if k % 7 else (64, 40)
            yy, xx = np.mgrid[:h, :w]
            low = np.stack([np.full((h, w), 100 * s + k), yy, xx], axis=-1).astype(np.uint8)
            for side, img in (("low", low), ("high", low + 1)):
                path = root / split / side / f"{split}{k:03d}.png"
                path.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(img).save(path)
    return root


def files(folder: Path) -> dict[str, bytes]:
    """Every file a finished pack leaves (its locks and the records of its index files found whole, which carry the
    files' stamps, aside), by name."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if not p.name.endswith((".lock", VERIFIED))}


def cli(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pairload.cli", "pack", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})


OPTS = ("--shard-size", "64KB", "--workers", "1", "--index", "binary")


@pytest.fixture(scope="module")
def reference(raw, tmp_path_factory) -> dict[str, bytes]:
    out = tmp_path_factory.mktemp("one") / "shards"
    pack(raw, out, PackOptions(shard_size=64 * 1024, workers=1, index="binary"))
    got = files(out)
    assert sum(name.endswith(".tar") for name in got) >= 4  # enough shards for every part to write some
    return got


def test_three_parts_run_as_three_processes_write_the_one_machine_bytes(raw, reference, tmp_path):
    out = tmp_path / "shards"
    procs = [cli(str(raw), str(out), "--part", f"{i}/3", *OPTS) for i in range(3)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    assert files(out) == reference


def test_parts_from_the_scheduler_and_in_any_order(raw, reference, tmp_path):
    out = tmp_path / "shards"
    for rank in (2, 0, 1):  # torchrun's variables; the last to finish writes the manifest
        p = cli(str(raw), str(out), "--part", "auto", *OPTS, env={"RANK": str(rank), "WORLD_SIZE": "3"})
        text, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert ("wrote the manifest" in text) == (rank == 1), text
    assert files(out) == reference
    assert Part.from_scheduler({"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_COUNT": "4",
                                "SLURM_ARRAY_TASK_MIN": "2"}) == Part(3, 4)


def test_a_killed_part_run_again_alone_completes_the_pack(raw, reference, tmp_path):
    out = tmp_path / "shards"
    for i in (0, 2):
        pack(raw, out, PackOptions(shard_size=64 * 1024, workers=1, index="binary"), part=Part(i, 3))
    assert not (out / "manifest.json").exists()
    kill_when_written(cli(str(raw), str(out), "--part", "1/3", *OPTS), out, "*.partial")
    assert not (out / "manifest.json").exists()
    pack(raw, out, PackOptions(shard_size=64 * 1024, workers=1, index="binary"), part=Part(1, 3))
    assert files(out) == reference


def test_parts_over_a_finished_pack_of_the_same_raw_leave_the_one_machine_bytes(raw, reference, tmp_path):
    out = tmp_path / "shards"
    opts = PackOptions(shard_size=64 * 1024, workers=1, index="binary")
    pack(raw, out, opts)  # an earlier pack there: its shards and index files are the parts' to replace
    for i in (1, 0, 2):
        pack(raw, out, opts, part=Part(i, 3))
    assert files(out) == reference


def test_finish_refuses_while_a_part_is_missing_and_names_it(raw, reference, tmp_path):
    out = tmp_path / "shards"
    for i in (0, 2):
        report = pack(raw, out, PackOptions(shard_size=64 * 1024, workers=1, index="binary"), part=Part(i, 3))
        assert report.waiting == ([1, 2] if i == 0 else [1]) and not report.finished
    with pytest.raises(OutputError, match=r"part 1/3 of 3 has not finished .*--part 1/3"):
        finish_parts(out)
    p = cli(str(raw), str(out), "--finish")
    _, err = p.communicate(timeout=120)
    assert p.returncode == 1 and "part 1/3 of 3 has not finished" in err and "Traceback" not in err
    pack(raw, out, PackOptions(shard_size=64 * 1024, workers=1, index="binary"), part=Part(1, 3))
    assert files(out) == reference


def test_parts_of_another_pack_in_the_folder_are_refused(raw, tmp_path):
    out = tmp_path / "shards"
    pack(raw, out, PackOptions(shard_size=64 * 1024, workers=1), part=Part(0, 2))
    with pytest.raises(OutputError, match=r"part-0000-of-0002\.record: .* holds part 0/2 of another pack"):
        pack(raw, out, PackOptions(shard_size=128 * 1024, workers=1), part=Part(1, 2))
    with pytest.raises(OutputError, match=r"holds part 0/2 of a pack in 2 parts, and this is part 1/3"):
        pack(raw, out, PackOptions(shard_size=64 * 1024, workers=1), part=Part(1, 3))
    with pytest.raises(ConfigError, match=r"--part 3/3: expected I/N with 0 <= I < N"):
        Part.parse("3/3")
    with pytest.raises(ConfigError, match=r"--part 'x': expected I/N"):
        Part.parse("x")
    with pytest.raises(OutputError, match=r"no part of a pack made with --part I/N is here"):
        finish_parts(tmp_path)


def test_torchrun_runs_the_parts_as_its_ranks(raw, reference, tmp_path):
    out = tmp_path / "shards"
    torchrun = Path(sys.executable).with_name("torchrun")
    done = subprocess.run([str(torchrun), "--nproc-per-node=3", "--master-port=0", "-m", "pairload.cli", "pack",
                           str(raw), str(out), "--part", "auto", *OPTS], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert files(out) == reference


def test_an_encoded_pack_in_parts_is_the_one_machine_bytes_tile_starts_and_all(raw, tmp_path):
    # each part works out alike how many tile starts a row of the index keeps (from the whole plan), so the index the
    # last part writes holds every shard's rows, as one machine's does
    opts = PackOptions(shard_size=64 * 1024, workers=1, store="encoded")
    pack(raw, tmp_path / "one", opts)
    for i in (1, 0):
        pack(raw, tmp_path / "parts", opts, part=Part(i, 2))
    one = files(tmp_path / "one")
    assert files(tmp_path / "parts") == one
    assert json.loads(one["manifest.json"])["splits"]["train"]["tile_starts"] == 1  # 48x64 and 64x40: one tile
