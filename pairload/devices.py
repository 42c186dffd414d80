"""The one place a device name becomes a `torch.device` ("auto", "cpu", "cuda" or "cuda:k"), and the one place the
loader's own CUDA streams are made (`loader_stream`)."""

from __future__ import annotations

import torch

from .errors import ConfigError

# the priority of the loader's streams: the highest the device has (torch maps a number beyond its range to the nearest
# end). Their kernels (decode, cut, degrade) are short and the training step waits for their batch, so the GPU runs
# them before the step's queued kernels rather than after them.
LOADER_PRIORITY = -100


def resolve_device(spec: str | torch.device = "auto", *, local_rank: int | None = None) -> torch.device:
    """auto → CUDA when available, else CPU. A CUDA device without an index gets `local_rank` (one GPU per rank
    on a node), else the current device. Refused with a ConfigError: CUDA where there is none, an index beyond the
    visible GPUs, any other name."""
    spec = str(spec)
    if spec == "auto":
        spec = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(spec)
    except RuntimeError:
        raise ConfigError(f"device {spec!r}: expected auto, cpu, cuda or cuda:K") from None
    if dev.type == "cpu":
        return dev
    if dev.type != "cuda":
        raise ConfigError(f"device {spec!r}: expected auto, cpu, cuda or cuda:K")
    if not torch.cuda.is_available():
        raise ConfigError(f"device {spec!r} but CUDA is not available here; use cpu")
    count = torch.cuda.device_count()
    index = dev.index if dev.index is not None else (local_rank if local_rank is not None
                                                     else torch.cuda.current_device())
    if index >= count:
        raise ConfigError(f"device cuda:{index} but only {count} CUDA devices are visible"
                          + ("; start at most that many processes per node" if local_rank is not None else ""))
    return torch.device("cuda", index)


def loader_stream(device: torch.device) -> torch.cuda.Stream:
    """A CUDA stream for the loader's own work on `device`, at `LOADER_PRIORITY`."""
    return torch.cuda.Stream(device, priority=LOADER_PRIORITY)
