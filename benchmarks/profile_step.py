"""Where the reference loop's step time goes, on 1 and N GPUs (no loader: one synthetic batch on the device).

    torchrun --standalone --nproc_per_node=N benchmarks/profile_step.py [--batch 32] [--crop 256] [--out F.json]

Per rank: the reference U-Net, bf16 autocast, fused AdamW, L1 loss; DDP (static graph, gradient buckets as views)
when N > 1. Reports ms per step (median over --steps after warm-up) for the forward+backward+step, and from
torch.profiler over a few steps the share of GPU time spent in NCCL kernels and how long the host spends
launching (a host-bound step shows GPU idle gaps). Rank 0 writes the JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F


def main() -> None:
    from pairload.batch import Normalize
    from pairload.distributed import dist_info, init_distributed
    from pairload.recipes.model import EnhanceUNet, ModelConfig

    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--crop", type=int, default=256)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--no-broadcast-buffers", action="store_true", help="DDP broadcast_buffers=False")
    ap.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb")
    ap.add_argument("--out")
    a = ap.parse_args()
    info = dist_info()
    init_distributed(info)
    dev = info.device
    model = EnhanceUNet(ModelConfig()).to(dev).to(memory_format=torch.channels_last)
    net = model
    if info.distributed:
        net = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index], static_graph=True,
                                                        gradient_as_bucket_view=True, bucket_cap_mb=a.bucket_mb,
                                                        broadcast_buffers=not a.no_broadcast_buffers)
    if a.compile:
        net = torch.compile(net)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    norm = Normalize(channels_last=True).to(dev)
    low = torch.randint(0, 255, (a.batch, 3, a.crop, a.crop), dtype=torch.uint8, device=dev)
    high = 255 - low

    def step():
        x, y = norm(low), norm(high)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = net(x)
        loss = F.l1_loss(out.float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(10):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(a.steps):
        t = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t = time.perf_counter()
        for _ in range(5):
            step()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t) * 1e3 / 5
    events = prof.key_averages()
    dev_total = sum(e.self_device_time_total for e in events) / 5 / 1e3
    nccl = sum(e.self_device_time_total for e in events if "nccl" in e.key.lower()) / 5 / 1e3
    top = sorted(events, key=lambda e: -e.self_device_time_total)[:8]
    row = {"rank": info.rank, "world_size": info.world_size, "ms_per_step_median": statistics.median(times),
           "ms_per_step_min": min(times), "profiled_wall_ms_per_step": wall, "gpu_busy_ms_per_step": dev_total,
           "nccl_ms_per_step": nccl, "gpu_idle_frac": max(0.0, 1 - dev_total / wall),
           "pairs_per_s": a.batch * info.world_size * 1e3 / statistics.median(times),
           "top_gpu_ops": [(e.key[:60], round(e.self_device_time_total / 5 / 1e3, 3)) for e in top]}
    rows = [None] * info.world_size
    if info.distributed:
        torch.distributed.all_gather_object(rows, row)
    else:
        rows = [row]
    if info.is_main:
        doc = {"device": torch.cuda.get_device_name(dev), "date": time.strftime("%Y-%m-%d"), "batch_per_gpu": a.batch,
               "crop": a.crop, "compile": a.compile,
               "broadcast_buffers": not a.no_broadcast_buffers, "bucket_mb": a.bucket_mb, "ranks": rows}
        print(json.dumps({k: (v if k != "ranks" else [{kk: vv for kk, vv in r.items() if kk != "top_gpu_ops"}
                                                         for r in v]) for k, v in doc.items()}))
        if a.out:
            from pairload.format.atomic import write_json_atomic

            write_json_atomic(a.out, doc)
    if info.distributed:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
