import json
import re
import subprocess
import sys

import pytest

from conftest import make_raw


def run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "pairload.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd)


def test_pack_verify_info_through_the_cli(raw, tmp_path):
    res = run("pack", raw, tmp_path / "s", "--shard-size", "64KB", "--workers", "2")
    assert res.returncode == 0, res.stderr
    assert "train: 8 pairs" in res.stdout and "test: 4 pairs" in res.stdout
    assert "hashing and syncing the last shards" in res.stdout and " MB/s written" in res.stdout
    assert not any(w in res.stdout for w in ("hash_fsync_tail", "decode_compress_write", "find 0."))
    res = run("verify", tmp_path / "s")
    assert res.returncode == 0 and "12 samples" in res.stdout
    res = run("info", tmp_path / "s", "--json")
    assert json.loads(res.stdout)["train"]["samples"] == 8


def test_errors_exit_1_with_one_line_and_no_traceback(tmp_path):
    raw = make_raw(tmp_path / "raw", 2)
    (raw / "low" / "00001.png").write_bytes(b"")
    res = run("pack", raw, tmp_path / "s")
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    empty = raw / "low" / "00001.png"
    assert res.stderr.strip().splitlines() == [f"error: {empty}: file is empty (0 bytes); replace or remove it"]
    res = run("verify", tmp_path / "nothing")
    assert res.returncode == 1 and "no such folder" in res.stderr and "Traceback" not in res.stderr
    res = run("pack", raw, tmp_path / "s", "--shard-size", "huge")
    assert res.returncode == 1 and "expected a size such as 500GB" in res.stderr


def test_make_pairs_then_pack_is_the_main_job(tmp_path):
    pytest.importorskip("skimage")
    assert run("make-pairs", tmp_path / "raw", "--pairs", "4", "--test", "2", "--size", "64x48").returncode == 0
    res = run("pack", tmp_path / "raw", tmp_path / "s")
    assert res.returncode == 0, res.stderr
    assert "train: 4 pairs" in res.stdout and "test: 2 pairs" in res.stdout


def test_train_help_and_usage_errors_pass_through():
    res = run("train", "--help")
    assert res.returncode == 0 and "--loader" in res.stdout and "--resume" in res.stdout
    assert "(default: None)" not in res.stdout and "Train a small enhancement network" in res.stdout
    assert "pairload train --shards SHARDS --out" in res.stdout and "`run` puts together" not in res.stdout
    res = run("train", "--epochs")
    assert res.returncode == 2 and "argument --epochs: expected one argument" in res.stderr


def test_version_and_help_that_is_not_cut_at_80_columns():
    import pairload

    res = run("--version")
    assert res.returncode == 0 and res.stdout.strip() == f"pairload {pairload.__version__}"
    res = run("pack", "--help")
    assert res.returncode == 0 and "…" not in res.stdout.replace("our485/Train/…", "").replace("eval15/Test/…", "")
    assert "low|input|dark|lq|img" in res.stdout and "high|normal|gt|target|hq" in res.stdout


def test_train_usage_errors_are_one_line_naming_the_command_and_refusals_name_its_flags(packed):
    res = run("train", "--bogus")
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == ["error: pairload train: unrecognized arguments: --bogus "
                                               "(see `pairload train --help`)"]
    res = run("train", "--shards", packed, "--crop", "16", "--batch-size", "500", "--epochs", "1", "--device", "cpu",
              "--val-split", "none")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "lower --batch-size" in res.stderr and "last_batch" not in res.stderr


def test_train_on_a_pack_without_a_test_split_names_its_splits_and_val_split_none(tmp_path):
    from pairload.pack import PackOptions, pack

    packed = tmp_path / "shards"
    pack(make_raw(tmp_path / "raw", 2), packed, PackOptions(workers=1))
    res = run("train", "--shards", packed, "--epochs", "1", "--device", "cpu", "--crop", "16", "--batch-size", "2")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert f"--val-split test: {packed} has no split 'test' (its splits: train); validate on one of them with " \
           "--val-split SPLIT, or train without validation with --val-split none" in res.stderr


def test_a_training_epoch_says_its_data_wait_as_a_share_of_step_time(tmp_path):
    from pairload.pack import PackOptions, pack

    pack(make_raw(tmp_path / "raw", 2), tmp_path / "shards", PackOptions(workers=1))
    res = run("train", "--shards", tmp_path / "shards", "--epochs", "1", "--device", "cpu", "--crop", "16",
              "--batch-size", "2", "--val-split", "none", "--width", "4")
    assert res.returncode == 0, res.stderr
    assert re.search(r"data wait \d+\.\d% of step time", res.stdout + res.stderr), res.stdout
