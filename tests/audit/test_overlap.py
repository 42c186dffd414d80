"""Training refuses to validate on images it trains on, by content (`pairload.audit.refuse_overlap`): the reference
loop (`--allow-overlap`), Lightning's `PairDataModule` (`allow_overlap=True`) and the BasicSR command
(`--allow-overlap`) each call the one check before training."""

from __future__ import annotations

from pathlib import Path

import pytest

from pairload.audit import refuse_overlap
from pairload.audit.overlap import ImageFiles
from pairload.errors import ConfigError
from pairload.pack import PackOptions, pack

from audit_photos import CHANGES, tiles, write_pairs

REFUSED = (r"^validation split 'test' of .*: 4 of its 6 samples show scenes of the training data: 't000' \(= "
           r"{train}:train 'l-000'\), 't001' \(= {train}:train 'l-001'\), 't002' \(= {train}:train 'l-002'\) …; "
           r"validate on a split the model does not train on \(`pairload audit` lists every overlap\), or pass "
           r"{override} to train anyway$")


@pytest.fixture(scope="module")
def leaky(tmp_path_factory) -> Path:
    """One pack whose test split (6 pairs) holds 4 scenes of its training split (10 pairs, l-000 to l-003 changed
    as `CHANGES` change them), and a clean pack of the other scenes alone."""
    root = tmp_path_factory.mktemp("leaky")
    scenes = tiles(160, 240)
    write_pairs(root / "raw", "train", [change(scenes[k]) for k, (_, change) in enumerate(CHANGES[1:])], "l-")
    write_pairs(root / "raw", "train", scenes[10:16], "o-")
    write_pairs(root / "raw", "test", scenes[:4] + scenes[20:22], "t", seed=100)
    pack(root / "raw", root / "shards", PackOptions(workers=1))
    write_pairs(root / "clean", "train", scenes[10:16], "o-")
    write_pairs(root / "clean", "test", scenes[20:22], "t", seed=100)
    pack(root / "clean", root / "clean-shards", PackOptions(workers=1))
    return root


def test_a_validation_split_showing_training_scenes_is_refused_naming_three(leaky):
    with pytest.raises(ConfigError, match=REFUSED.format(train="shards", override="--allow-overlap")):
        refuse_overlap(leaky / "shards", leaky / "shards", val_split="test", override="--allow-overlap")
    with pytest.raises(ConfigError, match=REFUSED.format(train="lol", override=r"allow_overlap=True")):
        refuse_overlap({"other": leaky / "clean-shards", "lol": leaky / "shards"}, leaky / "shards",
                       val_split="test", override="allow_overlap=True")
    refuse_overlap(leaky / "clean-shards", leaky / "clean-shards", val_split="test", override="-")  # clean


def test_the_reference_loop_refuses_unless_allow_overlap(leaky):
    from pairload.recipes.config import TrainConfig
    from pairload.recipes.data import TrainData, check_data

    cfg = TrainConfig(shards=str(leaky / "shards"), out=None)
    with pytest.raises(ConfigError, match=REFUSED.format(train="shards", override="--allow-overlap")):
        check_data(cfg, TrainData(cfg))
    cfg = TrainConfig(shards=str(leaky / "shards"), allow_overlap=True)
    check_data(cfg, TrainData(cfg))
    cfg = TrainConfig(shards=str(leaky / "shards"), val_split="none")
    check_data(cfg, TrainData(cfg))


def test_lightning_refuses_before_training_unless_allow_overlap(leaky, tmp_path):
    pl = pytest.importorskip("lightning.pytorch")
    from pairload.lightning import PairDataModule

    def trainer():
        return pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                          default_root_dir=tmp_path)

    dm = PairDataModule(leaky / "shards", batch_size=2, crop=16, val_split="test")
    dm.trainer = trainer()
    with pytest.raises(ConfigError, match=REFUSED.format(train="shards", override=r"allow_overlap=True")):
        dm.setup("fit")
    dm = PairDataModule(leaky / "shards", batch_size=2, crop=16, val_split="test", allow_overlap=True)
    dm.trainer = trainer()
    dm.setup("fit")


def test_the_basicsr_command_refuses_their_validation_folders_unless_allow_overlap(leaky):
    from pairload.basicsr.run import Session
    from basicsr_repo import options

    opt = options(leaky / "raw")  # validation: raw/test/{high,low}, training: the pack of raw/train
    opt.update(rank=0, world_size=1, path={"training_states": "x/training_states"})
    with pytest.raises(ConfigError, match=r"^validation split 'val' of .*raw/test/high, .*raw/test/low: 8 of its 12 "
                                          r"samples show scenes of the training data: 'high/t000.png' \(= shards:train "
                                          r"'l-000'\), .*; validate on a split the model does not train on "
                                          r"\(`pairload audit` lists every overlap\), or pass --allow-overlap to train "
                                          r"anyway$"):
        Session(str(leaky / "shards"), "train").setup(opt)
    Session(str(leaky / "shards"), "train", allow_overlap=True).setup(opt)
    assert len(ImageFiles([leaky / "raw" / "test" / "high"])) == 6


def test_the_reference_loops_epoch_line_names_the_split_it_validates_on():
    from pairload.recipes.config import TrainConfig
    from pairload.recipes.train import epoch_line

    row = {"train_loss": 0.1, "val_psnr": 20.0, "val_ssim": 0.7, "val_psnr_gt_mean": 22.0, "val_samples": 15,
           "val_psnr_input": None, "pairs_per_s": 100.0, "data_wait_frac": 0.0, "skipped_steps": 0}
    line = epoch_line(TrainConfig(shards="shards/lol", val_split="eval15"), 0, row)
    assert "val PSNR 20.00 dB SSIM 0.7000 (GT-mean PSNR 22.00 dB) on 15 pairs of 'eval15' " in line
