"""The reference DDP + AMP training loop: `torchrun --nproc_per_node=N -m pairload.train ...` or one process.

`run` goes through a run's phases, each a function of a `Run`: `set_up` (config, data, model, loaders, run folder),
`resume`, then per epoch `train_epoch` (the loop and evaluation) and `end_epoch` (metrics and checkpoints); `main`
is the command and its error boundary."""

from __future__ import annotations

import contextlib
import faulthandler
import io
import json
import math
import os
import random
import signal
import sys
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..batch import Normalize, RawNormalize
from ..distributed import (DistInfo, broadcast_buffers, cleanup, dist_info, exit_with_parent, init_distributed,
                           lost_ranks_error)
from ..errors import ConfigError, PairloadError, in_cli_terms
from ..format.atomic import write_bytes_atomic
from .checkpoint import (CHECKPOINT_VERSION, load_checkpoint, load_weights, prepare_run_dir, rng_state,
                         save_checkpoint, set_rng_state, tidy_run_dir)
from .config import TrainConfig, parse_args
from .data import TrainData, build_train_loader, build_val_loader
from .evaluate import evaluate, save_triplets
from .loop import lr_lambda, make_scaler, resolve_amp, train_one_epoch
from .model import EnhanceUNet, ModelConfig
from .stop import EXIT_CODE, StopSignal, Stopped


@contextlib.contextmanager
def epoch_progress(is_main: bool, epoch: int, epochs: int):
    """A progress bar for the epoch on rank 0 when stderr is a terminal (None otherwise: logs stay clean)."""
    if not (is_main and sys.stderr.isatty()):
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn(f"epoch {epoch + 1}/{epochs}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("train", total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def data_of(config: dict) -> str:
    """A run's training data in a message: its folder, its --degrade and its --clips."""
    where = config.get("mix") or config.get("shards") or config.get("raw")
    return ", ".join([f"{where}"] + [f"--{name} {config[name]}" for name in ("degrade", "clips") if config.get(name)])


def rate(x: float) -> str:
    """A throughput for the log: three significant digits below 100, whole numbers above."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


@dataclass
class Run:
    """A training run between its phases (`set_up`, `resume`, `train_epoch`, `end_epoch`): what `set_up` built, and
    what changes as it goes on: the epoch it starts at, the best score so far, and `mid`, the state of the epoch a
    resumed checkpoint was saved in the middle of."""

    cfg: TrainConfig  # its `amp` resolved for the device
    info: DistInfo
    model_cfg: ModelConfig
    model: torch.nn.Module  # the module whose state is saved; `net` runs it (under DDP, compiled)
    norm: torch.nn.Module
    train_loader: Any
    val_loader: Any  # None: --val-split none
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: torch.amp.GradScaler
    out: Path | None  # the run folder; None: nothing is written
    data_id: str  # `TrainData.fingerprint`: a resume on other data is refused
    steps_per_epoch: int
    net: torch.nn.Module | None = None
    start_epoch: int = 0
    best: float = -math.inf
    mid: dict | None = None

    def state_at(self, epoch_done: int, mid_epoch: dict | None = None) -> dict:
        """The checkpoint after `epoch_done` epochs (and `mid_epoch`'s steps of the next)."""
        return {"version": CHECKPOINT_VERSION, "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict(), "epoch": epoch_done, "best_psnr": self.best,
                "model_config": self.model_cfg.to_dict(), "rng": rng_state(), "train_config": self.cfg.record(),
                "data": self.data_id, "mid_epoch": mid_epoch}

    def save_mid_epoch(self, epoch: int, step: int, loader_state: dict, seen, sums: list[float]) -> None:
        """`train_one_epoch`'s `checkpoint` where the run has an --out, called on every rank; rank 0 writes last.pt.
        `seen` (a `loop.Seen`): what the epoch consumed so far, for its digest."""
        if self.info.is_main:
            save_checkpoint(self.out / "last.pt", self.state_at(epoch, {"step": step, "loader": loader_state,
                                                                        **seen.to_state(), "sums": sums}))


def run(cfg: TrainConfig, info: DistInfo, log=print, stop: StopSignal | None = None) -> list[dict]:
    """Train; returns the per-epoch metrics (rank 0 also writes them to RUN_DIR/metrics.jsonl). `stop` (SIGTERM's
    flag): `Stopped` once the ranks agree it was raised, after a step or at an epoch's end, the run saved there."""
    state = set_up(cfg, info, log)
    cfg = state.cfg
    if cfg.resume:
        resume(state, log)
    state.net = parallel(state.model, cfg, info)
    write_run_config(state)
    history = []
    for epoch in range(state.start_epoch, cfg.epochs):
        row, images = train_epoch(state, epoch, stop)
        history.append(row)
        if info.is_main:
            log(epoch_line(cfg, epoch, row))
            if state.out:
                end_epoch(state, epoch, row, images)
        if cfg.stop_after_epoch is not None and epoch + 1 >= cfg.stop_after_epoch:
            break
        if stop is not None and epoch + 1 < cfg.epochs and stop.agreed(info):  # (last.pt is this epoch's end)
            raise Stopped(epoch, None, state.steps_per_epoch, saved=state.out is not None)
    return history


def set_up(cfg: TrainConfig, info: DistInfo, log) -> Run:
    """The seeds, the data, the model, the loaders, the optimisation and the run folder, in this order (the seeds
    make the model's first weights)."""
    cfg = replace(cfg, amp=resolve_amp(cfg.amp, info.device))
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    cfg.kind.require()  # DALI's kinds: raises MissingDependencyError with install advice
    data = TrainData(cfg)  # each manifest is read once, here, whatever needs it
    members, camera_raw = data.members()
    model_cfg = ModelConfig(width=cfg.width, depth=cfg.depth, in_channels=members.low.channels,
                            out_channels=members.high.channels, scale=members.scale, frames=cfg.frames)
    model = build_model(model_cfg, cfg, info, log)
    channels_last = info.device.type == "cuda"
    # camera raw: black/white levels and each pair's ratio from the batch (SID's preprocessing), on the device
    norm = (RawNormalize(channels_last=channels_last) if camera_raw else Normalize(channels_last=channels_last))
    norm = norm.to(info.device)
    train_loader = build_train_loader(cfg, info, data)
    if info.is_main:
        log_inputs(cfg, log)
    val_loader = build_val_loader(cfg, info, data)
    if val_loader is not None and info.is_main:
        log(f"validation on split {cfg.val_split!r} of {cfg.shards or cfg.raw}: {val_loader.samples} whole "
            f"{'clips' if cfg.clips else 'images'}, each once per epoch across ranks")
    # the schedule is sized from the plan of every epoch (a crop/batch schedule changes the step count per epoch)
    per_epoch = [train_loader.batches_in(e) if cfg.max_steps is None else min(train_loader.batches_in(e), cfg.max_steps)
                 for e in range(cfg.epochs)]
    optimizer, scheduler = optimisation(model, per_epoch, cfg, info, log)
    scaler = make_scaler(cfg.amp, info.device)
    out = run_dir(cfg, info, log)
    return Run(cfg=cfg, info=info, model_cfg=model_cfg, model=model, norm=norm, train_loader=train_loader,
               val_loader=val_loader, optimizer=optimizer, scheduler=scheduler, scaler=scaler, out=out,
               data_id=data.fingerprint(), steps_per_epoch=per_epoch[0] if per_epoch else 0)


def build_model(model_cfg: ModelConfig, cfg: TrainConfig, info: DistInfo, log) -> torch.nn.Module:
    """The model on the device (channels last on a GPU), its weights from --init-from when given."""
    model = EnhanceUNet(model_cfg)
    if cfg.init_from and not cfg.resume:  # resumed, the run's own last.pt holds the weights trained from it
        model.load_state_dict(load_weights(Path(cfg.init_from), model_cfg))
        if info.is_main:
            log(f"model weights from {cfg.init_from} (optimizer and schedule start afresh)")
    if cfg.sync_bn and info.distributed:
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = model.to(info.device)
    if info.device.type == "cuda":
        model = model.to(memory_format=torch.channels_last)
    return model


def log_inputs(cfg: TrainConfig, log) -> None:
    """What the model is fed, where it is not plain pairs: inputs made by --degrade, clips of --clips."""
    validates = cfg.val_split != "none"
    if cfg.degrade:
        log(f"training inputs degraded from the targets: {cfg.degrade}"
            + (f" (sources {', '.join(cfg.degraded_sources())})" if cfg.degrade_sources else "")
            + ("; validation on the stored pairs" if validates else "; no validation (--val-split none)"))
    if cfg.clips:
        log(f"training on clips {cfg.clips}: the model takes their {cfg.frames} input frames stacked in channels and "
            f"predicts the target of frame {cfg.frames // 2}"
            + ("; validation on the clips of the grid" if validates else "; no validation (--val-split none)"))


def optimisation(model: torch.nn.Module, per_epoch: list[int], cfg: TrainConfig, info: DistInfo, log):
    """AdamW and its warm-up + cosine schedule over the run's steps (`per_epoch`: each epoch's)."""
    fused = {"fused": True} if info.device.type == "cuda" else {}
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, **fused)
    total_steps = sum(per_epoch)
    warmup = min(cfg.warmup_steps, max(1, total_steps // 10))  # a short run must still reach its learning rate
    if warmup < cfg.warmup_steps and info.is_main:
        log(f"warm-up shortened from {cfg.warmup_steps} to {warmup} steps (a tenth of this run's {total_steps} steps)")
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(warmup, total_steps))


def run_dir(cfg: TrainConfig, info: DistInfo, log) -> Path | None:
    """--out, emptied of an earlier run with --overwrite (refused without it), left as it is with --resume."""
    out = Path(cfg.out) if cfg.out else None
    if out is None:
        if info.is_main:
            log("note: no --out, so no checkpoint, metrics or pictures are written")
    elif not cfg.resume:
        prepare_run_dir(out, cfg.overwrite, info.is_main)
    return out


def resume(state: Run, log) -> None:
    """--resume: the model, optimisation and RNG states of RUN_DIR/last.pt (refused when it was trained on other
    data), and of an epoch it was saved in the middle of, the loader's state to finish it."""
    cfg, info, path = state.cfg, state.info, state.out / "last.pt"
    saved = load_checkpoint(path, state.model_cfg)
    state.model.load_state_dict(saved["model"])
    state.optimizer.load_state_dict(saved["optimizer"])
    state.scheduler.load_state_dict(saved["scheduler"])
    if saved["scaler"]:  # empty from runs before the skip guard: its scale (1.0) is the default
        state.scaler.load_state_dict(saved["scaler"])
    set_rng_state(saved["rng"])
    state.start_epoch, state.best = saved["epoch"], saved["best_psnr"]
    if saved.get("data") is not None and saved["data"] != state.data_id:
        raise ConfigError(f"--resume: {path} was trained on other data ({data_of(saved.get('train_config', {}))}) "
                          f"than this run's ({data_of(cfg.record())}); resume with the same data, or start a new --out")
    state.mid = saved.get("mid_epoch")
    if state.mid:  # the rest of the interrupted epoch, dealt over this run's ranks
        state.train_loader.load_state_dict(state.mid["loader"])
        if info.is_main:
            log(f"resuming epoch {state.start_epoch + 1} after step {state.mid['step']} (saved with "
                f"{state.mid['loader']['world_size']} ranks, now {info.world_size})")
    if info.is_main:
        tidy_run_dir(state.out, state.start_epoch)
    if state.start_epoch >= cfg.epochs:
        log(f"checkpoint is at epoch {state.start_epoch}, which is already --epochs {cfg.epochs}: nothing to do")


def parallel(model: torch.nn.Module, cfg: TrainConfig, info: DistInfo) -> torch.nn.Module:
    """The model as the steps run it: under DDP across ranks, compiled with --compile."""
    net = model
    if info.distributed:
        # the graph is the same every step: static_graph lets DDP skip the per-step search for unused parameters
        # and overlap all-reduces from the first bucket; gradient_as_bucket_view saves a copy of every gradient.
        # broadcast_buffers=False: BatchNorm's running statistics are made rank 0's once per epoch (`broadcast_buffers`
        # in `train_epoch`) instead of by a collective before every forward pass, which cost 1.4 ms of a 21 ms step
        # on two H100s (rank 0's statistics evolve the same either way: it is the broadcast's source)
        dev = info.device
        net = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index] if dev.type == "cuda" else None,
                                                        static_graph=True, gradient_as_bucket_view=True,
                                                        broadcast_buffers=False)
    if cfg.compile:
        net = torch.compile(net)
    return net


def write_run_config(state: Run) -> None:
    """Rank 0: RUN_DIR/config.json, the run's options with its ranks, device, model and data."""
    if not (state.out and state.info.is_main):
        return
    state.out.mkdir(parents=True, exist_ok=True)
    record = {**state.cfg.record(), "world_size": state.info.world_size, "device": str(state.info.device),
              "steps_per_epoch": state.steps_per_epoch, "model": state.model_cfg.to_dict(), "data": state.data_id}
    write_bytes_atomic(state.out / "config.json", (json.dumps(record, indent=2) + "\n").encode())


def train_epoch(state: Run, epoch: int, stop: StopSignal | None = None) -> tuple[dict, list]:
    """One epoch's training and validation: its metrics row, and rank 0's validation pictures."""
    cfg, info = state.cfg, state.info
    with epoch_progress(info.is_main, epoch, cfg.epochs) as on_step:
        stats = train_one_epoch(state.net, state.train_loader, state.optimizer, state.scheduler, state.scaler,
                                state.norm, cfg, info, epoch, on_step,
                                resume=state.mid if epoch == state.start_epoch else None,
                                checkpoint=partial(state.save_mid_epoch, epoch) if state.out else None, stop=stop)
    broadcast_buffers(state.model)  # every rank validates and checkpoints with rank 0's running statistics
    val = {} if state.val_loader is None else evaluate(state.model, state.val_loader, state.norm, cfg, info,
                                                       keep_images=cfg.image_count if info.is_main else 0)
    images = val.pop("images", [])
    row = {"epoch": epoch + 1, "train_loss": stats["train_loss"], **val, "pairs_per_s": stats["pairs_per_s"],
           "data_wait_frac": stats["data_wait_frac"], "world_size": info.world_size,
           "lr": state.scheduler.get_last_lr()[0], "skipped_steps": stats["skipped_steps"],
           "peak_gpu_mem_mb": stats["peak_gpu_mem_mb"], "steps": stats["steps"], "loader": cfg.loader,
           "data_digest": stats["data_digest"], "data_samples": stats["data_samples"],
           "data_repeats": stats["data_repeats"]}
    return row, images


def epoch_line(cfg: TrainConfig, epoch: int, row: dict) -> str:
    """The log line of an epoch's metrics `row` (its validation's when it has one)."""
    unit = "clips" if cfg.clips else "pairs"  # what pairs_per_s and val_samples count
    val = ""
    if "val_psnr" in row:
        val = (f"val PSNR {row['val_psnr']:.2f} dB SSIM {row['val_ssim']:.4f} (GT-mean PSNR "
               f"{row['val_psnr_gt_mean']:.2f} dB) on {row['val_samples']} {unit} of {cfg.val_split!r} ")
        if row["val_psnr_input"] is not None:
            val += f"(input: {row['val_psnr_input']:.2f} dB, {row['val_ssim_input']:.4f})  "
    return (f"epoch {epoch + 1}/{cfg.epochs}: loss {row['train_loss']:.4f}  {val}"
            f"{rate(row['pairs_per_s'])} {unit}/s  data wait {100 * row['data_wait_frac']:.1f}% of step time"
            + (f"  skipped {row['skipped_steps']} non-finite steps" if row["skipped_steps"] else ""))


def end_epoch(state: Run, epoch: int, row: dict, images: list) -> None:
    """Rank 0 with --out: the epoch's metrics row and validation pictures, last.pt, and best.pt at a new best score
    (the validation PSNR; without validation, the lowest training loss)."""
    out = state.out
    with open(out / "metrics.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")
    save_triplets(images, out / f"val-epoch{epoch + 1:03d}.png")
    score = row.get("val_psnr", -row["train_loss"])
    best_now = score > state.best
    state.best = max(state.best, score)
    checkpoint = state.state_at(epoch + 1)
    save_checkpoint(out / "last.pt", checkpoint)
    if best_now:
        save_checkpoint(out / "best.pt", checkpoint)


def _stacks_on_usr1() -> None:
    """`kill -USR1 PID`: every thread's stack on stderr. Not where stderr is no file (called in-process, under a
    capturing test runner): the dump is a debugging aid, never a reason to fail."""
    if not hasattr(signal, "SIGUSR1"):
        return
    try:
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    except (AttributeError, ValueError, OSError, io.UnsupportedOperation):
        pass


DESCRIPTION = """\
Train a small enhancement network on packed shards: it reads the train split in random crops, validates on the
test split after each epoch (PSNR, SSIM and GT-mean PSNR as BasicSR computes them, see --crop-border and
--y-channel; --val-split none for none) and writes checkpoints and a metrics log to --out. One process trains
on one GPU (or the CPU); under torchrun every GPU runs a rank. It is a reference loop to measure and check the
loaders with, not a model zoo.

example:
  {prog} --shards SHARDS --out runs/lol --epochs 10 --batch-size 8 --crop 256
  torchrun --nproc_per_node=4 -m pairload.train --shards SHARDS --out runs/lol"""


def main(argv: list[str] | None = None, prog: str = "python -m pairload.train", parent: int | None = None) -> int:
    """The command: parse, join the ranks, run; a PairloadError is one line on stderr and exit code 1. Under
    torchrun the rank exits when `parent` (the process that started it: the torchrun agent) dies. SIGTERM stops the
    run saved (`stop`), exit code 143. `kill -USR1 PID` prints every thread's stack of a rank that seems stuck (to
    stderr) and lets it go on."""
    parent = os.getppid() if parent is None else parent
    _stacks_on_usr1()
    stop = StopSignal()
    try:
        cfg = parse_args(argv, prog, description=DESCRIPTION.format(prog=prog))
        info = dist_info(cfg.device)
        if info.launcher != "torchrun" or not exit_with_parent(parent, info, on_sigterm=stop.ask):
            stop.install()
        init_distributed(info, timeout_s=cfg.dist_timeout)
        try:
            run(cfg, info, stop=stop)
        except Stopped as stopped:  # every rank stopped at the same step, last.pt written
            cleanup(finished=False)
            if info.is_main:
                sys.stderr.write(f"{stopped}\n")
            return EXIT_CODE
        except BaseException as exc:
            cleanup(finished=False)
            lost = lost_ranks_error(exc, info, cfg.dist_timeout)
            if lost is not None:
                raise lost from None
            raise
        cleanup()
    except PairloadError as exc:
        sys.stderr.write(f"error: {in_cli_terms(exc)}\n")
        return 1
    finally:
        stop.uninstall()
    return 0


if __name__ == "__main__":
    sys.exit(main())
