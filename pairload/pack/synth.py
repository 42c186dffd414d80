"""`pairload synth`: realistic low-light pairs made from normal-light photographs.

Each pair: a random scaled crop of a photo is the normal-light target; the low-light input is that crop
linearised (inverse sRGB), darkened by an exposure factor in [0.03, 0.3], tinted by per-channel gains, given
Poisson-Gaussian sensor noise, and re-encoded to sRGB uint8. Without a source folder the photographs bundled
with scikit-image are used, which gives pairload an embedded default dataset. Same seed, same bytes.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..raw.decode import decode_rgb
from ..raw.discover import IMAGE_EXTS
from ..raw.filetypes import NUMPY_EXTS
from ..errors import ConfigError, MissingDependencyError, PairloadError
from ..format.atomic import write_bytes_atomic, write_json_atomic

PHOTO_EXTS = IMAGE_EXTS - NUMPY_EXTS  # photographs to darken: .npy arrays are not sRGB photos
BUNDLED = ("astronaut", "chelsea", "coffee", "rocket")
EXPOSURE = (0.03, 0.3)
GAIN = (0.85, 1.15)
PHOTONS = (200.0, 4000.0)  # photo-electrons at full exposure (log-uniform); fewer means more shot noise
READ_NOISE = (0.001, 0.012)


@dataclass(frozen=True, kw_only=True)
class SynthOptions:
    pairs: int = 64
    test: int = 16
    size: tuple[int, int] = (600, 400)  # (width, height)
    seed: int = 0
    source: str | None = None  # folder of normal-light photos; None: scikit-image's bundled photographs
    workers: int = 1  # processes; the output does not depend on it

    def __post_init__(self) -> None:
        if self.pairs < 1 or self.test < 0:
            raise ConfigError(f"--pairs {self.pairs} --test {self.test}: expected at least 1 training pair and 0 or "
                              "more test pairs")
        if self.workers < 1:
            raise ConfigError(f"--workers {self.workers}: expected at least 1")
        if min(self.size) < 8:
            raise ConfigError(f"--size {self.size[0]}x{self.size[1]}: expected at least 8x8")


def srgb_to_linear(x: np.ndarray) -> np.ndarray:
    return np.where(x <= 0.04045, x / 12.92, ((x + 0.055) / 1.055) ** 2.4)


def linear_to_srgb(x: np.ndarray) -> np.ndarray:
    return np.where(x <= 0.0031308, x * 12.92, 1.055 * np.power(np.maximum(x, 0.0031308), 1 / 2.4) - 0.055)


_LINEAR = srgb_to_linear(np.arange(256, dtype=np.float64) / 255.0)  # uint8 sRGB -> linear, by table


def _sources(source: str | None) -> list[tuple[str, str]]:
    """(name, where) of every source photo; `where` is a file path, or `skimage:<name>`. Nothing is decoded here:
    each worker decodes the photos its pairs use (a few at a time), not the whole folder."""
    if source is None:
        try:
            import skimage.data
        except ImportError:
            raise MissingDependencyError(
                "pairload synth without --from uses scikit-image's bundled photographs: pip install 'pairload[demo]' "
                "(or pass --from NORMAL_DIR)"
            ) from None
        photos = []
        for name in BUNDLED:
            try:
                getattr(skimage.data, name)()
            except Exception:  # noqa: BLE001 - a photo that needs a download is simply left out
                continue
            photos.append((f"skimage:{name}", f"skimage:{name}"))
        if not photos:
            raise MissingDependencyError("none of scikit-image's bundled photographs could be loaded; pass --from "
                                         "NORMAL_DIR")
        return photos
    root = Path(source)
    if not root.is_dir():
        raise ConfigError(f"--from {source}: no such folder")
    files = sorted(p for p in root.rglob("*")
                   if p.is_file() and p.suffix.lower() in PHOTO_EXTS and not p.name.startswith("."))
    if not files:
        raise ConfigError(f"--from {source}: no images found (expected {', '.join(sorted(PHOTO_EXTS))})")
    return [(p.relative_to(root).as_posix(), str(p)) for p in files]


@functools.lru_cache(maxsize=4)  # jobs are sorted by photo, so a worker rarely needs one it has dropped
def _photo(where: str) -> np.ndarray:
    if where.startswith("skimage:"):
        import skimage.data

        return np.ascontiguousarray(getattr(skimage.data, where.split(":", 1)[1])()[..., :3])
    return decode_rgb(Path(where), to_8bit=True)[0]


def _crop(photo: np.ndarray, width: int, height: int, rng: np.random.Generator) -> tuple[np.ndarray, dict]:
    import cv2

    h, w = photo.shape[:2]
    smin = max(height / h, width / w)
    scale = smin * float(rng.uniform(1.0, 1.6))
    sh, sw = max(height, round(h * scale)), max(width, round(w * scale))
    interp = cv2.INTER_AREA if scale < 1 else cv2.INTER_CUBIC
    img = cv2.resize(photo, (sw, sh), interpolation=interp)
    y, x = int(rng.integers(0, sh - height + 1)), int(rng.integers(0, sw - width + 1))
    img = img[y:y + height, x:x + width]
    flip = bool(rng.integers(0, 2))
    if flip:
        img = img[:, ::-1]
    return np.ascontiguousarray(img), {"scale": round(scale, 6), "y": y, "x": x, "hflip": flip}


def darken(high: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, dict]:
    """The low-light version of an sRGB uint8 image, and the parameters drawn for it."""
    exposure = float(np.exp(rng.uniform(np.log(EXPOSURE[0]), np.log(EXPOSURE[1]))))
    gains = rng.uniform(GAIN[0], GAIN[1], size=3)
    photons = float(np.exp(rng.uniform(np.log(PHOTONS[0]), np.log(PHOTONS[1]))))
    read = float(rng.uniform(*READ_NOISE))
    signal = _LINEAR[high] * exposure * gains
    noisy = rng.poisson(signal * photons) / photons + rng.normal(0.0, read, size=signal.shape)
    low = np.clip(linear_to_srgb(np.clip(noisy, 0.0, 1.0)) * 255.0 + 0.5, 0, 255).astype(np.uint8)
    return low, {"exposure": round(exposure, 6), "gains": [round(float(g), 6) for g in gains],
                 "photons": round(photons, 3), "read_noise": round(read, 6)}


def _write_png(path: Path, rgb: np.ndarray) -> None:
    import cv2

    ok, buf = cv2.imencode(".png", rgb[..., ::-1])
    if not ok:
        raise PairloadError(f"{path}: PNG encoding failed")
    write_bytes_atomic(path, buf.tobytes(), fsync=False)  # synth.json, written last and fsynced, marks completion


_photos: list[tuple[str, str]] = []


def _init_worker(photos: list[tuple[str, str]]) -> None:
    import cv2

    cv2.setNumThreads(1)  # one process per core already: OpenCV's own threads would oversubscribe
    _photos[:] = photos


def _job_rng(job: tuple) -> np.random.Generator:
    _, seed, split_id, _, i, _, _ = job
    return np.random.default_rng([seed, split_id, i])


def _make_pair(job: tuple[Path, int, int, str, int, int, int]) -> tuple[str, dict]:
    out, seed, split_id, split, i, width, height = job
    rng = _job_rng(job)
    name, where = _photos[int(rng.integers(0, len(_photos)))]
    high, crop = _crop(_photo(where), width, height, rng)
    low, params = darken(high, rng)
    stem = f"{i:05d}"
    _write_png(out / split / "high" / f"{stem}.png", high)
    _write_png(out / split / "low" / f"{stem}.png", low)
    return f"{split}/{stem}", {"source": name, **crop, **params}


def _pair_files(out: Path, key: str) -> list[Path]:
    split, stem = key.split("/")
    return [out / split / side / f"{stem}.png" for side in ("low", "high")]


def _take_over(out: Path, new: set[str]) -> None:
    """Make OUT hold exactly the new pairs: refuse files synth did not write, delete old pairs that are not
    re-made. synth.json lists every pair file OUT may hold (old and new) from now until the run completes, so
    a killed run is taken over the same way."""
    try:
        old = set(json.loads((out / "synth.json").read_text(encoding="utf-8"))["pairs"])
    except (OSError, ValueError, KeyError, TypeError):
        old = set()
    ours = {p for key in old | new for p in _pair_files(out, key)}
    foreign = sorted(p for split in ("train", "test") for side in ("low", "high") if (out / split / side).is_dir()
                     for p in (out / split / side).iterdir() if p not in ours and not p.name.startswith("."))
    if foreign:
        raise ConfigError(f"{foreign[0].parent}: holds {len(foreign)} file(s) that pairload synth did not write "
                          f"(e.g. {foreign[0].name}); synth into an empty or new folder, so that the pairs on disk "
                          "are exactly those synth.json describes")
    for key in sorted(old - new):
        for p in _pair_files(out, key):
            p.unlink(missing_ok=True)
    if old or new:
        out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out / "synth.json", {"complete": False, "pairs": {k: None for k in sorted(old | new)}})


def synth(out_dir: str | os.PathLike, options: SynthOptions = SynthOptions(),
          on_progress: Callable[[int, int], None] | None = None, *, part=None) -> dict:
    """Write `out/train/{low,high}/NNNNN.png` (and `test/`), plus every pair's parameters in `out/synth.json`.

    `part` (a `parts.Part`): make only every N-th pair starting at the I-th (the same files the whole run would
    write) and record them in `out/.synth-part-I-of-N.json`; the last part to finish writes `synth.json` from the
    records, the document one run would write. Returns this run's document (a part still waiting: its own pairs,
    with `"complete": false`)."""
    out = Path(out_dir)
    photos = _sources(options.source)
    width, height = options.size
    jobs = []
    for split_id, (split, count) in enumerate((("train", options.pairs), ("test", options.test))):
        jobs.extend((out, options.seed, split_id, split, i, width, height) for i in range(count))
    # the photo each pair starts from is its generator's first draw: grouping jobs by photo keeps decodes few
    jobs.sort(key=lambda job: int(_job_rng(job).integers(0, len(photos))))
    _take_over(out, {f"{job[3]}/{job[4]:05d}" for job in jobs})  # the same in every part: all of them may run it
    if part is not None:
        jobs = jobs[part.index::part.count]
    for split in {job[3] for job in jobs}:
        for side in ("low", "high"):
            (out / split / side).mkdir(parents=True, exist_ok=True)
    results = {}
    if options.workers > 1:
        import multiprocessing as mp

        with mp.get_context("spawn").Pool(options.workers, initializer=_init_worker, initargs=(photos,)) as pool:
            for key, params in pool.imap_unordered(_make_pair, jobs, chunksize=4):
                results[key] = params
                if on_progress:
                    on_progress(len(results), len(jobs))
    else:
        _init_worker(photos)
        for job in jobs:
            key, params = _make_pair(job)
            results[key] = params
            if on_progress:
                on_progress(len(results), len(jobs))
    head = {"complete": True, "seed": options.seed, "size": [width, height],
            "source": options.source or "scikit-image"}
    if part is None:
        doc = {**head, "pairs": dict(sorted(results.items()))}
        write_json_atomic(out / "synth.json", doc)
        return doc
    write_json_atomic(out / _record(part.index, part.count), {**head, "pairs": results})
    return _finish_parts(out, part.count, head) or {**head, "complete": False, "pairs": dict(sorted(results.items()))}


def _record(index: int, count: int) -> str:
    return f".synth-part-{index:04d}-of-{count:04d}.json"


def _finish_parts(out: Path, count: int, head: dict) -> dict | None:
    """Once every part's record is in `out`: write synth.json from them (the bytes one run writes) and delete the
    records; None while a part is missing. Parts take turns (a lock file) so that one of them writes it."""
    import fcntl

    fd = os.open(out / ".synth.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        records = [out / _record(i, count) for i in range(count)]
        if not all(r.exists() for r in records):
            return None
        pairs: dict = {}
        for r in records:
            rec = json.loads(r.read_text(encoding="utf-8"))
            if {k: rec[k] for k in head} != head:
                raise ConfigError(f"{r}: a part of another synth run (seed, size or source differ); run every part "
                                  "with the same options, or delete the .synth-part-* files")
            pairs.update(rec["pairs"])
        doc = {**head, "pairs": dict(sorted(pairs.items()))}
        write_json_atomic(out / "synth.json", doc)
        for r in records:
            r.unlink()
        return doc
    finally:
        os.close(fd)
