"""The reference loop under real torchrun with gloo on CPU, resume, atomic checkpoints and its error messages."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from pairload.distributed import dist_info
from pairload.errors import ConfigError
from pairload.evaluate import psnr
from pairload.recipes.metrics import ssim
from pairload.pack.writer import PackOptions, pack
from pairload.makepairs import MakePairsOptions, make_pairs
from pairload.recipes.checkpoint import load_checkpoint, save_checkpoint
from pairload.recipes.config import TrainConfig
from pairload.recipes.train import main
from pairload.recipes.model import ModelConfig

pytest.importorskip("skimage")
TEST_PAIRS = 5


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("train")
    make_pairs(root / "raw", MakePairsOptions(pairs=32, test=TEST_PAIRS, size=(64, 48), seed=1))
    pack(root / "raw", root / "shards", PackOptions(workers=1, shard_size=128 * 1024))
    return root / "shards"


def torchrun(shards, out, *extra, nproc=2):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", "-m",
           "pairload.train", "--shards", str(shards), "--device", "cpu", "--crop", "32", "--batch-size", "4",
           "--width", "8", "--depth", "2", "--workers", "1", "--lr", "3e-3", "--warmup-steps", "2", "--out", str(out),
           *map(str, extra)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]


def test_two_rank_gloo_run_learns_and_counts_every_test_pair_once(shards, tmp_path):
    rows = torchrun(shards, tmp_path / "run", "--epochs", 5)
    assert [r["epoch"] for r in rows] == [1, 2, 3, 4, 5]
    assert rows[-1]["train_loss"] < rows[0]["train_loss"] * 0.9
    assert all(r["val_samples"] == TEST_PAIRS and r["world_size"] == 2 for r in rows)  # 5 pairs over 2 ranks: 3 + 2
    assert all(0 <= r["data_wait_frac"] <= 1 and r["pairs_per_s"] > 0 for r in rows)
    assert rows[-1]["val_psnr"] > rows[0]["val_psnr"]
    run = tmp_path / "run"
    config = json.loads((run / "config.json").read_text())
    assert config["world_size"] == 2 and config["loader"] == "ram"
    assert {"last.pt", "best.pt", "val-epoch005.png"} <= {p.name for p in run.iterdir()}
    state = torch.load(run / "last.pt", weights_only=False)
    assert state["epoch"] == 5 and set(state) >= {"model", "optimizer", "scheduler", "scaler", "rng"}


@pytest.mark.slow
def test_resume_continues_and_matches_an_uninterrupted_run(shards, tmp_path):
    full = torchrun(shards, tmp_path / "full", "--epochs", 4)
    first = torchrun(shards, tmp_path / "cut", "--epochs", 4, "--stop-after-epoch", 2)
    assert [r["epoch"] for r in first] == [1, 2]
    resumed = torchrun(shards, tmp_path / "cut", "--epochs", 4, "--resume")
    assert [r["epoch"] for r in resumed] == [1, 2, 3, 4]
    for a, b in zip(full, resumed):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-3, abs=1e-5)
        assert a["val_psnr"] == pytest.approx(b["val_psnr"], abs=0.02)


def test_checkpoint_write_interrupted_leaves_the_old_one(tmp_path):
    path = tmp_path / "last.pt"
    save_checkpoint(path, {"epoch": 1, "weights": torch.ones(3)})

    class Boom:
        def __reduce__(self):
            raise KeyboardInterrupt("killed while saving")

    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, {"epoch": 2, "weights": torch.zeros(1000), "bad": Boom()})
    assert torch.load(path, weights_only=False)["epoch"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]


def test_clear_errors(shards, tmp_path, capsys):
    assert main(["--shards", str(shards), "--device", "cpu", "--crop", "32", "--out", str(tmp_path / "none"),
                 "--resume"]) == 1
    assert "--resume: no checkpoint at" in capsys.readouterr().err
    save_checkpoint(tmp_path / "last.pt", {"version": 1, "model_config": {"width": 16, "depth": 3}})
    with pytest.raises(ConfigError, match=r"checkpoint of model \{'width': 16, 'depth': 3\}, but this run builds "
                                          r"\{'width': 32, 'depth': 3\}"):
        load_checkpoint(tmp_path / "last.pt", ModelConfig(width=32, depth=3))
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="device 'cuda' but CUDA is not available here"):
            dist_info("cuda", env={})
    with pytest.raises(ConfigError, match="--loader dali-file reads the dataset's image folders: pass --raw"):
        TrainConfig(loader="dali-file", shards=str(shards))
    code = ("import sys; sys.modules['nvidia.dali'] = None\n"
            "from pairload.recipes.train import main\n"
            f"sys.exit(main(['--shards', {str(shards)!r}, '--loader', 'dali-external', '--device', 'cpu', "
            "'--crop', '32']))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 1 and "pairload.dali needs NVIDIA DALI: pip install" in res.stderr
    assert "Traceback" not in res.stderr


def test_dist_info_reads_torchrun_and_slurm():
    info = dist_info("cpu", env={"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"})
    assert (info.rank, info.local_rank, info.world_size) == (3, 1, 8)
    info = dist_info("cpu", env={"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_LOCALID": "2"})
    assert (info.rank, info.local_rank, info.world_size) == (5, 2, 6)
    assert dist_info("cpu", env={}).world_size == 1


def test_metrics_match_scikit_image():
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    rng = np.random.default_rng(0)
    a = rng.random((2, 3, 40, 48)).astype(np.float32)
    b = np.clip(a + rng.normal(0, 0.05, a.shape), 0, 1).astype(np.float32)
    p = psnr(torch.from_numpy(b), torch.from_numpy(a), quantize=False)
    s = ssim(torch.from_numpy(b), torch.from_numpy(a))  # the loss's SSIM
    for i in range(2):
        assert float(p[i]) == pytest.approx(peak_signal_noise_ratio(a[i], b[i], data_range=1.0), abs=1e-3)
        ref = structural_similarity(a[i].transpose(1, 2, 0), b[i].transpose(1, 2, 0), channel_axis=2, data_range=1.0,
                                    gaussian_weights=True, sigma=1.5, use_sample_covariance=False)
        assert float(s[i]) == pytest.approx(ref, abs=2e-3)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_non_finite_step_is_skipped_and_reported(shards, device):
    from pairload.batch import Normalize
    from pairload.recipes.model import EnhanceUNet
    from pairload.recipes.data import build_train_loader
    from pairload.recipes.loop import lr_lambda, make_scaler, train_one_epoch

    cfg = TrainConfig(shards=str(shards), crop=32, batch_size=4, width=8, depth=2, workers=0, amp="none",
                      device=device, max_steps=4)
    info = dist_info(device, env={})
    model = EnhanceUNet(ModelConfig(width=8, depth=2)).to(info.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **({"fused": True} if device == "cuda" else {}))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(1, 8))
    scaler = make_scaler(cfg.amp, info.device)

    class Poisoned(Normalize):
        calls = 0

        def forward(self, x):
            Poisoned.calls += 1
            y = super().forward(x)
            return y * float("nan") if Poisoned.calls == 3 else y  # the second step's input

    before = {k: v.clone() for k, v in model.state_dict().items()}
    stats = train_one_epoch(model, build_train_loader(cfg, info), opt, sched, scaler, Poisoned().to(info.device), cfg,
                            info, 0)
    assert stats["skipped_steps"] == 1 and stats["steps"] == 4
    assert np.isfinite(stats["train_loss"])
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())  # the other steps did train


def _train(shards, out, *extra) -> int:
    return main(["--shards", str(shards), "--device", "cpu", "--crop", "32", "--batch-size", "4", "--width", "8",
                 "--depth", "2", "--workers", "0", "--warmup-steps", "2", "--out", str(out), *map(str, extra)])


def _epochs(out) -> list[int]:
    return [json.loads(line)["epoch"] for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]


def test_resume_after_a_kill_between_metrics_and_checkpoint_keeps_one_row_per_epoch(shards, tmp_path):
    out = tmp_path / "run"
    assert _train(shards, out, "--epochs", 3, "--stop-after-epoch", 2) == 0
    # what a rank killed while writing last.pt for epoch 3 leaves: the metrics row, a partial checkpoint
    with open(out / "metrics.jsonl", "a") as fh:
        fh.write(json.dumps({"epoch": 3, "train_loss": 1.0}) + "\n")
    (out / ".last.pt.4242.partial").write_bytes(b"half a checkpoint")
    assert _train(shards, out, "--epochs", 3, "--resume") == 0
    assert _epochs(out) == [1, 2, 3]
    assert not [p.name for p in out.iterdir() if p.name.endswith(".partial")]


def test_resume_with_other_data_is_refused_and_changes_nothing(shards, tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(shards, out, "--epochs", 1) == 0
    config = (out / "config.json").read_text()
    other = tmp_path / "other"
    make_pairs(tmp_path / "raw2", MakePairsOptions(pairs=32, test=TEST_PAIRS, size=(64, 48), seed=2))
    pack(tmp_path / "raw2", other, PackOptions(workers=1))
    assert _train(other, out, "--epochs", 2, "--resume") == 1
    assert "was trained on other data" in capsys.readouterr().err
    assert (out / "config.json").read_text() == config and _epochs(out) == [1]


def test_test_images_of_different_sizes_validate_one_by_one(tmp_path):
    from conftest import make_raw

    raw = tmp_path / "raw"
    make_raw(raw, 16, split="train", size=(40, 48))
    make_raw(raw, 3, split="test", start=100, sizes=[(40, 48), (36, 60), (52, 44)])
    pack(raw, tmp_path / "shards", PackOptions(workers=1))
    assert main(["--shards", str(tmp_path / "shards"), "--device", "cpu", "--crop", "32", "--batch-size", "4",
                 "--width", "8", "--depth", "2", "--workers", "0", "--epochs", "1",
                 "--out", str(tmp_path / "run")]) == 0
    assert json.loads((tmp_path / "run" / "metrics.jsonl").read_text())["val_samples"] == 3
    assert (tmp_path / "run" / "val-epoch001.png").is_file()


@pytest.mark.slow
def test_a_stopped_rank_ends_the_job_with_a_clear_error_not_a_hang(shards, tmp_path):
    import signal
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "run"
    procs = []
    for rank in range(2):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        cmd = [sys.executable, "-m", "pairload.train", "--shards", str(shards), "--device", "cpu", "--crop", "32",
               "--batch-size", "4", "--width", "8", "--depth", "2", "--workers", "0", "--epochs", "1000",
               "--dist-timeout", "8", "--out", str(out)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        deadline = time.monotonic() + 120
        while not ((out / "metrics.jsonl").is_file() and (out / "metrics.jsonl").read_text()):
            assert time.monotonic() < deadline and procs[0].poll() is None, procs[0].stderr.read()[-2000:]
            time.sleep(0.1)
        procs[1].send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        _, err = procs[0].communicate(timeout=90)
        assert time.monotonic() - stopped < 60
        assert procs[0].returncode == 1, err[-2000:]
        assert "error: rank 0 of 2: a collective got no answer from the other ranks within --dist-timeout 8 s" in err
        assert "Traceback" not in err
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_an_out_folder_holding_a_run_needs_resume_or_overwrite(shards, tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(shards, out, "--epochs", 1) == 0
    assert _train(shards, out, "--epochs", 1) == 1
    held = "already holds a run (config.json, metrics.jsonl, last.pt, best.pt); pass --resume"
    assert held in capsys.readouterr().err
    (out / "notes.txt").write_text("mine")
    assert _train(shards, out, "--epochs", 2, "--overwrite") == 0
    assert _epochs(out) == [1, 2] and (out / "notes.txt").read_text() == "mine"


def test_help_describes_every_option_with_its_default(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for flag in ("--val-split", "--train-split", "--dist-timeout", "--overwrite", "--warmup-steps"):
        assert flag in text
    assert "split to validate on ('none': no validation) (default: test)" in text


def test_short_runs_warm_up_for_a_tenth_and_report_the_do_nothing_baseline(shards, tmp_path, capsys):
    assert _train(shards, tmp_path / "run", "--epochs", 2, "--warmup-steps", "100") == 0
    assert "warm-up shortened from 100 to 1 steps" in capsys.readouterr().out
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    from pairload import open_shards

    ds = open_shards(shards, "test")
    def image(rgb):
        return torch.from_numpy(rgb.copy()).permute(2, 0, 1)[None].float() / 255

    expect = np.mean([float(psnr(image(lo), image(hi))) for _, lo, hi in ds])
    assert rows[0]["val_psnr_input"] == pytest.approx(expect, abs=1e-3) == rows[1]["val_psnr_input"]


def test_named_splits_and_no_validation(tmp_path):
    from conftest import make_raw

    raw = tmp_path / "raw"
    make_raw(raw, 16, split="Dataset_A", size=(40, 48))
    pack(raw, tmp_path / "shards", PackOptions(workers=1))
    base = ["--shards", str(tmp_path / "shards"), "--device", "cpu", "--crop", "32", "--batch-size", "4", "--width",
            "8", "--depth", "2", "--workers", "0", "--epochs", "1"]
    with pytest.raises(Exception, match=r"no split 'train'; this folder has \['dataset_a'\]"):
        from pairload.recipes.config import parse_args
        from pairload.recipes.train import run

        run(parse_args(base), dist_info("cpu", env={}))
    assert main([*base, "--train-split", "dataset_a", "--val-split", "none", "--out", str(tmp_path / "run")]) == 0
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text())
    assert "val_psnr" not in row and row["epoch"] == 1


def test_mixed_size_test_set_validates_under_torchrun_with_two_ranks(tmp_path):
    from conftest import make_raw

    raw = tmp_path / "raw"
    make_raw(raw, 16, split="train", size=(40, 48))
    make_raw(raw, 5, split="test", start=100, sizes=[(40, 48), (36, 60), (52, 44), (33, 41), (40, 48)])
    pack(raw, tmp_path / "shards", PackOptions(workers=1))
    rows = torchrun(tmp_path / "shards", tmp_path / "run", "--epochs", 2)
    assert [r["val_samples"] for r in rows] == [5, 5]
    assert all(np.isfinite(r["val_psnr"]) and np.isfinite(r["val_psnr_input"]) for r in rows)
    assert (tmp_path / "run" / "val-epoch002.png").is_file()


@pytest.mark.slow
def test_killed_mid_epoch_and_resumed_sees_the_same_data_as_an_uninterrupted_run(shards, tmp_path):
    import shutil
    import time

    from conftest import kill_tree

    args = ("--epochs", 3, "--batch-size", 2, "--save-every-steps", 2)
    full = torchrun(shards, tmp_path / "full", *args)
    assert all(r["data_samples"] == 32 and r["data_repeats"] == 0 for r in full)
    cut = tmp_path / "cut"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "pairload.train",
           "--shards", str(shards), "--device", "cpu", "--crop", "32", "--width", "8", "--depth", "2", "--workers", "1",
           "--lr", "3e-3", "--warmup-steps", "2", "--out", str(cut), *map(str, args)]
    proc = subprocess.Popen(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if torch.load(cut / "last.pt", weights_only=False)["mid_epoch"] is not None:
                    break
            except (FileNotFoundError, EOFError, RuntimeError):
                pass
            time.sleep(0.005)
    finally:
        # every rank and torchrun itself, in the middle of an epoch (torchrun starts each rank in a session of its
        # own: killing torchrun's process group would leave the ranks to finish the run on their own)
        kill_tree(proc.pid)
        proc.wait()
    state = torch.load(cut / "last.pt", weights_only=False)
    assert state["mid_epoch"] is not None, "the kill came after the run ended; no mid-epoch checkpoint to resume"
    interrupted = state["epoch"] + 1
    shutil.copytree(cut, tmp_path / "cut1")
    resumed = torchrun(shards, cut, *args, "--resume")
    assert [r["epoch"] for r in resumed] == [1, 2, 3]
    assert [r["data_digest"] for r in resumed] == [r["data_digest"] for r in full]
    assert [r["steps"] for r in resumed] == [r["steps"] for r in full]
    on_one = torchrun(shards, tmp_path / "cut1", *args, "--resume", nproc=1)
    row = next(r for r in on_one if r["epoch"] == interrupted)
    assert row["data_samples"] == 32 and row["data_repeats"] == 0  # the rest went to one rank: every sample once


def test_progressive_crops_on_a_weighted_mix_under_torchrun(shards, tmp_path):
    """--crop-schedule and --mix in the reference loop: each epoch has the steps the schedule gives (epoch 1 starts in
    stage 0 at step 4 and switches to 24-pixel crops of 2 per rank at step 5), and the learning-rate schedule spans
    exactly those steps."""
    rows = torchrun(shards, tmp_path / "run", "--epochs", 2, "--crop-schedule", "0:32:4,5:24:2",
                    "--mix", f"a={shards}:1,b={shards}:3", "--epoch-size", 32, "--val-split", "none")
    assert [r["steps"] for r in rows] == [4, 7]
    assert rows[-1]["lr"] == pytest.approx(0.0, abs=1e-9)  # the cosine schedule ends on the run's last step
    with pytest.raises(ConfigError, match="--mix 'a=x': expected NAME=FOLDER:WEIGHT"):
        TrainConfig(shards=str(shards), mix="a=x")


def test_amp_auto_is_fast_on_each_device_and_slow_rates_are_printed_as_they_are():
    import torch

    from pairload.recipes.config import TrainConfig
    from pairload.recipes.loop import resolve_amp
    from pairload.recipes.train import rate

    assert TrainConfig(shards="s").amp == "auto"
    assert resolve_amp("auto", torch.device("cpu")) == "none"  # bf16 autocast on a CPU is ~10x slower
    assert resolve_amp("auto", torch.device("cuda", 0)) == "bf16"
    assert resolve_amp("fp16", torch.device("cpu")) == "fp16"  # what the user asks for is kept
    assert rate(0.39) == "0.39" and rate(4.5) == "4.5" and rate(1574.6) == "1,575"


def _started_epoch_two(out: Path) -> bool:
    try:
        return torch.load(out / "last.pt", weights_only=False)["epoch"] >= 1
    except (FileNotFoundError, EOFError, RuntimeError, KeyError):
        return False


@pytest.mark.slow
@pytest.mark.parametrize("launcher, ranks", [("plain", 1), ("torchrun", 2)])
def test_sigterm_stops_the_run_saved_and_resume_gives_the_uninterrupted_data(shards, tmp_path, launcher, ranks):
    # a scheduler's SIGTERM: SLURM signals every process of the job (plain: the process group, loader workers
    # included), torchrun's agent passes its own on to each rank's process group. The ranks agree on a step, last.pt
    # holds it, and --resume sees what a run never stopped sees.
    import time

    from conftest import kill_tree

    args = ("--epochs", 3, "--batch-size", 1)  # 16 steps a rank an epoch: a check in its middle (`stop.CHECK_EVERY`)
    full = torchrun(shards, tmp_path / "full", *args, nproc=ranks)
    cut = tmp_path / "cut"
    head = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}", "-m"] \
        if launcher == "torchrun" else [sys.executable, "-m"]
    cmd = [*head, "pairload.train", "--shards", str(shards), "--device", "cpu", "--crop", "32", "--width", "8",
           "--depth", "2", "--workers", "1", "--lr", "3e-3", "--warmup-steps", "2", "--out", str(cut),
           *map(str, args)]
    proc = subprocess.Popen(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not _started_epoch_two(cut) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert proc.poll() is None, "the run ended before it could be stopped"
        if launcher == "torchrun":
            proc.send_signal(signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        kill_tree(proc.pid)
    assert proc.returncode != 0
    said = [line for line in err.splitlines() if "stopped by SIGTERM" in line]
    assert len(said) == 1 and "last.pt holds the run there: the same command with --resume continues it exactly" \
        in said[0], err[-3000:]
    state = torch.load(cut / "last.pt", weights_only=False)
    assert state["epoch"] in (1, 2)  # in the second epoch, or at its end
    resumed = torchrun(shards, cut, *args, "--resume", nproc=ranks)
    assert [r["epoch"] for r in resumed] == [1, 2, 3]
    assert [r["data_digest"] for r in resumed] == [r["data_digest"] for r in full]
    assert [r["steps"] for r in resumed] == [r["steps"] for r in full]
