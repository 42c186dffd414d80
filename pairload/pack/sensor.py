"""Camera raw in a pack, decided from the probed headers before anything is written: how each split stores its files
(`CameraSplit`: the input as a packed Bayer mosaic; the target developed, kept packed, or an image at the sensor's
size), each pair's exposures and amplification ratio (from SID-style names, else the file's metadata), the split's
manifest "sensor" entry, and the refusals of raw pairs that cannot be (different cameras or sensor sizes, no exposure,
a side mixing raw files and images, options that would change sensor counts)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, ImageError
from ..format import sensor as fmt
from ..format.members import Member
from ..camera import files as camera
from ..folders.decode import DEVELOPED, PACKED, Header
from ..folders.discover import Pair
from .jobs import IMAGE

SHOWN = 5


@dataclass(frozen=True)
class CameraSplit:
    """How one split's files are stored: `low_as`/`high_as` (PACKED, DEVELOPED or IMAGE) and the target's `scale`."""

    low_as: str
    high_as: str
    scale: int

    def member(self, side: int, header: Header) -> Member:
        as_ = self.high_as if side else self.low_as
        if as_ == PACKED:
            return Member("uint16", 4)
        if as_ == DEVELOPED:
            return Member("uint16", 3)
        return Member(*header.stored(False))


@dataclass(frozen=True)
class Exposure:
    """One pair's exposures in seconds, where each came from ("name" or "metadata"), and the input's ratio."""

    low_s: float
    high_s: float
    source: tuple[str, str]
    ratio: float


@dataclass
class CameraPlan:
    """The camera raw side of a pack: per split its `CameraSplit` and manifest doc, per pair (in job order) its
    `Exposure` (None for a pair that is not raw)."""

    splits: dict[str, CameraSplit]
    docs: dict[str, dict]
    exposures: list[Exposure | None]

    def job_fields(self, pair: Pair) -> dict:
        """The `Job` fields of a pair of this pack: how its files are stored."""
        cs = self.splits.get(pair.split)
        return {} if cs is None else {"low_as": cs.low_as, "high_as": cs.high_as, "scale": cs.scale}

    def input_hw(self, pair: Pair, hw: tuple[int, int]) -> tuple[int, int]:
        """The size of a pair's stored input whose file's probed size is `hw`: a developed camera raw input (a
        targets-only pack's) is twice its packed size, any other its own."""
        cs = self.splits.get(pair.split)
        return (2 * hw[0], 2 * hw[1]) if cs is not None and cs.low_as == DEVELOPED else hw


def is_raw(header) -> bool:
    return isinstance(header, Header) and header.raw is not None


def _any_raw(headers) -> bool:
    """Whether any of `headers` is a camera raw file's (each distinct header looked at once, where they are
    `Coded`)."""
    return any(map(is_raw, headers.distinct() if hasattr(headers, "distinct") else headers))


def _rows_by_split(pairs: list[Pair]) -> dict[str, list[int]]:
    """The pairs' numbers, split by split."""
    by_split: dict[str, list[int]] = {}
    for i, pair in enumerate(pairs):
        by_split.setdefault(pair.split, []).append(i)
    return by_split


def plan_camera(raw: Path, pairs: list[Pair], headers: list[Header], *, raw_target: str, ratio_cap: float,
                to_8bit: bool, resized: bool) -> CameraPlan:
    """The `CameraPlan` of `pairs` (headers: low then high of each pair); splits with no camera raw file have none."""
    if not _any_raw(headers):  # (no list of a million Nones, nor the pairs grouped by split)
        return CameraPlan({}, {}, [])
    plan = CameraPlan({}, {}, [None] * len(pairs))
    for split, rows in _rows_by_split(pairs).items():
        lows = [is_raw(headers[2 * i]) for i in rows]
        highs = [is_raw(headers[2 * i + 1]) for i in rows]
        if not any(lows) and not any(highs):
            continue
        for side, flags in ((0, lows), (1, highs)):
            if any(flags) and not all(flags):
                raise ImageError(_mixed(raw, split, side, [pairs[i] for i in rows], flags))
        if not all(lows):
            pair = pairs[rows[0]]
            raise ImageError(f"{pair.high_rel}: a camera raw target for the image {pair.low_rel}; pack stores camera "
                             "raw as the input (packed mosaic) with a raw or image target: swap the sides (--low-dir/"
                             "--high-dir) or develop the targets first")
        if to_8bit or resized:
            what = "--to-8bit" if to_8bit else "--resize/--max-side"
            raise ConfigError(f"{what}: split {split!r} holds camera raw files, whose sensor counts pack keeps as "
                              f"they are; leave {what} out (normalisation happens on the device)")
        high_as = raw_target if all(highs) else IMAGE
        scale = 1 if high_as == PACKED else 2
        plan.splits[split] = CameraSplit(PACKED, high_as, scale)
        for i in rows:
            plan.exposures[i] = _check_pair(pairs[i], headers[2 * i], headers[2 * i + 1], high_as, ratio_cap)
        plan.docs[split] = _doc(plan.splits[split], [headers[2 * i] for i in rows],
                                [headers[2 * i + 1] for i in rows], [plan.exposures[i] for i in rows], ratio_cap)
    return plan


def plan_targets(raw: Path, pairs: list[Pair], headers: list[Header], *, raw_target: str, ratio_cap: float,
                 to_8bit: bool, resized: bool) -> CameraPlan:
    """The `CameraPlan` of a targets-only pack (each pair's two files are one; headers: each twice): a split of camera
    raw files stores each alone, `raw_target` PACKED (a sensor split whose two sides are the packed mosaic: the index
    gives the target's levels and exposure for both, ratio 1) or DEVELOPED (16-bit RGB at the mosaic's full size,
    which has no sensor counts: no sensor entry)."""
    if not _any_raw(headers):
        return CameraPlan({}, {}, [])
    plan = CameraPlan({}, {}, [None] * len(pairs))
    for split, rows in _rows_by_split(pairs).items():
        flags = [is_raw(headers[2 * i + 1]) for i in rows]
        if not any(flags):
            continue
        if not all(flags):
            raise ImageError(_mixed(raw, split, 1, [pairs[i] for i in rows], flags, "pack them as separate packs "
                                    "(a folder or list of each kind)"))
        if to_8bit or resized:
            what = "--to-8bit" if to_8bit else "--resize/--max-side"
            crop = "" if to_8bit else ", or cut each to at most N×N with --max-side N --fit crop"
            raise ConfigError(f"{what}: {raw} holds camera raw files, whose sensor counts pack keeps as they are; "
                              f"leave {what} out{crop}")
        cs = plan.splits[split] = CameraSplit(raw_target, raw_target, 1)
        if raw_target != PACKED:
            continue
        for i in rows:
            seconds, source = _exposure(pairs[i].high, pairs[i].high_rel, headers[2 * i + 1].raw,
                                        "a packed target's exposure is recorded with its levels, for the degradation")
            plan.exposures[i] = Exposure(seconds, seconds, (source, source), 1.0)
        heads = [headers[2 * i + 1] for i in rows]
        plan.docs[split] = _doc(cs, heads, heads, [plan.exposures[i] for i in rows], ratio_cap)
    return plan


def _check_pair(pair: Pair, low: Header, high: Header, high_as: str, cap: float) -> Exposure:
    info = low.raw
    if high_as == IMAGE:
        want = (2 * low.height, 2 * low.width)
        if high.hw != want:
            raise ImageError(f"{pair.high_rel} is {high.width}x{high.height} but its camera raw input {pair.low_rel} "
                             f"packs into {low.width}x{low.height} cells of 2×2 sensor pixels; an image target must be "
                             f"{want[1]}x{want[0]}, twice the packed size (develop it from the long exposure at full "
                             "size, cropped to whole 2×2 cells)")
    else:
        other = high.raw
        if other.sensor_hw != info.sensor_hw:
            raise ImageError(f"{pair.low_rel} has {info.sensor_hw[1]}x{info.sensor_hw[0]} sensor pixels but "
                             f"{pair.high_rel} has {other.sensor_hw[1]}x{other.sensor_hw[0]}; a raw pair must come "
                             "from one camera at one size: fix the pairing or leave the pair out")
        if info.camera and other.camera and info.camera != other.camera:
            raise ImageError(f"{pair.low_rel} was taken with a {info.camera} but {pair.high_rel} with a "
                             f"{other.camera}; a raw pair must come from one camera: fix the pairing or leave the "
                             "pair out")
    low_s, low_from = _exposure(pair.low, pair.low_rel, info)
    high_s, high_from = _exposure(pair.high, pair.high_rel, high.raw)
    return Exposure(low_s, high_s, (low_from, high_from), camera.ratio(low_s, high_s, cap))


RATIO_NEEDS = "the input's amplification ratio is the target's exposure over the input's"


def _exposure(path: Path, rel: str, info, why: str = RATIO_NEEDS) -> tuple[float, str]:
    seconds = camera.exposure_from_name(path)
    if seconds is not None and seconds > 0:
        return seconds, "name"
    if info is not None and info.exposure:
        return info.exposure, "metadata"
    where = "its name or its metadata" if info is not None else "its name"
    raise ImageError(f"{rel}: no exposure time in {where}; {why}: name the files as SID does "
                     "(<scene>_<shot>_<seconds>s.<ext>, e.g. 00001_00_0.04s.ARW) or keep the camera's ExposureTime tag")


def _doc(cs: CameraSplit, lows: list[Header], highs: list[Header], exposures: list[Exposure], cap: float) -> dict:
    def side(kind: str, heads: list[Header]) -> dict:
        doc: dict = {"kind": kind}
        if kind != IMAGE:
            doc["cameras"] = sorted({h.raw.camera or "unknown" for h in heads})
            doc["patterns"] = sorted({h.raw.pattern for h in heads})
        if kind == PACKED:
            doc["channels"] = list(camera.PACKED_ORDER)
        if kind == DEVELOPED:
            doc["develop"] = dict(camera.DEVELOP)
        return doc

    kinds = {PACKED: fmt.PACKED, DEVELOPED: fmt.DEVELOPED, IMAGE: fmt.IMAGE}
    sources = sorted({s for e in exposures for s in e.source})
    return {"low": side(kinds[cs.low_as], lows), "high": side(kinds[cs.high_as], highs), "libraw": camera.libraw(),
            "ratio_cap": cap, "exposure_from": sources,
            "levels": "index.levels: black of each packed channel (R, G, B, G), then white, in sensor counts"}


def _mixed(raw: Path, split: str, side: int, pairs: list[Pair], flags: list[bool],
           fix: str = "pack them as separate splits (--pairs-file SPLIT=FILE)") -> str:
    rels = [(p.high_rel if side else p.low_rel) for p in pairs]
    odd = [r for r, f in zip(rels, flags) if not f]
    usual = [r for r, f in zip(rels, flags) if f]
    if len(odd) > len(usual):
        odd, usual = usual, odd
    what = "targets" if side else "inputs"
    more = f" and {len(odd) - SHOWN} more" if len(odd) > SHOWN else ""
    return (f"{raw}: split {split!r}: the {what} mix camera raw files and images: {', '.join(odd[:SHOWN])}{more} "
            f"differ from the other {len(usual)}; a side of a split is stored as one type: {fix} or leave the odd "
            "files out")
