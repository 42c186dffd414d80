"""The command line's error boundary: a refusal that names its option gets that option's flag in its advice, and
no message text is rewritten (a path or key holding `batch_size` or `crop` comes out as it is)."""

from __future__ import annotations

import pickle

import pytest

from pairload.errors import ConfigError, ShardError, in_cli_terms
from pairload.recipes.train import main


def test_only_a_refusal_that_names_its_option_gets_a_flag_and_the_text_is_never_rewritten():
    plain = ConfigError("runs/batch_size=8/crop=None: expected batch_size=2 and num_workers=0")
    assert in_cli_terms(plain) == str(plain)
    named = ConfigError("batch_size 9 is larger than a rank's share (runs/batch_size_9)", option="batch_size",
                        fix="lower batch_size, or use last_batch='pad'", flag_fix="lower {flag}")
    assert str(named) == "batch_size 9 is larger than a rank's share (runs/batch_size_9); lower batch_size, or use " \
                         "last_batch='pad'"
    assert in_cli_terms(named) == "batch_size 9 is larger than a rank's share (runs/batch_size_9); lower --batch-size"
    assert in_cli_terms(ConfigError("crop=1.5: expected an int", option="crop", fix="pass an int")) == \
        "crop=1.5: expected an int; change --crop"
    assert in_cli_terms(ShardError("shards/batch_size/manifest.json: missing")) == \
        "shards/batch_size/manifest.json: missing"
    value = ConfigError.for_value("batch_size", "{0}", "expected at least 1")  # braces in a value are kept too
    assert (str(value), in_cli_terms(value)) == ("batch_size={0}: expected at least 1",
                                                 "--batch-size {0}: expected at least 1")
    again = pickle.loads(pickle.dumps(named))  # as a worker process would send it back
    assert (str(again), again.option, in_cli_terms(again)) == (str(named), "batch_size", in_cli_terms(named))


def test_a_path_holding_option_names_is_printed_as_it_is(packed, tmp_path, capsys):
    out = tmp_path / "batch_size=8" / "crop_256"
    assert main(["--shards", str(packed), "--device", "cpu", "--crop", "16", "--batch-size", "2", "--workers", "0",
                 "--out", str(out), "--resume"]) == 1
    assert capsys.readouterr().err == f"error: --resume: no checkpoint at {out / 'last.pt'}; run without --resume " \
                                      "first, or point --out at the run\n"


def test_a_crop_larger_than_the_images_names_the_flag(packed, capsys):
    assert main(["--shards", str(packed), "--device", "cpu", "--crop", "999", "--batch-size", "2", "--workers", "0",
                 "--val-split", "none"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: crop 999 is larger than sample ") and "; use --crop <= 40 or repack without" in err
    assert "use crop <=" not in err


@pytest.mark.parametrize("argv, expected", [(["--workers", "-1"], "--workers -1: expected 0"),
                                            (["--batch-size", "0"], "--epochs and --batch-size must be at least 1")])
def test_train_refusals_name_their_flags(packed, capsys, argv, expected):
    assert main(["--shards", str(packed), "--device", "cpu", *argv]) == 1
    assert expected in capsys.readouterr().err
