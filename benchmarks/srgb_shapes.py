"""The sRGB kernels (lowlight, unprocess) in four program shapes (output pixels, warps), interleaved over two rounds,
GPU time of batch 32. Run from the repository root on the GPU host:

    PYTHONPATH=$PWD python benchmarks/srgb_shapes.py OUT.json
"""

from __future__ import annotations

import json
import sys

import torch

sys.path.insert(0, "benchmarks")
import synth_kernels  # noqa: E402

import pairload.degrade.kernels as kernels  # noqa: E402

CASES = (("lowlight", 256, "uint8"), ("lowlight", 512, "uint8"), ("lowlight", 256, "uint16"),
         ("unprocess", 256, "uint8"), ("unprocess", 512, "uint8"))


def main() -> None:
    res = {"device": torch.cuda.get_device_name()}
    for rep in range(2):
        for shape in ((1024, 8), (256, 2), (512, 4), (512, 2)):
            kernels.SHAPE.update({"lowlight_kernel": shape, "unprocess_kernel": shape})
            for model, crop, dtype in CASES:
                rate = synth_kernels.kernel_rate(model, crop, dtype, graph=True)
                res[f"{model} {dtype} {crop} {shape} r{rep}"] = round(rate)
                print(rep, shape, model, dtype, crop, round(rate), flush=True)
    with open(sys.argv[1], "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
