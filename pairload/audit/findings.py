"""What an audit found (`Finding`, one kind of them per `KINDS` entry), said in lines for a terminal and written as
JSON or CSV for a paper to cite (`AuditReport.write`)."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError
from ..format.atomic import write_bytes_atomic


@dataclass(frozen=True)
class Kind:
    """A class of finding: its `name` in files, how a summary line counts it (`counted`: "3 {counted}"), and
    whether it is a leak (the exit status of `pairload audit`)."""

    name: str
    counted: str
    leak: bool


KINDS = {k.name: k for k in (
    Kind("leak", "sample(s) of an evaluation split show a scene of a training split", True),
    Kind("near-duplicate", "sample(s) show a scene of another split of their pack", True),
    Kind("duplicate", "sample(s) repeat another sample of their split pixel for pixel", False),
    Kind("misaligned", "pair(s) whose input is shifted from its target", False),
    Kind("dark-target", "target(s) far darker than their split's others", False),
)}


@dataclass(frozen=True)
class Place:
    """A sample: its pack (as the audit names it), split and key."""

    pack: str
    split: str
    key: str

    def __str__(self) -> str:
        return f"{self.pack}:{self.split}/{self.key}"


@dataclass(frozen=True)
class Finding:
    """One finding of `kind` about the sample at `place` (and `other`, the sample it matches). `sides` says which
    images matched ("target~target", "input~target", …); `hamming`: their fingerprints' distance in bits;
    `similarity`: their verified likeness (1.0: identical pixels); `shift`: (dy, dx, confidence) of a misaligned
    pair; `luma`: a dark target's mean luma (and `note` its split's median)."""

    kind: str
    place: Place
    other: Place | None = None
    sides: str = ""
    hamming: int | None = None
    similarity: float | None = None
    shift: tuple[float, float, float] | None = None
    luma: float | None = None
    note: str = ""

    def line(self) -> str:
        if self.kind == "misaligned":
            dy, dx, c = self.shift
            return (f"misaligned: {self.place}: shifted by {(dy * dy + dx * dx) ** 0.5:.1f} px (dy {dy:+.2f}, "
                    f"dx {dx:+.2f}; confidence {c:.2f})")
        if self.kind == "dark-target":
            return f"dark-target: {self.place}: mean luma {self.luma:.3f} ({self.note})"
        how = "identical pixels" if self.similarity == 1.0 and self.hamming is None else (
            f"{self.hamming} bits apart, similarity {self.similarity:.2f}")
        return f"{self.kind}: {self.place} ~ {self.other} ({self.sides}: {how})"

    def row(self) -> dict:
        """A flat record (CSV columns, JSON objects)."""
        dy, dx, c = self.shift if self.shift is not None else (None, None, None)
        other = self.other or Place("", "", "")
        return {"kind": self.kind, "pack": self.place.pack, "split": self.place.split, "key": self.place.key,
                "other_pack": other.pack, "other_split": other.split, "other_key": other.key, "sides": self.sides,
                "hamming": self.hamming, "similarity": _rounded(self.similarity, 4), "dy": _rounded(dy, 3),
                "dx": _rounded(dx, 3), "confidence": _rounded(c, 3), "luma": _rounded(self.luma, 4),
                "note": self.note}


def _rounded(value, digits: int):
    return None if value is None else round(float(value), digits)


COLUMNS = tuple(Finding(kind="", place=Place("", "", "")).row())


@dataclass
class AuditReport:
    """An audit's findings, and what it read: per source its splits with their samples and where their facts came
    from (`sources`: {pack: {"path", "splits": {split: {"samples", "facts", "training"}}}}), per split its
    brightness (`exposure`: {"pack:split": `audit.packing.exposure_stats`}), and the thresholds it used."""

    findings: list[Finding] = field(default_factory=list)
    sources: dict = field(default_factory=dict)
    exposure: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)

    @property
    def leaks(self) -> list[Finding]:
        return [f for f in self.findings if KINDS[f.kind].leak]

    def of(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]

    def summary(self) -> list[str]:
        """One line per kind of finding: how many, and where."""
        out = []
        for kind in KINDS.values():
            found = self.of(kind.name)
            where: dict[str, int] = {}
            for f in found:
                pair = f"{f.place.pack}:{f.place.split}" + (f" ~ {f.other.pack}:{f.other.split}" if f.other else "")
                where[pair] = where.get(pair, 0) + 1
            said = f" ({', '.join(f'{k}: {v}' for k, v in where.items())})" if where else ""
            out.append(f"{kind.name}: {len(found)} {kind.counted}{said}")
        return out

    def exposure_lines(self) -> list[str]:
        out = []
        for name, e in self.exposure.items():
            sides = [f"{side}s {e[side]['median']:.3f}" for side in ("input", "target") if side in e]
            if sides:
                out.append(f"exposure: {name}: median luma of the " + ", of the ".join(sides))
        return out

    def lines(self) -> list[str]:
        """What `pairload audit` prints: the summary, every finding, each split's exposure."""
        return self.summary() + [f.line() for f in self.findings] + self.exposure_lines()

    def document(self) -> dict:
        return {"pairload_audit": 1, "settings": self.settings, "sources": self.sources,
                "summary": {kind: len(self.of(kind)) for kind in KINDS}, "exposure": self.exposure,
                "findings": [f.row() for f in self.findings]}

    def write(self, path: str | Path) -> None:
        """The findings as JSON (`.json`: settings, sources, summary, exposure and findings) or CSV (`.csv`: one row
        per finding, columns `COLUMNS`), written atomically."""
        path = check_out(path)
        if path.suffix.lower() == ".json":
            data = json.dumps(self.document(), indent=1).encode()
        else:
            buf = io.StringIO()
            writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
            writer.writeheader()
            writer.writerows(f.row() for f in self.findings)
            data = buf.getvalue().encode()
        write_bytes_atomic(path, data)


def check_out(path: str | Path) -> Path:
    """`path`, a file the findings can be written to: named .json or .csv."""
    path = Path(path)
    if path.suffix.lower() not in (".json", ".csv"):
        raise ConfigError(f"--out {path}: expected a file name ending in .json or .csv, found "
                          f"{path.suffix or 'no suffix'}; name it FILE.json (the findings and what was read) or "
                          "FILE.csv (one row per finding)")
    return path

