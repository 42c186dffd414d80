"""The reference loop and Lightning report the paper-style metrics: the loop's val_psnr_input is
`pairload.evaluate.psnr` of the test pairs under --crop-border/--y-channel, its row has val_psnr_gt_mean, a border
too large for the test images is refused before training; `ValidationMetrics` in a Lightning validation_step
counts every test image once."""

import json

import numpy as np
import pytest
import torch

from pairload.errors import ConfigError
from pairload.evaluate import ValidationMetrics, psnr, ssim


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    from conftest import make_raw
    from pairload.pack import PackOptions, pack

    root = tmp_path_factory.mktemp("reported")
    make_raw(root / "raw", 8, split="train", size=(32, 40))
    make_raw(root / "raw", 3, split="test", start=100, sizes=[(29, 37), (32, 40), (27, 45)])
    pack(root / "raw", root / "shards", PackOptions(workers=1))
    return root / "shards"


def test_the_loop_reports_paper_style_metrics_with_its_options(shards, tmp_path):
    from pairload import open_shards
    from pairload.recipes.train import main

    base = ["--shards", str(shards), "--device", "cpu", "--crop", "24", "--batch-size", "4", "--width", "4",
            "--depth", "1", "--workers", "0", "--epochs", "1"]
    assert main([*base, "--crop-border", "3", "--y-channel", "--out", str(tmp_path / "run")]) == 0
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text())
    assert row["val_samples"] == 3 and np.isfinite(row["val_psnr_gt_mean"])
    pairs = [(torch.from_numpy(lo.copy()).permute(2, 0, 1)[None], torch.from_numpy(hi.copy()).permute(2, 0, 1)[None])
             for _, lo, hi in open_shards(shards, "test")]
    for key, f in (("val_psnr_input", psnr), ("val_ssim_input", ssim)):
        expect = np.mean([float(f(lo, hi, crop_border=3, y_channel=True)) for lo, hi in pairs])
        other = np.mean([float(f(lo, hi)) for lo, hi in pairs])
        assert row[key] == pytest.approx(expect, abs=1e-6) and abs(row[key] - other) > 1e-3
    assert json.loads((tmp_path / "run" / "config.json").read_text())["crop_border"] == 3
    assert main([*base, "--crop-border", "9", "--out", str(tmp_path / "too-big")]) == 1  # 27 - 18 < 11


def test_a_border_too_large_for_the_test_images_is_refused_before_training(shards):
    from pairload.distributed import dist_info
    from pairload.recipes.config import TrainConfig
    from pairload.recipes.data import build_val_loader

    cfg = TrainConfig(shards=str(shards), crop=24, crop_border=9, workers=0)
    with pytest.raises(ConfigError, match=r"--crop-border 9: test image '00102' is 45x27, and SSIM needs at least "
                                          r"29x29 with that border; lower --crop-border \(at most 8\)"):
        build_val_loader(cfg, dist_info("cpu", env={}))
    with pytest.raises(ConfigError, match=r"--crop-border -1: expected 0"):
        TrainConfig(shards=str(shards), crop_border=-1)


def test_lightning_validation_step_with_validation_metrics(shards, tmp_path):
    pytest.importorskip("lightning")
    import lightning.pytorch as pl

    from pairload.batch import Normalize
    from pairload.lightning import PairDataModule

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(()))
            self.norm = Normalize()
            self.metrics = ValidationMetrics(crop_border=2)
            self.logged, self.pairs = {}, []

        def training_step(self, batch, batch_idx):
            x, y = self.norm.pair(batch)
            return ((x * self.w - y) ** 2).mean()

        def validation_step(self, batch, batch_idx):
            x, y = self.norm.pair(batch)
            self.metrics.update(x * self.w, y, batch.valid)
            self.pairs.append((x * self.w, y))

        def on_validation_epoch_end(self):
            self.logged = self.metrics.compute()
            self.metrics.reset()
            self.log_dict({f"val_{k}": float(v) for k, v in self.logged.items()})

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.0)

    model = Module()
    dm = PairDataModule(shards, batch_size=4, crop=24, val_split="test", val_batch_size=2)  # sizes differ: 1 each
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         default_root_dir=tmp_path)
    trainer.fit(model, datamodule=dm)
    assert model.logged["count"] == 3 and [len(x) for x, _ in model.pairs] == [1, 1, 1]
    expect = np.mean([float(psnr(x, y, crop_border=2)) for x, y in model.pairs])
    assert model.logged["psnr"] == pytest.approx(expect, abs=1e-9)
    assert trainer.callback_metrics["val_psnr_gt_mean"] > 0
