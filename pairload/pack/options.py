"""What a pack is asked to do and what it reports: `PackOptions` (validated on construction), the parsers of the
CLI's pack options (`parse_size`, `parse_split_names`, `parse_wxh`, and `from_cli`, all of them at once),
`PackReport` and, for a pack into a URL, `UploadReport`, with the lines `pairload pack` prints of them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from pathlib import Path

from ..audit.packing import TrustReport
from ..errors import ConfigError
from ..format.encoding import ENCODED, ZSTD, Encoding, from_store
from ..format.schema import check_split_name
from ..format.sequences import GAP_POLICIES
from ..folders.decode import CROP, DEVELOPED, FITS, PACKED, RESIZE
from ..units import human_bytes, parse_bytes

DEFAULT_SHARD_SIZE = 256 * 1024**2
RAW_TARGETS = (DEVELOPED, PACKED)
INDEXES = ("binary", "json")  # --index  # --raw-target: SID's developed target, or the packed mosaic (raw-to-raw)
MIN_SHARD_SIZE = 64 * 1024
MAX_RESIZE_PIXELS = 8192 * 8192  # a --resize target beyond this (192 MB per image) is a typo, not a training size


def parse_size(text: str | int) -> int:
    """A shard size ('256MB'; `pairload.units.parse_bytes`) of at least 64 KB."""
    value = parse_bytes(text, "shard size")
    if value < MIN_SHARD_SIZE:
        raise ConfigError(f"shard size {text!r} is too small: use at least 64KB")
    return value


def parse_split_names(items) -> tuple[tuple[str, str], ...]:
    """['Dataset_Part1=train', …] → (('Dataset_Part1', 'train'), …)."""
    out = []
    for item in items:
        old, sep, new = item.partition("=")
        if not sep or not old.strip() or not new.strip():
            raise ConfigError(f"--split-name {item!r}: expected FOLDER=SPLIT, e.g. our485=train")
        out.append((old.strip(), new.strip()))
    return tuple(out)


def parse_wxh(text: str | None) -> tuple[int, int] | None:
    """'600x400' → (600, 400); None stays None."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*[xX×]\s*(\d+)\s*", text)
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise ConfigError(f"size {text!r}: expected WIDTHxHEIGHT, e.g. 600x400")
    return int(m.group(1)), int(m.group(2))


def check_gap_policy(gaps, sequences: bool) -> None:
    """--sequence-gaps: one of `GAP_POLICIES`, other than the default only with --sequences."""
    if gaps not in GAP_POLICIES:
        raise ConfigError(f"--sequence-gaps {gaps}: expected refuse, split or allow (what pack --sequences does "
                          "with a sequence whose frame numbers break: refuse it, split it into evenly numbered runs, "
                          "or keep it whole)")
    if gaps != GAP_POLICIES[0] and not sequences:
        raise ConfigError(f"--sequence-gaps {gaps}: only with --sequences (it says what to do where a sequence's frame "
                          f"numbers break); add --sequences, or leave --sequence-gaps out")


@dataclass(frozen=True, kw_only=True)
class PackOptions:
    low_dir: str | None = None
    high_dir: str | None = None
    pairs_file: str | tuple[str, ...] | None = None  # a path, or `split=path` entries
    skip_unmatched: bool = False
    split_names: tuple[tuple[str, str], ...] = ()  # (folder name, split name) overrides
    name_template: str | None = None  # BasicSR filename_tmpl: the low stem from the high stem, e.g. '{}x4'

    to_8bit: bool = False
    resize: tuple[int, int] | None = None  # (width, height)
    max_side: int | None = None
    shard_size: int = DEFAULT_SHARD_SIZE
    workers: int = 0  # 0: all cores
    overwrite: bool = False  # replace a manifest.json that is not this RAW's pack (another pack's, or a user's file)
    compress: str | None = None  # "zstd": each image member as one zstd frame (format version 3); None: raw
    compress_level: int = ZSTD.default_level  # the level of an encoding that has levels (`encoding.Encoding`)
    # "encoded": each JPEG file kept as it is, every other image lossless as tiles (format version 7); "decoded":
    # every image's pixels (raw, or compressed by `compress`)
    store: str = "decoded"
    raw_target: str = DEVELOPED  # camera raw targets: developed by LibRaw (SID), or "packed" as the input (ELD)
    ratio_cap: float = 300.0  # camera raw inputs: the amplification ratio's ceiling (SID's 300)
    index: str = "binary"  # where the per-sample index goes: "binary" `<split>.index` files (version 5), or "json"
    # `--targets-only`: RAW is a folder of photos (or a list of them), each stored alone as a target for a
    # degradation to make its input from (format version 6), in one split named `split`
    targets_only: bool = False
    split: str = "train"
    fit: str = RESIZE  # an image larger than max_side: shrunk keeping its aspect, or (CROP) its centre cut to N×N
    # `--sequences`: the frames of videos or bursts, each folder holding frames one sequence (`pack.sequences`),
    # recorded in the manifest's split entries
    sequences: bool = False
    sequence_gaps: str = "refuse"  # `--sequence-gaps`: a sequence whose frame numbering breaks (`pack.sequences`)
    npy_bgr: bool = False  # `--npy-bgr`: .npy colour arrays hold BGR (SDSD, SMID): stored as RGB
    # `--max-shift PX`: refuse pairs whose input is confidently shifted from its target by more than PX pixels, or
    # (`--skip-misaligned`) leave them out, listed; `--allow-bright-inputs`: accept a split whose inputs are mostly
    # brighter than their targets (`audit.packing`)
    max_shift: float | None = None
    skip_misaligned: bool = False
    allow_bright_inputs: bool = False

    def __post_init__(self) -> None:
        self._check_targets_only()
        self._check_trust()
        if self.index not in INDEXES:
            raise ConfigError(f"--index {self.index}: expected {' or '.join(INDEXES)} (binary: a memory-mapped "
                              "<split>.index per split, format version 5; json: in manifest.json, for older readers)")
        if self.raw_target not in RAW_TARGETS:
            raise ConfigError(f"--raw-target {self.raw_target}: expected {' or '.join(RAW_TARGETS)} (developed: "
                              "LibRaw develops the target as SID does; packed: kept as a packed mosaic, raw-to-raw)")
        if isinstance(self.ratio_cap, bool) or not isinstance(self.ratio_cap, (int, float)) or not self.ratio_cap >= 1:
            raise ConfigError(f"--ratio-cap {self.ratio_cap}: expected a number of at least 1 (SID uses 300)")
        encoding = from_store(self.store, self.compress)  # a ConfigError naming the values --store/--compress take
        if encoding.per_member and self.index != "binary":
            raise ConfigError(f"--store encoded with --index {self.index}: an encoded pack is format version 7, whose "
                              "index is always a binary <split>.index; leave --index out")
        levels = encoding.levels
        if levels and self.compress_level not in levels:
            raise ConfigError(f"--compress-level {self.compress_level}: expected {levels.start} to {levels.stop - 1} "
                              f"(default {encoding.default_level}; higher is smaller and slower)")
        encoding.require(f"--compress {encoding.name}")
        if self.resize is not None and self.max_side is not None:
            raise ConfigError("--resize and --max-side cannot be used together; pick one")
        if self.resize is not None and self.resize[0] * self.resize[1] > MAX_RESIZE_PIXELS:
            w, h = self.resize
            raise ConfigError(f"--resize {w}x{h}: {w * h:,} pixels per image ({human_bytes(6 * w * h)} per pair) is "
                              f"more than pack stores (at most {MAX_RESIZE_PIXELS:,} pixels, e.g. 8192x8192); check "
                              "the size, given as WIDTHxHEIGHT (e.g. 600x400)")
        if self.max_side is not None and self.max_side < 1:
            raise ConfigError(f"--max-side {self.max_side}: expected a positive number of pixels")
        if self.workers < 0:
            raise ConfigError(f"--workers {self.workers}: expected 0 (all cores) or a positive number")
        if self.shard_size < MIN_SHARD_SIZE:
            raise ConfigError(f"shard size {self.shard_size} bytes is too small: use at least 64KB")
        check_gap_policy(self.sequence_gaps, self.sequences)

    def _check_targets_only(self) -> None:
        """The options of a targets-only pack, and those that only it takes."""
        if self.fit not in FITS:
            raise ConfigError(f"--fit {self.fit}: expected {' or '.join(FITS)} (how an image larger than --max-side N "
                              "is made to fit: shrunk keeping its aspect, or its centre cropped to at most N×N)")
        if self.fit == CROP and not self.targets_only:
            raise ConfigError("--fit crop: only with --targets-only (a pair's images are resized together); leave "
                              "--fit out")
        if self.fit == CROP and self.max_side is None:
            raise ConfigError("--fit crop: give --max-side N, the largest side of the centre crop")
        if not self.targets_only:
            if self.split != "train":
                raise ConfigError(f"--split {self.split}: only with --targets-only (a pair pack takes its splits from "
                                  "its folders or pairs files; --split-name FOLDER=SPLIT renames them)")
            return
        check_split_name(self.split)
        pair_options = {"--low-dir": self.low_dir, "--high-dir": self.high_dir, "--pairs-file": self.pairs_file,
                        "--skip-unmatched": self.skip_unmatched, "--split-name": self.split_names,
                        "--name-template": self.name_template}
        given = [flag for flag, value in pair_options.items() if value]
        if given:
            raise ConfigError(f"{given[0]}: finds pairs, and --targets-only packs every photo of PHOTOS alone; leave "
                              f"{given[0]} out (a list file of photos can be passed as PHOTOS)")
        if self.index != "binary":
            raise ConfigError(f"--index {self.index}: a targets-only pack is format version 6, which no reader of "
                              "json indexes reads; leave --index out")
        if self.sequences:
            raise ConfigError("--sequences: packs the frames of videos as pairs, and --targets-only packs photos "
                              "alone; leave one of them out")

    def _check_trust(self) -> None:
        """--max-shift, --skip-misaligned, --allow-bright-inputs."""
        shift = self.max_shift
        if shift is not None and (isinstance(shift, bool) or not isinstance(shift, (int, float))
                                  or not 0 < shift < float("inf")):
            raise ConfigError(f"--max-shift {shift}: expected a positive number of pixels (e.g. 1: pairs whose input "
                              "is shifted from its target by more than 1 px are refused)")
        if self.skip_misaligned and shift is None:
            raise ConfigError("--skip-misaligned: give --max-shift PX too, the largest shift of a pair that is packed")
        if self.skip_misaligned and self.sequences and self.sequence_gaps == "refuse":
            raise ConfigError("--skip-misaligned with --sequences: a frame left out breaks its sequence's frame "
                              "numbers; add --sequence-gaps split (each evenly numbered run its own sequence) or "
                              "--sequence-gaps allow, or leave --skip-misaligned out to have the misaligned frames "
                              "listed and refused")
        if self.targets_only and (shift is not None or self.allow_bright_inputs):
            flag = "--max-shift" if shift is not None else "--allow-bright-inputs"
            raise ConfigError(f"{flag}: compares each input with its target, and --targets-only stores targets "
                              f"alone; leave {flag} out")

    @property
    def encoding(self) -> Encoding:
        """How the image members are stored (`--store`, `--compress`: an entry of `encoding.ENCODINGS`; raw by
        default)."""
        return from_store(self.store, self.compress)


def from_cli(values: dict) -> PackOptions:
    """The `PackOptions` of `pairload pack`'s parameters by name, as the CLI parsed them (the sizes, --resize,
    --split-name and --pairs-file as typed); its other parameters (RAW, SHARDS, --part, …) are not pack options and
    are left out."""
    names = {f.name for f in fields(PackOptions)}
    given = {k: v for k, v in values.items() if k in names}
    given.update(pairs_file=tuple(values["pairs_file"]) if values.get("pairs_file") else None,
                 split_names=parse_split_names(values.get("split_name") or []), resize=parse_wxh(values.get("resize")),
                 shard_size=parse_size(values.get("shard_size", DEFAULT_SHARD_SIZE)))
    return PackOptions(**given)


@dataclass
class UploadReport:
    url: str  # the destination, any password or query string left out
    staging: Path
    kept: bool = True  # the staging folder is still there (a valid local pack)
    reused: bool = False  # the staging folder already held this pack: nothing was decoded
    uploaded: list[str] = field(default_factory=list)  # in upload order; manifest.json last
    skipped: list[str] = field(default_factory=list)  # already at the destination with the same bytes
    deleted: list[str] = field(default_factory=list)  # the old manifest, and shards no longer listed
    bytes_uploaded: int = 0

    def summary(self) -> str:
        """One line: what went to the bucket, what was already there, where the staging folder is."""
        manifest = "manifest.json"
        shards = [n for n in self.uploaded if n != manifest]
        there = [n for n in self.skipped if n != manifest]
        stale = [n for n in self.deleted if n != manifest]
        return (f"uploaded {len(shards)} shards ({human_bytes(self.bytes_uploaded)})"
                + (f" and {manifest} (last)" if manifest in self.uploaded else "") + f" to {self.url}"
                + (f"; {manifest} there is already this pack's" if manifest in self.skipped else "")
                + f"; skipped {len(there)} shards already there"
                + (f"; deleted {len(stale)} shards the new manifest does not list" if stale else "")
                + (f"; staging folder kept at {self.staging} (a valid local pack; --no-keep-staging removes it)"
                   if self.kept else f"; staging folder {self.staging} removed"))


# what each phase of a pack does, as the summary line says it (the report's JSON keeps the short names)
PHASE_WORDS = {"find": "finding pairs", "probe": "reading image headers",
               "measure": "measuring every pair to leave the misaligned out", "plan": "planning shards",
               "decode": "decoding and writing", "decode_compress_write": "decoding, compressing and writing",
               "decode_keep_write": "decoding, keeping JPEG files, tiling the other images and writing",
               "hash_fsync_tail": "hashing and syncing the last shards",
               "finish": "renaming shards and writing the manifest"}


@dataclass
class PackReport:
    shards_dir: Path
    splits: dict[str, dict] = field(default_factory=dict)  # split -> {"samples", "shards", "bytes"}
    gray: list[str] = field(default_factory=list)
    alpha: list[str] = field(default_factory=list)
    converted_16bit: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    skipped_per_split: dict[str, int] = field(default_factory=dict)
    layout: dict[str, dict] = field(default_factory=dict)  # split -> folders it came from and the pairing rule(s)
    unused: list[dict] = field(default_factory=list)  # image-like files in no pair: folder, reason, count, names, hint
    split_folders: dict[str, dict] = field(default_factory=dict)  # folder name -> {"split", "how"}
    seconds: float = 0.0
    part: str | None = None  # a part of a pack (`pack --part I/N`): "I/N"
    waiting: list[int] = field(default_factory=list)  # parts whose records the manifest still waits for
    finished: bool = False  # this run wrote the manifest of a pack made in parts
    workers: int = 1
    phases: dict[str, float] = field(default_factory=dict)  # seconds per phase (PHASE_WORDS), kept as named in JSON
    compression: str | None = None
    sequences: dict[str, str] = field(default_factory=dict)  # `--sequences`: split -> its sequences in words
    kept: int = 0  # `--store encoded`: the JPEG files kept as they are
    kept_notes: dict[str, list[str]] = field(default_factory=dict)  # and of them, those worth a word ("progressive")
    tiled: dict[str, list[str]] = field(default_factory=dict)  # the images stored as tiles, by what their files were
    decoded: dict[str, list[str]] = field(default_factory=dict)  # and the images stored as pixels, by reason
    url: str | None = None  # a pack into a URL: where (shards_dir is then its local staging folder)
    upload: UploadReport | None = None  # a pack into a URL: what was uploaded, skipped and deleted
    trust: TrustReport | None = None  # what pack found of its pairs' alignment and brightness (`audit.packing`)

    @property
    def pairs(self) -> int:
        return sum(s["samples"] for s in self.splits.values())

    def timings(self) -> str:
        """The phases in users' words with their seconds, and the rate shards were written at."""
        spent = [f"{PHASE_WORDS.get(k, k.replace('_', ' '))} {v:.1f} s" for k, v in self.phases.items()]
        written = sum(s.get("bytes", 0) for s in self.splits.values())
        return ", ".join(spent + [f"{written / 1e6 / max(self.seconds, 1e-9):,.1f} MB/s written"])

    def lines(self, options: PackOptions) -> list[str]:
        """What `pairload pack` prints of the pack it made with `options`: a part's state (alone until the part that
        finishes the pack), each split, the run and its upload, and every file converted or left out."""
        unit = "targets" if options.targets_only else "pairs"
        if self.part is not None:
            state = ("and wrote the manifest (the last part to finish)" if self.finished else
                     f"{self.pairs} {unit}; waiting for part(s) {', '.join(map(str, self.waiting[:10]))} before the "
                     "manifest")
            part = [f"part {self.part}: done in {self.seconds:.1f} s, {state}"]
            if not self.finished:
                return part
        else:
            part = []
        splits = [self._split_line(split, options, unit) for split in self.splits]
        if self.upload is not None and self.upload.reused:
            run = [f"{self.pairs} {unit} already packed in the staging folder {self.shards_dir} (nothing decoded)"]
        else:
            run = [f"packed {self.pairs} {unit} in {self.seconds:.1f} s ({self.pairs / max(self.seconds, 1e-9):,.0f} "
                   f"{unit}/s, {self.workers} workers) into {self.shards_dir}; {self.timings()}"]
        upload = [self.upload.summary()] if self.upload is not None else []
        stored = [self.stored_line()] if options.encoding is ENCODED else []
        checks = self.trust.lines() if self.trust is not None else []
        return part + splits + stored + run + upload + checks + self._notes()

    def stored_line(self) -> str:
        """An encoded pack's members: 'kept 4,980 JPEG files as they are (3 progressive (c.jpg, …): …); stored 20
        images lossless as tiles: 12 PNG (a.png, …), 8 CMYK JPEG (b.jpg); stored 1 image as pixels: 1 incompressible
        (n.png)', each kind and reason most frequent first, with its first files."""
        line = f"kept {self.kept:,} JPEG file{'s as they are' if self.kept != 1 else ' as it is'}"
        if self.kept_notes:
            line += (f" ({_counted(self.kept_notes)}: a GPU's hardware JPEG decoder takes baseline files only, so "
                     "nvImageCodec decodes these on its CPU-assisted decoder, many times slower; `jpegtran -copy all "
                     "IN > OUT` rewrites one as a baseline file, losslessly)")
        for what, found in (("lossless as tiles", self.tiled), ("as pixels", self.decoded)):
            total = sum(len(v) for v in found.values())
            if total:
                line += f"; stored {total:,} image{'s' if total != 1 else ''} {what}: " + _counted(found)
        return line

    def finish_lines(self) -> list[str]:
        """What `pairload pack --finish` prints of the manifest it wrote."""
        where = f"{self.url}/manifest.json" if self.url else self.shards_dir / "manifest.json"
        shards = sum(s["shards"] for s in self.splits.values())
        return ([f"finished: {self.pairs} pairs in {shards} shards; wrote {where}"]
                + (self.trust.lines() if self.trust is not None else []))

    def _split_line(self, split: str, options: PackOptions, unit: str) -> str:
        """A split's samples, shards and bytes, then its compression, the folders it came from and how they were
        paired, its sequences and its unmatched files, each where there is one."""
        s, folders = self.splits[split], self.layout.get(split, {}).get("folders")
        rules = self.layout.get(split, {}).get("rules", [])
        level = "" if self.compression == ENCODED.stored else f" level {options.compress_level}"
        return (f"{split}: {s['samples']} {unit} in {s['shards']} shards, {human_bytes(s['bytes'])}"
                + (f" ({self.compression}{level}: {stored_ratio(s)})" if self.compression else "")
                + (f" (from {', '.join(folders[:4])}{' …' if len(folders) > 4 else ''}; paired by "
                   f"{', '.join(rules)})" if folders and not options.targets_only else "")
                + (f"; {self.sequences[split]}" if split in self.sequences else "")
                + (f"; {self.skipped_per_split[split]} unmatched file(s) skipped"
                   if self.skipped_per_split.get(split) else ""))

    def _notes(self) -> list[str]:
        """How splits were named, the files converted on the way, and every image-like file under RAW (targets
        only: every file) that was not packed, with why."""
        notes = []
        if self.split_folders:
            notes.append("split folders: " + ", ".join(f"{folder} -> {m['split']} ({m['how']})"
                                                       for folder, m in self.split_folders.items()))
        for label, items in (("grayscale replicated to RGB", self.gray), ("alpha dropped", self.alpha),
                             ("16-bit converted to 8-bit", self.converted_16bit)):
            if items:
                shown = ", ".join(items[:10]) + (f" … and {len(items) - 10} more" if len(items) > 10 else "")
                notes.append(f"{label}: {len(items)} file(s): {shown}")
        for u in self.unused:
            more = u["count"] - len(u["names"])
            shown = ", ".join(u["names"]) + (f" … and {more} more" if more > 0 else "")
            notes.append(f"not packed ({u['reason']}): {u['count']} file(s) in {u['folder']}: {shown}; {u['hint']}")
        return notes


def _counted(files: dict[str, list[str]]) -> str:
    """'12 PNG (a.png, b.png, c.png …), 8 CMYK JPEG (d.jpg)': each entry's files counted, most first, the first three
    named."""
    most = sorted(files.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return ", ".join(f"{len(v):,} {what} ({', '.join(v[:3])}{' …' if len(v) > 3 else ''})" for what, v in most)


def stored_ratio(split: dict, short: bool = False) -> str:
    """How much smaller than its decoded pixels a split (of a report, or a manifest) is stored: '1.33x smaller than
    its pixels'."""
    return f"{split['pixel_bytes'] / max(split['bytes'], 1):.2f}x" + ("" if short else " smaller than its pixels")
