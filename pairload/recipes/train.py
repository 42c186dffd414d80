"""The reference DDP + AMP training loop: `torchrun --nproc_per_node=N -m pairload.train ...` or one process.

`run` puts together the config, data, loop, evaluation and run folder; `main` is the command and its error boundary."""

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
from dataclasses import replace
from pathlib import Path

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


def run(cfg: TrainConfig, info: DistInfo, log=print) -> list[dict]:
    """Train; returns the per-epoch metrics (rank 0 also writes them to RUN_DIR/metrics.jsonl)."""
    cfg = replace(cfg, amp=resolve_amp(cfg.amp, info.device))
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    dev = info.device
    cfg.kind.require()  # DALI's kinds: raises MissingDependencyError with install advice
    data = TrainData(cfg)  # each manifest is read once, here, whatever needs it
    members, camera_raw = data.members()
    model_cfg = ModelConfig(width=cfg.width, depth=cfg.depth, in_channels=members.low.channels,
                            out_channels=members.high.channels, scale=members.scale, frames=cfg.frames)
    model = EnhanceUNet(model_cfg)
    if cfg.init_from and not cfg.resume:  # resumed, the run's own last.pt holds the weights trained from it
        model.load_state_dict(load_weights(Path(cfg.init_from), model_cfg))
        if info.is_main:
            log(f"model weights from {cfg.init_from} (optimizer and schedule start afresh)")
    if cfg.sync_bn and info.distributed:
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = model.to(dev)
    channels_last = dev.type == "cuda"
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    # camera raw: black/white levels and each pair's ratio from the batch (SID's preprocessing), on the device
    norm = (RawNormalize(channels_last=channels_last) if camera_raw else Normalize(channels_last=channels_last)).to(dev)
    train_loader = build_train_loader(cfg, info, data)
    if cfg.degrade and info.is_main:
        log(f"training inputs synthesized from the targets: {cfg.degrade}"
            + (f" (sources {', '.join(cfg.degraded_sources())})" if cfg.degrade_sources else "")
            + "; validation on the stored pairs")
    if cfg.clips and info.is_main:
        log(f"training on clips {cfg.clips}: the model takes their {cfg.frames} input frames stacked in channels and "
            f"predicts the target of frame {cfg.frames // 2}; validation on the clips of the grid")
    val_loader = build_val_loader(cfg, info, data)
    # the schedule is sized from the plan of every epoch (a crop/batch schedule changes the step count per epoch)
    per_epoch = [train_loader.batches_in(e) if cfg.max_steps is None else min(train_loader.batches_in(e), cfg.max_steps)
                 for e in range(cfg.epochs)]
    steps_per_epoch = per_epoch[0] if per_epoch else 0
    fused = {"fused": True} if dev.type == "cuda" else {}
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, **fused)
    total_steps = sum(per_epoch)
    warmup = min(cfg.warmup_steps, max(1, total_steps // 10))  # a short run must still reach its learning rate
    if warmup < cfg.warmup_steps and info.is_main:
        log(f"warm-up shortened from {cfg.warmup_steps} to {warmup} steps (a tenth of this run's {total_steps} steps)")
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(warmup, total_steps))
    scaler = make_scaler(cfg.amp, dev)
    out = Path(cfg.out) if cfg.out else None
    if out is None:
        if info.is_main:
            log("note: no --out, so no checkpoint, metrics or pictures are written")
    elif not cfg.resume:
        prepare_run_dir(out, cfg.overwrite, info.is_main)
    data_id = data.fingerprint()
    start_epoch, best, mid = 0, -math.inf, None
    if cfg.resume:
        state = load_checkpoint(out / "last.pt", model_cfg)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        if state["scaler"]:  # empty from runs before the skip guard: its scale (1.0) is the default
            scaler.load_state_dict(state["scaler"])
        set_rng_state(state["rng"])
        start_epoch, best = state["epoch"], state["best_psnr"]
        if state.get("data") is not None and state["data"] != data_id:
            saved = state.get("train_config", {})
            raise ConfigError(f"--resume: {out / 'last.pt'} was trained on other data ({data_of(saved)}) than this "
                              f"run's ({data_of(cfg.record())}); resume with the same data, or start a new --out")
        mid = state.get("mid_epoch")
        if mid:  # the rest of the interrupted epoch, dealt over this run's ranks
            train_loader.load_state_dict(mid["loader"])
            if info.is_main:
                log(f"resuming epoch {start_epoch + 1} after step {mid['step']} (saved with "
                    f"{mid['loader']['world_size']} ranks, now {info.world_size})")
        if info.is_main:
            tidy_run_dir(out, start_epoch)
        if start_epoch >= cfg.epochs:
            log(f"checkpoint is at epoch {start_epoch}, which is already --epochs {cfg.epochs}: nothing to do")
    net = model
    if info.distributed:
        # the graph is the same every step: static_graph lets DDP skip the per-step search for unused parameters
        # and overlap all-reduces from the first bucket; gradient_as_bucket_view saves a copy of every gradient.
        # broadcast_buffers=False: BatchNorm's running statistics are made rank 0's once per epoch
        # (`broadcast_buffers` below) instead of by a collective before every forward pass, which cost 1.4 ms of a
        # 21 ms step on two H100s (rank 0's statistics evolve the same either way: it is the broadcast's source)
        net = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index] if dev.type == "cuda" else None,
                                                        static_graph=True, gradient_as_bucket_view=True,
                                                        broadcast_buffers=False)
    if cfg.compile:
        net = torch.compile(net)
    if out and info.is_main:
        out.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(out / "config.json", (json.dumps({**cfg.record(), "world_size": info.world_size,
                                                             "device": str(dev), "steps_per_epoch": steps_per_epoch,
                                                             "model": model_cfg.to_dict(), "data": data_id},
                                                            indent=2) + "\n").encode())
    def state_at(epoch_done: int, mid_epoch: dict | None = None) -> dict:
        return {"version": CHECKPOINT_VERSION, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(), "epoch": epoch_done,
                "best_psnr": best, "model_config": model_cfg.to_dict(), "rng": rng_state(),
                "train_config": cfg.record(), "data": data_id, "mid_epoch": mid_epoch}

    history = []
    for epoch in range(start_epoch, cfg.epochs):
        def checkpoint(step: int, loader_state: dict, seen, sums: list[float], epoch=epoch) -> None:
            if out and info.is_main:  # `seen` (a `loop.Seen`): what the epoch consumed so far, for its digest
                save_checkpoint(out / "last.pt", state_at(epoch, {"step": step, "loader": loader_state,
                                                                  **seen.to_state(), "sums": sums}))

        with epoch_progress(info.is_main, epoch, cfg.epochs) as on_step:
            stats = train_one_epoch(net, train_loader, optimizer, scheduler, scaler, norm, cfg, info, epoch, on_step,
                                    resume=mid if epoch == start_epoch else None, checkpoint=checkpoint)
        broadcast_buffers(model)  # every rank validates and checkpoints with rank 0's running statistics
        val = {} if val_loader is None else evaluate(model, val_loader, norm, cfg, info,
                                                     keep_images=cfg.image_count if info.is_main else 0)
        images = val.pop("images", [])
        row = {"epoch": epoch + 1, "train_loss": stats["train_loss"], **val, "pairs_per_s": stats["pairs_per_s"],
               "data_wait_frac": stats["data_wait_frac"], "world_size": info.world_size,
               "lr": scheduler.get_last_lr()[0], "skipped_steps": stats["skipped_steps"],
               "peak_gpu_mem_mb": stats["peak_gpu_mem_mb"], "steps": stats["steps"], "loader": cfg.loader,
               "data_digest": stats["data_digest"], "data_samples": stats["data_samples"],
               "data_repeats": stats["data_repeats"]}
        history.append(row)
        if info.is_main:
            unit = "clips" if cfg.clips else "pairs"  # what pairs_per_s and val_samples count
            log(f"epoch {epoch + 1}/{cfg.epochs}: loss {row['train_loss']:.4f}  "
                + (f"val PSNR {row['val_psnr']:.2f} dB SSIM {row['val_ssim']:.4f} (GT-mean PSNR "
                   f"{row['val_psnr_gt_mean']:.2f} dB) on {row['val_samples']} {unit} "
                   + (f"(input: {row['val_psnr_input']:.2f} dB, {row['val_ssim_input']:.4f})  "
                      if row["val_psnr_input"] is not None else "") if val else "")
                + f"{rate(row['pairs_per_s'])} {unit}/s  data wait {100 * row['data_wait_frac']:.1f}% of step time"
                + (f"  skipped {row['skipped_steps']} non-finite steps" if row["skipped_steps"] else ""))
            if out:
                with open(out / "metrics.jsonl", "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(row) + "\n")
                save_triplets(images, out / f"val-epoch{epoch + 1:03d}.png")
                score = row.get("val_psnr", -row["train_loss"])  # without validation, the lowest training loss
                best_now = score > best
                best = max(best, score)
                state = state_at(epoch + 1)
                save_checkpoint(out / "last.pt", state)
                if best_now:
                    save_checkpoint(out / "best.pt", state)
        if cfg.stop_after_epoch is not None and epoch + 1 >= cfg.stop_after_epoch:
            break
    return history


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
    torchrun the rank exits when `parent` (the process that started it: the torchrun agent) dies. `kill -USR1 PID`
    prints every thread's stack of a rank that seems stuck (to stderr) and lets it go on."""
    parent = os.getppid() if parent is None else parent
    _stacks_on_usr1()
    try:
        cfg = parse_args(argv, prog, description=DESCRIPTION.format(prog=prog))
        info = dist_info(cfg.device)
        if info.launcher == "torchrun":
            exit_with_parent(parent, info)
        init_distributed(info, timeout_s=cfg.dist_timeout)
        try:
            run(cfg, info)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
