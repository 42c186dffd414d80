"""DALI's outputs and failures in torch's and pairload's terms: dense TensorLists as torch tensors (viewed or
copied), the readers' labels as numpy, and a DALI exception as a one-line `ImageError` naming the file."""

from __future__ import annotations

import ctypes
import re

import numpy as np
import torch
from nvidia.dali.tensors import TensorListGPU
from torch.utils.dlpack import from_dlpack

from ...errors import ImageError, PairloadError


def to_torch(tensor_list, device: torch.device, share: bool = False, stream=None) -> torch.Tensor:
    """A dense DALI TensorList (CPU or GPU) → a torch tensor on `device`. `share` (pipelines on DALI's default,
    dynamic executor): a GPU output is viewed, and stays valid while the view lives, as DALI's own PyTorch iterator
    does; else one copy. `stream`: the torch stream that will use it (default: the current one)."""
    dense = tensor_list.as_tensor()
    if device.type == "cuda" and stream is None:
        stream = torch.cuda.current_stream(device)
    if share and device.type == "cuda":  # `stream` waits for DALI's work on the output
        return from_dlpack(dense.__dlpack__(stream=stream.cuda_stream or 1))  # DLPack calls the legacy stream 1
    # CPU outputs are copied: torch cannot view page-locked ones (kDLCUDAHost), and a view of a CPU-only pipeline's
    # output still held at interpreter exit crashed the process (SIGSEGV in the README's DALI example)
    out = torch.empty(tuple(dense.shape()), dtype=torch_type(dense.dtype), device=device)
    target = ctypes.c_void_p(out.data_ptr())
    if device.type == "cuda":
        dense.copy_to_external(target, ctypes.c_void_p(stream.cuda_stream), non_blocking=True)
    else:
        dense.copy_to_external(target)
    return out


def torch_type(dali_type) -> torch.dtype:
    """torch's dtype for a DALI element type: DALI's own table, and uint16 (16-bit splits), which it lacks."""
    from nvidia.dali import types
    from nvidia.dali.plugin.pytorch import to_torch_type

    table = {**to_torch_type, types.DALIDataType.UINT16: torch.uint16}
    if dali_type not in table:
        raise ImageError(f"a DALI output of type {dali_type} has no torch counterpart here; expected one of "
                         f"{', '.join(str(t) for t in table)}")
    return table[dali_type]


def named_tensors(outputs, names: tuple[str, ...], n: int, device_id: int | None, share: bool) -> dict:
    """A user pipeline's outputs by name, each on the device it came out on, cut to the batch's `n` rows."""
    out = {}
    for name, tl in zip(names, outputs):
        dev = torch.device("cuda", device_id) if isinstance(tl, TensorListGPU) else torch.device("cpu")
        out[name] = to_torch(tl, dev, share)[:n]
    return out


def pair_tensors(outputs, device: torch.device, share: bool, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The loaders' (low, high) outputs on `device`, for the current stream, cut to the batch's `n` rows."""
    stream = torch.cuda.current_stream(device) if device.type == "cuda" else None
    low, high = (to_torch(tl, device, share, stream) for tl in outputs)
    if low.shape[0] != n:  # the pipeline's batch is larger than this (last) batch
        low, high = low[:n], high[:n]
    return low, high


def labels(tensor_list) -> np.ndarray:
    """A readers' label output as a flat numpy array (copied off the GPU when it is there)."""
    dense = tensor_list.as_cpu().as_tensor() if hasattr(tensor_list, "as_cpu") else tensor_list.as_tensor()
    return np.array(dense).reshape(-1)


_SOURCE_INFO = re.compile(r"(?:source info|Source info|sample's source info)[^:]*:\s*(\S+)")


def dali_error(exc: Exception, where: str) -> PairloadError:
    """A DALI failure as one line: the file its message names, else the first line that says what failed."""
    text = str(exc)
    m = _SOURCE_INFO.search(text)
    name = m.group(1) if m else None
    fallback = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    first = next((ln.strip() for ln in text.splitlines() if ln.strip() and "Error" in ln), fallback)
    if name:
        return ImageError(f"{name}: DALI could not read or decode it ({first[:200]}); replace or remove the file")
    return ImageError(f"{where}: DALI failed: {first[:300]}")
