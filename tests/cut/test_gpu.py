"""The CUDA paths of the torch loaders: pinned ring buffers, side-stream copies, device-resident splits."""

import time

import pytest
import torch

from pairload import Normalize, make_loader

from test_loaders import check_batch, shards24  # noqa: F401 - shared fixture

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("backend", [{}, {"num_workers": 3}, {"resident": True}])
def test_ram_on_cuda_equals_cpu(shards24, backend):  # noqa: F811
    cpu = make_loader("ram", shards24, batch_size=4, crop=24, seed=2)
    gpu = make_loader("ram", shards24, batch_size=4, crop=24, seed=2, device="cuda", **backend)
    for epoch in (0, 1):
        cpu.set_epoch(epoch)
        gpu.set_epoch(epoch)
        for a, b in zip(cpu, gpu, strict=True):
            assert b.low.is_cuda and b.padded.is_cuda
            assert a.keys == b.keys
            assert torch.equal(a.low, b.low.cpu()) and torch.equal(a.high, b.high.cpu())
            check_batch(b, epoch, 2, 24, n=4)


def test_ram_batches_survive_the_ring_being_reused(shards24):  # noqa: F811
    """Keep every batch of an epoch alive on the GPU: pinned buffers are recycled, delivered batches are not."""
    gpu = make_loader("ram", shards24, batch_size=2, crop=16, seed=4, device="cuda", num_workers=2, prefetch=1)
    kept = list(gpu)
    torch.cuda.synchronize()
    for b in kept:
        check_batch(b, 0, 4, 16, n=2)


def test_wds_on_cuda(shards24):  # noqa: F811
    loader = make_loader("wds", shards24, batch_size=4, crop=16, seed=1, device="cuda", num_workers=2)
    n = 0
    for b in loader:
        assert b.low.is_cuda
        check_batch(b, 0, 1, 16, n=4)
        n += 1
    assert n == len(loader)


def test_normalize_on_cuda():
    x = torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8, device="cuda")
    y = Normalize((0.5,) * 3, (0.5,) * 3, channels_last=True).cuda()(x)
    torch.testing.assert_close(y, (x.float() / 255 - 0.5) / 0.5)


@pytest.mark.parametrize("backend", [{}, {"num_workers": 2}, {"resident": True}])
def test_a_consumer_that_never_synchronises_holds_the_loader_to_the_gpus_pace(shards24, backend):  # noqa: F811
    """The GPU is kept busy 20 ms per batch and the host never waits for it: the loader may run at most DEPTH blocks
    (of up to a few batches) ahead, so the host's loop takes about as long as the GPU's work, not a few ms."""
    from pairload.cut.handover import DEPTH

    loader = make_loader("ram", shards24, batch_size=2, crop=16, seed=0, device="cuda", **backend)
    batches, sleep_s = 0, 0.02
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for epoch in range(12):
        loader.set_epoch(epoch)
        for b in loader:
            torch.cuda._sleep(int(sleep_s * 1.4e9))  # about 20 ms of GPU time on a ~1.4 GHz clock
            b.low.float().mean()  # uses the batch on the caller's stream
            batches += 1
    host = time.perf_counter() - t0
    torch.cuda.synchronize()
    gpu = time.perf_counter() - t0
    ahead = 16 * DEPTH + 2  # batches a block may hold (the resident kernel cuts up to 16 per launch), then 2 more
    assert batches > ahead and host >= gpu * (batches - ahead) / batches * 0.8, (host, gpu, batches)
