"""dali-external's pipeline pieces alone, on a constant batch (GPU machine with DALI): the host-to-device copy, the
flip warp, the conversion to torch, with a host or a device source, per prefetch depth, thread count and executor.

    python benchmarks/dali_micro.py
"""

import time

import numpy as np
import nvidia.dali.fn as fn
import torch
from nvidia.dali import pipeline_def

from pairload.loaders.dali.convert import to_torch
from pairload.loaders.dali.graph import augment, dihedral_matrices

N, C = 32, 256
host = torch.empty((2, N, C, C, 3), dtype=torch.uint8).pin_memory()
host.random_(0, 255)
hn = host.numpy()
codes = np.random.randint(0, 8, N)
mat = dihedral_matrices(codes, np.full((N, 2), C))
dev_host = host.cuda()

def feed_cpu():
    while True:
        yield [hn[0], hn[1], mat]

def feed_gpu():
    while True:
        yield [dev_host[0], dev_host[1], mat]

def run(name, src, warp, conv, prefetch=2, threads=1, gpu_src=False, secs=3.0, dyn=None):
    kw = {} if dyn is None else {"exec_dynamic": dyn}
    @pipeline_def(batch_size=N, num_threads=threads, device_id=0, prefetch_queue_depth=prefetch, **kw)
    def p():
        if gpu_src:
            lo, hi = fn.external_source(source=src, num_outputs=2, batch=True, no_copy=True, device="gpu")
            m = fn.external_source(source=(lambda: mat), batch=True)
        else:
            lo, hi, m = fn.external_source(source=src, num_outputs=3, batch=True, no_copy=True)
            lo, hi = lo.gpu(), hi.gpu()
        if warp:
            lo, hi = augment(lo, m), augment(hi, m)
        return lo, hi
    pipe = p()
    pipe.build()
    dev = torch.device("cuda", 0)
    for _ in range(20):
        o = pipe.run()
    torch.cuda.synchronize()
    t = time.perf_counter()
    n = 0
    while time.perf_counter() - t < secs:
        o = pipe.run()
        if conv:
            to_torch(o[0], dev)
            to_torch(o[1], dev)
        n += N
    torch.cuda.synchronize()
    r = n / (time.perf_counter() - t)
    print(f"{name:40s} {r:9.0f} pairs/s", flush=True)
    del pipe

def gsrc():
    while True:
        yield [dev_host[0], dev_host[1]]

run("cpu-src gpu() only", feed_cpu(), False, False)
run("cpu-src gpu() + torch", feed_cpu(), False, True)
run("cpu-src gpu() + warp", feed_cpu(), True, False)
run("cpu-src gpu() + warp + torch", feed_cpu(), True, True)
run("cpu-src + warp + torch p4", feed_cpu(), True, True, prefetch=4)
run("cpu-src + warp + torch t4", feed_cpu(), True, True, threads=4)
run("cpu-src + warp + torch dyn=False", feed_cpu(), True, True, dyn=False)
run("gpu-src + warp + torch", gsrc(), True, True, gpu_src=True)
run("gpu-src only + torch", gsrc(), False, True, gpu_src=True)
# numpy feed with copy
def feed_copy():
    while True:
        yield [hn[0], hn[1], mat]
