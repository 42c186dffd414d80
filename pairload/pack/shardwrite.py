"""The two ways shard bytes reach the disk. Raw members (`write_raw`): every offset planned, each shard created at
its final size, the workers' pixels written in place. Compressed members (`write_compressed`, `CompressedShards`):
the workers' zstd frames appended in key order, one shard after the other. Both write `*.tar.partial` files only."""

from __future__ import annotations

import functools
import hashlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..format import schema
from ..format.members import Members
from ..raw.discover import Pair
from . import guard
from .jobs import Job, JobResult, close_fds, hash_file, run_job
from .options import PackOptions, PackReport
from .sensor import CameraPlan
from .shardplan import ShardPlan, plan_shards

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

    def close_files(self) -> None:
        for fh in self.open_files:
            fh.close()
        self.open_files.clear()

    def journal_partials(self, plans: list[ShardPlan]) -> None:
        """Before any partial exists: refuse names taken by someone else's files, then journal ours, so that a killed
        run's successor knows they are pack's."""
        names = [plan.partial_name for plan in plans]
        guard.check_partials_free(self.out, names)
        guard.write_journal(self.out, guard.owned(self.out, self.journal), names)


Written = tuple[list[ShardPlan], list[JobResult], list[str]]  # the shards, per-job results (no frames), sha256s


def write_raw(run: Run, pairs: list[Pair], probes: list, sizes: list, out_sizes: list,
              members: dict[str, Members], camera: CameraPlan) -> Written:
    """Raw members: every offset planned first, each shard created at its final size, pixels written in place by the
    workers; a shard is hashed and fsynced as soon as its last pair is in."""
    out, options, pool = run.out, run.options, run.pool
    plans = plan_shards(pairs, sizes, out_sizes, options.shard_size, members)
    guard.check_free_space(out, sum(plan.size for plan in plans), out_sizes)
    run.journal_partials(plans)

    jobs: list[Job] = []
    shard_of: list[int] = []
    for number, plan in enumerate(plans):
        part = out / plan.partial_name
        fh = guard.create_partial(part)
        run.partial_files.append(str(part))
        with guard.writing(part), fh:
            fh.truncate(plan.size)
            for off, data in plan.pieces:
                fh.seek(off)
                fh.write(data)
        for pair, lay, lead in plan.samples:
            idx = len(jobs)  # plans follow the order of `pairs`
            own = lead < 0
            jobs.append(Job(idx, pair.low, pair.high if own else None, probes[2 * idx], probes[2 * idx + 1],
                            (lay.height, lay.width), options.to_8bit, file=str(part), low_off=lay.low_data,
                            high_off=lay.high_data if own else None, **camera.job_fields(pair)))
            shard_of.append(number)

    t_decode = time.perf_counter()
    results: list[JobResult | None] = [None] * len(jobs)
    remaining = [len(plan.samples) for plan in plans]
    hashing: list = [None] * len(plans)
    finished = _on_hashed(plans, run.partial_files, run.on_shard)
    stream = pool.imap_unordered(run_job, jobs, chunksize=2) if pool else map(run_job, jobs)
    for done, res in enumerate(stream, 1):
        results[res.index] = res.check()
        number = shard_of[res.index]
        remaining[number] -= 1
        if remaining[number] == 0 and pool:  # hash and fsync a finished shard while later ones decode
            hashing[number] = pool.apply_async(hash_file, (run.partial_files[number],),
                                               callback=functools.partial(finished, number))
        elif remaining[number] == 0:  # one process: hash it now, so that on_shard hears of it at once
            hashing[number] = hash_file(run.partial_files[number])
            finished(number, hashing[number])
        if run.on_progress:
            run.on_progress(done, len(jobs))
    close_fds()  # pwrite has put every pixel in the page cache; fsync flushes them whoever wrote them
    t_finish = time.perf_counter()
    run.report.phases["decode"] = t_finish - t_decode
    digests = [h.get() for h in hashing] if pool else hashing
    run.report.phases["hash_fsync_tail"] = time.perf_counter() - t_finish
    return plans, results, digests


def write_compressed(run: Run, pairs: list[Pair], probes: list, sizes: list, out_sizes: list,
                     members: dict[str, Members], camera: CameraPlan) -> Written:
    """Compressed members (`--compress zstd`): the workers decode and compress each pair; the frames come back in key
    order and are appended to the shards one after the other (a frame's size is known only once it is compressed).
    Each shard holds the samples the raw pack's would (`--shard-size` is counted in raw bytes), so every loader,
    wds's shard-by-shard order included, yields the same batches from both packs. The bytes do not depend on the
    number of workers."""
    options, pool = run.options, run.pool
    plans = plan_shards(pairs, sizes, out_sizes, options.shard_size, members)  # which samples each shard holds
    slots = [(plan, lead) for plan in plans for _, _, lead in plan.samples]  # per job, in the order of `pairs`
    run.journal_partials(plans)
    jobs = [Job(k, pair.low, pair.high if slots[k][1] < 0 else None, probes[2 * k], probes[2 * k + 1],
                out_sizes[k], options.to_8bit, level=options.compress_level, **camera.job_fields(pair))
            for k, pair in enumerate(pairs)]
    t_decode = time.perf_counter()
    shards = CompressedShards(run)
    results: list[JobResult | None] = [None] * len(jobs)
    stream = pool.imap(run_job, jobs, chunksize=2) if pool else map(run_job, jobs)
    for done, res in enumerate(stream, 1):  # in job order
        k = res.check().index
        results[k] = res.without_frames()
        plan, lead = slots[k]
        ref = plan.samples[lead][0].key if lead >= 0 else None
        meta = schema.sample_meta(pairs[k].low_rel, pairs[k].high_rel, sizes[k], out_sizes[k], high_ref=ref)
        shards.add(plan, pairs[k], out_sizes[k], meta, res.low_frame, res.high_frame, lead)
        if run.on_progress:
            run.on_progress(done, len(jobs))
    shards.close()
    run.report.phases["decode_compress_write"] = time.perf_counter() - t_decode
    return shards.plans, results, shards.digests


class CompressedShards:
    """Compressed samples appended in key order to `*.tar.partial` shards, one shard after the other (each holding
    the samples of one raw plan), hashed as they are written, then fsynced."""

    def __init__(self, run: Run):
        self.run = run
        self.plans: list[ShardPlan] = []
        self.digests: list[str] = []
        self.fh = self.hash = None
        self.pos = 0
        self.finished = _on_hashed(self.plans, run.partial_files, run.on_shard)  # sees the plans as they are added

    def add(self, raw_plan: ShardPlan, pair: Pair, hw: tuple[int, int], meta: bytes, low: bytes,
            high: bytes | None, lead: int) -> None:
        """Append one sample to the shard of `raw_plan` (opened when its first sample comes); `lead` >= 0: the
        sample of that shard whose target frame it shares."""
        if not self.plans or self.plans[-1].name != raw_plan.name:
            self._open(raw_plan.split, raw_plan.number)
        plan = self.plans[-1]
        shared = None
        if lead >= 0:
            lay = plan.samples[lead][1]
            shared = (lay.high_data, lay.high_bytes)
        layout, pieces = schema.layout_compressed_sample(pair.key, hw[0], hw[1], meta, low, high, plan.end, shared)
        self._write(pieces)
        plan.samples.append((pair, layout, lead))
        plan.end = layout.end

    def _open(self, split: str, number: int) -> None:
        self.close()
        plan = ShardPlan(split, number)
        part = self.run.out / plan.partial_name
        self.fh = guard.create_partial(part)
        self.run.open_files.append(self.fh)
        self.run.partial_files.append(str(part))
        self.plans.append(plan)
        self.hash, self.pos = hashlib.sha256(), 0

    def _write(self, pieces: list[tuple[int, bytes]]) -> None:
        with guard.writing(Path(self.fh.name)):
            for off, data in pieces:
                if off > self.pos:  # tar's zero padding up to the next 512-byte block
                    self._put(bytes(off - self.pos))
                self._put(data)

    def _put(self, data: bytes) -> None:
        self.fh.write(data)
        self.hash.update(data)
        self.pos += len(data)

    def close(self) -> None:
        """Finish the current shard, if one is open: the archive's end blocks, then fsync."""
        if self.fh is None:
            return
        with guard.writing(Path(self.fh.name)):
            self._put(bytes(self.plans[-1].size - self.pos))
            self.fh.flush()
            os.fsync(self.fh.fileno())
            self.fh.close()
        self.run.open_files.remove(self.fh)
        self.digests.append(self.hash.hexdigest())
        self.fh = None
        self.finished(len(self.plans) - 1, self.digests[-1])


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
