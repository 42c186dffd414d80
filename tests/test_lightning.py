"""`pairload.lightning` with the real Lightning Trainer: DDP over 2 CPU processes (gloo), a run killed mid-epoch and
resumed from the Trainer's checkpoint gets the uninterrupted run's batches (same data digest), also resumed on 1
process (the rest of the epoch re-dealt). Pixels encode the pair index (conftest), so a wrong crop shows in a hash.

Lightning's DDP launches rank 1 by running the script again, so the runs are this file run as a script
(`python tests/test_lightning.py ...`): each rank appends one line per training step to records-rank<r>.jsonl.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lightning")

N, BATCH, CROP, KILL_AT = 24, 2, 16, 3  # 2 processes: 6 steps an epoch; killed after step 3 of epoch 0


def run_script(argv: list[str] | None = None) -> None:
    """One training run (the ranks Lightning starts run it too): `--kill-at k` exits every rank hard once the
    checkpoint of global step k is written; `--resume` continues from a checkpoint."""
    import lightning.pytorch as pl
    import torch
    import torch.nn.functional as F

    from pairload.lightning import PairDataModule

    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--kill-at", type=int)
    ap.add_argument("--resume")
    args = ap.parse_args(argv)
    out = Path(args.out)

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 3, 1)

        def training_step(self, batch, batch_idx):
            assert batch.low.device == self.device
            row = {"epoch": self.current_epoch, "step": batch_idx, "rank": self.global_rank, "keys": list(batch.keys),
                   "pixels": hashlib.sha256(batch.low.cpu().numpy().tobytes()).hexdigest()}
            with open(out / f"records-rank{self.global_rank}.jsonl", "a") as fh:
                fh.write(json.dumps(row) + "\n")
            return F.l1_loss(self.conv(batch.low.float() / 255), batch.high.float() / 255)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    class KillAfterCheckpoint(pl.Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            if trainer.global_step == args.kill_at:  # step k's checkpoint was written at the end of step k
                os._exit(17)

    callbacks = [pl.callbacks.ModelCheckpoint(dirpath=out / "ckpt", filename="{step}", every_n_train_steps=KILL_AT,
                                              save_top_k=-1)]
    if args.kill_at:
        callbacks.append(KillAfterCheckpoint())
    trainer = pl.Trainer(accelerator="cpu", devices=args.devices, strategy="ddp" if args.devices > 1 else "auto",
                         max_epochs=args.epochs, logger=False, enable_progress_bar=False, enable_model_summary=False,
                         callbacks=callbacks)
    dm = PairDataModule(args.shards, "ram", batch_size=BATCH, crop=CROP, seed=5)
    trainer.fit(Tiny(), datamodule=dm, ckpt_path=args.resume)


def launch(shards: Path, out: Path, *args: str) -> int:
    out.mkdir(parents=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parents[1])}
    proc = subprocess.run([sys.executable, __file__, "--shards", str(shards), "--out", str(out), *args], env=env,
                          cwd=out, capture_output=True, text=True, timeout=300)
    if proc.returncode not in (0, 17):
        raise AssertionError(f"run {out.name} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return proc.returncode


def records(out: Path) -> dict[tuple[int, int, int], tuple[list[str], str]]:
    """(epoch, step, rank) -> (keys, pixel hash) of every training step of a run."""
    got = {}
    for path in out.glob("records-rank*.jsonl"):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            where = (r["epoch"], r["step"], r["rank"])
            assert where not in got, f"{out.name}: step {where} trained twice"
            got[where] = (r["keys"], r["pixels"])
    return got


def digest(recs: dict) -> str:
    """The reference loop's data digest: every key consumed, in (epoch, step, rank, row) order."""
    from pairload.recipes.loop import data_digest

    return data_digest([k for where in sorted(recs) for k in recs[where][0]])


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    from conftest import raw_and_shards

    return raw_and_shards(tmp_path_factory.mktemp("lightning"), N, size=(24, 32)) / "shards"


@pytest.mark.slow
def test_a_run_killed_mid_epoch_resumes_from_the_trainers_checkpoint_with_the_same_data(shards, tmp_path):
    assert launch(shards, tmp_path / "whole") == 0
    whole = records(tmp_path / "whole")
    steps = N // (2 * BATCH)
    assert sorted(whole) == [(e, s, r) for e in range(2) for s in range(steps) for r in range(2)]
    for e in range(2):  # each epoch every pair once, in a new order
        keys = [k for (ep, _, _), (ks, _) in whole.items() if ep == e for k in ks]
        assert sorted(keys) == [f"{i:05d}" for i in range(N)]
    assert [whole[0, s, 0][0] for s in range(steps)] != [whole[1, s, 0][0] for s in range(steps)]

    assert launch(shards, tmp_path / "killed", "--kill-at", str(KILL_AT)) == 17
    killed = records(tmp_path / "killed")
    assert sorted(killed) == [(0, s, r) for s in range(KILL_AT) for r in range(2)]
    ckpt = tmp_path / "killed" / "ckpt" / f"step={KILL_AT}.ckpt"

    # the same number of processes: the uninterrupted run's batches, bit for bit
    launch(shards, tmp_path / "same", "--resume", str(ckpt))
    same = records(tmp_path / "same")
    assert not set(same) & set(killed)
    assert {**killed, **same} == whole
    assert digest({**killed, **same}) == digest(whole)

    # one process: the rest of epoch 0 re-dealt (each remaining pair once), then epoch 1 whole
    launch(shards, tmp_path / "one", "--devices", "1", "--resume", str(ckpt))
    one = records(tmp_path / "one")
    rest = sorted(k for (e, s, _), (ks, _) in whole.items() if e == 0 and s >= KILL_AT for k in ks)
    assert sorted(one) == [(0, s, 0) for s in range(KILL_AT, KILL_AT + len(rest) // BATCH)] + \
        [(1, s, 0) for s in range(N // BATCH)]
    assert sorted(k for (e, _, _), (ks, _) in one.items() if e == 0 for k in ks) == rest
    assert sorted(k for (e, _, _), (ks, _) in one.items() if e == 1 for k in ks) == [f"{i:05d}" for i in range(N)]

    # one process, from the checkpoint of epoch 0's last batch: epoch 1 whole (Lightning numbers its batches on
    # from 6 here: it keeps the saved count when the next epoch is longer, and the loader's length follows it)
    launch(shards, tmp_path / "next", "--devices", "1", "--resume", str(tmp_path / "whole" / "ckpt" / "step=6.ckpt"))
    after = records(tmp_path / "next")
    assert {e for e, _, _ in after} == {1} and len(after) == N // BATCH
    assert sorted(k for ks, _ in after.values() for k in ks) == [f"{i:05d}" for i in range(N)]


def in_process_trainer(root: Path, **kw):
    import lightning.pytorch as pl

    return pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                      default_root_dir=root, **kw)  # its default checkpoints go to root/checkpoints


def test_import_without_lightning_is_a_missing_dependency_naming_the_pip_command(monkeypatch):
    from pairload import MissingDependencyError

    monkeypatch.delitem(sys.modules, "pairload.lightning", raising=False)
    monkeypatch.setitem(sys.modules, "lightning", None)
    monkeypatch.setitem(sys.modules, "lightning.pytorch", None)
    with pytest.raises(MissingDependencyError, match=r"pairload.lightning needs PyTorch Lightning \(the `lightning` "
                       r"package\), which is not installed: pip install 'pairload\[lightning\]'"):
        import pairload.lightning  # noqa: F401


def test_what_the_trainer_decides_is_refused_as_an_option(shards, tmp_path):
    from pairload import ConfigError
    from pairload.lightning import PairDataModule

    with pytest.raises(ConfigError, match=r"PairDataModule: device, world_size given, but a Lightning run takes them "
                       r"from the Trainer \(trainer.strategy.root_device, trainer.world_size\); leave them out"):
        PairDataModule(shards, batch_size=2, crop=CROP, world_size=2, device="cpu")
    dm = PairDataModule(shards, batch_size=2, crop=CROP)
    dm.trainer = in_process_trainer(tmp_path, reload_dataloaders_every_n_epochs=2)
    with pytest.raises(ConfigError, match=r"Trainer\(reload_dataloaders_every_n_epochs=2\): PairDataModule needs 0 or "
                       r"1 \(the Trainer re-reads each epoch's length from the loader\); leave it out"):
        dm.setup("fit")
    dm.trainer = trainer = in_process_trainer(tmp_path)
    dm.setup("fit")
    assert trainer.reload_dataloaders_every_n_epochs == 1


def test_a_state_from_fewer_devices_gives_the_length_before_the_trainer_asks(shards, tmp_path):
    """Resumed on more devices: the loader is made with the checkpoint's state, so its first length (the one
    Lightning caps the epoch at) already counts the batches taken and the rest re-dealt."""
    from pairload import make_loader
    from pairload.lightning import PairDataModule

    one = make_loader("ram", shards, batch_size=BATCH, crop=CROP, seed=5)
    taken = [k for _, b in zip(range(5), one) for k in b.keys]
    state = {"loader": one.state_dict(), "trainer_batches": 5, "in_batch_end": True}
    dm = PairDataModule(shards, batch_size=BATCH, crop=CROP, seed=5)
    dm.trainer = in_process_trainer(tmp_path, devices=2, strategy="ddp")  # rank 0 of 2; nothing is launched before fit
    dm.load_state_dict({"train": state})
    dl = dm.train_dataloader()
    rank0 = make_loader("ram", shards, batch_size=BATCH, crop=CROP, seed=5, rank=0, world_size=2)
    rank0.load_state_dict(state["loader"])
    assert len(dl) == 5 + len(rank0) == 5 + 4  # 14 pairs left for 2 ranks: 3 batches of 2 and one of 1 each
    rest = [k for b in dl for k in b.keys]
    assert rest == [k for b in rank0 for k in b.keys] and len(rest) == 7 and not set(rest) & set(taken)
    dm.teardown("fit")


def test_a_batch_fetched_ahead_of_the_trainer_is_not_counted_as_consumed(shards, tmp_path):
    """Lightning fetches one batch ahead of an iterable without a length; a checkpoint must not count it."""
    import lightning.pytorch as pl
    import torch

    from pairload import make_loader
    from pairload.lightning import PairDataModule

    class Unsized:
        def __init__(self, inner):
            self.inner = inner

        def __iter__(self):
            return iter(self.inner)

        def state_dict(self):
            return self.inner.state_dict()

        def load_state_dict(self, state):
            self.inner.load_state_dict(state)

    class AheadModule(PairDataModule):
        def train_dataloader(self):
            self.unsized = Unsized(super().train_dataloader())
            return self.unsized

    class Keys(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(()))
            self.seen = []

        def training_step(self, batch, batch_idx):
            self.seen.append(list(batch.keys))
            return self.w * batch.low.float().mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    ref = make_loader("ram", shards, batch_size=BATCH, crop=CROP, seed=5)
    expected = [list(b.keys) for b in ref]
    first = Keys()
    dm = AheadModule(shards, batch_size=BATCH, crop=CROP, seed=5)
    save = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, filename="{step}", every_n_train_steps=3, save_top_k=-1)
    in_process_trainer(tmp_path, max_steps=4, callbacks=[save]).fit(first, datamodule=dm)
    ckpt = torch.load(tmp_path / "step=3.ckpt", weights_only=True)
    loop_copy = ckpt["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]
    for state in (ckpt[AheadModule.__qualname__]["train"], loop_copy):
        assert state["loader"]["consumed"] == [[1, 3]] and state["trainer_batches"] == 3  # 4 were handed out
    second = Keys()
    again = AheadModule(shards, batch_size=BATCH, crop=CROP, seed=5)
    in_process_trainer(tmp_path, max_epochs=1).fit(second, datamodule=again, ckpt_path=tmp_path / "step=3.ckpt")
    assert first.seen[:3] + second.seen == expected


def test_validation_batches_are_whole_images_each_once(tmp_path):
    import lightning.pytorch as pl
    import torch

    from conftest import raw_and_shards
    from pairload.lightning import PairDataModule

    shards = raw_and_shards(tmp_path, 4, test=3, size=(24, 32)) / "shards"

    class Val(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(()))
            self.val = []

        def training_step(self, batch, batch_idx):
            return self.w * batch.low.float().mean()

        def validation_step(self, batch, batch_idx):
            self.val.append((list(batch.keys), tuple(batch.low.shape)))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    from pairload import ConfigError

    with pytest.raises(ConfigError, match=r"PairDataModule: val_split='test' with a mix of sources \(a, b\); name the "
                       r"shard folder to validate on with val_source=\.\.\."):
        PairDataModule({"a": shards, "b": shards}, batch_size=2, crop=CROP, val_split="test")
    for val_split, expected in (("test", [(["00200", "00201"], (2, 3, 24, 32)), (["00202"], (1, 3, 24, 32))]),
                                (None, [])):
        model = Val()
        dm = PairDataModule(shards, batch_size=2, crop=CROP, val_split=val_split, val_batch_size=2)
        in_process_trainer(tmp_path, max_epochs=1, num_sanity_val_steps=0).fit(model, datamodule=dm)
        assert model.val == expected


def test_degrade_makes_the_training_inputs_and_validation_keeps_the_stored_pairs(tmp_path):
    import lightning.pytorch as pl
    import torch

    from conftest import raw_and_shards
    from pairload import make_loader
    from pairload.lightning import PairDataModule

    shards = raw_and_shards(tmp_path, 4, test=2, size=(24, 32)) / "shards"

    def copied(batch):  # the loader's buffers are used again for later batches
        return dataclasses.replace(batch, low=batch.low.clone(), high=batch.high.clone(), degradation=None if
                                   batch.degradation is None else {k: v.clone() for k, v in batch.degradation.items()})

    class Record(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(()))
            self.train_batches, self.val_batches = [], []

        def training_step(self, batch, batch_idx):
            self.train_batches.append(copied(batch))
            return self.w * batch.low.float().mean()

        def validation_step(self, batch, batch_idx):
            self.val_batches.append(copied(batch))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    for val_degrade in (None, "lowlight"):
        model = Record()
        dm = PairDataModule(shards, batch_size=2, crop=CROP, seed=3, val_split="test", val_batch_size=2,
                            degrade="lowlight,gamma=2..3", val_degrade=val_degrade)
        in_process_trainer(tmp_path, max_epochs=1, num_sanity_val_steps=0).fit(model, datamodule=dm)
        with make_loader("ram", shards, batch_size=2, crop=CROP, seed=3, degrade="lowlight,gamma=2..3") as loader:
            expected = [copied(b) for b in loader]
        assert len(model.train_batches) == len(expected) == 2
        for got, want in zip(model.train_batches, expected):  # the loader's degraded batches, parameters included
            assert torch.equal(got.low, want.low) and not torch.equal(got.low, 255 - got.high)
            assert list(got.degradation) == ["alpha", "beta", "gamma", "gain_r", "gain_b", "shot", "read"]
            assert all(torch.equal(got.degradation[k], want.degradation[k]) for k in want.degradation)
            assert ((got.degradation["gamma"] >= 2) & (got.degradation["gamma"] <= 3)).all()
        val, = model.val_batches
        if val_degrade is None:  # the stored pairs: the target is 255 - input (conftest)
            assert val.degradation is None and torch.equal(val.low, 255 - val.high)
        else:
            assert set(val.degradation) == set(expected[0].degradation) and not torch.equal(val.low, 255 - val.high)


def test_clips_train_as_the_loader_cuts_them_and_validate_on_the_grid(tmp_path):
    """clips=3: training_step gets the loader's N×T×C×H×W batches (frames stacked in channels for the model, the
    centre frame's target), validation every clip of the grid once, of whole frames; ValidationMetrics scores each
    frame of a clip."""
    import lightning.pytorch as pl
    import torch
    import torch.nn.functional as F

    from clipdata import make_video_raw, pack_video
    from pairload import Normalize, make_loader
    from pairload.lightning import PairDataModule, ValidationMetrics

    make_video_raw(tmp_path / "raw", [5, 4], size=(24, 32))
    make_video_raw(tmp_path / "raw", [0, 0, 4], size=(24, 32), split="test")  # sequence 2: pixels of its own
    shards = pack_video(tmp_path / "raw", tmp_path / "shards")

    class Clips(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.norm, self.net = Normalize(), torch.nn.Conv2d(3 * 3, 3, 3, padding=1)
            self.metrics = ValidationMetrics()
            self.train_keys, self.val_keys = [], []

        def training_step(self, batch, batch_idx):
            x, y = self.norm.pair(batch)  # N×T×C×H×W floats
            self.train_keys.append(batch.keys)
            return F.l1_loss(self.net(x.flatten(1, 2)), y[:, batch.frames // 2])

        def validation_step(self, batch, batch_idx):
            x, y = self.norm.pair(batch)
            assert x.shape == (len(batch), 3, 3, 24, 32)
            self.val_keys += batch.keys
            self.metrics.update(x, y, batch.valid)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    model = Clips()
    dm = PairDataModule(shards, batch_size=2, crop=16, seed=4, clips=3, val_split="test", val_batch_size=2)
    in_process_trainer(tmp_path, max_epochs=1, num_sanity_val_steps=0).fit(model, datamodule=dm)
    with make_loader("ram", shards, batch_size=2, crop=16, seed=4, clips=3) as loader:
        assert model.train_keys == [b.keys for b in loader] and len(model.train_keys) == (3 + 2) // 2
    assert model.val_keys == [[f"scene02+{f + k:04d}" for k in range(3)] for f in range(2)]
    assert model.metrics.compute()["count"] == 2 * 3  # every frame of both clips


if __name__ == "__main__":
    run_script()


def test_a_targets_only_val_split_is_refused_naming_val_split(tmp_path):
    from conftest import make_raw
    from pairload import ConfigError
    from pairload.lightning import PairDataModule
    from pairload.pack import PackOptions, pack

    raw = make_raw(tmp_path / "raw", 4, size=(24, 32))
    pack(raw / "high", tmp_path / "targets", PackOptions(workers=1, targets_only=True))
    dm = PairDataModule(tmp_path / "targets", batch_size=2, crop=CROP, degrade="lowlight", val_split="train")
    dm.trainer = in_process_trainer(tmp_path)
    with pytest.raises(ConfigError, match=r"PairDataModule: val_split='train' of .* holds targets only \(packed with "
                       r"--targets-only\): there are no stored inputs to validate on; validate on a split with stored "
                       r"pairs, degrade its targets into inputs with val_degrade=... \(the same every epoch\), or "
                       r"leave val_split out$"):
        dm.val_dataloader()
    dm = PairDataModule(tmp_path / "targets", batch_size=2, crop=CROP, degrade="lowlight", val_split="train",
                        val_degrade="lowlight")
    dm.trainer = in_process_trainer(tmp_path)
    assert len(dm.val_dataloader()) == 4  # whole images, one at a time: their inputs degraded
