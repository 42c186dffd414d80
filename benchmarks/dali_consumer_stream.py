"""`dali-external` on a GPU with the consumer on torch's default (legacy) stream, on a stream of its own, and with the
cutting stream's wait for the consumer left out (GPU machine with DALI): whether those waits cost the loader time.

    python benchmarks/dali_consumer_stream.py SHARDS current|nobefore|sidestream

`nobefore` drops a safety wait (a released block could be cut into while DALI still copies it): a measurement only.
"""

import sys
import time

import torch

import pairload.loaders.dali.external as external
from pairload import make_loader
from pairload.bench.measure import pairs_over


def main() -> None:
    shards, variant = sys.argv[1], sys.argv[2]
    if variant == "nobefore":
        external.ExternalSource._hold_until_consumed = (
            lambda self, release, before=None: self.run_state.hold(release, None))
    loader = make_loader("dali-external", shards, batch_size=32, crop=256, device="cuda")
    stream = torch.cuda.Stream() if variant == "sidestream" else torch.cuda.current_stream()

    with torch.cuda.stream(stream):
        pairs_over(loader, range(3))
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        n = pairs_over(loader, range(3, 60))
        torch.cuda.synchronize()
    print(f"{variant}: {n / (time.perf_counter() - t0):,.0f} pairs/s")
    loader.close()


if __name__ == "__main__":
    main()
