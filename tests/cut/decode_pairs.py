"""What the decode path's GPU tests share: two epochs of a loader on the CPU and the same loader on the GPU (the
decode path), batch by batch, compared by `same(cpu_tensor, gpu_tensor)`."""

from __future__ import annotations

from pairload import make_loader


def epochs_alike(shards, kind: str, same) -> None:
    cpu = make_loader(kind, shards, batch_size=4, crop=64, seed=3)
    gpu = make_loader(kind, shards, batch_size=4, crop=64, seed=3, device="cuda")
    assert gpu.path == "decode"
    for epoch in (0, 1):
        cpu.set_epoch(epoch)
        gpu.set_epoch(epoch)
        for a, b in zip(cpu, gpu, strict=True):
            assert a.keys == b.keys and b.low.is_cuda
            assert same(a.low, b.low) and same(a.high, b.high)
