"""PyTorch Lightning: `PairDataModule`, a LightningDataModule over pairload loaders, and `TrainerLoader`, what its
`train_dataloader()` returns. The Trainer gives the rank, world size, device and epoch; the loader's position goes
into the Trainer's checkpoint and comes back on `fit(ckpt_path=...)`, so a run resumed mid-epoch gets the batches
the uninterrupted run would (the rest of the epoch re-dealt when the number of devices changed).

Validation metrics as papers report them: `ValidationMetrics` (from `pairload.evaluate`, re-exported here) sums
PSNR, SSIM and GT-mean PSNR per image in `validation_step` and averages them over every image of every device in
`on_validation_epoch_end` (docs/evaluation.md shows the hooks).

The only module of pairload that imports lightning: `import pairload` works without it.
"""

from __future__ import annotations

import os
from typing import Any

from .errors import ConfigError, MissingDependencyError
from .evaluate.loader import whole_image_loader
from .evaluate.meter import ValidationMetrics  # noqa: F401  (the validation_step helper, re-exported)
from .kinds import RAW, lookup
from .loaders import make_loader
from .plan import REQUIRED

try:
    import lightning.pytorch as pl
except ImportError:
    raise MissingDependencyError("pairload.lightning needs PyTorch Lightning (the `lightning` package), which is not "
                                 "installed: pip install 'pairload[lightning]'") from None

# make_loader's options that the Trainer decides: where they come from in a Lightning run
FROM_TRAINER = {"rank": "trainer.global_rank", "world_size": "trainer.world_size",
                "device": "trainer.strategy.root_device"}
REMOTE_OPTIONS = ("cache_dir", "cache_limit", "storage_options")  # shards at a URL: the validation loader's too


class TrainerLoader:
    """A pairload loader as the Trainer iterates it, unwrapped (no sampler is injected: `use_distributed_sampler`
    does not apply, the loader deals the ranks itself). With `trainer`, each iteration is of the Trainer's current
    epoch (`set_epoch` is called at its start), `len()` is that epoch's batches as the Trainer counts them (those
    it counts as done before a resume included), and `state_dict()` describes the batches the Trainer has trained
    on, not those the loader handed out ahead of it. Without a trainer it is the loader as it is (validation)."""

    def __init__(self, loader, trainer: pl.Trainer | None = None):
        self.loader = loader
        self.trainer = trainer
        # epoch -> (batches of it the Trainer counts as done, batches of it the loader counts as delivered) when
        # this process starts it; other epochs: both count from 0
        self._start: dict[int, tuple[int, int]] = {}
        self._running = None  # the iteration under way

    def _epoch(self) -> int:
        return self.loader.epoch if self.trainer is None else self.trainer.current_epoch

    def _counted(self, epoch: int) -> tuple[int, int]:
        return self._start.get(epoch, (0, 0))

    def __len__(self) -> int:
        epoch = self._epoch()
        rest = len(self.loader) if epoch == self.loader.epoch else self.loader.batches_in(epoch)
        return self._counted(epoch)[0] + rest

    def __iter__(self):
        # a generator: Lightning calls iter() ahead of the epoch (and once only to check that the object is
        # iterable); the loader starts at the first batch, when the Trainer has moved to the epoch
        if self._running is not None:
            self._running.close()  # the last epoch's iteration, left after its last batch (Lightning counts batches)
        self._running = self._batches()
        return self._running

    def _batches(self):
        if self.trainer is not None:
            self.loader.set_epoch(self.trainer.current_epoch)  # the epoch of a loaded state keeps the rest of it
        yield from self.loader

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)

    def _trainer_progress(self, epoch: int) -> tuple[int, int] | None:
        """(batches of `epoch` the Trainer has run its training step on, of which it has finished the batch-end
        hooks); None: it is not fitting that epoch."""
        trainer = self.trainer
        if trainer is None or trainer.state.fn != "fit" or trainer.current_epoch != epoch:
            return None
        progress = trainer.fit_loop.epoch_loop.batch_progress.current
        return progress.processed, progress.completed

    def state_dict(self) -> dict:
        """`loader`: the loader's state (`Loader.state_dict`) less any batch it handed out that the Trainer has not
        trained on (a batch fetched ahead would otherwise be skipped on resume); `trainer_batches`: the batches of
        its epoch the Trainer counts as done; `in_batch_end`: written from a batch-end hook (by
        `ModelCheckpoint(every_n_train_steps=...)`), where the Trainer resumes differently after an epoch's last
        batch."""
        state = self.loader.state_dict()
        trainer_before, loader_before = self._counted(state["epoch"])
        this_run = sum(k for _, k in state["consumed"]) - loader_before
        counted = trainer_before + this_run
        progress = self._trainer_progress(state["epoch"])
        steps, finished = progress if progress else (counted, counted)
        if 0 < counted - steps <= this_run:  # only this run's batches can be ahead
            world, delivered = state["consumed"][-1]
            state["consumed"][-1] = [world, delivered - (counted - steps)]
            if not state["consumed"][-1][1]:
                state["consumed"].pop()
            counted = steps
        return {"loader": state, "trainer_batches": counted, "in_batch_end": finished < steps}

    def load_state_dict(self, state: dict) -> None:
        """Continue from `state_dict()`; loading the same state again before iterating changes nothing (the
        DataModule restores it early, the Trainer's fit loop once more)."""
        if not isinstance(state, dict) or "loader" not in state or "trainer_batches" not in state:
            raise ConfigError(f"TrainerLoader state: expected a dict of 'loader' and 'trainer_batches' from "
                              f"TrainerLoader.state_dict(), found {str(state)[:80]!r}; resume from a checkpoint "
                              "written with PairDataModule")
        self.loader.load_state_dict(state["loader"])
        epoch, counted = self.loader.epoch, int(state["trainer_batches"])
        self._start = {epoch: (counted, sum(int(k) for _, k in state["loader"]["consumed"]))}
        if state.get("in_batch_end") and not len(self.loader) and self.loader.batches_in(epoch + 1) > counted:
            # saved at the epoch's last batch end: Lightning (2.x) goes on to the next epoch and keeps this count in
            # it, unless the count is at least the next epoch's length (its test of "the saved epoch was finished")
            self._start[epoch + 1] = (counted, 0)

    def close(self) -> None:
        if self._running is not None:
            self._running.close()
            self._running = None
        self.loader.close()


class PairDataModule(pl.LightningDataModule):
    """Training (and validation) batches from a shard folder, for `Trainer.fit(model, datamodule=...)`.

    `kind`, `batch_size` (per device), `crop`, `seed`, `num_workers` and every other keyword go to `make_loader`;
    the Trainer gives the rank, world size and device (the batches are made on it: `training_step` receives a
    `PairBatch` of uint8 tensors, to normalise there). `val_split` (None: no validation batches) is read whole
    (no crop), unshuffled, each image once across devices, `val_batch_size` at a time, from `val_source` (default:
    `source`; needed when `source` mixes several folders), one image at a time when the split's images differ in
    size. `degrade` ("lowlight", "lowlight,gamma=2..3", a dict or
    a `pairload.degrade.Degradation`) degrades the training targets into their inputs (`degrade_sources`: the
    mixed sources it applies to; `PairBatch.degradation` holds each sample's parameters); validation reads the
    stored pairs, unless `val_degrade` degrades its targets too (the same ones every epoch). A `val_split` whose
    images show scenes of the training data is refused before training (`pairload.audit.refuse_overlap`) unless
    `allow_overlap=True`. `clips` (5, or
    "5,stride=2,start=random,short=pad": a split packed with --sequences) makes the training batches clips of frames
    (`PairBatch.low`/`high` N×T×C×H×W) and the validation batches clips of whole frames on the grid (start="grid", no
    augmentation, the same every epoch). The loader's state is
    saved in every checkpoint; `fit(ckpt_path=...)` resumes it mid-epoch, on any number of devices. The Trainer is asked
    to call `train_dataloader()` each epoch (`reload_dataloaders_every_n_epochs=1`; the same loader comes back) so
    that it re-reads the epoch's length, which changes after a resume on another number of devices or under a
    crop/batch schedule."""

    def __init__(self, source: str | os.PathLike | dict, kind: str = "ram", *, batch_size: int | None = None,
                 crop: Any = REQUIRED, split: str = "train", seed: int = 0, num_workers: int = 0,
                 val_split: str | None = None, val_batch_size: int = 1, val_source: str | os.PathLike | None = None,
                 degrade: Any = None, degrade_sources: Any = (), val_degrade: Any = None, clips: Any = None,
                 allow_overlap: bool = False, **options: Any):
        super().__init__()
        given = sorted(set(options) & set(FROM_TRAINER))
        if given:
            raise ConfigError(f"PairDataModule: {', '.join(given)} given, but a Lightning run takes them from the "
                              f"Trainer ({', '.join(FROM_TRAINER[name] for name in given)}); leave them out")
        if val_split is not None and val_source is None and isinstance(source, dict):
            raise ConfigError(f"PairDataModule: val_split={val_split!r} with a mix of sources ({', '.join(source)}); "
                              "name the shard folder to validate on with val_source=...")
        self.source, self.kind, self.split, self.val_split = source, kind, split, val_split
        self.val_source = source if val_source is None else val_source
        self.options = dict(batch_size=batch_size, crop=crop, seed=seed, num_workers=num_workers, degrade=degrade,
                            degrade_sources=degrade_sources, clips=clips, **options)
        self.val_batch_size, self.val_degrade = val_batch_size, val_degrade
        self.allow_overlap = allow_overlap
        self._train: TrainerLoader | None = None
        self._val: TrainerLoader | None = None
        self._pending: dict | None = None  # a checkpoint's loader state, loaded when the loader is made

    def _placement(self) -> dict:
        trainer = self.trainer
        if trainer is None:
            raise ConfigError("PairDataModule: no Trainer yet; pass it to Trainer.fit(model, datamodule=...), which "
                              "gives the rank, world size and device")
        return dict(rank=trainer.global_rank, world_size=trainer.world_size, device=str(trainer.strategy.root_device))

    def setup(self, stage: str) -> None:
        trainer = self.trainer
        if stage != "fit" or trainer is None:
            return
        every = trainer.reload_dataloaders_every_n_epochs
        if every == 0:
            trainer.reload_dataloaders_every_n_epochs = 1
        elif every != 1:
            raise ConfigError(f"Trainer(reload_dataloaders_every_n_epochs={every}): PairDataModule needs 0 or 1 (the "
                              "Trainer re-reads each epoch's length from the loader); leave it out")
        if self.val_split is not None and not self.allow_overlap and lookup(self.kind).reads != RAW:
            from .audit.overlap import refuse_overlap

            remote = {k: v for k, v in self.options.items() if k in REMOTE_OPTIONS}
            refuse_overlap(self.source, self.val_source, split=self.split, val_split=self.val_split,
                           override="allow_overlap=True", remote=remote)

    def train_dataloader(self) -> TrainerLoader:
        if self._train is None:
            loader = make_loader(self.kind, self.source, split=self.split, **self.options, **self._placement())
            self._train = TrainerLoader(loader, self.trainer)
        if self._pending is not None:
            # before the Trainer first asks the loader's length: a resumed epoch's is not the length of a fresh one
            self._train.load_state_dict(self._pending)
            self._pending = None
        return self._train

    def val_dataloader(self) -> TrainerLoader | list:
        if self.val_split is None:
            return []
        if self._val is None:
            # whole images: the ram loader reads any split of shards, one image at a time when their sizes differ
            # (`whole_image_loader`); a kind that reads the image folders (dali-file) validates on them itself
            remote = {k: v for k, v in self.options.items() if k in REMOTE_OPTIONS}
            common = dict(seed=self.options["seed"], num_workers=self.options["num_workers"], degrade=self.val_degrade,
                          **remote, **self._placement())
            if lookup(self.kind).reads == RAW:
                loader = make_loader(self.kind, self.val_source, split=self.val_split, batch_size=self.val_batch_size,
                                     crop=None, last_batch="partial", augment=False, shuffle=False,
                                     clips=self.options["clips"], **common)
            else:  # clips on the grid
                loader = whole_image_loader(self._val_shards(remote), self.val_split, batch_size=self.val_batch_size,
                                            clips=self.options["clips"], **common)
            self._val = TrainerLoader(loader)
        return self._val

    def _val_shards(self, remote: dict):
        """The validation split, opened once; a split of targets only is refused naming val_split unless val_degrade
        makes its inputs (validation compares outputs on stored inputs with their targets)."""
        from .read.shards import open_shards

        ds = open_shards(self.val_source, self.val_split, **remote)
        if ds.targets_only and self.val_degrade is None:
            raise ConfigError(f"PairDataModule: val_split={self.val_split!r} of {ds.where} holds targets only (packed "
                              "with --targets-only): there are no stored inputs to validate on; validate on a split "
                              "with stored pairs, degrade its targets into inputs with val_degrade=... (the same "
                              "every epoch), or leave val_split out")
        return ds

    def state_dict(self) -> dict:
        if self._train is None:
            return {} if self._pending is None else {"train": self._pending}
        return {"train": self._train.state_dict()}

    def load_state_dict(self, state_dict: dict) -> None:
        self._pending = state_dict.get("train")
        if self._train is not None and self._pending is not None:
            self._train.load_state_dict(self._pending)
            self._pending = None

    def teardown(self, stage: str) -> None:
        """Stop the loaders' workers; the next fit makes new loaders (its Trainer may have another world size)."""
        for ld in (self._train, self._val):
            if ld is not None:
                ld.close()
        self._train = self._val = None
