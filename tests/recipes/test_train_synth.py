"""The reference loop on degraded inputs (`--degrade`): it trains, validates on the stored pairs, records the
degradation, and its data digest covers each sample's parameters (the same run: the same digest, also across a
mid-epoch resume; other parameters on the same keys: another digest). `--init-from` starts from another run's
weights. A targets-only pack is refused by the flag at fault: --degrade (or --degrade-sources) for training on it,
--val-split for validating on it. In-process, CPU, a pack of 16 pairs of 24x32."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import raw_and_shards
from midepoch import keep_first_mid_epoch_checkpoint
from pairload.errors import ConfigError
from pairload.recipes.config import TrainConfig
from pairload.recipes.train import main


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    return raw_and_shards(tmp_path_factory.mktemp("synthrun"), 16, test=2, size=(24, 32)) / "shards"


@pytest.fixture(scope="module")
def targets(shards) -> Path:
    """The fixture's 16 training targets packed alone (`pack --targets-only`)."""
    from pairload.pack.writer import PackOptions, pack

    pack(shards.parent / "raw" / "train" / "high", shards.parent / "targets", PackOptions(workers=1, targets_only=True))
    return shards.parent / "targets"


def train(shards, out, *extra) -> list[dict]:
    code = main(["--shards", str(shards), "--device", "cpu", "--crop", "16", "--batch-size", "4", "--width", "4",
                 "--depth", "1", "--workers", "0", "--warmup-steps", "1", "--epochs", "1", "--out", str(out),
                 *map(str, extra)])
    assert code == 0
    return [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]


def test_degrade_trains_and_its_parameters_enter_the_data_digest(shards, tmp_path, capsys):
    stored, = train(shards, tmp_path / "stored")
    synth, = train(shards, tmp_path / "synth", "--degrade", "lowlight")
    assert "training inputs degraded from the targets: lowlight; validation on the stored pairs" in \
        capsys.readouterr().out
    again, = train(shards, tmp_path / "again", "--degrade", "lowlight")
    darker, = train(shards, tmp_path / "darker", "--degrade", "lowlight, gamma = 4..5")
    assert np.isfinite(synth["train_loss"]) and synth["train_loss"] != stored["train_loss"]
    # the same keys in the same order (the plan does not depend on the degradation) ...
    assert stored["data_samples"] == synth["data_samples"] == darker["data_samples"] == 16
    # ... but the digest tells the inputs apart: stored pairs, one degradation, another
    assert len({stored["data_digest"], synth["data_digest"], darker["data_digest"]}) == 3
    assert again["data_digest"] == synth["data_digest"] and again["train_loss"] == synth["train_loss"]
    # validation reads the stored pairs whatever trains
    assert synth["val_psnr_input"] == stored["val_psnr_input"] == darker["val_psnr_input"]
    config = json.loads((tmp_path / "darker" / "config.json").read_text())
    assert config["degrade"] == "lowlight,gamma=4..5" and config["degrade_sources"] is None  # the canonical form
    assert json.loads((tmp_path / "stored" / "config.json").read_text())["degrade"] is None


def test_an_epoch_resumed_mid_way_has_the_digest_of_the_whole(shards, tmp_path, monkeypatch):
    """The parameters of the steps before a mid-epoch checkpoint are kept in it and hashed with the rest."""
    mid = tmp_path / "resumed"
    mid.mkdir()
    keep_first_mid_epoch_checkpoint(monkeypatch, mid)
    whole, = train(shards, tmp_path / "whole", "--degrade", "lowlight", "--save-every-steps", 2)
    monkeypatch.undo()
    state = torch.load(mid / "last.pt", weights_only=False)["mid_epoch"]
    assert state["step"] == 2 and state["params"]["columns"] == ["alpha", "beta", "gamma", "gain_r", "gain_b",
                                                                 "shot", "read"]
    resumed, = train(shards, mid, "--degrade", "lowlight", "--save-every-steps", 2, "--resume")
    assert resumed["data_digest"] == whole["data_digest"] and resumed["data_samples"] == 16


def test_init_from_starts_from_the_checkpoints_weights(shards, tmp_path, capsys):
    train(shards, tmp_path / "pre", "--degrade", "lowlight", "--val-split", "none")
    pre = torch.load(tmp_path / "pre" / "last.pt", weights_only=False)["model"]
    # a learning rate of 0 leaves the weights where they started (batch-norm statistics move on: left out), the
    # checkpoint's with --init-from, else fresh ones
    pre = {name: value for name, value in pre.items() if not name.endswith(("running_mean", "running_var",
                                                                             "num_batches_tracked"))}
    train(shards, tmp_path / "tuned", "--lr", 0, "--init-from", tmp_path / "pre" / "last.pt")
    assert f"model weights from {tmp_path / 'pre' / 'last.pt'}" in capsys.readouterr().out
    tuned = torch.load(tmp_path / "tuned" / "last.pt", weights_only=False)["model"]
    assert all(torch.equal(pre[name], tuned[name]) for name in pre)
    train(shards, tmp_path / "fresh", "--lr", 0)
    fresh = torch.load(tmp_path / "fresh" / "last.pt", weights_only=False)["model"]
    assert not all(torch.equal(pre[name], fresh[name]) for name in pre)
    assert json.loads((tmp_path / "tuned" / "config.json").read_text())["init_from"] == str(tmp_path / "pre" /
                                                                                          "last.pt")
    base = ["--shards", str(shards), "--device", "cpu", "--crop", "16", "--batch-size", "4", "--depth", "1",
            "--workers", "0", "--epochs", "1"]
    assert main([*base, "--width", "4", "--init-from", str(tmp_path / "none.pt")]) == 1
    assert capsys.readouterr().err.strip() == (f"error: --init-from {tmp_path / 'none.pt'}: no such file; expected a "
                                               "checkpoint of an earlier run (its last.pt or best.pt)")
    assert main([*base, "--width", "8", "--init-from", str(tmp_path / "pre" / "last.pt")]) == 1
    assert "but this run builds {'width': 8," in capsys.readouterr().err


@pytest.mark.parametrize("options, message", [
    ({"degrade": "lowlight,gama=2"}, r"--degrade lowlight,gama=2: degradation 'lowlight': no parameter 'gama'; its "
                                     r"parameters are alpha, beta, gamma"),
    ({"degrade": "darken"}, r"--degrade darken: degradation 'darken': expected one of lowlight, "),
    ({"degrade": "lowlight,gamma=2,gamma=3"}, r"^--degrade lowlight,gamma=2,gamma=3: degradation 'lowlight': gamma is "
                                              r"given twice \(gamma=2, then gamma=3\); give it once, as one value or "
                                              r"one range, e.g. lowlight,gamma=1\.5\.\.5$"),
    ({"degrade_sources": "synth"}, r"--degrade-sources synth: there is no --degrade to apply; pass --degrade SPEC"),
    ({"degrade": "lowlight", "degrade_sources": "synth"}, r"--degrade-sources synth names sources of a --mix, and "
                                                          r"there is none"),
    ({"degrade": "lowlight", "degrade_sources": "web", "mix": "real=a:1,synth=b:3"},
     r"--degrade-sources web: expected some of the --mix sources \(real, synth\), each once, separated by single "
     r"commas; found web"),
    ({"degrade": "lowlight", "degrade_sources": "synth,,real", "mix": "real=a:1,synth=b:3"},
     r"--degrade-sources synth,,real: .*; found an empty name$"),
    ({"degrade": "lowlight", "degrade_sources": "synth, synth", "mix": "real=a:1,synth=b:3"},
     r"--degrade-sources synth, synth: .*; found synth named twice$"),
    ({"mix": "made=a:1,made=b:3"}, r"^--mix made=a:1,made=b:3: source 'made' is named twice \(items made=a:\.\.\. "
                                   r"and made=b:3\); give each source its own name$"),  # not the last one silently
])
def test_degrade_options_are_checked_before_anything_starts(options, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig(shards="shards", **options)


def test_degrade_sources_reach_the_loader_as_names():
    cfg = TrainConfig(shards="s", mix="real=a:1,synth=b:3", degrade="lowlight", degrade_sources=" synth ")
    assert cfg.plan_options()["degrade_sources"] == ("synth",) and cfg.plan_options()["degrade"] == "lowlight"
    assert "degrade" not in TrainConfig(shards="s").plan_options()


@pytest.mark.parametrize("extra, message", [
    (["--degrade", "lowlight", "--val-split", "train"],
     "--val-split train: split 'train' of {targets} holds targets only (packed with --targets-only): there are no "
     "stored inputs to validate on; {targets} has no split with stored pairs: train without validation with "
     "--val-split none"),
    (["--degrade", "lowlight"],
     "--val-split test: {targets} has no split 'test' (its splits: train (targets only)); {targets} has no split with "
     "stored pairs: train without validation with --val-split none"),
    (["--val-split", "none"],
     "{targets}: split 'train' holds targets only (packed with --targets-only), so its inputs must be made "
     "from them by a degradation; add --degrade lowlight (docs/degrade.md)"),
    (["--mix", "real={shards}:1,made={targets}:1", "--degrade", "lowlight", "--degrade-sources", "real"],
     "--mix source 'made' ({targets}): split 'train' holds targets only (packed with --targets-only), so its inputs "
     "must be made from them by a degradation; add it to --degrade-sources: --degrade-sources real,made"),
])
def test_a_targets_only_pack_is_refused_by_the_flag_at_fault(shards, targets, tmp_path, capsys, extra, message):
    """Validation compares outputs with stored pairs and never degrades; the refusal names --val-split, not the
    --degrade that was given, before any loader is built."""
    extra = [a.format(shards=shards, targets=targets) for a in extra]
    base = ["--device", "cpu", "--crop", "16", "--batch-size", "4", "--workers", "0", "--out", str(tmp_path / "run")]
    assert main(["--shards", str(targets), *base, *extra]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: " + message.format(shards=shards, targets=targets)]


def test_val_split_names_the_splits_with_stored_pairs():
    from pairload.recipes.data import check_val_split

    manifest = {"splits": {"photos": {"targets_only": True}, "test": {}, "train": {}}}
    fix = "validate on a split with stored pairs with --val-split SPLIT (test, train), or train without validation " \
          "with --val-split none"
    with pytest.raises(ConfigError, match=re.escape(f"--val-split photos: split 'photos' of s holds targets only "
                                                    f"(packed with --targets-only): there are no stored inputs to "
                                                    f"validate on; {fix}")):
        check_val_split(TrainConfig(shards="s", val_split="photos"), manifest)
    with pytest.raises(ConfigError, match=re.escape("--val-split val: s has no split 'val' (its splits: photos "
                                                    f"(targets only), test, train); {fix}")):
        check_val_split(TrainConfig(shards="s", val_split="val"), manifest)
    check_val_split(TrainConfig(shards="s", val_split="test"), manifest)  # stored pairs: nothing to refuse
