"""The reference loop's DDP runs without a buffer broadcast before every forward pass; `broadcast_buffers` makes every
rank's BatchNorm statistics rank 0's once per epoch. Real gloo, two processes."""

import os
import socket

import torch
import torch.multiprocessing as mp

from pairload.distributed import broadcast_buffers


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, port: int, out) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    try:
        torch.manual_seed(rank)
        bn = torch.nn.BatchNorm2d(3)
        bn.train()
        for _ in range(rank + 2):  # each rank's statistics from its own batches, a different number of them
            bn(torch.randn(4, 3, 5, 5) * (rank + 1) + rank)
        before = [b.clone() for b in bn.buffers()]
        broadcast_buffers(bn)
        out[rank] = ([b.clone() for b in before], [b.clone() for b in bn.buffers()])
    finally:
        torch.distributed.destroy_process_group()


def test_every_rank_gets_rank_0s_running_statistics():
    with mp.Manager() as manager:
        out = manager.dict()
        mp.start_processes(_rank, args=(_free_port(), out), nprocs=2, start_method="spawn")
        (before0, after0), (before1, after1) = out[0], out[1]
    assert not torch.equal(before0[0], before1[0])  # the ranks' running means differed
    for a, b, own in zip(after1, after0, before0):
        assert torch.equal(a, b) and torch.equal(b, own)  # rank 1 now holds rank 0's, which are unchanged
    assert int(after1[2]) == int(before0[2]) == 2  # num_batches_tracked too
