"""`dali-external` on a GPU with the consumer on torch's current stream or on a stream of its own (GPU machine with
DALI): whether the consumer's stream costs the loader time.

    python benchmarks/dali_consumer_stream.py SHARDS current|sidestream
"""

import sys
import time

import torch

from pairload import make_loader
from pairload.bench.measure import pairs_over


def main() -> None:
    shards, variant = sys.argv[1], sys.argv[2]
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
