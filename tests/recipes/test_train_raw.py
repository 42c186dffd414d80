"""The reference loop trains on a packed camera raw split: 4-channel packed input, 3-channel developed target at
twice its size (the model ends in a pixel shuffle, as SID's network does), SID's levels and ratio applied on the
device from each batch; the checkpoint records the shapes."""

import json

import pytest
import torch

pytest.importorskip("rawpy")
pytest.importorskip("tifffile")
pytest.importorskip("skimage")

from test_pack_camera import sid_tree  # noqa: E402

from pairload.pack.writer import PackOptions, pack  # noqa: E402
from pairload.recipes.train import main  # noqa: E402


def test_the_reference_loop_learns_on_packed_raw_and_validates_whole_images(tmp_path):
    sid_tree(tmp_path / "SID")
    raw = tmp_path / "SID"
    pack(raw, tmp_path / "shards", PackOptions(workers=1, pairs_file=(f"train={raw / 'Sony_train_list.txt'}",
                                                                        f"test={raw / 'Sony_test_list.txt'}")))
    args = ["--shards", str(tmp_path / "shards"), "--device", "cpu", "--crop", "8", "--batch-size", "2",
            "--width", "8", "--depth", "2", "--workers", "0", "--lr", "1e-2", "--warmup-steps", "1",
            "--out", str(tmp_path / "run")]
    assert main(args + ["--epochs", "6"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["train_loss"] < rows[0]["train_loss"]
    assert all(r["val_samples"] == 4 for r in rows)  # the test list's 4 pairs, whole 12×20 inputs
    assert rows[-1]["val_psnr_input"] is None  # a packed input has no do-nothing baseline against an RGB target
    state = torch.load(tmp_path / "run" / "last.pt", weights_only=False)
    assert state["model_config"] == {"width": 8, "depth": 2, "in_channels": 4, "scale": 2}  # out_channels: 3
    assert (tmp_path / "run" / "val-epoch006.png").is_file()
