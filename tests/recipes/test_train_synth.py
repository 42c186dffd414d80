"""The reference loop on synthesized inputs (`--degrade`): it trains, validates on the stored pairs, records the
degradation, and its data digest covers each sample's parameters (the same run: the same digest, also across a
mid-epoch resume; other parameters on the same keys: another digest). `--init-from` starts from another run's
weights. In-process, CPU, a pack of 16 pairs of 24x32."""

import json
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


def train(shards, out, *extra) -> list[dict]:
    code = main(["--shards", str(shards), "--device", "cpu", "--crop", "16", "--batch-size", "4", "--width", "4",
                 "--depth", "1", "--workers", "0", "--warmup-steps", "1", "--epochs", "1", "--out", str(out),
                 *map(str, extra)])
    assert code == 0
    return [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]


def test_degrade_trains_and_its_parameters_enter_the_data_digest(shards, tmp_path, capsys):
    stored, = train(shards, tmp_path / "stored")
    synth, = train(shards, tmp_path / "synth", "--degrade", "lowlight")
    assert "training inputs synthesized from the targets: lowlight; validation on the stored pairs" in \
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
    ({"degrade_sources": "synth"}, r"--degrade-sources synth: there is no --degrade to apply; pass --degrade SPEC"),
    ({"degrade": "lowlight", "degrade_sources": "synth"}, r"--degrade-sources synth names sources of a --mix, and "
                                                          r"there is none"),
    ({"degrade": "lowlight", "degrade_sources": "web", "mix": "real=a:1,synth=b:3"},
     r"--degrade-sources web: expected some of the --mix sources \(real, synth\), separated by commas; found web"),
])
def test_degrade_options_are_checked_before_anything_starts(options, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig(shards="shards", **options)


def test_degrade_sources_reach_the_loader_as_names():
    cfg = TrainConfig(shards="s", mix="real=a:1,synth=b:3", degrade="lowlight", degrade_sources=" synth ")
    assert cfg.plan_options()["degrade_sources"] == ("synth",) and cfg.plan_options()["degrade"] == "lowlight"
    assert "degrade" not in TrainConfig(shards="s").plan_options()
