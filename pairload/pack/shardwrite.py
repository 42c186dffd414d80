"""The two ways shard bytes reach the disk. Raw members (`write_raw`): every offset planned, each shard created at
its final size, the workers' pixels written in place. Compressed or encoded members (`write_compressed`,
`CompressedShards`): the workers' zstd frames, or an encoded pack's JPEG files and pixels, appended in key order, one
shard after the other. Both write `*.tar.partial` files only."""

from __future__ import annotations

import bisect
import functools
import hashlib
import itertools
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..format import schema
from ..format.atomic import write_json_atomic
from ..format import sensor as fmt
from ..format.encoding import Encoding
from ..format.members import Members
from ..format.tiles import STARTS_MAX, tile_count
from ..folders.discover import Pair
from . import guard
from .encoded import run_encoded_job
from .jobs import Job, JobResult, close_fds, run_job, run_task
from .options import PackOptions, PackReport
from .sensor import CameraPlan
from .rows import RowsBuilder, ShardRows
from .spill import Spill
from .shardhash import ShardHasher
from .shardplan import ShardPlan, lay_out, shared_targets

ShardDone = Callable[[str, str, str, int], None]  # (shard name, partial file, sha256, bytes)


@dataclass
class Run:
    """One pack's output side: what the writers need, and the partial shards created so far (removed on failure)."""

    out: Path
    options: PackOptions
    pool: object
    journal: dict
    report: PackReport
    on_progress: Callable[[int, int], None] | None
    on_shard: ShardDone | None = None
    partial_files: list[str] = field(default_factory=list)
    open_files: list = field(default_factory=list)
    part_journal: Path | None = None  # a part of a pack (`parts`): its own journal of partial shards
    spill: Spill = field(init=False)  # the finished shards' index rows, out of memory until the index is written

    def __post_init__(self):
        self.spill = Spill(self.out)

    def close_files(self) -> None:
        for fh in self.open_files:
            fh.close()
        self.open_files.clear()
        self.spill.close()

    def journal_partials(self, plans: list[ShardPlan]) -> None:
        """Before any partial exists: refuse names taken by someone else's files, then journal ours, so that a killed
        run's successor knows they are pack's."""
        names = [plan.partial_name for plan in plans]
        guard.check_partials_free(self.out, names)
        if self.part_journal is not None:
            with guard.writing(self.part_journal):
                write_json_atomic(self.part_journal, {"partials": names})
            return
        guard.write_journal(self.out, guard.owned(self.out, self.journal), names)


CHUNK = 2048  # pairs laid out and handed to the workers at a time: what bounds a pack's memory, whatever its size
# (two chunks are in flight, a pair ~1 KB of the pack's memory: its job, paths, layout and result)
CHUNK_BYTES = 512 << 20  # and at most this many shard bytes, so that shards finish (and are hashed, and written back
# to the disk) while later ones decode instead of all at the end: 4,096 pairs of 600x400 fill 23 shards


JPEG_NAMES = (".jpg", ".jpeg")  # files an encoded pack keeps as they are (mostly: `imageformats.jpeg_refusal`)


@dataclass
class Inputs:
    """What the writers read: the pairs in `target_groups` order, each file's probed header (low then high of each
    pair), each pair's original and stored size, the splits' member types and the camera plan; `targets_only`: each
    sample stores its target alone (`pack --targets-only`)."""

    pairs: list[Pair]
    probes: list
    sizes: list
    out_sizes: list
    members: dict[str, Members]
    camera: CameraPlan
    targets_only: bool = False
    shared: np.ndarray | None = None  # `shardplan.shared_targets(pairs)`, once made
    tile_rows: dict[str, int] | None = None  # `tiles_kept`, once worked out

    def tiles_kept(self, split: str) -> int:
        """How many tile starts a row of an encoded `split`'s index keeps (`RowsBuilder`'s `tiles`): the most tiles
        of a member that may be stored as tiles (not a JPEG file, which is kept as it is) among those of at most
        `tiles.STARTS_MAX`; 0: none."""
        if self.tile_rows is None:
            self.tile_rows = {}
            for pair, (h, w) in zip(self.pairs, self.out_sizes):
                s = self.members[pair.split].scale
                sides = ((pair.high_rel, s),) if self.targets_only else ((pair.low_rel, 1), (pair.high_rel, s))
                for rel, scale in sides:
                    n = tile_count(h * scale, w * scale)
                    if n <= STARTS_MAX and not rel.lower().endswith(JPEG_NAMES):
                        self.tile_rows[pair.split] = max(self.tile_rows.get(pair.split, 0), n)
        return self.tile_rows.get(split, 0)

    def job(self, k: int, own: bool, options: PackOptions, **where) -> Job:
        pair = self.pairs[k]
        after = self.pairs[k + 1] if k + 1 < len(self.pairs) else None  # a target's samples are consecutive
        shared = after is not None and (after.split, after.high_rel) == (pair.split, pair.high_rel)
        return Job(k, None if self.targets_only else pair.low, pair.high if own else None, self.probes[2 * k],
                   self.probes[2 * k + 1], self.out_sizes[k], options.to_8bit, **where, fit=options.fit,
                   npy_bgr=options.npy_bgr, shared_high=None if own else pair.high, keeps_high=own and shared,
                   **self.camera.job_fields(pair))

    def rows(self, plan: ShardPlan, encoding: Encoding, spill: Spill | None = None) -> RowsBuilder:
        doc = self.camera.docs.get(plan.split)
        exposures = None if doc is None else self.camera.exposures[plan.first:plan.first + plan.count]
        packed = doc is not None and fmt.LEVELS_HIGH in fmt.index_fields({fmt.FIELD: doc})
        return RowsBuilder(plan.split, plan.name, self.pairs, plan.first, plan.count, sized=encoding.sized,
                           kinds=encoding.per_member, exposures=exposures, packed_target=packed, spill=spill,
                           tiles=self.tiles_kept(plan.split) if encoding.per_member else 0)

    def laid_out(self, plans: list[ShardPlan]):
        """(shard number, place, layout, lead, pieces) of every sample of `plans`, in order (`lay_out`)."""
        shared = shared_targets(self.pairs) if self.shared is None else self.shared
        for number, plan in enumerate(plans):
            for i, lay, lead, pieces in lay_out(plan, self.pairs, self.sizes, self.out_sizes, self.members,
                                                self.targets_only, shared):
                yield number, i, lay, lead, pieces


def _chunks(iterable, n: int, max_bytes: int | None = None, first: int | None = None):
    """Lists of up to `n` items; with `max_bytes`, the items are (item, bytes) pairs and a list also ends once its
    bytes reach `max_bytes` (the items are then given without their sizes). `first`: the first list holds at most
    this many items, and each next one twice as many as the one before, up to `n` (the workers start on a few jobs
    instead of waiting while a whole chunk is laid out)."""
    it = iter(iterable)
    limit = n if first is None else max(1, min(first, n))
    if max_bytes is None:
        while chunk := list(itertools.islice(it, limit)):
            yield chunk
            limit = min(n, 2 * limit)
        return
    chunk, size = [], 0
    for item, nbytes in it:
        chunk.append(item)
        size += nbytes
        if len(chunk) >= limit or size >= max_bytes:
            yield chunk
            chunk, size = [], 0
            limit = min(n, 2 * limit)
    if chunk:
        yield chunk


def spread(chunk: list, file_of: Callable = lambda job: job.file) -> list:
    """A chunk's jobs (or runs of jobs, `units`, with `file_of` saying their shard) reordered so that each of its
    shards' samples are spread evenly over it (their offsets are planned: any order writes the same bytes). Several
    shards then fill at once, each at a fraction of the workers' rate: a shard is hashed by one thread, slower than
    all the workers filling it alone, so a shard filled alone at the end of a pack left a backlog to hash (and fsync)
    after the last decode."""
    groups: dict[str | None, list] = {}
    for item in chunk:
        groups.setdefault(file_of(item), []).append(item)
    if len(groups) < 2:
        return chunk
    lists = list(groups.values())
    ranked = sorted(((k + 0.5) / len(items), n, k) for n, items in enumerate(lists) for k in range(len(items)))
    return [lists[n][k] for _, n, k in ranked]


def units(jobs: list[Job]) -> list[list[Job]]:
    """The jobs in runs that one worker takes together: a job storing a target, then the jobs whose pairs share it
    (measured against its decode: `jobs.run_task`)."""
    out: list[list[Job]] = []
    for job in jobs:
        if job.shared_high is not None and out:
            out[-1].append(job)
        else:
            out.append([job])
    return out


def tasks(runs: list[list[Job]], size: int) -> list[list[Job]]:
    """Pool tasks of about `size` jobs each, made of whole runs (`units`)."""
    out: list[list[Job]] = []
    for run in runs:
        if out and len(out[-1]) + len(run) <= size:
            out[-1].extend(run)
        else:
            out.append(list(run))
    return out


RUN_TASK = functools.partial(run_task, run_job)  # a raw pack's pool task
TASK_PIXELS = 2_000_000  # pixels of a pair's stored size that make one pool task (600x400 pairs: 8 jobs a task)


def task_size(chunk: list[Job]) -> int:
    """Jobs per pool task: one for large pairs (1080p and up), so that the workers' last tasks end together, more
    for smaller ones, up to 16: a task's pairs are measured together (`jobs.measured`: a third less of the measures'
    time at 600x400), and a task's round trip costs the pack's process about as much as decoding a small pair; the
    workers' last tasks end up to a few pairs' decode apart, once a pack."""
    pixels = sum(job.out_hw[0] * job.out_hw[1] for job in chunk) / max(1, len(chunk))
    return max(1, min(16, int(TASK_PIXELS // max(1.0, pixels))))


def hash_threads(workers: int) -> int:
    """Threads hashing shards as they fill: one per four workers, since hashing a pair's pixels costs a fraction
    of decoding them, so one thread keeps up with several workers; each shard in flight has at most one."""
    return max(2, min(16, workers // 4 + 1))


def write_raw(run: Run, inputs: Inputs, plans: list[ShardPlan]) -> list[ShardRows]:
    """Raw members: every offset planned first, each shard created at its final size, pixels written in place by the
    workers; a shard is hashed while it fills, as far as its samples are in (`ShardHasher`), and fsynced once its
    last one is. The samples are laid out a chunk at a time while the workers decode the chunk before (memory
    bounded by the chunk, not by the pack or the shard)."""
    out, options, pool = run.out, run.options, run.pool
    guard.check_free_space(out, sum(plan.size for plan in plans), inputs.out_sizes)
    run.journal_partials(plans)
    fds: list[int | None] = [None] * len(plans)
    builders: list[RowsBuilder | None] = [None] * len(plans)
    rows: list[ShardRows | None] = [None] * len(plans)
    remaining = [plan.count for plan in plans]
    # per shard, the end offset of each sample laid out past the ones all in from its start (`whole`), and the places
    # done past them: a window of a chunk or two of samples, whatever the shard's size
    ends: list[dict[int, int]] = [{} for _ in plans]
    finished_places: list[set[int]] = [set() for _ in plans]
    whole = [0] * len(plans)  # the samples from a shard's start that are all in
    hasher = ShardHasher(hash_threads(options.workers or os.cpu_count() or 1),
                         _on_hashed(plans, run.partial_files, run.on_shard))
    firsts = [plan.first for plan in plans]
    total, done = sum(plan.count for plan in plans), 0

    def jobs():
        for number, i, lay, lead, pieces in inputs.laid_out(plans):
            if fds[number] is None:  # the shard's first sample: create it at its final size
                part = out / plans[number].partial_name
                fh = guard.create_partial(part)
                run.partial_files.append(str(part))
                with guard.writing(part):
                    fh.truncate(plans[number].size)
                fds[number] = os.dup(fh.fileno())
                fh.close()
                builders[number] = inputs.rows(plans[number], options.encoding, run.spill)
                hasher.open(number, str(part), plans[number].size)
            with guard.writing(out / plans[number].partial_name):
                for off, data in pieces:
                    os.pwrite(fds[number], data, off)
            builders[number].laid(i, lay, lead)
            ends[number][i] = lay.end
            yield inputs.job(plans[number].first + i, lead < 0, options, file=run.partial_files[number],
                             low_off=lay.low_data, high_off=lay.high_data if lead < 0 else None), lay.end - lay.start

    def collect(results) -> None:
        nonlocal done
        for res in results:
            number = bisect.bisect_right(firsts, res.index) - 1
            place = res.index - plans[number].first
            builders[number].result(place, res.check())
            remaining[number] -= 1
            if remaining[number] == 0:
                os.close(fds[number])
                fds[number] = -1
                builder, builders[number] = builders[number], None
                rows[number] = builder.finish(plans[number].size, "")
                ends[number], finished_places[number] = {}, set()
                hasher.ready(number, plans[number].size, final=True)
            else:
                marks, laid = finished_places[number], ends[number]
                marks.add(place)
                start = k = whole[number]
                while k in marks:
                    marks.discard(k)
                    k += 1
                if k > start:
                    whole[number] = k
                    upto = laid[k - 1]
                    for j in range(start, k):
                        del laid[j]
                    hasher.ready(number, upto)
            done += 1
            if run.on_progress:
                run.on_progress(done, total)

    t_decode = time.perf_counter()
    try:
        pending = None
        # the next chunk is laid out while the workers decode this one; the first is small, so that they start at once
        for chunk in _chunks(jobs(), CHUNK, CHUNK_BYTES, first=2 * (options.workers or os.cpu_count() or 1)):
            work = tasks(spread(units(chunk), lambda run: run[0].file), task_size(chunk))
            started = itertools.chain.from_iterable(pool.imap_unordered(RUN_TASK, work) if pool else
                                                    map(RUN_TASK, work))
            if pending is not None:
                collect(pending)
            pending = started
        if pending is not None:
            collect(pending)
        close_fds()  # pwrite has put every pixel in the page cache; fsync flushes them whoever wrote them
        t_finish = time.perf_counter()
        run.report.phases["decode"] = t_finish - t_decode
        for number in range(len(plans)):
            rows[number].sha256 = hasher.digest(number).result()
        run.report.phases["hash_fsync_tail"] = time.perf_counter() - t_finish
    finally:
        hasher.close()
        for fd in fds:
            if fd is not None and fd >= 0:
                os.close(fd)
    return rows


def write_compressed(run: Run, inputs: Inputs, plans: list[ShardPlan]) -> list[ShardRows]:
    """Compressed members (`--compress zstd`): the workers decode and compress each pair; the frames come back in key
    order and are appended to the shards one after the other (a frame's size is known only once it is compressed).
    Each shard holds the samples the raw pack's would (`--shard-size` is counted in raw bytes), so every loader,
    wds's shard-by-shard order included, yields the same batches from both packs. The bytes do not depend on the
    number of workers."""
    options, pool = run.options, run.pool
    run.journal_partials(plans)
    t_decode = time.perf_counter()
    shards = CompressedShards(run, inputs)
    total, done = sum(plan.count for plan in plans), 0
    level = options.compress_level if options.encoding.levels else None
    work = functools.partial(run_task, run_encoded_job if options.encoding.per_member else run_job)
    slots = ((plans[number], lead, inputs.job(plans[number].first + i, lead < 0, options,
                                              encoding=options.encoding, level=level))
             for number, i, _, lead, _ in inputs.laid_out(plans))
    pending = None
    for chunk in itertools.chain(_chunks(slots, CHUNK), [None]):
        started = None
        if chunk is not None:
            runs = tasks(units([job for _, _, job in chunk]), 2)
            started = (chunk, itertools.chain.from_iterable(pool.imap(work, runs) if pool else map(work, runs)))
        if pending is not None:
            for (plan, lead, _), res in zip(*pending):  # in job order
                k = res.check().index
                pair = inputs.pairs[k]
                ref = shards.key_of(lead) if lead >= 0 else None
                meta = schema.sample_meta(None if inputs.targets_only else pair.low_rel, pair.high_rel, inputs.sizes[k],
                                          inputs.out_sizes[k], high_ref=ref)
                shards.add(plan, pair, inputs.out_sizes[k], meta, res.low_frame, res.high_frame, lead,
                           res.without_frames())
                done += 1
                if run.on_progress:
                    run.on_progress(done, total)
        pending = started
    shards.close()
    phase = "decode_keep_write" if options.encoding.per_member else "decode_compress_write"
    run.report.phases[phase] = time.perf_counter() - t_decode
    return shards.rows


class CompressedShards:
    """Compressed samples appended in key order to `*.tar.partial` shards, one shard after the other (each holding
    the samples of one raw plan), hashed as they are written, then fsynced; each finished shard becomes `ShardRows`."""

    def __init__(self, run: Run, inputs: Inputs):
        self.run, self.inputs = run, inputs
        self.plans: list[ShardPlan] = []  # the compressed shards, as they are opened
        self.rows: list[ShardRows] = []
        self.builder: RowsBuilder | None = None
        # place -> (frame offset, length, format code, key) of a stored target
        self.targets: dict[int, tuple[int, int, int, str]] = {}
        self.fh = self.hash = None
        self.pos = 0
        self.finished = _on_hashed(self.plans, run.partial_files, run.on_shard)  # sees the plans as they are added

    def key_of(self, lead: int) -> str:
        return self.targets[lead][3]

    def add(self, raw_plan: ShardPlan, pair: Pair, hw: tuple[int, int], meta: bytes, low: bytes | None,
            high: bytes | None, lead: int, result: JobResult) -> None:
        """Append one sample to the shard of `raw_plan` (opened when its first sample comes); `lead` >= 0: the
        sample of that shard whose target frame it shares; `low` None: a targets-only sample."""
        if not self.plans or self.plans[-1].name != raw_plan.name:
            self._open(raw_plan)
        plan = self.plans[-1]
        shared = None if lead < 0 else self.targets[lead][:3]
        layout, pieces = schema.layout_compressed_sample(pair.key, hw[0], hw[1], meta, low, high, plan.end, shared,
                                                         self.run.options.encoding)
        self._write(pieces)
        if lead < 0:
            self.targets[plan.count] = (layout.high_data, layout.high_bytes, layout.high_kind, pair.key)
        self.builder.laid(plan.count, layout, lead)
        self.builder.result(plan.count, result)
        plan.count += 1
        plan.end = layout.end

    def _open(self, raw_plan: ShardPlan) -> None:
        self.close()
        plan = ShardPlan(raw_plan.split, raw_plan.number, raw_plan.first)
        part = self.run.out / plan.partial_name
        self.fh = guard.create_partial(part)
        self.run.open_files.append(self.fh)
        self.run.partial_files.append(str(part))
        self.plans.append(plan)
        self.builder, self.targets = self.inputs.rows(raw_plan, self.run.options.encoding, self.run.spill), {}
        self.hash, self.pos = hashlib.sha256(), 0

    def _write(self, pieces: list[tuple[int, bytes]]) -> None:
        with guard.writing(Path(self.fh.name)):
            for off, data in pieces:
                if off > self.pos:  # tar's zero padding up to the next 512-byte block
                    self.put(bytes(off - self.pos))
                self.put(data)

    def put(self, data: bytes) -> None:
        """Append bytes to the open shard (hashed as they go)."""
        self.fh.write(data)
        self.hash.update(data)
        self.pos += len(data)

    def close(self) -> None:
        """Finish the current shard, if one is open: the archive's end blocks, then fsync."""
        if self.fh is None:
            return
        with guard.writing(Path(self.fh.name)):
            self.put(bytes(self.plans[-1].size - self.pos))
            self.fh.flush()
            os.fsync(self.fh.fileno())
            self.fh.close()
        self.run.open_files.remove(self.fh)
        plan = self.plans[-1]
        self.rows.append(self.builder.finish(plan.size, self.hash.hexdigest()))
        self.builder, self.targets, self.fh = None, {}, None
        self.finished(len(self.plans) - 1, self.rows[-1].sha256)


def _on_hashed(plans: list[ShardPlan], partial_files: list[str], on_shard: ShardDone | None):
    """finished(number, sha256): tell `on_shard` that shard `number` is complete. It runs on the pool's result thread,
    which must never raise (the pool would hang), so a failing hook is swallowed here; the hook owns its errors."""
    def finished(number: int, digest: str) -> None:
        if on_shard is None:
            return
        try:
            on_shard(plans[number].name, partial_files[number], digest, plans[number].size)
        except Exception:  # noqa: BLE001 - see above
            pass

    return finished
