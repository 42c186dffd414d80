"""The reference loop on clips (`--clips 3`) of a split packed with --sequences: the model takes the 3 input frames
stacked in channels and predicts the centre frame, validation takes every clip of the grid once, the data digest
covers each clip's frames (also across a mid-epoch resume) and a degradation draws one parameter set per clip.
In-process, CPU, sequences of 24x32 frames."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from clipdata import make_video_raw, pack_video
from midepoch import keep_first_mid_epoch_checkpoint
from pairload.errors import ConfigError
from pairload.recipes.config import TrainConfig
from pairload.recipes.loop import data_digest
from pairload.recipes.model import EnhanceUNet, ModelConfig
from pairload.recipes.train import main

# frames per sequence: 4 + 3 + 5 training clips of 3; 2 + 1 on the test grid (sequences 3 and 4: other pixels)
TRAIN, TEST = [6, 5, 7], [0, 0, 0, 4, 3]


@pytest.fixture(scope="module")
def video(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("clipsrun")
    make_video_raw(root / "raw", TRAIN, size=(24, 32))
    make_video_raw(root / "raw", TEST, size=(24, 32), split="test")
    return pack_video(root / "raw", root / "shards")


def train(shards, out, *extra) -> list[dict]:
    code = main(["--shards", str(shards), "--device", "cpu", "--crop", "16", "--batch-size", "2", "--width", "4",
                 "--depth", "1", "--workers", "0", "--warmup-steps", "1", "--epochs", "1", "--clips", "3",
                 "--out", str(out), *map(str, extra)])
    assert code == 0
    return [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]


def test_clips_train_a_model_of_stacked_frames_and_resume_with_the_same_digest(video, tmp_path, monkeypatch, capsys):
    mid = tmp_path / "resumed"
    mid.mkdir()
    keep_first_mid_epoch_checkpoint(monkeypatch, mid)
    whole, = train(video, tmp_path / "whole", "--save-every-steps", 2)
    monkeypatch.undo()
    assert "predicts the target of frame 1" in capsys.readouterr().out
    assert np.isfinite(whole["train_loss"]) and whole["steps"] == 6 and whole["data_samples"] == 12
    assert whole["val_samples"] == 3 and np.isfinite(whole["val_psnr"]) and np.isfinite(whole["val_psnr_input"])
    state = torch.load(tmp_path / "whole" / "last.pt", weights_only=False)
    assert state["model"]["stem.0.weight"].shape[1] == 3 * 3  # C·T input channels
    assert state["model_config"]["frames"] == 3
    config = json.loads((tmp_path / "whole" / "config.json").read_text())
    assert config["clips"] == "3,stride=1,start=random,short=refuse" and config["model"]["frames"] == 3
    # the digest is of each clip's frames, one clip a line
    cut = torch.load(mid / "last.pt", weights_only=False)["mid_epoch"]
    assert cut["step"] == 2 and cut["loader"]["clips"] == "3,stride=1,start=random,short=refuse"
    first = cut["keys"][0].split(" ")
    assert len(first) == 3 and first[0].rsplit("+", 1)[0] == first[2].rsplit("+", 1)[0]
    assert data_digest([first]) == data_digest([" ".join(first)]) != data_digest(first)
    resumed, = train(video, mid, "--save-every-steps", 2, "--resume")
    assert resumed["data_digest"] == whole["data_digest"] and resumed["data_samples"] == 12
    # a degradation: one parameter set per clip, in the digest
    degraded, = train(video, tmp_path / "degraded", "--degrade", "lowlight")
    assert np.isfinite(degraded["train_loss"]) and degraded["data_samples"] == 12
    assert degraded["data_digest"] != whole["data_digest"]


def test_a_clip_model_is_residual_over_its_centre_frame():
    model = EnhanceUNet(ModelConfig(width=4, depth=1, frames=3)).eval()
    x = torch.rand(2, 3, 3, 10, 14)
    assert model.stem[0].in_channels == 9
    assert torch.equal(model(x), x[:, 1])  # the head starts at zero: the output is the centre frame
    assert ModelConfig(width=4, depth=1).to_dict() == {"width": 4, "depth": 1}  # old checkpoints still match


def test_clips_options_are_checked_before_anything_starts():
    assert TrainConfig(shards="s", clips=" 5, stride=2").clips == "5,stride=2,start=random,short=refuse"
    assert TrainConfig(shards="s", clips="5").plan_options()["clips"] == "5,stride=1,start=random,short=refuse"
    assert "clips" not in TrainConfig(shards="s").plan_options() and TrainConfig(shards="s").frames == 1
    with pytest.raises(ConfigError, match="--clips 3,start=middle: clips start=middle: expected one of random, grid"):
        TrainConfig(shards="s", clips="3,start=middle")
    with pytest.raises(ConfigError, match="--clips takes the sequences of packed shards: use --loader ram"):
        TrainConfig(loader="dali-file", raw="raw", clips="3")
