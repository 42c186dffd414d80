"""Distributed facts (rank, local rank, world size, device, launcher) from one place: torchrun or SLURM variables;
joining and leaving the process group; a torchrun rank's tie to its agent. Loaders never read the environment: the
training script calls `dist_info()` once and passes the facts on."""

from __future__ import annotations

import ctypes
import gc
import os
import signal
import sys
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Mapping

import torch

from .devices import resolve_device
from .errors import ConfigError, DistributedError, PairloadError


@dataclass(frozen=True)
class DistInfo:
    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    launcher: str = "none"  # "torchrun", "slurm" or "none" (a plain process, or ranks started by hand)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def dist_info(device: str = "auto", env: Mapping[str, str] | None = None) -> DistInfo:
    """Rank facts from torchrun (RANK, LOCAL_RANK, WORLD_SIZE) or SLURM (SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS);
    a plain process is rank 0 of 1. `device`: auto (CUDA by local rank when available), cpu, or cuda."""
    env = os.environ if env is None else env
    launcher = "none"
    if "RANK" in env and "WORLD_SIZE" in env:
        rank, world, local = int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", 0))
        if "TORCHELASTIC_RUN_ID" in env:  # set by torchrun's agent for every rank it starts
            launcher = "torchrun"
    elif "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        rank, world, local = int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), int(env.get("SLURM_LOCALID", 0))
        launcher = "slurm"
    else:
        rank, world, local = 0, 1, 0
    dev = resolve_device(device, local_rank=local)
    return DistInfo(rank=rank, local_rank=local, world_size=world, device=dev, launcher=launcher)


PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
HARD_EXIT_S = 10.0  # after SIGTERM, seconds the rank may spend unwinding before it exits without cleaning up


def exit_with_parent(parent: int, info: DistInfo, on_sigterm=None) -> bool:
    """Make this rank end when `parent` (the torchrun agent that started it) dies: torchrun starts each rank in a
    session of its own, so an agent killed with SIGKILL would otherwise leave its ranks running, orphaned. Linux
    only (returns False elsewhere). The kernel sends SIGTERM on the parent's death; the rank then unwinds (loaders
    and the process group closed) and stops with one line, or exits hard after HARD_EXIT_S. A parent that died
    before the request (ours is no longer `parent`) stops the rank at once. A SIGTERM while the parent lives (torchrun
    passing on its own, a scheduler's) calls `on_sigterm()` where one is given (the run then stops where it can save
    itself), and otherwise stops the rank the same way."""
    if not sys.platform.startswith("linux"):
        return False

    def sigterm(signum, frame):
        if os.getppid() == parent and on_sigterm is not None:
            on_sigterm()
            return
        hard = threading.Timer(HARD_EXIT_S, os._exit, (128 + signal.SIGTERM,))
        hard.daemon = True  # a clean unwind ends the process without waiting for it
        hard.start()
        raise DistributedError(f"rank {info.rank} of {info.world_size}: "
                               + ("the torchrun agent that started it is gone (killed?)" if os.getppid() != parent
                                  else "stopped by SIGTERM")
                               + "; the other ranks stop too: start the job again, with --resume to continue it")

    signal.signal(signal.SIGTERM, sigterm)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        return False  # not allowed here (a seccomp profile): the rank runs on as before
    if os.getppid() != parent:  # the parent died before the request: no signal will come
        os.kill(os.getpid(), signal.SIGTERM)
    return True


def init_distributed(info: DistInfo, timeout_s: float = 600.0) -> None:
    """Join the process group (NCCL on CUDA, gloo on CPU) when there is more than one rank. A collective that waits
    longer than `timeout_s` for the other ranks fails (see `lost_ranks_error`) instead of hanging the job."""
    if info.device.type == "cuda":
        torch.cuda.set_device(info.device)
    if not info.distributed or torch.distributed.is_initialized():
        return
    if "MASTER_ADDR" not in os.environ:
        raise ConfigError("several ranks but no MASTER_ADDR/MASTER_PORT: start with torchrun, or export them under "
                          "SLURM (e.g. MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -1))")
    backend = "nccl" if info.device.type == "cuda" else "gloo"
    kwargs = {"device_id": info.device} if backend == "nccl" else {}
    torch.distributed.init_process_group(backend, rank=info.rank, world_size=info.world_size,
                                         timeout=timedelta(seconds=timeout_s), **kwargs)


_LOST = ("timed out", "timeout", "connection closed", "connection reset", "broken pipe")


def lost_ranks_error(exc: BaseException, info: DistInfo, timeout_s: float) -> DistributedError | None:
    """The error to report when `exc` means this rank lost the others (a rank was stopped, died or hung), else None."""
    if not info.distributed or isinstance(exc, (PairloadError, KeyboardInterrupt)):
        return None
    text = str(exc)
    dist_error = getattr(torch.distributed, "DistError", ())
    if not (isinstance(exc, dist_error) or any(w in text.lower() for w in _LOST)):
        return None
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(exc).__name__)
    return DistributedError(f"rank {info.rank} of {info.world_size}: a collective got no answer from the other ranks "
                            f"within --dist-timeout {timeout_s:g} s ({first[:160]}); a rank was stopped, died or "
                            "is far behind: check the other ranks' logs, then restart with --resume")


def cleanup(finished: bool = True) -> None:
    """Leave the process group. After a normal finish the ranks leave together (a rank tearing gloo down while
    another still works can abort it); after an error a barrier could wait forever, so there is none."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        try:
            if finished:
                torch.distributed.barrier()
        finally:
            torch.distributed.destroy_process_group()
            # what still holds the process group (a DistributedDataParallel in a reference cycle) goes now, its gloo
            # threads joined while the interpreter lives: left to the collection at exit, a gloo thread finishing a
            # work item took the GIL there and the rank aborted ("terminate called without an active exception",
            # 1 run in 12-14 of 4 CPU ranks on the 2-core machine, 2026-12-01)
            gc.collect()


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(t)
    return t


def all_reduce_max(t: torch.Tensor) -> torch.Tensor:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    return t


def broadcast_buffers(module: torch.nn.Module, src: int = 0) -> None:
    """Every rank's buffers (BatchNorm's running statistics) made rank `src`'s. The reference loop's DDP does not
    broadcast them before every forward pass (a collective that made each step wait for the slowest rank); they are
    used only to evaluate, so they are made one after each epoch, before validation and checkpoints."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        for buf in module.buffers():
            torch.distributed.broadcast(buf, src)
