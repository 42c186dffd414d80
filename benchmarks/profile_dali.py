"""dali-external's rate against its parts, in one process (warm page cache, crop 256, batch 32):

    python benchmarks/profile_dali.py SHARDS [--device cuda] [--workers 7,15] [--prefetch 2,4] [--out F.json]

`host`: the cutting workers alone (WorkerCuts, the batches `fn.external_source` receives); `dali-external` for
each worker count and prefetch depth; `ram` for reference. Every rate is pairs/s over --seconds after one epoch
of warm-up, so the numbers say whether DALI's own per-batch work or the cutting is the limit.
"""

from __future__ import annotations

import argparse
import json
import platform
import time


def _rate(it_factory, seconds: float, sync) -> float:
    n, epoch = 0, 0
    t0 = None
    while True:
        for batch in it_factory(epoch):
            if t0 is None:  # from the first batch of the second epoch
                continue
            n += batch
            if time.perf_counter() - t0 > seconds:
                sync()
                return n / (time.perf_counter() - t0)
        epoch += 1
        if t0 is None:
            sync()
            t0 = time.perf_counter()


def main() -> None:
    import torch

    from pairload import make_loader
    from pairload.loaders.base import LoaderOptions
    from pairload.cut.workers import WorkerCuts
    from pairload.read.shards import ShardDataset

    ap = argparse.ArgumentParser()
    ap.add_argument("shards")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--workers", default="7,15")
    ap.add_argument("--prefetch", default="2,4")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--out")
    a = ap.parse_args()
    sync = (lambda: torch.cuda.synchronize()) if a.device.startswith("cuda") else (lambda: None)
    rows = []
    for w in [int(x) for x in a.workers.split(",")]:
        ds = ShardDataset(a.shards, "train")
        opts = LoaderOptions.build(batch_size=32, crop=256, num_workers=w)
        from pairload.plan import plan_epoch, key_hashes

        cfg, kh = opts.plan, key_hashes(ds.keys)
        host = WorkerCuts(ds, cfg, lambda e, c, cfg=cfg, kh=kh, ds=ds: plan_epoch(cfg, kh, ds.sizes, e, consumed=c),
                           num_workers=w, prefetch=4, pin=False, apply_codes=not a.device.startswith("cuda"),
                           name="profile")

        def host_epoch(e, host=host):
            run = (e, ())
            for cut in host.cuts(run, host.plan_for(*run)):
                if cut.release is not None:
                    cut.release()
                yield cut.rows

        rows.append({"what": "host", "workers": w, "pairs_per_s": round(_rate(host_epoch, a.seconds, lambda: None))})
        host.close()
        print(rows[-1], flush=True)
        for p in [int(x) for x in a.prefetch.split(",")]:
            loader = make_loader("dali-external", a.shards, batch_size=32, crop=256, num_workers=w, device=a.device,
                                 prefetch=p)

            def dali_epoch(e, loader=loader):
                loader.set_epoch(e)
                return (len(b) for b in loader)

            rows.append({"what": "dali-external", "workers": w, "prefetch": p,
                         "pairs_per_s": round(_rate(dali_epoch, a.seconds, sync))})
            loader.close()
            print(rows[-1], flush=True)
        loader = make_loader("ram", a.shards, batch_size=32, crop=256, num_workers=w, device=a.device)

        def ram_epoch(e, loader=loader):
            loader.set_epoch(e)
            return (len(b) for b in loader)

        rows.append({"what": "ram", "workers": w, "pairs_per_s": round(_rate(ram_epoch, a.seconds, sync))})
        loader.close()
        print(rows[-1], flush=True)
    dev = torch.cuda.get_device_name() if a.device.startswith("cuda") else platform.processor() or "cpu"
    result = {"device": dev, "date": time.strftime("%Y-%m-%d"), "cores": __import__("os").cpu_count(),
              "crop": 256, "batch_size": 32, "rows": rows}
    if a.out:
        from pairload.format.atomic import write_json_atomic

        write_json_atomic(a.out, result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
