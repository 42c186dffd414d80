"""Where dali-external's zero-copy time goes, per batch (GPU machine with DALI):

    python benchmarks/profile_dali_zerocopy.py SHARDS OUT.json

`ram` and `dali-external` (zero-copy) in turn, over whole epochs after one warm-up epoch. Per dali-external batch:
wall and main-thread CPU time in the input callback (the cut and the feed), in each call into DALI's backend
(SetExternalTLInput, Run, Outputs), in the conversion to a PairBatch; the first batch of each epoch separately; the
CPU share of the busiest threads. Variants by keyword (`stream=True`: outputs bound to torch's stream; `sleep=N`:
GPU cycles queued before each cut).
"""

import cProfile
import io
import json
import pstats
import sys
import time

import torch
from nvidia.dali.pipeline import Pipeline

from pairload import make_loader
from pairload.loaders import zerocopy

dev = torch.device("cuda", 0)
shards, out_path = sys.argv[1], sys.argv[2]
T = {}


TC = {}


def timed(name, fn):
    def wrapper(*a, **k):
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            T[name] = T.get(name, 0.0) + time.perf_counter() - t0
            TC[name] = TC.get(name, 0.0) + time.thread_time() - c0
    return wrapper


class Proxy:
    """Times every method of DALI's backend pipeline object (wall and this thread's CPU)."""

    def __init__(self, inner):
        object.__setattr__(self, "_inner", inner)

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        return timed("backend." + name, attr) if callable(attr) else attr


from pairload.loaders.dali.sources import PairedSource
orig_build = PairedSource._build


def build(self, run):
    pipe = orig_build(self, run)
    pipe._pipe = Proxy(pipe._pipe)
    return pipe


PairedSource._build = build


def thread_cpu():
    import os
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                parts = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        out[tid] = (name, (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK"))
    return out


orig_run, orig_cb, orig_outputs = Pipeline.run, Pipeline._run_input_callbacks, Pipeline._outputs
MODE = {"stream": False, "sleep": 0}


def run(self, *a, **k):
    if MODE["stream"]:
        return orig_run(self, torch.cuda.current_stream(dev).cuda_stream)
    return orig_run(self)


Pipeline.run = timed("run", run)
Pipeline._run_input_callbacks = timed("callbacks", orig_cb)
Pipeline._outputs = timed("outputs", orig_outputs)
orig_cut = zerocopy.cut


def cut(*a, **k):
    if MODE["sleep"]:
        torch.cuda._sleep(MODE["sleep"])  # on the current stream: the cut's stream
    return orig_cut(*a, **k)


zerocopy.cut = timed("cut", cut)


def variant(name, epochs=8, prefetch=4, profile=False, **mode):
    MODE.update({"stream": False, "sleep": 0})
    MODE.update(mode)
    loader = make_loader("dali-external", shards, batch_size=32, crop=256, device="cuda", num_workers=15,
                         **({"prefetch": prefetch} if prefetch != 4 else {}))
    conv = loader._convert
    loader._convert = timed("convert", conv)
    assert loader.zero_copy, loader.path_note
    firsts, rest, n = [], [], 0
    prof = cProfile.Profile() if profile else None
    for epoch in range(epochs + 1):
        if epoch == 1:
            torch.cuda.synchronize()
            T.clear()
            TC.clear()
            cpu0 = thread_cpu()
            t_start = time.perf_counter()
            if prof:
                prof.enable()
        loader.set_epoch(epoch)
        t = time.perf_counter()
        for b, batch in enumerate(loader):
            now = time.perf_counter()
            if epoch:
                (firsts if b == 0 else rest).append(now - t)
                n += batch.low.shape[0]
            t = now
    torch.cuda.synchronize()
    total = time.perf_counter() - t_start
    cpu1 = thread_cpu()
    busy = sorted(((cpu1[t][1] - cpu0.get(t, (0, 0))[1]) / total, cpu1[t][0]) for t in cpu1)[::-1][:8]
    if prof:
        prof.disable()
    loader.close()
    nb = len(firsts) + len(rest)
    row = {"variant": name, "prefetch": prefetch, **mode, "pairs_per_s": round(n / total),
           "us_per_batch": round(total / nb * 1e6), "first_batch_of_epoch_us": round(sum(firsts) / len(firsts) * 1e6),
           "other_batches_us": round(sum(rest) / len(rest) * 1e6),
           "per_batch_us": {k: round(v / nb * 1e6) for k, v in sorted(T.items())},
           "per_batch_cpu_us": {k: round(v / nb * 1e6) for k, v in sorted(TC.items())},
           "busiest_threads_cores": [(n, round(c, 2)) for c, n in busy]}
    if prof:
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(40)
        pstats.Stats(prof, stream=s).sort_stats("cumtime").print_stats(45)
        row["profile"] = s.getvalue().splitlines()
    print(json.dumps({k: v for k, v in row.items() if k != "profile"}), flush=True)
    return row


def ram(epochs=8):
    loader = make_loader("ram", shards, batch_size=32, crop=256, device="cuda", num_workers=8)
    n = 0
    for epoch in range(epochs + 1):
        if epoch == 1:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        loader.set_epoch(epoch)
        for batch in loader:
            n += batch.low.shape[0] if epoch else 0
    torch.cuda.synchronize()
    row = {"variant": "ram zero-copy", "pairs_per_s": round(n / (time.perf_counter() - t0))}
    loader.close()
    print(json.dumps(row), flush=True)
    return row



import os
rows = []
for rep in range(3 if not os.environ.get("PROBE_PROFILE") else 0):
    rows.append(ram())
    rows.append(variant(f"dali-external #{rep}", epochs=30))
if os.environ.get("PROBE_PROFILE"):
    row = variant("dali-external under cProfile", epochs=20, profile=True)
    print("\n".join(row["profile"]))
    rows.append(row)
with open(out_path, "w") as f:
    json.dump({"device": torch.cuda.get_device_name(0), "rows": rows}, f, indent=1)
