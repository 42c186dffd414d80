"""The `pairload` command: parses options and calls library functions; nothing else lives here.

Every PairloadError becomes one line on stderr and exit code 1, at the single boundary in `main`.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import Annotated, List, Optional

import typer
from rich.console import Console
from rich.table import Table

from .errors import PairloadError, in_cli_terms
from .progress import progress as _progress
from .kinds import RAW, kind_help, kinds_that, one_of
from .units import human_bytes
from .bench.rows import BENCH_ENTRIES
from .remote.urls import default_cache_dir, storage_options

# plain click help (rich_markup_mode=None): rich's panels cut option descriptions with "…" at 80 columns
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  context_settings={"max_content_width": 100},
                  help="Fast, correct loading of paired low/normal-light images.")


def _show_version(value: bool) -> None:
    if value:
        from . import __version__

        out.print(f"pairload {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_show_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Fast, correct loading of paired low/normal-light images."""


out = Console(soft_wrap=True)  # long paths stay on one line, whatever the terminal or pipe


# one declaration of --storage-option for every command that reaches a URL (pack's destination, verify/info's source)
StorageOptions = Annotated[Optional[List[str]], typer.Option(
    "--storage-option", metavar="KEY=VALUE",
    help="For a URL: KEY=VALUE passed to its fsspec backend (repeat it), e.g. key=ID, secret=KEY, anon=true; "
         "true/false become booleans; for s3:// endpoint_url=URL goes into client_kwargs (MinIO, Ceph, R2). "
         "Credentials otherwise come from the backend's usual places; values are never printed.")]


@app.command("make-pairs")
def make_pairs(
    out_dir: Path = typer.Argument(..., help="Folder to write train/{low,high}/ and test/{low,high}/ into."),
    source: Optional[Path] = typer.Option(None, "--from", help="Folder of normal-light photos (default: "
                                          "scikit-image's bundled photographs)."),
    pairs: int = typer.Option(64, help="Training pairs."),
    test: int = typer.Option(16, help="Test pairs."),
    size: str = typer.Option("600x400", help="Pair size WxH."),
    seed: int = typer.Option(0, help="Random seed; the same seed gives the same files."),
    workers: int = typer.Option(1, help="Processes (the output does not depend on it)."),
    degrade: str = typer.Option("lowlight", metavar="SPEC", help="The model that makes each input from its target, "
                                "as the loaders' degrade= takes it, e.g. lowlight or 'lowlight,gamma=2..3'; one "
                                "that takes 8-bit RGB targets."),
    part: Optional[str] = typer.Option(None, metavar="I/N", help="Make only part I of N of the pairs (or 'auto': "
                                       "from a SLURM array task or torchrun's rank); the last part to finish writes "
                                       "synth.json. The files are those of one run."),
) -> None:
    """Make low/normal-light pairs from normal-light photos (inputs by the loaders' degradation model)."""
    from .pack.writer import Part, parse_wxh
    from .makepairs import MakePairsOptions, make_pairs as run

    opts = MakePairsOptions(pairs=pairs, test=test, size=parse_wxh(size), seed=seed, workers=workers,
                            source=str(source) if source else None, degrade=degrade)
    which = Part.from_cli(part, dict(os.environ))  # the scheduler's variables, read here (never by the library)
    with _progress("make-pairs") as update:
        doc = run(out_dir, opts, on_progress=update, part=which)
    if not doc["complete"]:
        out.print(f"part {which}: wrote {doc['count']} pairs to {out_dir}; the last part writes synth.json")
        return
    out.print(f"wrote {doc['count']} pairs ({pairs} train, {test} test) of {size} to {out_dir}")


@app.command("synth", hidden=True, help="Deprecated alias of make-pairs, removed in the next release.")
@functools.wraps(make_pairs)  # make-pairs' options, declared once
def synth(*args, **kwargs) -> None:
    sys.stderr.write("warning: `pairload synth` is deprecated and will be removed in the next release; use "
                     "`pairload make-pairs` (the same options)\n")
    make_pairs(*args, **kwargs)


CALIBRATE_FLAGS = {"flats": "--flats", "darks": "--darks", "iso": "--iso", "black": "--black", "white": "--white",
                   "read_dist": "--read-dist", "window": "--window", "name": "--name", "out": "-o",
                   "report": "--report"}


@app.command()
def calibrate(
    flats: List[Path] = typer.Option(..., "--flats", metavar="PATH", help="Flat-field frames (uniformly lit, "
                                     "unsaturated, two or more per brightness and ISO): files or folders, searched "
                                     "recursively, of camera raw files or H×W×4 uint16 .npy packed mosaics (R, G, B, "
                                     "G); repeat the option."),
    darks: List[Path] = typer.Option(..., "--darks", metavar="PATH", help="Dark frames (lens capped, shortest "
                                     "exposure, two or more per ISO), as --flats."),
    out_json: Path = typer.Option(..., "-o", "--out", help="The profile JSON to write (atomically)."),
    name: Optional[str] = typer.Option(None, help="The profile's name (default: the output file's name without "
                                       ".json)."),
    iso: Optional[int] = typer.Option(None, help="ISO of the frames whose metadata and names say none (a name or "
                                      "folder such as ISO800/ or flat_iso800_01.npy says it)."),
    black: Optional[str] = typer.Option(None, help=".npy frames' black level: N, or R,G,B,G (default: the dark "
                                        "frames' mean, rounded)."),
    white: Optional[float] = typer.Option(None, help=".npy frames' white level (saturation), for the check of "
                                          "saturated flats."),
    read_dist: str = typer.Option("tukey", help="The read noise the profile holds: tukey (Tukey-λ scale and shape, "
                                  "as ELD) or gaussian (σ)."),
    window: int = typer.Option(512, help="Side of the central square analysed, in packed pixels."),
    report_json: Optional[Path] = typer.Option(None, "--report", help="Also write the per-ISO numbers as JSON here."),
) -> None:
    """Fit a camera noise profile (system gain K, read and row noise, Tukey-λ, colour bias) from flat and dark
    frames, for the raw-physics low-light model."""
    from .errors import ConfigError
    from .camera.calibrate import black_option, calibrate as run, check_outputs, report_lines, save

    try:
        check_outputs(out_json, report_json)  # before the frames are read: a bad -o is no reason to wait
        profile, report = run(flats, darks, name=out_json.stem if name is None else name, iso=iso,
                              black=black_option(black), white=white, read_dist=read_dist, window=window)
    except ConfigError as exc:  # said with this command's flags
        raise ConfigError(in_cli_terms(exc, CALIBRATE_FLAGS)) from None
    for line in report_lines(report):
        out.print(line, highlight=False, markup=False)
    save(profile, report, out_json, report_json)
    out.print(f"wrote {out_json}: {profile.describe()}", highlight=False, markup=False)


@app.command()
def pack(
    folder: Path = typer.Argument(..., help="The dataset folder: {low,high}/ or <split>/{low,high}/ (synonyms "
                                  "accepted); with --targets-only, a folder of photos (searched recursively) or a "
                                  "text file listing them, one path a line relative to its folder."),
    shards_dir: str = typer.Argument(..., help="Output folder for the shards and manifest.json, or a URL (s3://, "
                                     "gs://, az://, any writable fsspec URL): the shards are packed into a local "
                                     "staging folder, each uploaded once finished, manifest.json last; re-running "
                                     "resumes."),
    low_dir: Optional[str] = typer.Option(None, help="Name of the low-light folder (default: low|input|dark|lq|img)."),
    high_dir: Optional[str] = typer.Option(None, help="Name of the normal-light folder (default: "
                                           "high|normal|gt|target|hq)."),
    pairs_file: Optional[List[str]] = typer.Option(None, help="Pairs list relative to FOLDER: 'low high [extra "
                                                   "columns]' per line, or 'low<TAB>high<TAB>split'; repeat as "
                                                   "SPLIT=FILE for one file per split."),
    skip_unmatched: bool = typer.Option(False, help="Pack the matched pairs and report the unmatched files per split."),
    split_name: Optional[List[str]] = typer.Option(None, help="FOLDER=SPLIT: name a split folder's split yourself "
                                                   "(default: our485/Train/… -> train, eval15/Test/… -> test)."),
    name_template: Optional[str] = typer.Option(None, help="BasicSR-style name rule when names differ: the low "
                                                "file's name from the high's, e.g. '{}x4'."),
    to_8bit: bool = typer.Option(False, "--to-8bit", help="Convert 16-bit images (and uint16 .npy arrays) to 8 bits "
                                 "(otherwise they are stored as 16 bits)."),
    resize: Optional[str] = typer.Option(None, help="Resize both images to WxH (area interpolation)."),
    max_side: Optional[int] = typer.Option(None, help="Shrink both images so the longer side is at most N (images "
                                           "already within N are kept as they are)."),
    shard_size: str = typer.Option("256MB", help="Close a shard at this size (KB, MB, GB)."),
    workers: int = typer.Option(0, help="Decoding processes (0: all cores)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a manifest.json in SHARDS_DIR that is not a "
                                   "pack of FOLDER (another folder's pack, with its shards, or a file of yours); "
                                   "refused otherwise."),
    compress: Optional[str] = typer.Option(None, help="zstd: store each image as one zstd frame (KEY.low.npy.zst), "
                                           "smaller for buckets and HTTP; loaders decode it in their workers (pip "
                                           "install 'pairload[zstd]'). Default: raw, fastest to read."),
    compress_level: int = typer.Option(3, help="zstd level with --compress, 1-22 (higher: smaller, slower to pack; "
                                       "decoding speed barely changes)."),
    store: str = typer.Option("decoded", help="'decoded': every image's pixels, the fastest warm reads. 'encoded' "
                              "(format version 7): every JPEG file kept as its own bytes (KEY.low.jpg, decoded by "
                              "the loaders to exactly the pixels 'decoded' stores; 5-14x smaller, for data bigger "
                              "than RAM and JPEG photo collections), other images lossless as tiles (KEY.low.tiles, "
                              "about 2x smaller on photographs; decoded exactly) or, where tiles are no smaller, as "
                              "pixels (KEY.low.npy); each counted in the report. Not with --compress."),
    raw_target: str = typer.Option("developed", help="Camera raw targets: 'developed' by LibRaw as SID does (camera "
                                   "white balance, no auto-brightness, 16 bits; 3 channels at twice the packed "
                                   "input's size) or 'packed' like the input (raw-to-raw, as ELD uses)."),
    ratio_cap: float = typer.Option(300.0, help="Camera raw inputs: the largest amplification ratio (target exposure "
                                    "/ input exposure) recorded per pair; SID's is 300."),
    staging: Optional[Path] = typer.Option(None, metavar="DIR", help="URL destinations: the local folder the shards "
                                           "are packed into before upload (default: a folder under the system temp "
                                           "folder named after a hash of the URL, found again by a re-run)."),
    storage_option: StorageOptions = None,
    keep_staging: bool = typer.Option(True, "--keep-staging/--no-keep-staging", help="URL destinations: keep the "
                                      "staging folder after the upload (a valid local pack; a re-run skips "
                                      "decoding)."),
    part: Optional[str] = typer.Option(None, metavar="I/N", help="Make only part I of N (0 <= I < N) of the pack, "
                                       "e.g. one per machine of a SLURM array (--part auto: from SLURM_ARRAY_TASK_ID "
                                       "and SLURM_ARRAY_TASK_COUNT, or torchrun's RANK and WORLD_SIZE); the last part "
                                       "to finish writes the manifest. The bytes are those of a one-machine pack."),
    finish: bool = typer.Option(False, "--finish", help="Write the manifest of a pack made with --part once every "
                                "part is in SHARDS_DIR (refused, naming the missing parts, before)."),
    index: str = typer.Option("binary", help="Where the per-sample index goes: 'binary' (<split>.index files that "
                              "loaders memory-map, format version 5) or 'json' (in manifest.json, for older readers)."),
    targets_only: bool = typer.Option(False, "--targets-only", help="Pack normal-light photos alone, as targets for "
                                      "a degradation to make the inputs from (format version 6): every image under "
                                      "FOLDER (or listed in it) is decoded once and stored without an input; camera "
                                      "raw files per --raw-target."),
    split: str = typer.Option("train", help="With --targets-only: the name of the one split the photos become."),
    fit: str = typer.Option("resize", help="With --targets-only and --max-side N: 'resize' shrinks a larger image "
                            "so its longer side is N, keeping its aspect (area interpolation); 'crop' cuts its centre "
                            "to at most NxN, every pixel as decoded (camera raw too)."),
    sequences: bool = typer.Option(False, "--sequences", help="Frames of videos or bursts: the folder holding each "
                                   "frame is its sequence, its frames consecutive samples in name order (numbered "
                                   "with zero padding, one size), recorded in the manifest."),
    sequence_gaps: str = typer.Option("refuse", "--sequence-gaps", help="With --sequences, a sequence whose frame "
                                      "numbers break their even spacing (frames missing, as after an interrupted "
                                      "copy): 'refuse' it (naming the frames), 'split' it into evenly numbered runs, "
                                      "each a sequence, so that no clip crosses a break, or 'allow' it whole."),
    npy_bgr: bool = typer.Option(False, "--npy-bgr", help=".npy colour arrays hold BGR (SDSD's and SMID's frames): "
                                 "store them as RGB."),
    max_shift: Optional[float] = typer.Option(None, "--max-shift", metavar="PX", help="Refuse the pairs whose input "
                                              "is confidently shifted from its target by more than PX pixels."),
    skip_misaligned: bool = typer.Option(False, "--skip-misaligned", help="With --max-shift: pack the others and list "
                                         "those left out (each pair is then decoded twice)."),
    allow_bright_inputs: bool = typer.Option(False, "--allow-bright-inputs", help="Accept inputs mostly brighter than "
                                             "their targets (over-exposed; SICE's and MSEC's layouts need not)."),
) -> None:
    """Decode every pair once into WebDataset tar shards with a manifest (8- or 16-bit images, .npy arrays, camera raw
    packed as SID does); with --targets-only, every photo alone."""
    from .pack.options import from_cli

    opts = from_cli(dict(locals()))  # the values as typed: parsed and checked by the library
    from .audit.packing import MisalignedPairs
    from .pack.writer import Part, pack as run
    from .remote.urls import is_url

    options = storage_options(storage_option, shards_dir) if is_url(shards_dir) else storage_option  # local: refused
    which = Part.from_cli(part, dict(os.environ))
    if finish:
        from .pack.writer import finish_parts

        report = finish_parts(shards_dir, which.count if which else None, storage_options=options or None,
                              staging=staging)
        _print_lines(report.finish_lines())
        return
    try:
        with _progress("pack", "targets" if targets_only else "pairs") as update:
            report = run(folder, shards_dir, opts, on_progress=update, staging=staging, storage_options=options,
                         keep_staging=keep_staging, part=which)
    except MisalignedPairs as exc:  # each pair on a line of its own, then the error's one line
        sys.stderr.writelines(f"{line}\n" for line in exc.lines)
        raise
    _print_lines(report.lines(opts))


def _print_lines(lines: list[str]) -> None:
    for line in lines:
        out.print(line, highlight=False, markup=False, emoji=False)  # emoji=False: "lol:train:" stays text


SHARDS_HELP = "Folder written by `pairload pack`, or its URL (s3://, gs://, az://, https://, any fsspec URL)."


@app.command()
def verify(
    shards_dir: str = typer.Argument(..., help=SHARDS_HELP),
    cache_dir: Optional[Path] = typer.Option(None, help="A URL's shards are downloaded here to be verified (default: "
                                             "~/.cache/pairload)."),
    storage_option: StorageOptions = None,
) -> None:
    """Re-hash every shard and parse every sample; exit 1 naming the shard and key of any problem."""
    from .read.shards import verify as run

    report = run(shards_dir, cache_dir=cache_dir or default_cache_dir(),
                 storage_options=storage_options(storage_option, shards_dir))
    out.print(f"ok: {report.shards} shards, {report.samples} samples, {human_bytes(report.bytes)} verified")
    if report.leftovers:
        sys.stderr.write(f"warning: {len(report.leftovers)} temporary file(s) of an interrupted pack "
                         f"({human_bytes(report.leftover_bytes)}: {', '.join(report.leftovers[:3])}"
                         f"{' …' if len(report.leftovers) > 3 else ''}) are not part of the shards; run the same "
                         "`pairload pack` again to finish it, or delete them\n")
    for line in report.gaps:  # the shards are sound; clips across a break in frame numbering are not
        sys.stderr.write(f"warning: {line}\n")


@app.command()
def info(
    shards_dir: str = typer.Argument(..., help=SHARDS_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    sizes: bool = typer.Option(False, "--sizes", help="Print a histogram of each split's image sizes (WxH of the "
                               "inputs: pairs), from the index alone (no pixel is read)."),
    storage_option: StorageOptions = None,
) -> None:
    """Per-split counts, bytes, compression, image sizes, shifts and brightness (a URL: from its manifest alone)."""
    from .pack.options import stored_ratio
    from .read.info import checks_line, formats_cell, sequences_cell, size_histogram
    from .read.shards import info as run

    splits = run(shards_dir, storage_options=storage_options(storage_option, shards_dir))
    if as_json:
        print(json.dumps(splits, indent=2))
        return
    if sizes:
        for name, s in splits.items():
            for line in size_histogram(name, s):
                out.print(line, highlight=False, markup=False)
        return
    seqs = any("sequences" in s for s in splits.values())
    table = Table("split", "pairs", "shards", "bytes", "compression", "members", "sizes (WxH: pairs)",
                  *(["sequences"] if seqs else []))
    for name, s in splits.items():
        members = s.get("members", "uint8 ×3, same size") + (f"; {s['sensor']}" if "sensor" in s else "")
        q = s.get("sequences")  # a column only for a pack made with --sequences
        table.add_row(name, str(s["samples"]), str(s["shards"]), human_bytes(s["bytes"]),
                      "none" if s["compression"] == "none" else f"{s['compression']}, {stored_ratio(s, short=True)}"
                      + (f": {formats_cell(s['formats'])}" if "formats" in s else ""),
                      members, ", ".join(f"{k}: {v}" for k, v in s["sizes"].items()),
                      *[sequences_cell(q) if q else "-"][:seqs])
    out.print(table)
    for line in filter(None, (checks_line(name, s) for name, s in splits.items())):  # (older packs: none)
        out.print(line, highlight=False, markup=False)
    for s in splits.values():  # breaks in a sequence's frame numbering: clips cross them
        if "gaps" in s.get("sequences", {}):
            sys.stderr.write(f"warning: {s['sequences']['gaps']}\n")


@app.command()
def audit(
    shards: List[str] = typer.Argument(..., help="Folders written by `pairload pack` (or their URLs): every split of "
                                       "each is compared with every split of the others."),
    max_shift: float = typer.Option(1.0, help="List the pairs whose input is shifted from its target by more than "
                                    "this many pixels (where the estimate is confident)."),
    out_file: Optional[Path] = typer.Option(None, "--out", help="Also write the findings to FILE.json (findings, "
                                            "settings, what was read, each split's exposure) or FILE.csv (one row "
                                            "per finding), for a paper to cite."),
    workers: int = typer.Option(0, help="Threads (0: all cores)."),
    cache_dir: Optional[Path] = typer.Option(None, help="A URL's shards are cached here (default: ~/.cache/pairload)."),
    storage_option: StorageOptions = None,
) -> None:
    """The same scene in a training and an evaluation split (across packs too), in two splits of one pack, or twice
    in a split; misaligned pairs; targets far darker than their split's others; each split's exposure. Exit 1 when
    a training and an evaluation split (or two splits of a pack) share a scene. Packs made before pairload measured
    their pairs are measured now (once: kept as <split>.facts.npz beside the index)."""
    from .audit.findings import check_out
    from .audit.run import audit as run

    if out_file is not None:
        check_out(out_file)
    with _progress("measuring", "pairs") as update:
        report = run(shards, max_shift=max_shift, workers=workers or None, progress=lambda what, done, total:
                     update(done, total), cache_dir=cache_dir or default_cache_dir(),
                     storage_options=storage_options(storage_option, shards[0]))
    if out_file is not None:
        report.write(out_file)
    _print_lines(report.lines())
    if out_file is not None:
        out.print(f"findings written to {out_file}", highlight=False, markup=False)
    if report.leaks:
        raise typer.Exit(1)


PREVIEW_FLAGS = {"n": "-n", "crop": "--crop", "tile_height": "--tile-height", "columns": "--columns",
                 "display": "--display", "out": "--out", "degrade": "--degrade", "clips": "--clips", "seed": "--seed"}


@app.command()
def preview(
    shards_dir: str = typer.Argument(..., help=SHARDS_HELP),
    out_png: Path = typer.Option(..., "--out", help="The PNG to write (atomically)."),
    split: str = typer.Option("train", help="Split to show."),
    n: int = typer.Option(16, "-n", help="Pairs to show (all of a smaller split)."),
    batch: bool = typer.Option(False, "--batch", help="Show the first batch a ram loader cuts on the CPU (its crops "
                               "and flips, the same on input and target) instead of stored pairs."),
    crop: Optional[str] = typer.Option(None, help="The loader's crop for --batch (implies it): N (square), WxH, or "
                                       "'whole' (whole images); default 128."),
    seed: int = typer.Option(0, help="Seed of the pairs chosen (and of the loader's plan with --batch)."),
    tile_height: int = typer.Option(128, help="Every image is scaled to this height (area averaging when shrinking, "
                                    "nearest neighbour when enlarging); 0: stored size, no resampling."),
    columns: int = typer.Option(0, help="Pairs per row (0: about square)."),
    display: str = typer.Option("range", help="range: uint8 as stored, uint16 over its type's range, camera raw "
                                "by its levels and ratio with gamma 1/2.2; stretch: each image's 0.5th-99.5th "
                                "percentiles stretched to 0-255 after that. The sheet states which."),
    degrade: Optional[str] = typer.Option(None, metavar="SPEC", help="Degrade the targets into the inputs "
                                          "(implies --batch), e.g. lowlight or 'lowlight,gamma=2..3'; each pair is "
                                          "labelled with the parameters it drew."),
    clips: Optional[str] = typer.Option(None, metavar="SPEC", help="Clips of a split packed with --sequences (implies "
                                        "--batch), e.g. 5 or '5,stride=2': -n clips, input frames over targets."),
    cache_dir: Optional[Path] = typer.Option(None, help="A URL's shards are cached here (default: "
                                             "~/.cache/pairload)."),
    storage_option: StorageOptions = None,
) -> None:
    """A contact sheet (PNG) of pairs: input | target with key, size and source folders, or a loader's augmented
    batch (or degraded pairs, with their parameters), so that misalignment shows at a glance."""
    from .errors import ConfigError
    from .preview import PreviewOptions, preview as run, write_sheet

    try:
        opts = PreviewOptions(split=split, n=n, seed=seed, batch=batch or crop is not None, crop=_crop(crop),
                              tile_height=tile_height, columns=columns, display=display, degrade=degrade, clips=clips)
        sheet = run(shards_dir, opts, cache_dir=cache_dir or default_cache_dir(),
                    storage_options=storage_options(storage_option, shards_dir))
        write_sheet(sheet, out_png)
    except ConfigError as exc:  # said with this command's flags (-n, --tile-height, ...)
        raise ConfigError(in_cli_terms(exc, PREVIEW_FLAGS)) from None
    h, w = sheet.image.shape[:2]
    out.print(f"wrote {out_png}: {sheet.count()} of split {split}" + (" as the loader cut them" if opts.batch else "")
              + (f", inputs degraded from the targets ({opts.degrade})" if degrade else "") + f", {w}x{h} px",
              highlight=False, markup=False)


def _crop(text: str | None):
    """--crop: None (the default, 128), N, WxH (as (height, width)) or 'whole' (None: whole images)."""
    from .errors import ConfigError

    if text is None:
        return 128
    text = text.strip().lower()
    if text == "whole":
        return None
    if text.isdigit():
        return int(text)
    w, sep, h = text.partition("x")
    if sep and w.strip().isdigit() and h.strip().isdigit():
        return int(h), int(w)
    raise ConfigError.for_value("crop", text, "expected N (square), WxH or 'whole'")


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@app.command("bench-loaders")
def bench_loaders(
    shards_dir: Path = typer.Argument(..., help="Folder written by `pairload pack`."),
    raw: Optional[Path] = typer.Option(None, help="The dataset folder the shards came from (for "
                                       f"{one_of(kinds_that(reads=RAW))} and the baselines)."),
    loaders: str = typer.Option(",".join(BENCH_ENTRIES), help="Comma-separated loaders to run: every kind of "
                                "`pairload.kinds` (" + kind_help() + "), its variants and the baselines."),
    split: str = typer.Option("train", help="Split to read."),
    crop: int = typer.Option(256, help="Crop size."),
    batch_size: int = typer.Option(32, help="Batch size."),
    workers: int = typer.Option(0, help="CPU workers/threads per loader (0: all cores but one)."),
    seconds: float = typer.Option(6.0, help="Measured seconds per loader (split into --repeats windows)."),
    repeats: int = typer.Option(3, help="Timed windows per loader; the median is reported."),
    device: str = typer.Option("auto", help="auto, cpu or cuda[:k]."),
    consumer: str = typer.Option("none", help="none, or unet: feed a training step and report data-wait."),
    cold: bool = typer.Option(False, help="Also run ram, wds and dali-external with the shards evicted from the page "
                              "cache before each repeat, next to the disk's read bound."),
    ranks: int = typer.Option(1, help="Run that many ranks at once, each with its own loader on its own GPU and its "
                              "share of the cores (--workers per rank, default cores/ranks - 1); reports the node's "
                              "total and the per-rank spread."),
    out_json: Optional[Path] = typer.Option(None, "--out", help="Write the JSON report here."),
    plot_png: Optional[Path] = typer.Option(None, "--plot", help="Write a bar chart (PNG) here."),
    remote_rate: Optional[str] = typer.Option(None, help="Serve the shards over HTTP on loopback throttled to this "
                                              "bandwidth (e.g. 500MB = bytes/s) and measure one loader (the first of "
                                              "--loaders, default wds) reading them through a fresh cache: the network "
                                              "bound, the first batch, the cold epoch and the cached one."),
) -> None:
    """Every loader and today's baselines side by side, with the hardware limits."""
    from .bench.loaders import BenchConfig, plot, run_bench
    from .bench.result import limits_line
    from .format.schema import write_json_atomic

    if remote_rate is not None:
        from .bench.remote import RemoteBenchConfig, run_remote
        from .remote.cache import parse_bytes

        chosen = [n.strip() for n in loaders.split(",") if n.strip()]
        kind = "wds" if loaders == ",".join(BENCH_ENTRIES) else chosen[0]
        dev = device if device != "auto" else ("cuda" if _cuda() else "cpu")
        report = run_remote(RemoteBenchConfig(shards=str(shards_dir), rate=parse_bytes(remote_rate, "--remote-rate"),
                                              loader=kind, split=split, crop=crop, batch_size=batch_size,
                                              workers=workers or max(1, (os.cpu_count() or 2) - 1), device=dev))
        if out_json:
            write_json_atomic(out_json, report)
        print(json.dumps(report, indent=2))
        return

    cfg = BenchConfig(shards=str(shards_dir), raw=str(raw) if raw else None, split=split,
                      loaders=tuple(n.strip() for n in loaders.split(",") if n.strip()), crop=crop,
                      batch_size=batch_size, workers=workers, seconds=seconds, repeats=repeats, device=device,
                      consumer=consumer, cold=cold, ranks=ranks)
    err = Console(stderr=True)

    def show(r) -> None:
        outcome = f"{r.pairs_per_s:,.0f} pairs/s" if r.status == "ok" else f"{r.status} ({r.reason})"
        err.print(f"  {r.loader}{' (cold)' if r.cold else ''}: {outcome}", highlight=False, markup=False)

    report = run_bench(cfg, on_result=show)
    table = Table("loader", "pairs/s", "spread", "MB/s", "CPU cores", "host RSS MB", "device MB", "reserved MB",
                  *(["data wait"] if consumer != "none" else []), "note",
                  title=f"{report['device']}, {report['cpu_count']} cores, crop {crop}, batch {batch_size}"
                  + (f", {ranks} ranks (node total; spread = per rank)" if ranks > 1 else ""))
    for r in report["results"]:
        ok = r["status"] == "ok"
        table.add_row(r["loader"] + (" (cold)" if r.get("cold") else ""), f"{r['pairs_per_s']:,.0f}" if ok else "-",
                      f"{r['pairs_per_s_min']:,.0f}-{r['pairs_per_s_max']:,.0f}" if ok else "",
                      f"{r['mb_per_s']:,.0f}" if ok else "", f"{r['cpu_cores_used']:.1f}" if ok else "",
                      f"{r['peak_host_rss_mb']:,.0f}" if ok else "", f"{r['device_mem_mb']:,.0f}" if ok else "",
                      f"{r.get('device_reserved_mb', 0):,.0f}" if ok else "",
                      *([f"{r['data_wait_frac']:.3f}" if ok else ""] if consumer != "none" else []),
                      r["reason"] if ok else f"{r['status']}: {r['reason']}")
    out.print(table)
    out.print(limits_line(report["limits"]), highlight=False)
    if out_json:
        write_json_atomic(out_json, report)
    if plot_png:
        plot(report, plot_png)


@app.command()
def demo(
    workdir: Path = typer.Argument(Path("pairload-demo"), help="Where to put the demo's data and results."),
    device: str = typer.Option("auto", help="auto (GPU when there is one), cpu or cuda."),
) -> None:
    """The main job on the embedded default data: make pairs, pack, verify, bench the loaders, train briefly."""
    from .demo import run_demo

    run_demo(workdir, device=device, log=lambda m: out.print(m, highlight=False, markup=False))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True}, add_help_option=False)
def train(ctx: typer.Context) -> None:
    """The reference DDP + AMP training loop (same options as `python -m pairload.train --help`)."""
    from .recipes.train import main as train_main

    try:
        code = train_main(list(ctx.args), prog="pairload train")
    except SystemExit as exc:  # argparse's --help and usage errors
        code = exc.code or 0
    if code:
        raise typer.Exit(code)


def _crash_log(exc: BaseException) -> str:
    """Write the traceback of an unexpected error to a log file; returns its path."""
    import tempfile
    import time
    import traceback

    path = Path(tempfile.gettempdir()) / f"pairload-crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    try:
        path.write_text(f"pairload {' '.join(sys.argv[1:])}\n" + "".join(traceback.format_exception(exc)),
                        encoding="utf-8", errors="backslashreplace")
    except OSError:
        return "(could not be written)"
    return str(path)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def main(argv: Optional[List[str]] = None) -> int:
    """The single error boundary: usage errors exit 2 with typer's own message, a PairloadError or an OS error (a
    read-only folder, a full disk) exits 1 with one line, anything else exits 1 with one line and a crash log."""
    try:
        app(args=argv, prog_name="pairload", standalone_mode=True)
    except SystemExit as exc:  # typer ends every run this way; usage errors have already been printed
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except PairloadError as exc:
        sys.stderr.write(f"error: {_one_line(in_cli_terms(exc))}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        sys.stderr.write(f"error: {where}{exc.strerror or exc} (check the path, its permissions and free disk space)\n")
        return 1
    except Exception as exc:  # noqa: BLE001 - a bug or an unforeseen input: one line here, the traceback in a file
        sys.stderr.write(f"error: unexpected {type(exc).__name__}: {_one_line(exc)[:300]} (traceback in "
                         f"{_crash_log(exc)}; please report it)\n")
        return 1
    return 0


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
