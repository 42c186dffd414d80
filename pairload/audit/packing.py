"""What `pairload pack` concludes from the facts it measured of each pair (`measures.pair_facts`, stored as the
index's `format.facts` columns), and what `pairload info` shows of them: pairs shifted beyond `--max-shift` (refused,
or left out with `--skip-misaligned`), a split whose inputs are brighter than their targets (its sides swapped:
refused unless accepted), targets far darker than their split's others (listed), and per split the distributions of
shift and brightness. Arrays in, decisions and sentences out: no pack, folder or loader code."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..errors import ImageError, PairingError
from ..format.facts import CONFIDENCE, HIGH, LOW, FactsColumns

# A shift estimate counts from this confidence on (`measures.shift_between`: the agreeing phase-correlation peaks of
# the image halves' projections). Measured (2026-11-29) on 216 pairs of 18 real photographs at 600x400, darkened
# 7-30x (a third under a 2.2 tone curve) with noise, a third unshifted and the others by up to 5 px
# (`benchmarks/shift_confidence.py`): from 0.3 on (164 pairs), every estimate was within 0.34 px of the true shift;
# none off by more than 0.5 px scored above 0.
CONFIDENT = 0.3
SHIFTED_PX = 1.0  # a pair shifted by this much or more is counted (pack's report, `info`): one whose estimate rounds
# to it (within half a pixel below: the estimates are that close), so a pair shifted by 1 px is counted, and an aligned
# pair's estimate (under 0.15 px on real photographs) is not
COUNTED_FROM = SHIFTED_PX - 0.5
# An input and its target differ clearly in brightness when the brighter one's mean luma is at least DIFFERS times
# the darker one's, and greater by DIFFERS_MIN of the full range (two near-black images do not count). A low-light
# input is 3-20x darker than its target; pairs of about one brightness (denoising, deblurring, a retouched photo)
# say nothing of which side is which, and are left out of the count.
DIFFERS = 1.5
DIFFERS_MIN = 0.01
SWAPPED = 0.5  # more than this fraction of a split's clearly differing pairs with the input the brighter: swapped
# A target is far darker than its split's others below both DARK_MADS median absolute deviations under the median
# of the split's target lumas, on a log scale (brightness goes by multiples: an exposure, a gain), and DARK_LUMA
# (dark in any dataset), among at least DARK_MIN_TARGETS targets (fewer say nothing of what is usual).
DARK_MADS = 3.0
DARK_LUMA = 0.15
DARK_MIN_TARGETS = 8
ALLOW_BRIGHT = "--allow-bright-inputs"


class MisalignedPairs(ImageError):
    """Pairs shifted beyond `--max-shift`: the message says how many and the fix, `lines` names each pair."""

    def __init__(self, message: str, lines: tuple[str, ...] = ()):
        super().__init__(message)
        self.lines = tuple(lines)


class SwappedSides(PairingError):
    """Most inputs of a split are brighter than their targets: the input and target folders look swapped."""


@dataclass(frozen=True)
class CheckedSplit:
    """One split's facts as `pack` checks them: its keys and `facts` in index order, `own`: the samples that store
    their target (a shared target counted once), `names(k)`: sample k's (input, target) files, or None where only
    the keys are known (a pack finished from its parts' records); `bright_ok`: why its inputs may be brighter than
    their targets (exposure brackets, `--allow-bright-inputs`), or None; `paired`: it stores inputs (not targets
    only); `brightness`: its inputs' brightness compares with its targets' (not camera raw counts, whose exposure
    times say which side is which)."""

    split: str
    keys: list[str]
    facts: FactsColumns
    own: np.ndarray
    names: Callable[[int], tuple[str, str] | None] | None = None
    bright_ok: str | None = None
    paired: bool = True
    brightness: bool = True

    def pair(self, k: int) -> str:
        """Sample k as messages name it: its two files, else its key."""
        files = self.names(k) if self.names is not None else None
        return f"{files[0]} ↔ {files[1]}" if files else f"{self.split} key {self.keys[k]}"

    def target(self, k: int) -> str:
        files = self.names(k) if self.names is not None else None
        return files[1] if files else f"the target of {self.split} key {self.keys[k]}"


def confident(facts: FactsColumns) -> np.ndarray:
    """The samples whose shift estimate counts (`CONFIDENT`)."""
    return facts.shift[:, CONFIDENCE] >= CONFIDENT


def misaligned(facts: FactsColumns, max_shift: float) -> np.ndarray:
    """Indices of the samples confidently shifted by more than `max_shift` pixels."""
    return np.flatnonzero(confident(facts) & (facts.shift_px() > max_shift))


def shift_line(s: CheckedSplit, k: int) -> str:
    """One misaligned pair in a line: 'low/1.png ↔ high/1.png: shifted by 4.0 px (dy +4.00, dx -0.10; confidence
    0.93)'."""
    dy, dx, c = (float(v) for v in s.facts.shift[k])
    return f"{s.pair(k)}: shifted by {np.hypot(dy, dx):.1f} px (dy {dy:+.2f}, dx {dx:+.2f}; confidence {c:.2f})"


def refuse_misaligned(splits: list[CheckedSplit], max_shift: float) -> None:
    """Raise `MisalignedPairs` naming every pair confidently shifted by more than `max_shift` (`--max-shift`)."""
    found = [(s, int(k)) for s in splits if s.paired for k in misaligned(s.facts, max_shift)]
    if not found:
        return
    s, k = max(found, key=lambda sk: float(np.hypot(*sk[0].facts.shift[sk[1], :CONFIDENCE])))
    raise MisalignedPairs(
        f"{len(found)} pair{'s are' if len(found) != 1 else ' is'} shifted by more than --max-shift {max_shift:g} px "
        f"(listed above; the largest: {shift_line(s, k)}); align or replace {'them' if len(found) != 1 else 'it'}, "
        "raise --max-shift, or pass --skip-misaligned to pack the others and list these in the report",
        tuple(f"misaligned: {shift_line(s, k)}" for s, k in found))


def brighter(luma: np.ndarray) -> tuple[int, int]:
    """(inputs clearly brighter than their targets, pairs whose two sides differ clearly: `DIFFERS`) of (n, 2)
    lumas."""
    low, high = luma[:, LOW].astype(np.float64), luma[:, HIGH].astype(np.float64)
    differ = (np.maximum(low, high) >= DIFFERS * np.minimum(low, high)) & (np.abs(low - high) >= DIFFERS_MIN)
    return int((differ & (low > high)).sum()), int(differ.sum())


def check_sides(s: CheckedSplit) -> str | None:
    """Refuse (`SwappedSides`) a split most of whose clearly differing pairs have the brighter image as input, its
    median input luma `DIFFERS` times its median target luma or more, unless `bright_ok` says why it may; then a
    line saying they were accepted, else None."""
    if not (s.paired and s.brightness):
        return None
    up, differ = brighter(s.facts.luma)
    med_low, med_high = (float(np.median(s.facts.luma[:, side])) for side in (LOW, HIGH))
    # and the typical input clearly brighter than the typical target: synthetic pairs of about one brightness, which
    # go either way, are no swapped low-light pairs
    if not differ or up <= SWAPPED * differ or med_low < DIFFERS * med_high:
        return None
    said = (f"split {s.split!r}: {up} of the {differ} pairs whose sides differ clearly in brightness have the brighter "
            f"image as input (median luma {med_low:.2f} for the inputs, {med_high:.2f} for the targets)")
    if s.bright_ok:
        return f"{said}; accepted: {s.bright_ok}"
    k = int(np.argmax(s.facts.luma[:, LOW] - s.facts.luma[:, HIGH]))
    raise SwappedSides(f"{said}, e.g. {s.pair(k)}: the input and target sides look swapped (the brighter images "
                       "given as inputs, as --low-dir target --high-dir input would); swap --low-dir and --high-dir "
                       f"(or the columns of --pairs-file), or pass {ALLOW_BRIGHT} if this dataset's inputs really "
                       "are brighter than their targets (exposure correction with over-exposed inputs)")


def dark_targets(luma_high: np.ndarray) -> tuple[np.ndarray, float, float]:
    """(indices, threshold, median) of the targets far darker than the others of their split (`DARK_MADS`,
    `DARK_LUMA`); no index among fewer than `DARK_MIN_TARGETS` targets."""
    y = np.asarray(luma_high, dtype=np.float64)
    if len(y) < DARK_MIN_TARGETS:
        return np.zeros(0, np.int64), 0.0, float(np.median(y)) if len(y) else 0.0
    med = float(np.median(y))
    logs = np.log(np.maximum(y, 1e-4))  # (a black target is as dark as 1e-4)
    middle = float(np.median(logs))
    limit = min(float(np.exp(middle - DARK_MADS * float(np.median(np.abs(logs - middle))))), DARK_LUMA)
    return np.flatnonzero(y < limit), limit, med


def dark_line(s: CheckedSplit) -> str | None:
    """A warning naming the split's targets far darker than its other targets (LOL's our485/high holds four), or
    None."""
    own = np.flatnonzero(s.own)
    found, limit, med = dark_targets(s.facts.luma[own, HIGH])
    if not len(found):
        return None
    listed = ", ".join(f"{s.target(int(own[k]))} ({float(s.facts.luma[own[k], HIGH]):.3f})" for k in found)
    return (f"split {s.split!r}: {len(found)} target{'s are' if len(found) != 1 else ' is'} far darker than the "
            f"split's others (mean luma under {limit:.3f}; the split's median {med:.2f}): {listed}; look at "
            f"{'them' if len(found) != 1 else 'it'} (`pairload preview`), and replace or leave out a target that is "
            "not what a model should learn to make")


@dataclass
class TrustReport:
    """What pack found of its pairs, for its report: pairs measured and shifted, the largest shift, bright inputs
    accepted, dark targets, and the misaligned pairs left out (`--skip-misaligned`)."""

    measured: int = 0  # pairs with a confident shift estimate
    pairs: int = 0  # pairs (not targets only)
    shifted: int = 0  # confidently shifted by SHIFTED_PX or more
    largest: str | None = None  # the most shifted pair, in words
    accepted: list[str] = field(default_factory=list)  # splits whose bright inputs were accepted, and why
    dark: list[str] = field(default_factory=list)  # warnings: targets far darker than their split's others
    skipped: list[str] = field(default_factory=list)  # misaligned pairs left out, one line each
    max_shift: float | None = None

    def lines(self) -> list[str]:
        if not self.pairs:
            return [f"warning: {line}" for line in self.dark]
        if self.shifted:
            align = (f"alignment: {self.shifted} of {self.pairs} pairs shifted by {SHIFTED_PX:g} px or more "
                     f"(the largest: {self.largest}); `pairload info` shows each split's shifts, --max-shift PX "
                     "refuses pairs beyond PX")
        else:
            align = f"alignment: no pair of {self.pairs} shifted by {SHIFTED_PX:g} px or more"
        if self.measured < self.pairs:
            align += f" ({self.pairs - self.measured} without a confident estimate: flat or very noisy images)"
        out = [align] + [f"bright inputs: {line}" for line in self.accepted]
        if self.skipped:
            out.append(f"skipped {len(self.skipped)} misaligned pair{'s' if len(self.skipped) != 1 else ''} "
                       f"(shifted by more than --max-shift {self.max_shift:g} px; --skip-misaligned):")
            out += [f"  {line}" for line in self.skipped]
        return out + [f"warning: {line}" for line in self.dark]


def review(splits: list[CheckedSplit], *, max_shift: float | None = None) -> TrustReport:
    """Check a pack's splits (every split whole): refuse pairs beyond `max_shift` (`MisalignedPairs`) and a split
    whose sides look swapped (`SwappedSides`); else what its report says of them."""
    if max_shift is not None:
        refuse_misaligned(splits, max_shift)
    report = TrustReport(max_shift=max_shift)
    most = None
    for s in splits:
        dark = dark_line(s) if s.brightness else None
        if dark:
            report.dark.append(dark)
        if not s.paired:
            continue
        line = check_sides(s)
        if line:
            report.accepted.append(line)
        sure = confident(s.facts)
        px = s.facts.shift_px()
        report.pairs += len(s.keys)
        report.measured += int(sure.sum())
        report.shifted += int((sure & (px >= COUNTED_FROM)).sum())
        if sure.any():
            k = int(np.argmax(np.where(sure, px, -1.0)))
            if px[k] >= COUNTED_FROM and (most is None or px[k] > most[0]):
                most = (float(px[k]), shift_line(s, k))
    report.largest = most[1] if most else None
    return report


def shift_stats(facts: FactsColumns) -> dict:
    """A split's shifts as `info` shows them: over its confident estimates, the median, 95th percentile and largest
    |shift| in input pixels, how many are `SHIFTED_PX` or more (`COUNTED_FROM`), and how many pairs had no confident
    estimate."""
    sure = confident(facts)
    px = facts.shift_px()[sure]
    out = {"pairs": int(len(sure)), "measured": int(sure.sum()), "shifted": int((px >= COUNTED_FROM).sum())}
    if len(px):
        out.update(median=round(float(np.median(px)), 2), p95=round(float(np.percentile(px, 95)), 2),
                   max=round(float(px.max()), 2))
    return out


def exposure_stats(facts: FactsColumns, own: np.ndarray | None = None) -> dict:
    """A split's brightness as `info` shows it: per side the median, least and most mean luma in [0, 1] (targets
    counted once where shared: `own`), the inputs brighter than their targets among the pairs that differ, and the
    targets far darker than the others (`dark_targets`, as places in the split)."""
    own = np.flatnonzero(own) if own is not None else np.arange(len(facts.luma))
    out = {}
    for name, side, rows in (("input", LOW, slice(None)), ("target", HIGH, own)):
        y = facts.luma[rows, side]
        if len(y):
            out[name] = {"median": round(float(np.median(y)), 3), "min": round(float(y.min()), 3),
                         "max": round(float(y.max()), 3)}
    up, differ = brighter(facts.luma)
    out.update(brighter_inputs=up, differing=differ)
    found, limit, _ = dark_targets(facts.luma[own, HIGH])
    if len(found):
        out.update(dark_targets=[int(own[k]) for k in found], dark_below=round(limit, 3))
    return out
