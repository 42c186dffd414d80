"""`pairload make-pairs`: low/normal-light pairs written offline from normal-light photographs, for the demo, the
tests and the benchmarks (loaders given `degrade=` make inputs at run time instead; this tool only writes files).

Each pair: a random scaled crop of a photo is the normal-light target; its low-light input is made from it by the
loaders' own degradation model and sRGB curve (`degrade`, "lowlight" by default: `pairload.degrade.models`), with
parameters drawn from the model's ranges and a noise key, both from the pair's generator of (seed, split, number).
Without a source folder the photographs bundled with scikit-image are used. Same seed, same bytes, whatever the
number of workers. OUT/synth.json records every pair's crop, parameters and noise key (its name is the one the
benchmarks and earlier outputs know).
"""

from __future__ import annotations

import functools
import heapq
import json
import numbers
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .errors import ConfigError, MissingDependencyError, PairloadError
from .format.atomic import atomic_open, write_bytes_atomic
from .format.members import Members
from .folders.decode import MAX_HEIGHT, MAX_PIXELS, MAX_WIDTH, decode_rgb
from .folders.discover import IMAGE_EXTS
from .folders.filetypes import CAMERA_RAW_EXTS, NUMPY_EXTS
from .folders.names import HIGH_NAMES, LOW_NAMES
from .degrade import Degradation
from .degrade.spec import takers
from .workerpool import WorkerPool, doing

PHOTO_EXTS = IMAGE_EXTS - NUMPY_EXTS - CAMERA_RAW_EXTS  # photographs to darken: not .npy arrays, not camera raw
BUNDLED = ("astronaut", "chelsea", "coffee", "rocket")
DOC = "synth.json"
PAIR_MEMBERS = Members()  # every pair: uint8 RGB input and target of one size; the model must take such targets


@dataclass(frozen=True, kw_only=True)
class MakePairsOptions:
    """`degrade`: the model that makes each input, as the loaders' `degrade=` takes it ("lowlight",
    "lowlight,gamma=2..3", a dict or a `Degradation`); read into a `Degradation` on construction."""

    pairs: int = 64
    test: int = 16
    size: tuple[int, int] = (600, 400)  # (width, height)
    seed: int = 0
    source: str | None = None  # folder of normal-light photos; None: scikit-image's bundled photographs
    workers: int = 1  # processes; the output does not depend on it
    degrade: Any = "lowlight"

    def __post_init__(self) -> None:
        for flag, value, least in (("--pairs", self.pairs, 1), ("--test", self.test, 0), ("--seed", self.seed, 0),
                                   ("--workers", self.workers, 1)):
            if not _whole(value) or value < least:
                raise ConfigError(f"{flag} {value!r}: expected a whole number, {least} or more")
        size = self.size
        if not (isinstance(size, (tuple, list)) and len(size) == 2 and all(map(_whole, size)) and min(size) >= 8):
            shown = f"{size[0]}x{size[1]}" if isinstance(size, (tuple, list)) and len(size) == 2 else repr(size)
            raise ConfigError(f"--size {shown}: expected WIDTHxHEIGHT of at least 8x8, e.g. 600x400")
        w, h = int(size[0]), int(size[1])
        if w * h > MAX_PIXELS or w > MAX_WIDTH or h > MAX_HEIGHT:  # pairs pack could not decode
            raise ConfigError(f"--size {w}x{h}: {w * h:,} pixels a pair; expected at most {MAX_PIXELS:,} pixels and "
                              f"sides of at most {MAX_WIDTH:,}x{MAX_HEIGHT:,} (what pack can decode), e.g. 600x400")
        object.__setattr__(self, "size", (w, h))
        if self.source is not None:  # a Path too; kept as text, which synth.json records
            if not isinstance(self.source, (str, os.PathLike)):
                raise ConfigError(f"--from {self.source!r}: expected the path of a folder of normal-light photos")
            object.__setattr__(self, "source", os.fspath(self.source))
        object.__setattr__(self, "degrade", _degradation(self.degrade))


def _whole(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _degradation(value) -> Degradation:
    """`value` as a Degradation whose model makes inputs from 8-bit RGB photos, or a one-line refusal naming
    --degrade and the models that can."""
    usable = ", ".join(takers(PAIR_MEMBERS, None))
    try:
        degrade = Degradation.of(value)
    except ConfigError as exc:
        raise ConfigError(f"--degrade {value}: {exc}") from None
    if degrade is None:
        raise ConfigError(f"--degrade {value!r}: expected a model that makes the inputs ({usable}), e.g. lowlight")
    why = degrade.spec.takes(PAIR_MEMBERS, False)
    if why is not None:
        raise ConfigError(f"--degrade {degrade}: make-pairs writes 8-bit RGB photos and {degrade.model} cannot make "
                          f"their inputs: {why}; use one of {usable}")
    return degrade


def _sources(source: str | None) -> list[tuple[str, str]]:
    """(name, where) of every source photo; `where` is a file path, or `skimage:<name>`. Nothing is decoded here:
    each worker decodes the photos its pairs use (a few at a time), not the whole folder."""
    if source is None:
        try:
            import skimage.data
        except ImportError:
            raise MissingDependencyError(
                "pairload make-pairs without --from uses scikit-image's bundled photographs: pip install "
                "'pairload[demo]' (or pass --from NORMAL_DIR)"
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
        found = "a file, not a folder" if root.exists() else "no such folder"
        raise ConfigError(f"--from {source}: {found}; pass the folder that holds the normal-light photos")
    listed = sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))
    raw = [p for p in listed if p.suffix.lower() in CAMERA_RAW_EXTS]
    if raw:
        raise ConfigError(f"--from {source}: {raw[0].relative_to(root)}"
                          + (f" and {len(raw) - 1} more file(s) are" if len(raw) > 1 else " is")
                          + " camera raw, which make-pairs cannot darken (it reads developed 8-bit or 16-bit photos); "
                          "develop them to PNG or TIFF, or move them out of the folder")
    files = [p for p in listed if p.suffix.lower() in PHOTO_EXTS]
    if not files:
        raise ConfigError(f"--from {source}: no images found (expected {', '.join(sorted(PHOTO_EXTS))})")
    _refuse_pairs_layout(root, files)
    return [(p.relative_to(root).as_posix(), str(p)) for p in files]


def _refuse_pairs_layout(root: Path, files: list[Path]) -> None:
    """A folder of low-light photos beside one of normal-light photos (`pairload pack`'s low/ and high/) is a paired
    dataset: its dark inputs would be taken as targets and darkened again."""
    folders = sorted({p.parent for p in files})
    for low in folders:
        high = [f for f in folders if f.parent == low.parent and f.name.lower() in HIGH_NAMES]
        if low != root and low.name.lower() in LOW_NAMES and high:
            rel = low.relative_to(root).as_posix(), high[0].relative_to(root).as_posix()
            raise ConfigError(f"--from {root}: {rel[0]}/ holds low-light images beside {rel[1]}/ (a paired dataset), "
                              "and make-pairs would darken them again; pass the normal-light folder alone, e.g. "
                              f"--from {high[0]}")


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


def make_input(high: np.ndarray, degrade: Degradation, rng: np.random.Generator
               ) -> tuple[np.ndarray, np.ndarray, np.uint64]:
    """The input `degrade` makes from the target `high` (H×W×3 uint8) with parameters and a noise key drawn from
    `rng` (the pair's generator): (input, its parameters (columns,) float32, its noise key). The uniforms lie in
    (0, 1) as the planner's do, and the noise is drawn over the whole image in orientation 0, as a loader draws it
    for a window cut unoriented."""
    u = (rng.integers(0, 1 << 53, size=(1, degrade.spec.uniforms)) + 0.5) * 2.0 ** -53
    table = degrade.draw(u)
    key = rng.integers(0, 1 << 64, size=1, dtype=np.uint64)
    low = degrade.spec.numpy(high[None], table, key, np.zeros(1, np.int32), None, degrade.extra)[0]
    return low, table[0], key[0]


def _write_png(path: Path, rgb: np.ndarray) -> None:
    import cv2

    ok, buf = cv2.imencode(".png", rgb[..., ::-1])
    if not ok:
        raise PairloadError(f"{path}: PNG encoding failed")
    write_bytes_atomic(path, buf.tobytes(), fsync=False)  # synth.json, written last and fsynced, marks completion


_worker: dict[str, Any] = {}  # a process's photos and degradation, set once by _init_worker

SPLITS = ("train", "test")  # split_id 0 and 1; a pair's row is its split's base plus its number
CHUNK = 4096  # jobs handed to the pool at a time: what bounds the parent's memory besides the table


def row_dtype(degrade: Degradation) -> np.dtype:
    """Every pair's record, one row per pair (60-130 bytes with the model's columns, not a dict each), written into
    synth.json as the JSON a dict per pair gives."""
    return np.dtype([("done", "?"), ("source", "<i4"), ("scale", "<f8"), ("y", "<i4"), ("x", "<i4"), ("hflip", "?"),
                     ("params", "<f4", (len(degrade.columns),)), ("key", "<u8")])


def _init_worker(photos: list[tuple[str, str]], degrade: Degradation) -> None:
    import cv2

    cv2.setNumThreads(1)  # one process per core already: OpenCV's own threads would oversubscribe
    _worker.update(photos=photos, degrade=degrade)


def _first_draw(rng: np.random.Generator, split_id: int, photos: int) -> int:
    """The photo a pair starts from, its generator's first draw (`make_pairs` groups the jobs by it), among its
    split's photos: every fourth photo (at least one, where there are two or more) is the test split's alone, so
    that no test pair shows the scene of a training pair (`pairload audit`, and training's overlap check)."""
    held = list(range(3, photos, 4)) or [photos - 1]
    pool = held if split_id == 1 else [k for k in range(photos) if k not in held] or held
    return pool[int(rng.integers(0, len(pool)))]


def _make_pair(job: tuple[Path, int, int, int, int, int]) -> tuple[int, int, tuple]:
    """Write one pair; (split_id, number, its record as a row without `done`)."""
    out, seed, split_id, i, width, height = job
    rng = np.random.default_rng([seed, split_id, i])
    photos = _worker["photos"]
    source = _first_draw(rng, split_id, len(photos))
    doing(photos[source][1])
    high, crop = _crop(_photo(photos[source][1]), width, height, rng)
    low, params, key = make_input(high, _worker["degrade"], rng)
    stem, split = f"{i:05d}", SPLITS[split_id]
    _write_png(out / split / "high" / f"{stem}.png", high)
    _write_png(out / split / "low" / f"{stem}.png", low)
    return split_id, i, (True, source, crop["scale"], crop["y"], crop["x"], crop["hflip"], params, key)


def _row_params(row, names: list[str], columns: tuple[str, ...]) -> dict:
    """A record row as the pair's dict in synth.json: the float32 parameters as the float64 numbers equal to them
    (so that they read back exactly), the noise key as 16 hex digits (64 bits, which not every JSON reader keeps)."""
    return {"source": names[int(row["source"])], "scale": float(row["scale"]), "y": int(row["y"]),
            "x": int(row["x"]), "hflip": bool(row["hflip"]),
            "degradation": dict(zip(columns, row["params"].tolist())), "noise_key": f"{int(row['key']):016x}"}


def _head(options: MakePairsOptions) -> dict:
    """synth.json's fields before its pairs: the run's options and the degradation in force (JSON types only, so
    that a part's record compares equal after a round trip)."""
    degrade = options.degrade
    spans = dict(degrade.ranges)
    return {"complete": True, "seed": options.seed, "size": list(options.size),
            "source": options.source or "scikit-image",
            "degrade": {"spec": degrade.describe(), "model": degrade.model, "columns": list(degrade.columns),
                        "ranges": {p.name: list(spans.get(p.name, (p.low, p.high))) for p in degrade.spec.params}}}


def _numbers_in_key_order(count: int) -> np.ndarray:
    """0 … count-1 in the order of their keys' text (`00009` < `00010`, but `100000` < `99999`)."""
    if count <= 100_000:
        return np.arange(count)
    return np.argsort(np.char.zfill(np.arange(count).astype("U12"), 5), kind="stable")


def keys_in_order(counts: dict[str, int]):
    """(key, split, number) of every pair of `counts` ({split: pairs}), in key order."""
    for split in sorted(counts):
        ranked = _numbers_in_key_order(counts[split])
        for start in range(0, len(ranked), 1 << 16):  # a Python int each, a slice at a time
            for i in ranked[start:start + (1 << 16)].tolist():
                yield f"{split}/{i:05d}", split, i


def _write_doc(path: Path, head: dict, keys, value) -> None:
    """synth.json (atomically): `head`'s fields, then "pairs": {key: value(key, …) for each of `keys`}, written as
    it goes: the bytes `json.dump` of the whole document gives, without the document in memory."""
    def dumps(obj) -> str:
        return json.dumps(obj, separators=(",", ":"))

    with atomic_open(path, "w") as fh:
        fh.write("{" + "".join(f"{dumps(k)}:{dumps(v)}," for k, v in head.items()) + '"pairs":{')
        batch: list[str] = []
        first = True
        for item in keys:
            batch.append(f"{dumps(item[0])}:{dumps(value(*item))}")
            if len(batch) >= 4096:
                fh.write(("" if first else ",") + ",".join(batch))
                first, batch = False, []
        if batch:
            fh.write(("" if first else ",") + ",".join(batch))
        fh.write("}}")


def _pair_files(out: Path, key: str) -> list[Path]:
    split, stem = key.split("/")
    return [out / split / side / f"{stem}.png" for side in ("low", "high")]


def _take_over(out: Path, counts: dict[str, int]) -> None:
    """Make OUT hold exactly the new pairs (`counts`: {split: pairs}): refuse files make-pairs did not write, delete
    old pairs that are not re-made. synth.json lists every pair file OUT may hold (old and new) from now until the
    run completes, so a killed run is taken over the same way."""
    try:
        old = set(json.loads((out / DOC).read_text(encoding="utf-8"))["pairs"])
    except (OSError, ValueError, KeyError, TypeError):
        old = set()

    def new(key: str) -> bool:
        split, _, stem = key.partition("/")
        return stem.isdigit() and stem == f"{int(stem):05d}" and int(stem) < counts.get(split, 0)

    foreign = sorted(p for split in SPLITS for side in ("low", "high") if (out / split / side).is_dir()
                     for p in (out / split / side).iterdir()
                     if not p.name.startswith(".") and not (p.name.endswith(".png") and (
                         new(key := f"{split}/{p.name[:-4]}") or key in old)))
    if foreign:
        raise ConfigError(f"{foreign[0].parent}: holds {len(foreign)} file(s) that pairload make-pairs did not write "
                          f"(e.g. {foreign[0].name}); make the pairs in an empty or new folder, so that the pairs on "
                          f"disk are exactly those {DOC} describes")
    gone = sorted(key for key in old if not new(key))
    for key in gone:
        for p in _pair_files(out, key):
            p.unlink(missing_ok=True)
    if old or any(counts.values()):
        out.mkdir(parents=True, exist_ok=True)
        keys = heapq.merge(keys_in_order(counts), ((k, None, None) for k in gone))  # gone: listed, as deleted
        _write_doc(out / DOC, {"complete": False}, keys, lambda *_: None)


def make_pairs(out_dir: str | os.PathLike, options: MakePairsOptions = MakePairsOptions(),
               on_progress: Callable[[int, int], None] | None = None, *, part=None) -> dict:
    """Write `out/train/{low,high}/NNNNN.png` (and `test/`), plus every pair's record in `out/synth.json`.

    `part` (a `parts.Part`): make only every N-th pair starting at the I-th (the same files the whole run would
    write) and record them in `out/.make-pairs-part-I-of-N.npz`; the last part to finish writes `synth.json` from
    the records, the document one run would write. Returns the run's summary: synth.json's fields but its pairs, and
    `count`, the pairs this run (or part) made (`complete` false: a part still waiting for others). Memory stays
    60-130 bytes per pair plus the workers, whatever the number of pairs."""
    out = Path(out_dir)
    photos = _sources(options.source)
    width, height = options.size
    counts = {"train": options.pairs, "test": options.test}
    base = {"train": 0, "test": options.pairs}
    # the photo each pair starts from is its generator's first draw: grouping jobs by photo keeps decodes few
    photo = np.fromiter((_first_draw(np.random.default_rng([options.seed, split_id, i]), split_id, len(photos))
                         for split_id, split in enumerate(SPLITS) for i in range(counts[split])),
                        dtype=np.int32, count=options.pairs + options.test)
    order = np.argsort(photo, kind="stable")  # rows (train then test) in the order the jobs are made
    del photo
    _take_over(out, {k: v for k, v in counts.items() if v})  # the same in every part: all of them may run it
    if part is not None:
        order = order[part.index::part.count]
    for split in SPLITS:
        if counts[split]:
            for side in ("low", "high"):
                (out / split / side).mkdir(parents=True, exist_ok=True)

    def jobs(rows: np.ndarray) -> list[tuple]:
        return [(out, options.seed, int(row >= options.pairs), row - (options.pairs if row >= options.pairs else 0),
                 width, height) for row in rows.tolist()]

    table = np.zeros(options.pairs + options.test, dtype=row_dtype(options.degrade))
    made = 0

    def keep(result) -> None:
        nonlocal made
        split_id, i, row = result
        table[base[SPLITS[split_id]] + i] = row
        made += 1
        if on_progress:
            on_progress(made, len(order))

    chunks = [order[k:k + CHUNK] for k in range(0, len(order), CHUNK)]  # views: the jobs are made a chunk at a time
    if options.workers > 1:
        from .forking import spawn_context

        with WorkerPool(options.workers, spawn_context(), "make-pairs", _init_worker,
                        (photos, options.degrade)) as pool:
            pending = None  # the pool takes a whole iterable at once: it gets a chunk while it works on the one before
            for chunk in chunks + [None]:
                started = pool.imap_unordered(_make_pair, jobs(chunk), chunksize=4) if chunk is not None else None
                for result in pending or ():
                    keep(result)
                pending = started
    else:
        _init_worker(photos, options.degrade)
        for chunk in chunks:
            for job in jobs(chunk):
                keep(_make_pair(job))
    head = _head(options)
    names = [name for name, _ in photos]
    if part is None:
        _write_final(out, head, table, names, counts, base)
        return {**head, "count": made}
    _write_record(out / _record(part.index, part.count), head, table, names, counts)
    complete = _finish_parts(out, part.count, head, counts, base)
    return {**head, "complete": complete, "count": made}


def _write_final(out: Path, head: dict, table: np.ndarray, names: list[str], counts: dict, base: dict) -> None:
    columns = tuple(head["degrade"]["columns"])

    def value(key: str, split: str, i: int) -> dict:
        return _row_params(table[base[split] + i], names, columns)

    _write_doc(out / DOC, head, keys_in_order({k: v for k, v in counts.items() if v}), value)


def _record(index: int, count: int) -> str:
    return f".make-pairs-part-{index:04d}-of-{count:04d}.npz"


def _write_record(path: Path, head: dict, table: np.ndarray, names: list[str], counts: dict) -> None:
    """A part's record: its rows of the table (the others not done), the run's head, the photos' names and the pairs
    of each split (`counts`)."""
    import io

    buf = io.BytesIO()
    np.savez(buf, table=table, head=np.array(json.dumps(head)), names=np.array(json.dumps(names)),
             counts=np.array(json.dumps(counts)))
    write_bytes_atomic(path, buf.getvalue())


def _finish_parts(out: Path, count: int, head: dict, counts: dict, base: dict) -> bool:
    """Once every part's record is in `out`: write synth.json from them (the bytes one run writes) and delete the
    records; False while a part is missing. Parts take turns (a lock file) so that one of them writes it."""
    import fcntl

    fd = os.open(out / ".make-pairs.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        records = [out / _record(i, count) for i in range(count)]
        if not all(r.exists() for r in records):
            return False
        table, names = None, None
        for r in records:
            with np.load(r) as rec:
                if json.loads(str(rec["head"])) != head or (
                        "counts" not in rec.files or json.loads(str(rec["counts"])) != counts):
                    raise ConfigError(f"{r}: a part of another make-pairs run (seed, size, source, pairs or "
                                      "degrade differ); run every part with the same options, or delete the "
                                      ".make-pairs-part-* files")
                part_table = rec["table"]
                names = json.loads(str(rec["names"]))
            if table is None:
                table = part_table
            else:
                table[part_table["done"]] = part_table[part_table["done"]]
        _write_final(out, head, table, names, counts, base)
        for r in records:
            r.unlink()
        return True
    finally:
        os.close(fd)
