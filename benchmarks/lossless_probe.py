#!/usr/bin/env python3
"""Which lossless encoding a GPU decodes fast enough for packs (#61): on real photographs (scikit-image's, 600x400
crops; low-light inputs made from them: a tenth of the light and sensor noise), the size of each candidate against
uint8, and on the GPU its batched decode rate and whether it gives back the very pixels.

Candidates:
- `zstd-tiles`: 256x256 tiles, each colour plane of a tile one standard zstd frame (python `zstandard`, level 9);
  targets as (R-G, G, B-G) with the planar-gradient residual (x - up - left + up-left, mod 256), inputs as they are
  (their noise defeats any predictor). Decoded by nvCOMP's batched zstd, then cumulative sums undo the residual.
- `zstd-whole`: the same with one frame per plane of the whole image.
- `htj2k`: HTJ2K lossless (reversible 5/3; OpenJPH through `imagecodecs`), decoded by nvImageCodec (nvJPEG2000).

    python benchmarks/lossless_probe.py [--images 256] [--out results.json]

Needs a CUDA GPU, torch, zstandard, imagecodecs, nvImageCodec and nvCOMP's Python module (`nvidia.nvcomp`).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

TILE = 256


def photos(n_pairs: int) -> list[tuple[np.ndarray, np.ndarray]]:
    import cv2
    import skimage.data as data

    out = []
    for name in ("astronaut", "coffee", "chelsea", "rocket", "stereo_motorcycle", "immunohistochemistry"):
        img = getattr(data, name)()
        img = img[0] if isinstance(img, tuple) else img
        h, w = img.shape[:2]
        if h < 400 or w < 600:
            s = max(400 / h, 600 / w)
            img = cv2.resize(img, (int(np.ceil(w * s)), int(np.ceil(h * s))), interpolation=cv2.INTER_CUBIC)
            h, w = img.shape[:2]
        for y, x in sorted({(0, 0), (h - 400, w - 600), ((h - 400) // 2, (w - 600) // 2)}):
            out.append(np.ascontiguousarray(img[y:y + 400, x:x + 600, :3]))
    rng = np.random.default_rng(0)
    pairs = []
    for k in range(n_pairs):
        high = out[k % len(out)]
        low = np.clip(np.round(high * rng.uniform(0.05, 0.15) + rng.normal(0, rng.uniform(2, 5), high.shape)),
                      0, 255).astype(np.uint8)
        pairs.append((low, high))
    return pairs


def big(pairs, h: int, w: int):
    """Each pair's target enlarged to h x w with a sensor's grain, its input a tenth of its light with noise."""
    import cv2

    rng = np.random.default_rng(1)
    out = []
    for _, high in pairs:
        up = cv2.resize(high, (w, h), interpolation=cv2.INTER_CUBIC)
        up = np.clip(up + rng.normal(0, 2, up.shape), 0, 255).astype(np.uint8)  # a sensor's grain at 4K
        dark = np.clip(up * 0.1 + rng.normal(0, 3, up.shape), 0, 255).astype(np.uint8)
        out.append((dark, up))
    return out


def residual(x: np.ndarray, target: bool) -> np.ndarray:
    """CHW uint8 of what is compressed: a target's colour differences and planar-gradient residual; an input as is."""
    p = np.ascontiguousarray(x.transpose(2, 0, 1))
    if not target:
        return p
    p = p.copy()
    p[0] -= p[1]
    p[2] -= p[1]
    r = p.copy()
    r[:, :, 1:] -= p[:, :, :-1]
    out = r.copy()
    out[:, 1:, :] -= r[:, :-1, :]
    return out


def frames_of(img: np.ndarray, target: bool, tile: int | None, cctx) -> list[tuple[tuple, bytes]]:
    """((y, x, h, w, plane), zstd frame) of an image."""
    out = []
    h, w = img.shape[:2]
    t = tile or max(h, w)
    for y in range(0, h, t):
        for x in range(0, w, t):
            r = residual(img[y:y + t, x:x + t], target)
            for c in range(r.shape[0]):
                out.append(((y, x, r.shape[1], r.shape[2], c), cctx.compress(np.ascontiguousarray(r[c]).tobytes())))
    return out


def zstd_candidate(pairs, tile, images: int, repeat: int) -> dict:
    import torch
    import zstandard
    from nvidia import nvcomp

    cctx = zstandard.ZstdCompressor(level=9)
    enc = []  # per image: (target?, frames)
    t0 = time.perf_counter()
    for low, high in pairs:
        enc.append((False, frames_of(low, False, tile, cctx)))
        enc.append((True, frames_of(high, True, tile, cctx)))
    encode_ms = (time.perf_counter() - t0) / len(enc) * 1e3
    raw = sum(p[0].nbytes + p[1].nbytes for p in pairs)
    packed = sum(len(b) for _, fr in enc for _, b in fr)
    which = [k % len(enc) for k in range(images)]
    frames = [(k, meta, b) for k in which for meta, b in enc[k][1]]
    # one pinned host buffer of every frame (16-byte aligned), sent to the GPU at once (the page cache's role)
    offsets, pos = [], 0
    for _, _, b in frames:
        pos += -pos % 16
        offsets.append(pos)
        pos += len(b)
    host = np.zeros(pos, np.uint8)
    for o, (_, _, b) in zip(offsets, frames):
        host[o:o + len(b)] = np.frombuffer(b, np.uint8)
    dev = torch.device("cuda")
    stream = torch.cuda.current_stream()
    comp = torch.from_numpy(host).pin_memory().to(dev)
    sizes = [m[2] * m[3] for _, m, _ in frames]
    out_off = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    out = torch.empty(int(sum(sizes)), dtype=torch.uint8, device=dev)
    codec = nvcomp.Codec(algorithm="Zstd", bitstream_kind=nvcomp.BitstreamKind.RAW, device_id=0,
                         cuda_stream=stream.cuda_stream)
    src = nvcomp.as_arrays([comp[o:o + len(b)] for o, (_, _, b) in zip(offsets, frames)],
                           cuda_stream=stream.cuda_stream)
    dst = nvcomp.as_arrays([out[int(o):int(o) + n] for o, n in zip(out_off, sizes)], cuda_stream=stream.cuda_stream)
    cfg = codec.decompression_config(src)
    codec.decode(src, out=dst, decompression_config=cfg)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        codec.decode(src, out=dst, decompression_config=cfg)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    unconfigured = float("inf")
    for _ in range(max(2, repeat // 4)):
        t = time.perf_counter()
        codec.decode(src, out=dst)
        torch.cuda.synchronize()
        unconfigured = min(unconfigured, time.perf_counter() - t)
    # undo the residuals on the GPU, image by image of the first 16, and compare with the originals
    exact = True
    imgs = [img for p in pairs for img in p]
    per_image: dict = {}
    for (k, meta, _), o, n in zip(frames, out_off, sizes):
        per_image.setdefault(k, []).append((meta, int(o), n))
    undo_best = float("inf")
    for k in list(per_image)[:16]:
        target = enc[k][0]
        h, w = imgs[k].shape[:2]
        got = torch.empty((3, h, w), dtype=torch.int32, device=dev)
        for (y, x, th, tw, c), o, n in per_image[k]:
            got[c, y:y + th, x:x + tw] = out[o:o + n].view(th, tw).to(torch.int32)
        t = time.perf_counter()
        if target:  # per tile: cumulative sums down and across, mod 256, then the colour differences undone
            for (y, x, th, tw, c), _, _ in per_image[k]:
                if c == 0:
                    blk = got[:, y:y + th, x:x + tw]
                    blk.copy_(torch.cumsum(torch.cumsum(blk, 1) & 255, 2) & 255)
            got[0] = (got[0] + got[1]) & 255
            got[2] = (got[2] + got[1]) & 255
        torch.cuda.synchronize()
        undo_best = min(undo_best, time.perf_counter() - t)
        exact &= bool(torch.equal(got.to(torch.uint8).permute(1, 2, 0).cpu(), torch.from_numpy(imgs[k])))
    return {"ratio": round(raw / packed, 3),
            "ratio_inputs": round(sum(p[0].nbytes for p in pairs) / sum(len(b) for t, fr in enc if not t
                                                                        for _, b in fr), 3),
            "ratio_targets": round(sum(p[1].nbytes for p in pairs) / sum(len(b) for t, fr in enc if t
                                                                         for _, b in fr), 3),
            "cpu_encode_ms_per_image": round(encode_ms, 2), "frames_per_call": len(frames), "images_per_call": images,
            "gpu_decode_images_per_s": round(images / best), "gpu_decode_images_per_s_without_config":
                round(images / unconfigured), "bit_exact": exact}


def htj2k_candidate(pairs, images: int, repeat: int) -> dict:
    import imagecodecs
    import torch
    from nvidia import nvimgcodec

    t0 = time.perf_counter()
    enc = [imagecodecs.htj2k_encode(img, reversible=True) for p in pairs for img in p]
    encode_ms = (time.perf_counter() - t0) / len(enc) * 1e3
    raw = sum(p[0].nbytes + p[1].nbytes for p in pairs)
    batch = [enc[k % len(enc)] for k in range(images)]
    out = {"ratio": round(raw / sum(len(b) for b in enc), 3), "cpu_encode_ms_per_image": round(encode_ms, 2),
           "images_per_call": images}
    imgs = [img for p in pairs for img in p]
    for backend in ("gpu", "hybrid"):
        kind = {"gpu": nvimgcodec.BackendKind.GPU_ONLY, "hybrid": nvimgcodec.BackendKind.HYBRID_CPU_GPU}[backend]
        try:
            dec = nvimgcodec.Decoder(backends=[nvimgcodec.Backend(kind)])
            got = dec.decode(batch[:len(enc)])
            if any(g is None for g in got):
                out[backend] = "refused"
                continue
            exact = all(np.array_equal(np.asarray(g.cpu()), imgs[k]) for k, g in enumerate(got[:16]))
            dec.decode(batch)
            best = float("inf")
            for _ in range(repeat):
                t = time.perf_counter()
                dec.decode(batch)
                torch.cuda.synchronize()
                best = min(best, time.perf_counter() - t)
            out[backend] = {"gpu_decode_images_per_s": round(images / best), "bit_exact": exact}
        except Exception as e:  # noqa: BLE001 - a probe reports what each backend does
            out[backend] = f"{type(e).__name__}: {e}"[:200]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=18)
    ap.add_argument("--images", type=int, default=256, help="images per decode call")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--out")
    args = ap.parse_args()
    import torch

    pairs = photos(args.pairs)
    doc = {"device": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d"), "images": "600x400",
           "pairs": args.pairs}
    for images in (64, args.images):
        doc[f"zstd-tiles-{images}"] = zstd_candidate(pairs, TILE, images, args.repeat)
        doc[f"zstd-whole-{images}"] = zstd_candidate(pairs, None, images, args.repeat)
        doc[f"htj2k-{images}"] = htj2k_candidate(pairs, images, args.repeat)
        print(json.dumps(doc, indent=1), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
