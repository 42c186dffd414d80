"""Which GPU JPEG decoder the decode stage should use, measured: torchvision's batched `decode_jpeg(device="cuda")`
and nvImageCodec's `Decoder` (its hardware engine, its CUDA decoder), on photo-like 600x400 JPEGs (q90) in batches
of 32-128: images/s, how far each is from OpenCV's decode of the same bytes (libjpeg-turbo, what `pack` stores), and
whether each decodes on the caller's current stream.

    python benchmarks/gpu_decode_probe.py OUT.json [--images 512]
"""

from __future__ import annotations

import argparse
import json
import time

import cv2
import numpy as np
import torch


def photos(n: int, h: int = 400, w: int = 600, seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        base = cv2.resize(rng.integers(0, 256, (h // 16, w // 16, 3), dtype=np.uint8), (w, h),
                          interpolation=cv2.INTER_CUBIC)
        detail = rng.normal(0, 12, (h, w, 3))
        img = np.clip(base + detail, 0, 255).astype(np.uint8)
        ok, data = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])
        out.append(data.tobytes())
    return out


def reference(data: list[bytes]) -> list[np.ndarray]:
    return [cv2.cvtColor(cv2.imdecode(np.frombuffer(d, np.uint8), cv2.IMREAD_UNCHANGED), cv2.COLOR_BGR2RGB)
            for d in data]


def rate(fn, batches, seconds: float = 2.0) -> float:
    fn(batches[0])
    torch.cuda.synchronize()
    n, t0, k = 0, time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        out = fn(batches[k % len(batches)])
        n += len(batches[k % len(batches)])
        k += 1
    torch.cuda.synchronize()
    del out
    return n / (time.perf_counter() - t0)


def diffs(got: list[torch.Tensor], ref: list[np.ndarray]) -> dict:
    d = [np.abs(g.cpu().numpy().astype(np.int16) - r.astype(np.int16)) for g, r in zip(got, ref)]
    return {"max_abs": int(max(x.max() for x in d)), "mean_abs": float(np.mean([x.mean() for x in d])),
            "share_differing": float(np.mean([(x > 0).mean() for x in d]))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--images", type=int, default=512)
    args = ap.parse_args()
    data = photos(args.images)
    ref = reference(data)
    report = {"date": time.strftime("%Y-%m-%d"), "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
              "images": len(data), "mean_jpeg_bytes": float(np.mean([len(d) for d in data])),
              "cv2_images_per_s_one_core": None, "decoders": {}}
    t0 = time.perf_counter()
    for d in data[:128]:
        cv2.imdecode(np.frombuffer(d, np.uint8), cv2.IMREAD_UNCHANGED)
    report["cv2_images_per_s_one_core"] = 128 / (time.perf_counter() - t0)
    try:
        import torchvision
        from torchvision.io import decode_jpeg

        tensors = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in data]
        row = {"version": torchvision.__version__}
        for b in (32, 64, 128):
            batches = [tensors[i:i + b] for i in range(0, len(tensors) - b + 1, b)]
            row[f"images_per_s_b{b}"] = rate(lambda x: decode_jpeg(x, device="cuda"), batches)
        got = decode_jpeg(tensors[:64], device="cuda")
        row["vs_opencv"] = diffs([g.permute(1, 2, 0) for g in got], ref[:64])
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            torch.cuda._sleep(int(2e8))  # the stream is busy: a decode on it waits, one elsewhere does not
            t = time.perf_counter()
            decode_jpeg(tensors[:32], device="cuda")
            row["returns_while_stream_busy_s"] = time.perf_counter() - t
        torch.cuda.synchronize()
        report["decoders"]["torchvision"] = row
    except Exception as exc:  # noqa: BLE001
        report["decoders"]["torchvision"] = {"error": f"{type(exc).__name__}: {exc}"[:400]}
    try:
        from nvidia import nvimgcodec as nv

        combos = {"HW_GPU_ONLY": ["HW_GPU_ONLY"], "HYBRID_CPU_GPU": ["HYBRID_CPU_GPU"],
                  "HW+HYBRID": ["HW_GPU_ONLY", "HYBRID_CPU_GPU"], "default": None}
        for kind, names in combos.items():
            try:
                backends = None if names is None else [nv.Backend(getattr(nv.BackendKind, k), load_hint=1.0)
                                                       for k in names]
                dec = nv.Decoder(device_id=0, backends=backends) if backends else nv.Decoder(device_id=0)
                arrays = [np.frombuffer(d, np.uint8) for d in data]
                row = {}
                for b in (32, 64, 128):
                    batches = [arrays[i:i + b] for i in range(0, len(arrays) - b + 1, b)]
                    row[f"images_per_s_b{b}"] = rate(
                        lambda x, dec=dec: [torch.as_tensor(im, device="cuda") for im in dec.decode(x)], batches)
                got = [torch.as_tensor(im, device="cuda") for im in dec.decode(arrays[:64])]
                row["vs_opencv"] = diffs(got, ref[:64])
                row["shape"] = list(got[0].shape)
                report["decoders"][f"nvimgcodec-{kind}"] = row
            except Exception as exc:  # noqa: BLE001
                report["decoders"][f"nvimgcodec-{kind}"] = {"error": f"{type(exc).__name__}: {exc}"[:400]}
        report["nvimgcodec_version"] = getattr(nv, "__version__", "?")
    except Exception as exc:  # noqa: BLE001
        report["decoders"]["nvimgcodec"] = {"error": f"{type(exc).__name__}: {exc}"[:400]}
    print(json.dumps(report, indent=1))
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
