import pytest
import torch

from pairload import make_loader
from pairload.devices import resolve_device
from pairload.errors import ConfigError


def test_device_names_resolve_in_one_place():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    for bad in ("tpu", "gpu0", "cuda:x"):
        with pytest.raises(ConfigError, match=r"expected auto, cpu, cuda or cuda:K"):
            resolve_device(bad)
    if torch.cuda.is_available():
        n = torch.cuda.device_count()
        assert resolve_device("cuda", local_rank=n - 1) == torch.device("cuda", n - 1)
        with pytest.raises(ConfigError, match=rf"cuda:{n} but only {n} CUDA devices are visible; start at most"):
            resolve_device("cuda", local_rank=n)
    else:
        with pytest.raises(ConfigError, match=r"device 'cuda:0' but CUDA is not available here; use cpu"):
            resolve_device("cuda:0")


def test_a_loader_refuses_a_device_that_is_not_here(packed):
    bad = "cuda:64" if torch.cuda.is_available() else "cuda"
    with pytest.raises(ConfigError, match=r"CUDA"):
        make_loader("ram", packed, batch_size=2, crop=16, device=bad)
