"""Where a call of the loader's JPEG decode process (`pairload.workers.decode`) spends its time, on the GPU host, over
a targets-only JPEG pack in the page cache: nvImageCodec's hardware decoder alone (calls of BATCH images: until
`decode` returns, and until its stream is done), the process's whole call (`Server.decode`), and its parts (the
members' bytes, the decode, the per-image check and copy into the loader's memory, the wait); then P processes each
making such calls at once (does a second process get more from the engine?); `--pinned`: one process held to C
cores, its decoder given T CPU threads (nvImageCodec's `max_num_cpu_threads`; 0: its default), for each C and T: its
rate and the CPU time it spends an image (all its threads). Results to OUT as JSON.

    python benchmarks/decode_call_parts.py SHARDS OUT.json [--batch 128] [--calls 60] [--procs 1,2,3]
    python benchmarks/decode_call_parts.py SHARDS OUT.json --procs "" --pinned 1,2,16 --threads 0,1,2
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time

import numpy as np

from pairload.read.shards import ShardDataset
from pairload.workers.decode import Server
from pairload.workers.jpegs import JpegDecoders, decoded_face, member_bytes


def calls_of(shards: str, batch: int, calls: int, first: int = 0) -> tuple[list, list]:
    """The decode process's requests for `calls` calls of `batch` targets from sample `first` on, and the files."""
    ds = ShardDataset(shards, "train")
    out = []
    for c in range(calls):
        samples = (first + np.arange(c * batch, (c + 1) * batch)) % len(ds.sizes)
        rows = ds.stored_members(samples)
        hw = ds.sizes[samples].astype(np.int64)
        size = hw[:, 0] * hw[:, 1] * 3
        dest = ((np.cumsum(size) - size) + 255) // 256 * 256
        out.append((rows.shard.astype(np.int64), rows.offset[:, 1].astype(np.int64),
                    rows.length[:, 1].astype(np.int64), hw[:, 0], hw[:, 1], dest))
    return out, [str(f) for f in ds.files]


def server_for(files: list, batch: int) -> Server:
    server = Server(0, files)
    server.ring = server.device.alloc(batch * 400 * 600 * 3 + batch * 256 + (64 << 20))
    return server


def timed_parts(server: Server, req: tuple) -> dict:
    shard, start, length, height, width, dest = req
    t0 = time.perf_counter()
    data = member_bytes(shard, start, length, server.shards.map)
    t1 = time.perf_counter()
    images = server.decoders.decode(data, server.stream)
    t2 = time.perf_counter()
    with server.device:
        for i, image in enumerate(images):
            h, w = int(height[i]), int(width[i])
            face = decoded_face(image, h, w)
            server.device.copy(server.ring + int(dest[i]), face["data"][0], h * w * 3, server.stream)
    t3 = time.perf_counter()
    server.device.synchronize(server.stream)
    t4 = time.perf_counter()
    return {"bytes": t1 - t0, "decode": t2 - t1, "copy_loop": t3 - t2, "sync": t4 - t3}


def engine_alone(server: Server, reqs: list) -> dict:
    from nvidia import nvimgcodec

    dec = nvimgcodec.Decoder(device_id=0, backends=[nvimgcodec.Backend(nvimgcodec.BackendKind.HW_GPU_ONLY)])
    params = nvimgcodec.DecodeParams(apply_exif_orientation=False)
    datas = [member_bytes(r[0], r[1], r[2], server.shards.map) for r in reqs]
    streams = [nvimgcodec.CodeStream(bytes(d)) for d in datas[0]]  # parsed once: the engine's own rate
    out = {}
    for name, srcs in (("arrays", None), ("codestreams", streams)):
        dec.decode(srcs or datas[0], params=params, cuda_stream=server.stream)
        server.device.synchronize(server.stream)
        ret, t0 = 0.0, time.perf_counter()
        for d in datas:
            a = time.perf_counter()
            imgs = dec.decode(srcs or d, params=params, cuda_stream=server.stream)
            ret += time.perf_counter() - a
            server.device.synchronize(server.stream)
        dt = time.perf_counter() - t0
        del imgs
        out[name] = {"images_per_s": len(datas) * len(datas[0]) / dt, "returns_share": ret / dt}
    reuse, t0 = None, time.perf_counter()  # the previous call's images passed back (nvImageCodec's own buffers)
    for d in datas:
        reuse = dec.decode(d, images=reuse, params=params, cuda_stream=server.stream)
        server.device.synchronize(server.stream)
    out["arrays_images_reused"] = {"images_per_s": len(datas) * len(datas[0]) / (time.perf_counter() - t0)}
    return out


def worker(shards: str, batch: int, calls: int, first: int, start_at, q) -> None:
    reqs, files = calls_of(shards, batch, calls, first)
    server = server_for(files, batch)
    server.decode(*reqs[0])
    start_at.wait()
    t0 = time.perf_counter()
    for r in reqs:
        assert server.decode(*r) == ("done",)
    q.put((t0, time.perf_counter(), len(reqs) * batch))


def pinned(shards: str, batch: int, calls: int, cores: int, threads: int, q) -> None:
    import os

    from nvidia import nvimgcodec

    os.sched_setaffinity(0, range(cores))
    reqs, files = calls_of(shards, batch, calls)
    server = server_for(files, batch)
    server.decoders = JpegDecoders(nvimgcodec, 0, threads)
    server.decode(*reqs[0])
    c0, t0 = time.process_time(), time.perf_counter()
    for r in reqs:
        assert server.decode(*r) == ("done",)
    n = len(reqs) * batch
    q.put({"cores": cores, "threads": threads, "images_per_s": n / (time.perf_counter() - t0),
           "cpu_us_per_image": 1e6 * (time.process_time() - c0) / n})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("shards")
    ap.add_argument("out")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--procs", default="1,2,3")
    ap.add_argument("--pinned", default="", help="cores a process is held to, a comma-separated list")
    ap.add_argument("--threads", default="0", help="nvImageCodec's CPU threads, a comma-separated list")
    args = ap.parse_args()
    reqs, files = calls_of(args.shards, args.batch, args.calls)
    server = server_for(files, args.batch)
    res: dict = {"batch": args.batch, "calls": args.calls, "mean_bytes": float(np.mean([r[2].mean() for r in reqs]))}
    res["engine_alone"] = engine_alone(server, reqs)
    print(json.dumps(res), flush=True)
    server.decode(*reqs[0])
    t0 = time.perf_counter()
    for r in reqs:
        server.decode(*r)
    res["server_images_per_s"] = len(reqs) * args.batch / (time.perf_counter() - t0)
    parts = [timed_parts(server, r) for r in reqs]
    res["parts_ms_per_call"] = {k: 1000 * float(np.median([p[k] for p in parts])) for k in parts[0]}
    print(json.dumps(res), flush=True)
    ctx = mp.get_context("spawn")
    res["pinned"] = []
    for cores in [int(x) for x in args.pinned.split(",") if x]:
        for threads in [int(x) for x in args.threads.split(",")]:
            q = ctx.Queue()
            proc = ctx.Process(target=pinned, args=(args.shards, args.batch, args.calls, cores, threads, q))
            proc.start()
            res["pinned"].append(q.get(timeout=300))
            proc.join()
            print(json.dumps(res["pinned"][-1]), flush=True)
    res["processes"] = {}
    for p in [int(x) for x in args.procs.split(",") if x]:
        start_at, q = ctx.Barrier(p + 1), ctx.Queue()
        procs = [ctx.Process(target=worker, args=(args.shards, args.batch, args.calls, i * args.calls * args.batch,
                                                   start_at, q)) for i in range(p)]
        for x in procs:
            x.start()
        start_at.wait()
        got = [q.get(timeout=300) for _ in procs]
        for x in procs:
            x.join()
        span = max(g[1] for g in got) - min(g[0] for g in got)
        res["processes"][p] = sum(g[2] for g in got) / span
        print(json.dumps(res), flush=True)
    with open(args.out, "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
