"""`pack_folder`: one pack into a local folder, start to finish. Under the folder's lock: find the pairs, probe every
header (unreadable files and mismatched sizes are refused before anything is written), write the partial shards
(`shardwrite`), then rename them, delete the shards no longer listed, and write the manifest last."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

from ..errors import ImageError
from ..format import schema
from ..format.atomic import write_json_atomic
from ..raw.decode import Header, orientation_hint, target_size
from ..raw.discover import Pair, find_pairs
from . import guard
from .jobs import close_fds, probe, start_pool
from .manifest import build_manifest
from .options import PackOptions, PackReport
from .shardplan import target_groups
from .sensor import is_raw, plan_camera
from .sides import split_members
from .shardwrite import Run, ShardDone, write_compressed, write_raw


def pack_folder(raw_dir: str | os.PathLike, shards_dir: str | os.PathLike, options: PackOptions = PackOptions(),
                on_progress: Callable[[int, int], None] | None = None, *, on_start: Callable[[], None] | None = None,
                on_shard: ShardDone | None = None) -> PackReport:
    """`pack` into a local folder. `on_start()` runs once the folder is locked and the pairs are found, before
    anything is written; `on_shard(name, partial, sha256, bytes)` as soon as a shard is written, hashed and fsynced
    (under its temporary name `partial`, renamed to `name` beside it once every shard is done). `on_shard` may run
    on another thread, and must not raise."""
    start = time.perf_counter()
    workers = options.workers or os.cpu_count() or 1
    pool = start_pool(workers) if workers > 1 else None  # workers start while the folders are being listed
    try:
        out = Path(shards_dir)
        guard.check_output_outside_raw(Path(raw_dir), out)
        discovery = find_pairs(raw_dir, low_dir=options.low_dir, high_dir=options.high_dir,
                               pairs_file=options.pairs_file, skip_unmatched=options.skip_unmatched,
                               split_names=dict(options.split_names), name_template=options.name_template)
        out.mkdir(parents=True, exist_ok=True)
        with guard.folder_lock(out):
            if on_start:
                on_start()
            return _pack_locked(discovery, Path(raw_dir), out, options, pool, workers, start, on_progress, on_shard)
    except BaseException:
        if pool:
            pool.terminate()
        raise


def _pack_locked(discovery, raw: Path, out: Path, options: PackOptions, pool, workers: int, start: float,
                 on_progress, on_shard: ShardDone | None = None) -> PackReport:
    if not options.overwrite:
        guard.check_manifest_replaceable(out, raw)
    pairs = target_groups(discovery.pairs)
    journal = guard.read_journal(out)
    guard.remove_partials(out, journal)  # left by a killed run
    report = PackReport(shards_dir=out, workers=workers, compression=options.compress)
    report.skipped = discovery.skipped_low + discovery.skipped_high
    report.skipped_per_split = dict(discovery.skipped_per_split)
    report.layout = discovery.layout()
    report.unused = [u.as_dict() for u in discovery.unused]
    report.split_folders = {k: {"split": v[0], "how": v[1]} for k, v in sorted(discovery.split_folders.items())}
    run = Run(out=out, options=options, pool=pool, journal=journal, report=report, on_progress=on_progress,
              on_shard=on_shard)
    try:
        probes = _probe_pairs(pairs, pool, options)
        report.phases["probe"] = time.perf_counter() - start
        resized = options.resize is not None or options.max_side is not None
        camera = plan_camera(raw, pairs, probes, raw_target=options.raw_target, ratio_cap=options.ratio_cap,
                             to_8bit=options.to_8bit, resized=resized)
        members = split_members(raw, pairs, probes, options.to_8bit, camera)
        sizes = [probes[2 * i].hw for i in range(len(pairs))]
        out_sizes = [target_size(h, w, options.resize, options.max_side) for h, w in sizes]
        write = write_compressed if options.compress else write_raw
        plans, results, digests = write(run, pairs, probes, sizes, out_sizes, members, camera)
    except BaseException:
        if pool:
            pool.terminate()
            pool.join()
        close_fds()
        run.close_files()
        for part in run.partial_files:
            Path(part).unlink(missing_ok=True)
        guard.forget_partials(out, journal)
        raise
    if pool:
        pool.close()
        pool.join()

    manifest = build_manifest(plans, results, digests, discovery, raw, options, report, members, camera)
    keep = {plan.name for plan in plans}
    owned = guard.owned(out, journal) | keep
    guard.write_journal(out, owned, [plan.partial_name for plan in plans])  # a kill from here on still knows
    (out / schema.MANIFEST).unlink(missing_ok=True)  # its shards are about to be replaced
    for plan, part in zip(plans, run.partial_files):
        with guard.writing(out / plan.name):
            os.replace(part, out / plan.name)
    for stale in sorted(owned - keep):
        (out / stale).unlink(missing_ok=True)
    schema.fsync_dir(out)
    with guard.writing(out / schema.MANIFEST):
        write_json_atomic(out / schema.MANIFEST, manifest)
    (out / guard.JOURNAL).unlink(missing_ok=True)
    report.seconds = time.perf_counter() - start
    return report


def _probe_pairs(pairs: list[Pair], pool, options: PackOptions) -> list[Header]:
    """Every pair's headers, low then high: refuse unreadable files, and pairs of two sizes unless --resize brings
    both images to one."""
    paths = [p for pair in pairs for p in (pair.low, pair.high)]
    probes = pool.map(probe, paths, chunksize=64) if pool else [probe(p) for p in paths]
    errors = [r for r in probes if isinstance(r, str)]
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
