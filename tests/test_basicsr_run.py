"""`python -m pairload.basicsr`: a BasicSR-shaped repository's own train.py, unchanged, trains on a pack.

The repositories are the tiny ones of `basicsr_repo` (Restormer-shaped and BasicSR >= 1.3-shaped), run as
subprocesses from their root on the CPU. Pair i's pixels hold (i, row, column) and its target is 255 - input
(conftest's `make_raw`), and the test model records every batch it was fed, so a wrong pair, crop or order shows."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from pairload import ConfigError, ShardError, make_loader
from pairload.basicsr import loader_options
from pairload.basicsr.metrics import calculate_psnr_gt_mean
from pairload.basicsr.run import (RepositoryError, Session, check_options_file, find_names, pack_hint,
                                  split_args)
from pairload.evaluate import gt_mean_psnr
from pairload.pack import PackOptions, pack

from basicsr_repo import options, write_repo
from conftest import make_raw

ROOT = Path(__file__).resolve().parents[1]
N, H, W = 12, 16, 20


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """raw/ (12 training pairs of 16x20, 3 validation pairs) and its pack of the training split."""
    root = tmp_path_factory.mktemp("bsrrun")
    make_raw(root / "raw", N, split="train", size=(H, W))
    make_raw(root / "raw", 3, split="test", start=200, size=(H, W))
    pack(root / "raw" / "train", root / "shards", PackOptions(workers=1, shard_size=64 * 1024))
    return root


def command(repo: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, "-m", "pairload.basicsr", *args], cwd=repo, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": path, **(env or {})})


def fed(path: Path) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """{iteration: (lq, gt) as uint8 N x C x H x W} the test model recorded."""
    out = {}
    for line in path.read_text().splitlines():
        doc = json.loads(line)
        out[doc["iter"]] = (np.array(doc["lq"], dtype=np.uint8), np.array(doc["gt"], dtype=np.uint8))
    return out


def loader_batches(shards: Path, opt: dict, n: int) -> list[np.ndarray]:
    """The first n input batches (uint8) a ram loader made from the options yields, epoch after epoch."""
    opt = {**opt, "rank": 0, "world_size": 1}
    out, epoch = [], 0
    with make_loader("ram", shards, **loader_options(opt, progressive="code")) as loader:
        while len(out) < n:
            loader.set_epoch(epoch)
            out += [b.low.numpy() for b in loader]
            epoch += 1
    return out[:n]


def log_of(repo: Path) -> str:
    return "".join(p.read_text() for p in sorted((repo / "experiments" / "Tiny").glob("train_*.log")))


@pytest.fixture(scope="module")
def uninterrupted(data, tmp_path_factory):
    """A Restormer-shaped repository trained for 10 iterations: (repo, what it was fed, the run's result)."""
    repo = write_repo(tmp_path_factory.mktemp("repo"), options(data / "raw"))
    done = command(repo, "-opt", "Options/Tiny.yml", "--shards", str(data / "shards"))
    assert done.returncode == 0, done.stderr[-3000:]
    return repo, fed(repo / "experiments" / "Tiny" / "fed.jsonl"), done


def test_their_train_py_trains_on_exactly_the_packs_batches(data, uninterrupted):
    repo, got, done = uninterrupted
    assert sorted(got) == list(range(1, 11))
    opt = yaml.safe_load((repo / "Options" / "Tiny.yml").read_text())
    batches = loader_batches(data / "shards", opt, 10)
    for it, (lq, gt) in got.items():
        assert np.array_equal(gt, 255 - lq), it  # input and target cut and oriented alike, of one pair
        assert all(len(np.unique(row[0])) == 1 and row[0, 0, 0] < N for row in lq)  # one pair per row
        full = batches[it - 1]
        if it <= 6:  # stage 1 of the YAML: 4 windows of 8, the loader's batch as it is
            assert np.array_equal(lq, full), it
            continue
        # stage 2: their progressive block took 2 of the 4 rows and one 6x6 window of them, as from their loader
        assert lq.shape == (2, 3, 6, 6)
        windows = [(x, y) for x in range(3) for y in range(3)
                   if all(any(np.array_equal(r, f[:, x:x + 6, y:y + 6]) for f in full) for r in lq)]
        assert windows, it
    log = log_of(repo)
    assert log.count("pairload: training pairs from") == 1 and "3 batches per epoch on this rank" in log
    assert log.count("not used: they name the source folders") == 1
    assert "Validation ValSet, iter 5: l1" in log and "Validation ValSet, iter 10: l1" in log  # theirs, kept
    states = repo / "experiments" / "Tiny"
    assert sorted(p.name for p in (states / "training_states").iterdir()) == ["4.state", "8.state"]
    beside = json.loads((states / "training_states_pairload" / "8.json").read_text())
    assert (beside["iter"], beside["epoch"], beside["loader"]["epoch"], beside["loader"]["consumed"]) == (8, 2, 2,
                                                                                                         [[1, 2]])


def test_a_killed_run_resumes_mid_epoch_with_the_uninterrupted_runs_batches(data, uninterrupted, tmp_path):
    _, whole, _ = uninterrupted
    repo = write_repo(tmp_path / "repo", options(data / "raw"))
    args = ("-opt", "Options/Tiny.yml", "--shards", str(data / "shards"))
    killed = command(repo, *args, env={"TINY_STOP_AT": "6", "TINY_FED": str(tmp_path / "killed.jsonl")})
    assert killed.returncode == 17, killed.stderr[-3000:]  # after the checkpoint of iteration 4 (epoch 1, batch 1)
    bare = tmp_path / "bare"
    shutil.copytree(repo, bare)  # the same killed run, to resume without the loader's position
    (bare / "experiments" / "Tiny" / "training_states_pairload" / "4.json").unlink()

    resumed = command(repo, *args, env={"TINY_FED": str(tmp_path / "resumed.jsonl")})
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    got = fed(tmp_path / "resumed.jsonl")
    assert sorted(got) == list(range(5, 11))
    for it in got:  # stage 2 included: their block's draws are seeded as in the uninterrupted run
        assert np.array_equal(got[it][0], whole[it][0]) and np.array_equal(got[it][1], whole[it][1]), it
    assert ("pairload: the loader resumes epoch 1 after its first 1 batches "
            "(experiments/Tiny/training_states_pairload/4.json)") in resumed.stderr

    restarted = command(bare, *args, env={"TINY_FED": str(tmp_path / "restarted.jsonl")})
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    assert ("pairload: no loader position experiments/Tiny/training_states_pairload/4.json for iteration 4: epoch 1 "
            "restarts from its first batch (as BasicSR's own resume does)") in restarted.stderr
    again = fed(tmp_path / "restarted.jsonl")
    assert np.array_equal(again[5][0], whole[4][0])  # epoch 1's first batch once more


def test_a_basicsr_13_train_pipeline_runs_to_total_iter(data, tmp_path):
    """BasicSR >= 1.3's loop runs range(start_epoch, total_epochs + 1) epochs of what it counts as
    ceil(len(train_set) / batch) iterations: 12 pairs in batches of 5 are 2 batches an epoch, not ceil(12 / 5) = 3;
    with len(train_set) read as 12 it would stop after 2 x 5 = 10 of the 12 iterations."""
    opt = options(data / "raw", batch_size_per_gpu=5, mini_batch_sizes=None, gt_sizes=None, iters=None)
    opt["train"]["total_iter"] = 12
    repo = write_repo(tmp_path / "repo", opt, style="basicsr13")
    done = command(repo, "-opt", "Options/Tiny.yml", "--auto_resume", "--shards", str(data / "shards"))
    assert done.returncode == 0, done.stderr[-3000:]
    got = fed(repo / "experiments" / "Tiny" / "fed.jsonl")
    assert sorted(got) == list(range(1, 13))
    batches = loader_batches(data / "shards", opt, 12)
    assert all(np.array_equal(got[it][0], batches[it - 1]) for it in got)
    assert "len(train_set) reads 10 so that train.py's count, 2 per epoch, is not more" in done.stderr


def test_a_missing_options_file_is_named_in_one_line(data, tmp_path):
    repo = write_repo(tmp_path / "repo", options(data / "raw"))
    done = command(repo, "-opt", "Options/Missing.yml", "--shards", str(data / "shards"))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().endswith("-opt Options/Missing.yml: no such options file in "
                                        f"{repo.resolve()}; pass the training YAML, e.g. -opt Options/NAME.yml, "
                                        "relative to the repository's root")


FIX = ("copy one of the repository's own training option files and edit it (name:, datasets: train: and val:, "
       "network_g:, train: total_iter: ...)")


@pytest.mark.parametrize("text, message", [
    ("", f"the file is empty; {FIX}"),
    ("name: [unclosed\n  x: : y\n", f"not YAML (expected ',' or ']', but got ':' at line 2, column 4); correct the "
                                     f"file there, or {FIX}"),
])
def test_an_empty_or_broken_options_file_is_one_line_from_the_command(data, tmp_path, text, message):
    """(#60: their parser used to end in a traceback.)"""
    repo = write_repo(tmp_path / "repo", options(data / "raw"))
    (repo / "Options" / "Bad.yml").write_text(text)
    done = command(repo, "-opt", "Options/Bad.yml", "--shards", str(data / "shards"))
    assert (done.returncode, done.stderr) == (1, f"pairload.basicsr: -opt Options/Bad.yml: {message}\n")


def bad_train(**changes) -> str:
    opt = options(Path("raw"), **changes)
    return yaml.safe_dump(opt)


@pytest.mark.parametrize("text, message", [
    ("# name: Tiny\n", f"it holds no options \\(comments only, or null\\); {re.escape(FIX)}"),
    ("- a\n- b\n", r"the YAML is a list \(\['a', 'b'\]\), not a mapping of options"),
    ("Options/Tiny.yml\n", r"the YAML is a string \('Options/Tiny.yml'\), not a mapping of options"),
    ("\x00\x01", r"not YAML \(not text: special characters are not allowed at byte 0\)"),
    ("name: Tiny\ntrain: {total_iter: 10}\n", r"no datasets: section \(found name, train\); add datasets: with a "
                                              r"train: dataset \(type: PairedImageDataset, gt_size, "
                                              r"batch_size_per_gpu, ...\), or copy"),
    ("datasets: [train, val]\n", r"datasets is a list \(\['train', 'val'\]\), expected a mapping of phases "
                                  r"\(train:, val:\); indent the datasets under it$"),
    ("datasets:\n  val: {name: V}\n", r"no datasets: train: mapping \(found val\); pairload.basicsr trains on the "
                                       r"train phase: add datasets: train: with type: PairedImageDataset, gt_size "
                                       r"and batch_size_per_gpu$"),
    ("datasets:\n  train: 8\n", r"no datasets: train: mapping \(train is a number \(8\)\)"),
    ("datasets:\n  train: {gt_size: 8, batch_size_per_gpu: 4}\n  val:\n", r"datasets.val is empty \(null\), "
                                                                           r"expected a mapping of that dataset's "
                                                                           r"options .*; indent them under val:, or "
                                                                           r"remove val:$"),
    (bad_train(batch_size_per_gpu="eight"), r"BasicSR options datasets.train.batch_size_per_gpu='eight': expected a "
                                            r"whole number, at least 1$"),
    (bad_train(use_shuffle="yes"), r"BasicSR options datasets.train.use_shuffle='yes': expected true or false$"),
    (bad_train(type="Dataset_SIDImage"), r"BasicSR options datasets.train.type=Dataset_SIDImage: this dataset reads "
                                         r"frame sequences"),
    (bad_train(gt_size=None, mini_batch_sizes=None, gt_sizes=None, iters=None),
     r"BasicSR options datasets.train: no gt_size; pairload needs the crop side \(e.g. gt_size: 128\)"),
    # a key written twice would train on the last value, silently
    (bad_train().replace("    gt_size: 8\n", "    gt_size: 8\n    gt_size: 16\n"),
     r"datasets\.train\.gt_size is given twice \(lines (\d+) and (?!\1)\d+\); a YAML parser keeps the last one "
     r"silently: remove one of them$"),
    (bad_train() + "manual_seed: 8\n", r"manual_seed is given twice \(lines \d+ and \d+\)"),
    (bad_train() + "---\nname: Other\n", r"not YAML \(expected a single document in the stream but found another "
                                          r"document at line \d+, column 1\)"),
    (bad_train().replace("scale: 1\n", "scale: '1'\n"), r"BasicSR options.scale='1': expected 1; "),
    (bad_train(degrade="lowlight", degrade_sources=["made"]),
     r"datasets\.train\.degrade_sources=\['made'\]: names sources of a mix, and python -m pairload\.basicsr trains on "
     r"one --shards folder, all of whose inputs degrade makes; remove degrade_sources$"),
], ids=["comments", "list", "string", "binary", "no datasets", "datasets list", "no train", "train number",
        "val null", "batch eight", "shuffle yes", "sequence dataset", "no gt_size", "key twice", "top key twice",
        "two documents", "scale text", "degrade_sources"])
def test_options_files_their_parser_cannot_read_or_pairload_cannot_load_are_named(tmp_path, text, message):
    (tmp_path / "Options").mkdir()
    (tmp_path / "Options" / "Bad.yml").write_text(text)
    with pytest.raises(ConfigError, match=r"^-opt Options/Bad.yml: " + message):
        check_options_file(["-opt", "Options/Bad.yml", "--launcher", "none"], tmp_path)


def test_the_options_file_argument_is_checked_before_their_argparse_sees_it(tmp_path):
    (tmp_path / "Options").mkdir()
    (tmp_path / "Options" / "Tiny.yml").write_text(yaml.safe_dump(options(tmp_path)))
    root = re.escape(str(tmp_path))
    with pytest.raises(ConfigError, match=rf"^no -opt: their train.py trains from an options file; pass the training "
                                          rf"YAML, e.g. -opt Options/NAME.yml, relative to the repository's root "
                                          rf"{root}$"):
        check_options_file(["--auto_resume"], tmp_path)
    with pytest.raises(ConfigError, match=r"^--opt: no file after it; pass the training YAML, e.g. --opt "):
        check_options_file(["--opt", "--auto_resume"], tmp_path)
    with pytest.raises(ConfigError, match=r"^-opt Options/Tiny.yml and --opt Options/Tiny.yml: more than one "
                                          r"options file; pass one$"):
        check_options_file(["-opt", "Options/Tiny.yml", "--opt=Options/Tiny.yml"], tmp_path)
    with pytest.raises(ConfigError, match=r"^-opt Options: is a folder; pass one training YAML in it \(Tiny.yml, "
                                          r"...\), e.g. -opt Options/Tiny.yml$"):
        check_options_file(["-opt", "Options"], tmp_path)
    assert check_options_file(["-opt=Options/Tiny.yml"], tmp_path) == "-opt Options/Tiny.yml"
    # their loader's Python tags are read as plain values, never run (their own loader runs them later, if at all)
    (tmp_path / "Options" / "Tagged.yml").write_text(
        yaml.safe_dump(options(tmp_path)) + "marker: !!python/object/apply:os.remove [gone]\n")
    (tmp_path / "gone").touch()
    assert check_options_file(["-opt", "Options/Tagged.yml"], tmp_path) == "-opt Options/Tagged.yml"
    assert (tmp_path / "gone").exists()


def test_an_unreadable_options_file_is_named(tmp_path, monkeypatch):
    import pairload.basicsr.options as module

    def denied(path, *args, **kwargs):  # what a chmod 000 file gives (but not to root, who may run the tests)
        raise PermissionError(13, "Permission denied", str(path))

    (tmp_path / "Options").mkdir()
    (tmp_path / "Options" / "Tiny.yml").write_text("name: Tiny\n")
    monkeypatch.setattr(module, "open", denied, raising=False)
    with pytest.raises(ConfigError, match=r"^-opt Options/Tiny.yml: cannot read it \(Permission denied\); check "
                                          r"the path and its permissions$"):
        check_options_file(["-opt", "Options/Tiny.yml"], tmp_path)


def test_what_their_parse_options_refuses_is_one_line():
    session = Session("shards", "train", options_file="-opt Options/Tiny.yml")

    def theirs(argv):
        parser = argparse.ArgumentParser(prog="train.py")
        parser.add_argument("-opt", required=True)
        return parser.parse_args(argv)

    with pytest.raises(ConfigError, match=r"^train.py: unrecognized arguments: --shard s; every argument but "
                                          r"--shards, --shards-split and --gt-mean-psnr goes to their parse_options: "
                                          r"see python basicsr/train.py -h$"):
        session.parsed(theirs, ["-opt", "Options/Tiny.yml", "--shard", "s"])
    with pytest.raises(SystemExit):  # argparse is itself again once their parse_options returns
        argparse.ArgumentParser(prog="x").parse_args(["--nope"])

    def lacks_path(*args):
        return {"name": "Tiny"}["path"]

    with pytest.raises(ConfigError, match=r"^-opt Options/Tiny.yml: their parse_options failed on it \(KeyError: "
                                          r"'path'\); most often a key their parser reads is missing or of the "
                                          r"wrong type: compare the file with the repository's own training option "
                                          r"files$"):
        session.parsed(lacks_path)


def test_outside_a_repository_the_command_says_so(tmp_path):
    done = command(tmp_path, "-opt", "Options/x.yml", "--shards", "shards")
    assert done.returncode == 1 and done.stderr == (
        f"pairload.basicsr: {tmp_path.resolve()}: no basicsr/train.py here; run python -m pairload.basicsr from the "
        "root of a BasicSR-family repository (BasicSR, Restormer, Retinexformer, NAFNet: the folder that holds "
        "basicsr/)\n")


def test_without_shards_the_command_gives_the_pack_command(data, tmp_path):
    repo = write_repo(tmp_path / "repo", options(data / "raw"))
    done = command(repo, "-opt", "Options/Tiny.yml")
    raw = data / "raw" / "train"
    assert done.returncode == 1 and done.stderr.splitlines()[-1] == (
        f"pairload.basicsr: no --shards: pack datasets.train's folders once with `pairload pack {raw} "
        "shards/raw-train --low-dir low --high-dir high`, then add --shards shards/raw-train")
    assert "Traceback" not in done.stderr and not (repo / "experiments").exists()  # refused before their dirs


def test_the_pack_command_it_gives_packs_what_their_folders_hold(data, tmp_path):
    opt = options(data / "raw")["datasets"]["train"]
    hint = pack_hint(opt)
    line = hint.split("`")[1].split()
    assert line[:2] == ["pairload", "pack"]
    from pairload.cli import entry

    sys_argv = sys.argv
    sys.argv = ["pairload", *line[1:3], str(tmp_path / "s"), *line[4:], "--workers", "1"]
    try:
        with pytest.raises(SystemExit) as done:
            entry()
    finally:
        sys.argv = sys_argv
    assert done.value.code in (0, None)
    with make_loader("ram", tmp_path / "s", batch_size=4, crop=8) as loader:
        assert loader.samples == N


@pytest.mark.parametrize("train, expected", [
    ({"dataroot_lq": "data/LOLv1/Train/input", "dataroot_gt": "data/LOLv1/Train/target", "filename_tmpl": "{}"},
     "pack datasets.train's folders once with `pairload pack data/LOLv1/Train shards/LOLv1-Train --low-dir input "
     "--high-dir target`, then add --shards shards/LOLv1-Train"),
    ({"dataroot_lq": "./datasets/DIV2K/lq", "dataroot_gt": "./datasets/DIV2K/gt", "filename_tmpl": "{}x4"},
     "`pairload pack datasets/DIV2K shards/datasets-DIV2K --low-dir lq --high-dir gt --name-template '{}x4'`"),
    ({"dataroot_lq": "./datasets/SIDD/train/input_crops.lmdb", "dataroot_gt": "./datasets/SIDD/train/gt_crops.lmdb",
      "io_backend": {"type": "lmdb"}},
     "datasets.train reads LMDB files (./datasets/SIDD/train/input_crops.lmdb, ./datasets/SIDD/train/gt_crops.lmdb), "
     "which pairload does not read: pack the image folders they were made from"),
    ({"dataroot_lq": "/a/low", "dataroot_gt": "/b/high"},
     "datasets.train's folders /a/low and /b/high are not side by side: link them into one folder and pack it once "
     "with `mkdir -p raw-train && ln -s /a/low raw-train/low && ln -s /b/high raw-train/high && pairload pack "
     "raw-train shards/train`, then add --shards shards/train"),
])
def test_pack_hints(train, expected):
    assert expected in pack_hint(train)


def test_our_arguments_are_taken_out_and_theirs_kept_in_order():
    ours, theirs = split_args(["-opt", "a.yml", "--shards", "s", "--launcher", "pytorch", "--force_yml",
                               "train:x=1", "--shards-split", "val", "--auto_resume"])
    assert (ours.shards, ours.shards_split) == ("s", "val")
    assert theirs == ["-opt", "a.yml", "--launcher", "pytorch", "--force_yml", "train:x=1", "--auto_resume"]
    assert (split_args([])[0].shards, split_args([])[0].shards_split) == (None, "train")
    # given twice, argparse would train on the last one silently
    with pytest.raises(ConfigError, match=r"^--shards given 2 times \(a, b\); give it once$"):
        split_args(["--shards", "a", "-opt", "x.yml", "--shards=b"])
    with pytest.raises(ConfigError, match=r"^--shards-split given 2 times \(train, test\); give it once$"):
        split_args(["--shards-split", "train", "--shards-split", "test"])


def test_a_merge_key_overridden_in_the_train_dataset_is_no_repeated_key(tmp_path):
    """`<<: *anchor` then a key of the anchor's: YAML's override, meant, not a key written twice."""
    (tmp_path / "Options").mkdir()
    text = bad_train().replace("datasets:\n", "base: &base {gt_size: 16}\ndatasets:\n", 1).replace(
        "    gt_size: 8\n", "    <<: *base\n    gt_size: 8\n")
    (tmp_path / "Options" / "Merged.yml").write_text(text)
    assert check_options_file(["-opt", "Options/Merged.yml"], tmp_path) == "-opt Options/Merged.yml"


def test_a_train_py_of_another_shape_is_named():
    train = types.SimpleNamespace(__file__="repo/basicsr/train.py", **{name: print for name in (
        "parse_options", "create_dataset", "create_dataloader", "EnlargedSampler", "CPUPrefetcher", "CUDAPrefetcher",
        "build_model")})
    with pytest.raises(RepositoryError, match=r"^repo/basicsr/train.py: no train_pipeline or main found in it; "
                                              r"pairload.basicsr drives train.py files shaped like BasicSR's"):
        find_names(train)
    train.main = print
    assert find_names(train)["model"] == "build_model" and find_names(train)["entry"] == "main"


def parsed_opt(data: Path, **changes) -> dict:
    opt = options(data / "raw", **changes)
    opt.update(rank=0, world_size=1, path={"training_states": "x/training_states"})
    return opt


def test_shards_that_do_not_fit_are_refused_in_one_line(data):
    with pytest.raises(ShardError, match=r"no split 'val'; this folder has \['train'\]; name the split to train on "
                                         r"with --shards-split$"):
        Session(str(data / "shards"), "val").setup(parsed_opt(data))
    opt = parsed_opt(data)
    opt["network_g"]["inp_channels"] = 4
    with pytest.raises(ConfigError, match=r"^BasicSR options network_g.inp_channels=4: the model's inputs have 4 "
                                          r"channels, --shards .* split 'train' has 3-channel inputs; pack 4-channel "
                                          r"images, or set network_g.inp_channels: 3$"):
        Session(str(data / "shards"), "train").setup(opt)
    with pytest.raises(ConfigError, match=r"^-opt O.yml: datasets.train gt_size 32, batch_size_per_gpu 4, "
                                          r"dataset_enlarge_ratio 1 on --shards .* split 'train': crop 32 is larger "
                                          r"than sample '00000' of split 'train', which is 20x16 \(crop 32x32\); use "
                                          r"datasets.train.gt_size <= 16 or repack without that image$"):
        Session(str(data / "shards"), "train", options_file="-opt O.yml").setup(parsed_opt(data, gt_size=32))
    # the option file's keys, not the loader's (repeats=, last_batch=), in the advice (#60)
    with pytest.raises(ConfigError, match=r"^datasets.train gt_size 8, batch_size_per_gpu 13, dataset_enlarge_ratio "
                                          r"1 on --shards .* split 'train': batch_size 13 is larger than a rank's "
                                          r"share of split 'train' \(12 samples / 1 ranks = 12\); lower "
                                          r"datasets.train.batch_size_per_gpu, or set "
                                          r"datasets.train.dataset_enlarge_ratio: K \(K passes over the split per "
                                          r"epoch, each with new crops\)$"):
        Session(str(data / "shards"), "train").setup(parsed_opt(data, batch_size_per_gpu=13, mini_batch_sizes=[13, 2]))
    with pytest.raises(ConfigError, match=r"^BasicSR options datasets.train.type=Dataset_SIDImage: this dataset "):
        Session(str(data / "shards"), "train").setup(parsed_opt(data, type="Dataset_SIDImage", N_frames=5))


def test_gt_mean_psnr_in_their_metric_form_is_pairloads_on_the_rgb_images():
    rng = np.random.default_rng(3)
    rgb_out = (rng.random((1, 3, 24, 20)) * np.array([0.3, 0.5, 0.9])[None, :, None, None]).astype(np.float32)
    rgb_gt = rng.random((1, 3, 24, 20)).astype(np.float32)
    out_t, gt_t = torch.from_numpy(rgb_out), torch.from_numpy(rgb_gt)
    as_basicsr = [(t[0].permute(1, 2, 0).numpy()[..., ::-1] * 255).round().astype(np.uint8) for t in (out_t, gt_t)]
    # their validation gives tensor2img's 8-bit images: the metric of those levels, in RGB order
    rgb_levels = [torch.from_numpy(a[..., ::-1].transpose(2, 0, 1).copy())[None] for a in as_basicsr]
    want = float(gt_mean_psnr(*rgb_levels, crop_border=2)[0])
    assert calculate_psnr_gt_mean(*as_basicsr, crop_border=2) == pytest.approx(want, abs=1e-9)
    want_pt = float(gt_mean_psnr(out_t, gt_t, crop_border=2)[0])
    assert calculate_psnr_gt_mean(out_t, gt_t, crop_border=2) == pytest.approx(want_pt, abs=1e-9)  # their _pt form
    swapped = [a[..., ::-1].copy() for a in as_basicsr]  # RGB taken for BGR: other luma weights, another value
    assert abs(calculate_psnr_gt_mean(*swapped, crop_border=2) - want) > 1e-3
    chw = [a.transpose(2, 0, 1) for a in as_basicsr]
    assert calculate_psnr_gt_mean(*chw, crop_border=2, input_order="CHW") == pytest.approx(want, abs=1e-9)


def test_gt_mean_psnr_is_reported_by_their_validation_before_their_own_metrics(data, tmp_path):
    opt = options(data / "raw")
    opt["train"]["total_iter"] = 5
    opt["val"]["metrics"] = {"psnr": {"type": "calculate_psnr", "crop_border": 1, "test_y_channel": False}}
    repo = write_repo(tmp_path / "repo", opt)
    done = command(repo, "-opt", "Options/Tiny.yml", "--shards", str(data / "shards"), "--gt-mean-psnr")
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in log_of(repo).splitlines() if "Validation ValSet," in x)
    assert re.search(r"# psnr_gt_mean: \d+\.\d{4}\s+# psnr: \d+\.\d{4}$", line), line  # theirs stays the last
    assert "validation reports psnr_gt_mean" in log_of(repo)


def test_under_torchrun_each_rank_trains_on_its_share_of_the_loaders_batches(data, tmp_path):
    opt = options(data / "raw")
    opt["train"]["total_iter"] = 3  # stage 1 only: the loader's batches as they are
    repo = write_repo(tmp_path / "repo", opt)
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
                           "pairload.basicsr", "-opt", "Options/Tiny.yml", "--launcher", "pytorch", "--shards",
                           str(data / "shards")], cwd=repo, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (repo / "experiments" / "Tiny" / "fed.jsonl").read_text().splitlines()]
    assert sorted((r["iter"], r["rank"]) for r in rows) == [(i, k) for i in (1, 2, 3) for k in (0, 1)]
    want = {}
    for rank in (0, 1):
        ranked = {**opt, "rank": rank, "world_size": 2}
        with make_loader("ram", data / "shards", **loader_options(ranked, progressive="code")) as loader:
            for epoch in range(3):  # 12 pairs, batch 4, 2 ranks: one batch per rank and epoch
                loader.set_epoch(epoch)
                want[epoch + 1, rank] = [b.low.numpy() for b in loader]
    for r in rows:
        assert len(want[r["iter"], r["rank"]]) == 1
        assert np.array_equal(want[r["iter"], r["rank"]][0], np.array(r["lq"], dtype=np.uint8)), (r["iter"], r["rank"])
    for i in (1, 2, 3):  # the two ranks' rows are different pairs (pixel [0, 0, 0] holds the pair's index)
        firsts = [set(np.array(r["lq"], dtype=np.uint8)[:, 0, 0, 0].tolist()) for r in rows if r["iter"] == i]
        assert not firsts[0] & firsts[1]
