"""`pack_folder`: one pack into a local folder, start to finish. Under the folder's lock: find the pairs, probe every
header (unreadable files and mismatched sizes are refused before anything is written), write the partial shards
(`shardwrite`), then rename them, delete the shards no longer listed, and write the manifest last."""

from __future__ import annotations

import itertools
import os
from array import array
import time
from pathlib import Path
from typing import Callable

from ..errors import ImageError, OutputError
from ..format import schema
from ..format.atomic import write_json_atomic
from ..format.columns import write_columns
from ..folders.decode import RESIZE, orientation_hint, target_size
from ..folders.discover import Pair, find_pairs
from ..folders.photos import find_targets
from . import guard, parts, trust
from .coded import Coded
from .heap import give_back
from .jobs import close_fds, probe_many, start_pool
from .manifest import assemble, skeleton
from .options import PackOptions, PackReport
from .parts import Part
from .shardplan import ShardPlan, plan_shards, shared_targets, target_groups
from .sensor import is_raw, plan_camera, plan_targets
from .sequences import check_names, describe_splits, plan_sequences
from .sides import split_members
from .shardwrite import Inputs, Run, ShardDone, write_compressed, write_raw


def pack_folder(raw_dir: str | os.PathLike, shards_dir: str | os.PathLike, options: PackOptions = PackOptions(),
                on_progress: Callable[[int, int], None] | None = None, *, on_start: Callable[[], None] | None = None,
                on_shard: ShardDone | None = None, part: Part | None = None) -> PackReport:
    """`pack` into a local folder (`part`: only that part of it, see `parts`). `on_start()` runs once the folder is
    locked and the pairs are found, before anything is written; `on_shard(name, partial, sha256, bytes)` as soon as
    a shard is written, hashed and fsynced (under its temporary name `partial`, renamed to `name` beside it once
    every shard is done). `on_shard` may run on another thread, and must not raise."""
    start = time.perf_counter()
    workers = options.workers or os.cpu_count() or 1
    pool = start_pool(workers) if workers > 1 else None  # workers start while the folders are being listed
    try:
        out = Path(shards_dir)
        guard.check_output_outside_raw(Path(raw_dir), out)
        discovery = find_targets(raw_dir, options.split) if options.targets_only else find_pairs(
            raw_dir, low_dir=options.low_dir, high_dir=options.high_dir, pairs_file=options.pairs_file,
            skip_unmatched=options.skip_unmatched, split_names=dict(options.split_names),
            name_template=options.name_template)
        clock = (start, time.perf_counter())  # when the pack started, and when its pairs were found
        if not options.sequences:
            discovery.loose = array("q")  # (8 bytes a pair that only `--sequences` reads)
        give_back()  # discovery's temporaries: not held while the shards are written
        out.mkdir(parents=True, exist_ok=True)
        if part is not None:
            with guard.part_lock(out, part.record):
                return _pack_part(discovery, Path(raw_dir), out, options, pool, workers, clock, on_progress, part)
        with guard.folder_lock(out):
            if on_start:
                on_start()
            return _pack_locked(discovery, Path(raw_dir), out, options, pool, workers, clock, on_progress, on_shard)
    except BaseException:
        if pool:
            pool.terminate()
        raise


def _report(discovery, out: Path, workers: int, options: PackOptions) -> PackReport:
    report = PackReport(shards_dir=out, workers=workers, compression=options.encoding.stored)
    report.skipped = discovery.skipped_low + discovery.skipped_high
    report.skipped_per_split = dict(discovery.skipped_per_split)
    report.layout = discovery.layout()
    report.unused = [u.as_dict() for u in discovery.unused]
    report.split_folders = {k: {"split": v[0], "how": v[1]} for k, v in sorted(discovery.split_folders.items())}
    return report


def _plan(discovery, raw: Path, options: PackOptions, pool, report: PackReport, clock: tuple[float, float]
          ) -> tuple[Inputs, list[ShardPlan], dict]:
    """What every part of a pack computes alike: the headers, the camera plan, the member types, every shard's
    boundaries and the manifest's skeleton (with `--skip-misaligned`, of the pairs its measuring pass keeps). `clock`:
    when the pack started and when its pairs were found (the report's "find" phase, the pool's start included)."""
    report.phases["find"] = clock[1] - clock[0]
    misaligned = None
    if options.skip_misaligned:
        discovery, misaligned = trust.leave_out_misaligned(discovery, _inputs(discovery, raw, options, pool, report),
                                                           options, pool, report)
    t1 = time.perf_counter()
    inputs = _inputs(discovery, raw, options, pool, report)
    sequences = plan_sequences(inputs.pairs, inputs.out_sizes, options.sequence_gaps) if options.sequences else {}
    report.sequences = describe_splits(sequences, inputs.pairs)
    inputs.shared = shared_targets(inputs.pairs)
    plans = plan_shards(inputs.pairs, inputs.sizes, inputs.out_sizes, options.shard_size, inputs.members,
                        options.targets_only, inputs.shared)
    skel = skeleton(discovery, raw, options, inputs.members, inputs.camera, sequences, misaligned)
    give_back()  # the probes' and the plan's temporaries
    report.phases["plan"] = time.perf_counter() - t1 - report.phases["probe"]
    return inputs, plans, skel


def _inputs(discovery, raw: Path, options: PackOptions, pool, report: PackReport) -> Inputs:
    """The pairs in pack order with their headers, the camera plan and the member types (the report's "probe"
    phase)."""
    t0 = time.perf_counter()
    if options.sequences:  # key order, each sequence's frames in a row (`sequences`); shared targets stay shared
        check_names(discovery, options.sequence_gaps)
        pairs = discovery.pairs  # (reordered in place, as target_groups does: a table is never held twice)
        pairs.sort_keys()
    else:
        pairs = target_groups(discovery.pairs)
    probes = _probe_pairs(pairs, pool, options)
    report.phases["probe"] = time.perf_counter() - t0
    # a centre crop keeps every value as it is, sensor counts included; resampling does not
    resized = options.resize is not None or (options.max_side is not None and options.fit == RESIZE)
    plan = plan_targets if options.targets_only else plan_camera
    camera = plan(raw, pairs, probes, raw_target=options.raw_target, ratio_cap=options.ratio_cap,
                  to_8bit=options.to_8bit, resized=resized)
    members = split_members(raw, pairs, probes, options.to_8bit, camera, options.targets_only)
    # equal sizes kept once, as codes: a million pairs of a few sizes cost two arrays of bytes
    sizes = (probes[2 * i].hw for i in range(len(pairs)))
    if camera.splits and options.targets_only:
        sizes = (camera.input_hw(pair, hw) for pair, hw in zip(pairs, sizes))
    sizes = Coded(sizes)
    fitted = {hw: target_size(hw[0], hw[1], options.resize, options.max_side, options.fit) for hw in sizes.distinct()}
    out_sizes = Coded(fitted[hw] for hw in sizes)
    return Inputs(pairs, probes, sizes, out_sizes, members, camera, options.targets_only)


def index_writer(out: Path):
    def write(name: str, columns) -> tuple[str, int]:
        with guard.writing(out / name):
            return write_columns(out / name, columns)
    return write


def _pack_locked(discovery, raw: Path, out: Path, options: PackOptions, pool, workers: int, clock: tuple[float, float],
                 on_progress, on_shard: ShardDone | None = None) -> PackReport:
    if not options.overwrite:
        guard.check_manifest_replaceable(out, raw)
    journal = guard.read_journal(out)
    guard.remove_partials(out, journal)  # left by a killed run
    report = _report(discovery, out, workers, options)
    run = Run(out=out, options=options, pool=pool, journal=journal, report=report, on_progress=on_progress,
              on_shard=on_shard)
    try:
        inputs, plans, skel = _plan(discovery, raw, options, pool, report, clock)
        write = write_raw if options.encoding.plain else write_compressed
        rows = write(run, inputs, plans)
        give_back()  # what the writing freed: the checks' and the index's arrays are new
        report.trust = trust.check_pack(skel, rows, inputs.pairs)  # refused: the old pack stays as it was
    except BaseException:
        _abandon(run, pool)
        guard.forget_partials(out, journal)
        raise
    written = time.perf_counter()
    if pool:
        pool.close()  # the workers exit while the shards are renamed and the manifest written; joined at the end

    keep = {r.name for r in rows}
    owned = guard.owned(out, journal) | keep
    guard.write_journal(out, owned, [r.name + schema.PARTIAL_SUFFIX for r in rows])  # a kill from here on still knows
    (out / schema.MANIFEST).unlink(missing_ok=True)  # its shards are about to be replaced
    _rename_into_place(out, rows, run.partial_files)
    guard.remove_stale(out, owned - keep)
    schema.fsync_dir(out)
    give_back()  # the checks' arrays: not under the index's
    manifest = assemble(skel, rows, report, options.index, index_writer(out))
    with guard.writing(out / schema.MANIFEST):
        write_json_atomic(out / schema.MANIFEST, manifest)
    schema.record_packed(out, manifest)
    (out / guard.JOURNAL).unlink(missing_ok=True)
    if pool:
        pool.join()
    report.phases["finish"] = time.perf_counter() - written  # the shards renamed, the manifest, the workers joined
    report.seconds = time.perf_counter() - clock[0]
    return report


def _rename_into_place(out: Path, rows, partial_files: list[str]) -> None:
    """Each written shard from its temporary name to its own (the caller then fsyncs the folder)."""
    for r, partial in zip(rows, partial_files):
        with guard.writing(out / r.name):
            os.replace(partial, out / r.name)


def _abandon(run: Run, pool) -> None:
    """After a failure: stop the workers and delete the partial shards this run created."""
    if pool:
        pool.terminate()
        pool.join()
    close_fds()
    run.close_files()
    for part in run.partial_files:
        Path(part).unlink(missing_ok=True)


def _pack_part(discovery, raw: Path, out: Path, options: PackOptions, pool, workers: int, clock: tuple[float, float],
               on_progress, part: Part) -> PackReport:
    """Part `part` of the pack: its shards and its record, then the manifest if it is the last part to finish."""
    if not options.overwrite:
        guard.check_manifest_replaceable(out, raw)
    report = _report(discovery, out, workers, options)
    report.part = str(part)
    journal_path = out / part.journal
    guard.remove_listed_partials(out, journal_path, part.record)  # left by a killed run of this part
    run = Run(out=out, options=options, pool=pool, journal={}, report=report, on_progress=on_progress,
              part_journal=journal_path)
    try:
        inputs, plans, skel = _plan(discovery, raw, options, pool, report, clock)
        fingerprint = parts.fingerprint(skel, inputs, plans)
        parts.check_records(out, part, fingerprint)
        owner = parts.owners(plans, part.count)
        mine = [plan for plan, o in zip(plans, owner) if o == part.index]
        write = write_raw if options.encoding.plain else write_compressed
        rows = write(run, inputs, mine) if mine else []
        give_back()
        trust.check_part(skel, rows, inputs.pairs)
    except BaseException:
        _abandon(run, pool)
        journal_path.unlink(missing_ok=True)
        raise
    if pool:
        pool.close()
        pool.join()
    with guard.finish_lock(out):  # the first part done takes the old pack's shard list before its manifest goes
        journal = guard.read_journal(out)
        guard.write_journal(out, guard.owned(out, journal), sorted(guard.journal_names(journal, "partials")))
        (out / schema.MANIFEST).unlink(missing_ok=True)
    _rename_into_place(out, rows, run.partial_files)
    schema.fsync_dir(out)
    with guard.writing(out / part.record):
        parts.write_record(out, part, fingerprint, dict(skel, index=options.index), rows)
    journal_path.unlink(missing_ok=True)
    report.splits = {}
    for r in rows:
        s = report.splits.setdefault(r.split, {"samples": 0, "shards": 0, "bytes": 0})  # the manifest's, if last
        s["samples"] += r.samples
        s["shards"] += 1
        s["bytes"] += r.bytes
    finish(out, part.count, report, required=False)
    report.seconds = time.perf_counter() - clock[0]
    return report


def finish(out: Path, count: int | None, report: PackReport, *, required: bool = True) -> PackReport:
    """Write the manifest of a pack made in parts once every part's record is in `out` (`count`: the number of
    parts; None: as the records say). Missing parts: refused naming them when `required` (`pack --finish`), else
    left to the last part (`report.waiting`)."""
    with guard.finish_lock(out):
        records = parts.records_in(out)
        count = parts.choose_count(set(records), count, str(out))
        gone = parts.missing(out, count)
        if gone:
            if required:
                raise OutputError(parts.missing_message(str(out), gone, count))
            report.waiting = gone
            return report
        recs = [parts.read_record(records[Part(i, count)]) for i in range(count)]
        rows = parts.one_pack(recs, lambda rec: str(out / rec.part.record))
        for r in rows:
            try:
                size = (out / r.name).stat().st_size
            except FileNotFoundError:
                size = None
            parts.check_shard(str(out / r.name), size, r.bytes)
        skel = dict(recs[0].skeleton)
        index = skel.pop("index")
        report.trust = trust.check_pack(skel, rows)  # refused: the parts stay, for a pack made again
        guard.remove_partials(out, {})  # a killed finisher's temporary manifest
        report.waiting = []
        journal = guard.read_journal(out)
        keep = {r.name for r in rows}
        guard.remove_stale(out, guard.owned(out, journal) - keep)  # old shards and index files: before the new index
        manifest = assemble(skel, rows, report, index, index_writer(out))
        with guard.writing(out / schema.MANIFEST):
            write_json_atomic(out / schema.MANIFEST, manifest)
        schema.record_packed(out, manifest)
        (out / guard.JOURNAL).unlink(missing_ok=True)
        for rec in recs:
            (out / rec.part.record).unlink(missing_ok=True)
        report.finished = True
    return report


PROBE_BATCH = 256  # files a worker probes per job: 16 workers share 8,000 files in 32 jobs


def _probe_all(pairs: list[Pair], pool, chunk: int = 1 << 13, targets_only: bool = False) -> Coded:
    """Each pair's low and high `Header` (or the one-line error), probed a chunk of files at a time (the next chunk
    queued before the results of the one before are taken: two chunks in flight, whatever the number of files);
    equal headers are kept once, as codes (`Coded`), so that two million files of a few sizes cost two million bytes.
    `targets_only`: each pair's one file is probed once, its header given for both sides."""
    out = Coded()
    files = (f for pair in pairs for f in (pair.files()[1:] if targets_only else pair.files()))
    pending = None
    while True:
        names = list(itertools.islice(files, chunk))
        batches = [names[i:i + PROBE_BATCH] for i in range(0, len(names), PROBE_BATCH)]
        del names
        started = (pool.imap(probe_many, batches) if pool else map(probe_many, batches)) if batches else None
        if pending is not None:
            for found in pending:
                out.extend(found if not targets_only else (h for one in found for h in (one, one)))
        if started is None:
            return out
        pending = started


def _probe_pairs(pairs: list[Pair], pool, options: PackOptions) -> Coded:
    """Every pair's headers, low then high: refuse unreadable files, and pairs of two sizes unless --resize brings
    both images to one."""
    probes = _probe_all(pairs, pool, targets_only=options.targets_only)
    errors = [r for r in itertools.islice(probes, 0, None, 2 if options.targets_only else 1) if isinstance(r, str)]
    if errors:
        raise ImageError(errors[0] + (f" (and {len(errors) - 1} more unreadable files)" if len(errors) > 1 else ""))
    # a camera raw input's partner is checked against its sensor (`sensor.plan_camera`)
    mismatched = [(pair, probes[2 * i].hw, probes[2 * i + 1].hw) for i, pair in enumerate(pairs)
                  if probes[2 * i].hw != probes[2 * i + 1].hw and not is_raw(probes[2 * i])]
    if mismatched and options.resize is None:
        pair, lo, hi = mismatched[0]
        more = f" (and {len(mismatched) - 1} more pairs)" if len(mismatched) > 1 else ""
        hint = orientation_hint(pair.low, pair.high, lo, hi)
        raise ImageError(f"{pair.low_rel} is {lo[1]}x{lo[0]} but {pair.high_rel} is {hi[1]}x{hi[0]}; a pair must "
                         f"have one size (fix the files, or pack with --resize WxH to resize both){more}"
                         + (f"; {hint}" if hint else ""))
    return probes
