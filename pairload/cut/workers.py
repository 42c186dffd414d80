"""The `workers` cut path: worker processes copy planned windows out of the memory-mapped shards into one shared host
ring, and `WorkerCuts` feeds a run's plans through them (the host-side cutter of `ram`, `wds` and `dali-external`).

Workers are started as `python -m pairload.workers` (`pairload.workers`), each on a private socket: they import
neither torch nor the user's script, so they stay small, start in well under a second, and a script needs no
`if __name__ == "__main__":` guard. The parent plans every batch and puts self-contained tasks (`WindowTask`:
slot, rows, windows, codes) on one task socket that every worker reads from, so the first idle worker takes the
next task; results come back as slot numbers on each worker's own connection. A worker exits when its socket
closes, so a killed loader leaves none behind. Every wait has a timeout and checks that all workers are alive: a
dead worker becomes a `LoaderError` naming it, never a hang. The ring is page-locked on a GPU so host-to-device
copies are asynchronous.
"""

from __future__ import annotations

import os
import pickle
import signal
import socket
import subprocess
import sys
import time
import weakref
from collections import deque
from multiprocessing import shared_memory
from multiprocessing.connection import Connection, wait
from typing import Callable

import numpy as np
import torch

from .. import errors, interrupts
from ..errors import ConfigError, LoaderError, WorkerError
from ..forking import child_env, death
from ..format.members import DEFAULT, Members
from ..hooks import Hooks
from ..hostmemory import outgrows_cache
from ..plan import BatchPlan, PlanConfig
from ..plan import Run as PlanRun
from ..plan.run import BLOCK, FIRST_BLOCK, RunKey, next_run
from ..plan.crops import crop_size
from ..read.ahead import ReadAhead, batches_within
from ..read.concat import PerSource
from ..workers.serve import DONE, FAILED, MAX_TASK_BYTES, READY, SHM_DIR
from ..workers.windows import DegradeRows, WindowTask, degrade_window, fill
from .payload import Cut

READ_AHEAD_MAX = 1 << 30  # bytes of shards asked to be read ahead of the cuts at most: ~0.6 s of a 1.7 GB/s disk


def slot_bytes(cfg: PlanConfig, hw: np.ndarray, members: Members = DEFAULT) -> int:
    """Bytes of one ring slot: the largest batch of any schedule phase, inputs and targets laid out by the split's
    members, of crops or of the split's largest whole image (the sizes are read only for whole images)."""
    largest = (0, 0)
    if any(st.crop is None for st in cfg.phases):
        hw = np.asarray(hw)
        largest = hw[int(np.argmax(hw[:, 0] * hw[:, 1]))]
    sizes = [crop_size(st.crop) or (int(largest[0]), int(largest[1])) for st in cfg.phases]
    return max(members.batch(st.batch_size * cfg.frames, h, w).total for st, (h, w) in zip(cfg.phases, sizes))


def check_shm(depth: int, slot_bytes: int) -> None:
    """Refuse a ring larger than the free space of /dev/shm: the block would be created anyway (sparse) and the
    workers killed by SIGBUS when they first write past the space, which looks like damaged shards."""
    try:
        st = os.statvfs(SHM_DIR)
    except OSError:
        return
    need, free = depth * slot_bytes, st.f_bavail * st.f_frsize
    if need > free:
        raise ConfigError(f"the loader's ring needs {need / 2**20:.0f} MB of shared memory ({depth} batches of "
                          f"{slot_bytes / 2**20:.1f} MB: one per worker, prefetch, 2 in copy) but {SHM_DIR} has "
                          f"{free / 2**20:.0f} MB free; give it more (Docker: `docker run --shm-size=2g`), or lower "
                          "num_workers, prefetch or batch_size")


def ring_depth(workers: int, prefetch: int, hold: int = 0) -> int:
    """Ring slots: every worker busy, `prefetch` batches ready, 2 in the device copy, `hold` held by the caller
    (DALI reads its `no_copy` inputs until they leave its queues)."""
    return workers + prefetch + 2 + hold


class RemoteTraceback(Exception):
    """The traceback text of an exception raised in a worker process (set as the `__cause__` of the error the
    loader raises, so the worker's frames are printed with it)."""

    def __str__(self) -> str:
        return "\n" + self.args[0].rstrip()


def worker_error(err, who: str = "a loader worker") -> Exception:
    """The exception for a worker's (type name, message, traceback): the PairloadError subclass of that name, or a
    `WorkerError` naming the original type; its cause carries the worker's traceback."""
    kind, message, tb = err
    cls = getattr(errors, kind, None)
    if isinstance(cls, type) and issubclass(cls, errors.PairloadError) and cls is not WorkerError:
        exc = cls(message)
    else:
        exc = WorkerError(f"{who} raised {kind}: {message}", type_name=kind, remote_traceback=tb)
    exc.__cause__ = RemoteTraceback(tb)
    return exc


def _size(path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


class WorkerPool:
    """`num_workers` worker processes over one ring of `depth` slots of `slot_bytes`, each given the `dataset` it
    reads from. `submit(task)` puts a task on the shared task socket (the next idle worker takes it), `get()`
    returns the next (slot, error). Torn down by `close()` or when garbage collected."""

    POLL_S = 0.5

    def __init__(self, dataset, *, num_workers: int, depth: int, slot_bytes: int, pin: bool, name: str,
                 timeout: float = 300.0):
        if not hasattr(socket, "SOCK_SEQPACKET") or not os.path.isdir(SHM_DIR):
            raise ConfigError(f"num_workers={num_workers}: loader worker processes need Linux (a shared task socket "
                              "and /dev/shm); use num_workers=0 on this system")
        check_shm(depth, slot_bytes)
        self.depth, self.slot_bytes, self.name, self.timeout = depth, slot_bytes, name, timeout
        self.files, self.file_bytes = list(dataset.files), list(dataset.shard_bytes)
        self.shm = shared_memory.SharedMemory(create=True, size=depth * slot_bytes)
        self.ring = np.ndarray((depth, slot_bytes), dtype=np.uint8, buffer=self.shm.buf)
        self.tensor = torch.from_numpy(self.ring)
        self.pinned = False
        if pin:
            err = torch.cuda.cudart().cudaHostRegister(self.tensor.data_ptr(), depth * slot_bytes, 0)
            self.pinned = int(err) == 0  # otherwise copies still work, synchronously
        self.procs: list[subprocess.Popen] = []
        self.conns: list[Connection] = []
        self.tasks, theirs_tasks = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.ready: set[int] = set()
        self._results: deque = deque()  # (slot, error) read from the workers, not yet taken by get()
        self._checked = time.monotonic()
        self._finalizer = weakref.finalize(self, WorkerPool._teardown, self.procs, self.conns, self.tasks, self.shm,
                                           self.tensor, self.pinned)
        env = child_env()
        try:
            for _ in range(num_workers):
                mine, theirs = socket.socketpair()
                try:
                    fds = (theirs.fileno(), theirs_tasks.fileno())
                    with interrupts.held():  # a Ctrl-C while it imports: this process's, not a traceback of its
                        proc = subprocess.Popen([sys.executable, "-m", "pairload.workers", *map(str, fds)],
                                                pass_fds=fds, stdin=subprocess.DEVNULL, env=env)
                finally:
                    theirs.close()
                self.procs.append(proc)
                self.conns.append(Connection(mine.detach()))
        finally:
            theirs_tasks.close()  # the workers hold it now; the loader's end closing is what tells them it is gone
        # all started before any setup is sent: a large split's index would otherwise wait for each start in turn
        setup = pickle.dumps(("setup", {"ring": (self.shm.name, depth, slot_bytes), "dataset": dataset}),
                             protocol=pickle.HIGHEST_PROTOCOL)
        for k, conn in enumerate(self.conns):
            try:
                conn.send_bytes(setup)
            except OSError:  # it died before it read its setup: say how
                self._reap(k)
                raise LoaderError(f"{self.who(k)} closed its connection before it started; restart the job") from None

    @staticmethod
    def _teardown(procs, conns, tasks, shm, tensor, pinned) -> None:
        tasks.close()  # every worker sees the end of its task socket and exits after the task in hand
        deadline = time.monotonic() + 5
        for p in procs:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=1)
        for conn in conns:
            conn.close()
        if pinned:
            torch.cuda.cudart().cudaHostUnregister(tensor.data_ptr())
        del tensor
        try:
            shm.close()
        except BufferError:  # a delivered CPU batch may still view the ring; the name is removed all the same
            pass
        try:
            shm.unlink()
        except FileNotFoundError:
            pass

    def close(self) -> None:
        self._finalizer()

    def who(self, k: int) -> str:
        return f"loader worker {self.name}-{k} (pid {self.procs[k].pid})"

    def submit(self, task: WindowTask) -> None:
        """Queue `task` for whichever worker is free first."""
        data = pickle.dumps(task, protocol=pickle.HIGHEST_PROTOCOL)
        if len(data) > MAX_TASK_BYTES:
            raise ConfigError(f"a batch of {len(task.index)} rows makes a task of {len(data)} bytes, more than the "
                              f"workers take ({MAX_TASK_BYTES}); use a batch_size below 2048")
        try:
            self.tasks.sendall(data)
        except OSError:
            self.check_alive()
            raise LoaderError("the loader workers stopped taking tasks; restart the job") from None

    def _collect(self, timeout: float) -> None:
        """Read every message the workers have sent, waiting at most `timeout` s for the first: READY and FAILED
        are handled here, results queued for `get()`. Every worker's liveness is checked at least every POLL_S
        seconds: a batch lost with a dead worker would otherwise be waited for forever."""
        now = time.monotonic()
        if now - self._checked > self.POLL_S:
            self._checked = now
            self.check_alive()
        for conn in wait(self.conns, timeout=timeout):
            k = self.conns.index(conn)
            try:
                while True:
                    msg = conn.recv()
                    if msg[0] == READY:
                        self.ready.add(k)
                    elif msg[0] == FAILED:
                        raise worker_error(msg[1], f"{self.who(k)} (starting)")
                    elif msg[0] == DONE:
                        self._results.append((msg[1], None if msg[2] is None else (msg[2], self.who(k))))
                    if not conn.poll():
                        break
            except (EOFError, OSError):
                self._reap(k)
                raise LoaderError(f"{self.who(k)} closed its connection; restart the job") from None

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Block until every worker has started (opened what it needs and attached the ring)."""
        deadline = time.monotonic() + timeout
        while len(self.ready) < len(self.procs):
            if time.monotonic() > deadline:
                raise LoaderError(f"loader workers did not start within {timeout:.0f} s")
            self._collect(self.POLL_S)  # no task has been given yet: only READY or FAILED can come

    def get(self) -> tuple[int, object]:
        """The next (slot, error or None) from any worker; raises LoaderError naming a worker that died, or when no
        result came for `timeout` seconds (a worker stopped or stuck)."""
        start = time.monotonic()
        while not self._results:
            self._collect(self.POLL_S)
            if not self._results and time.monotonic() - start > self.timeout:
                raise LoaderError(self._stalled())
        return self._results.popleft()

    def _stalled(self) -> str:
        import psutil

        why = []
        for k, p in enumerate(self.procs):
            try:
                status = psutil.Process(p.pid).status()
            except psutil.Error:
                continue
            if status in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
                why.append(f"{self.who(k)} is stopped (SIGSTOP or a debugger; `kill -CONT {p.pid}` resumes it)")
            elif status == psutil.STATUS_DISK_SLEEP:
                why.append(f"{self.who(k)} is waiting on storage (a hung network mount?)")
        return (f"no batch from the loader workers in {self.timeout:g} s: "
                + ("; ".join(why) if why else "every worker is running, so a shard read seems to hang")
                + "; restart the job, or give the loader a larger timeout= if its storage is this slow")

    def _reap(self, k: int) -> None:
        """Worker k's connection broke: wait briefly for it to end, and raise how it did (if it did)."""
        try:
            self.procs[k].wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.check_alive()

    def check_alive(self) -> None:
        dead = [k for k, p in enumerate(self.procs) if p.poll() is not None]
        if not dead:
            return
        k = dead[0]
        code = self.procs[k].returncode
        what = f"{self.who(k)} {death(code)}"
        if code == -signal.SIGBUS:
            changed = [str(f) for f, size in zip(self.files, self.file_bytes) if _size(f) != size]
            hint = (f"; {', '.join(changed)} changed size while the loader read it: repack, then restart" if changed
                    else "; a shard was truncated or replaced while the loader read it (repack, then restart), or "
                         f"{SHM_DIR} ran out of space (see `df -h {SHM_DIR}`)")
        elif code == -signal.SIGKILL:
            hint = " (often the out-of-memory killer: see `dmesg`); restart the job, with fewer num_workers if so"
        elif k not in self.ready:
            hint = " before it started (its error is printed above); restart the job"
        else:
            hint = "; restart the job"
        raise LoaderError(what + hint)


class WorkerCuts:
    """The `workers` cutter: planned batches cut on the host. `cuts(run, plans)` yields a `Cut` for each plan of
    `run`, its block a host buffer laid out by the split's members; `release()` (None without workers) gives the
    ring slot back once the caller no longer needs the block. With `num_workers` > 0 the workers fill the ring and run
    ahead into the next epoch's first batches while the current one ends; with none the calling process cuts each
    batch itself. `plan_for(epoch, consumed)` gives a run's plans (the loader's planner). `hold` more slots are
    added to the ring for callers that keep released-later arrays in use (DALI's `no_copy` inputs).

    Reading: the disk is kept busy from the first batch on, and the workers only cut. One thread of this process
    (`ReadAhead`; `read_ahead=False`: none) asks the kernel to read the batches in the order they are handed out,
    from the first (read while the workers start) to `_window` batches ahead of the one being cut. `evict` (None: when
    the split's shards outgrow the memory that could cache them, `hostmemory.outgrows_cache`): each batch's pages
    are dropped once it is cut, since every epoch reads such a split from disk anyway, and pages kept after use only
    push out those read ahead (under a memory limit they were read again, by page faults)."""

    def __init__(self, ds, cfg: PlanConfig, plan_for: Callable[[int, tuple], list[BatchPlan]], *,
                 num_workers: int, prefetch: int, pin: bool, apply_codes: bool, name: str, hold: int = 0,
                 timeout: float = 300.0, hooks: Hooks | None = None, degrade=None, evict: bool | None = None,
                 read_ahead: bool = True):
        if not timeout > 0:
            raise ConfigError(f"timeout={timeout}: expected a positive number of seconds to wait for a batch")
        self.ds, self.cfg, self.plan_for, self.timeout = ds, cfg, plan_for, timeout
        self.members: Members = ds.members
        self.num_workers, self.pin, self.apply_codes, self.name = num_workers, pin, apply_codes, name
        self.prefetch, self.hold = prefetch, hold
        self.hooks = hooks or Hooks()
        # the degrade stage runs here (the path placed it in the host cutter): rows of the sources read as targets
        self.degrade = degrade
        self._makes = self._degraded_rows() if degrade is not None else None
        self.evict = outgrows_cache(sum(ds.shard_bytes)) if evict is None else evict
        self.pool: WorkerPool | None = None
        self._pending: deque = deque()  # (run, batch, slot) submitted to workers, in delivery order
        self._free: deque = deque()
        self._done: dict[int, object] = {}
        self._tokens: dict[int, object] = {}  # slot -> remote shards held for its task
        self._wanted: tuple | None = None  # (run, block) whose shards were last queued for download
        self.read_ahead = read_ahead and hasattr(os, "posix_fadvise")
        self.reader: ReadAhead | None = None
        self._handed = 0  # batches handed out to the workers since the reader started or was reset
        self._queued_to: tuple | None = None  # (run, batch): the next batch to queue on the reader; () past the end
        self._batches_ahead: int | None = None

    path = "workers"
    on_device = False

    @property
    def degrades(self) -> bool:
        """The cuts hold the inputs a degradation makes (the degrade stage runs in this cutter)."""
        return self.degrade is not None

    def _degraded_rows(self) -> PerSource:
        """Per sample: its source is read as targets only (the loader opened the degraded sources so)."""
        sources = list(getattr(self.ds, "by_name", {}).values()) or [self.ds]
        return PerSource([ds.targets_only for ds in sources], [len(ds) for ds in sources])

    def _degrade_rows(self, bp: BatchPlan) -> DegradeRows | None:
        if self.degrade is None:
            return None
        return DegradeRows(self.degrade, bp.params, bp.noise, self._makes[bp.index])

    @property
    def depth(self) -> int:
        return ring_depth(self.num_workers, self.prefetch, self.hold)

    # ------------------------------------------------------------------ life cycle

    def set_hold(self, hold: int) -> None:
        """Hold this many slots besides the working ones (a ring of another size: running workers stop first)."""
        if hold != self.hold:
            self.close()
            self.hold = hold

    def start(self) -> WorkerPool | None:
        """Start the workers (if any) and wait until they are ready; no shard data is read."""
        if self.num_workers:
            self._ensure().wait_ready()
        return self.pool

    def worker_pids(self) -> list[int]:
        """Process ids of the running workers (none before `start` or without workers)."""
        return [] if self.pool is None else [p.pid for p in self.pool.procs if p.poll() is None]

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        self._pending.clear()
        for token in self._tokens.values():
            self.ds.release(token)
        self._tokens.clear()
        self._wanted = None
        if self.reader is not None:
            self.reader.close()
            self.reader = None

    def _ensure(self) -> WorkerPool:
        if self.pool is None:
            self.pool = WorkerPool(self.ds, num_workers=self.num_workers, depth=self.depth,
                                   slot_bytes=slot_bytes(self.cfg, self.ds.sizes, self.members), pin=self.pin,
                                   name=self.name,
                                   timeout=self.timeout)
            self._free = deque(range(self.depth))
            self._pending.clear()
            self._done.clear()
            if self.read_ahead:
                if self.reader is not None:
                    self.reader.close()
                # the window counts from the batch being cut: the ring's batches handed out are inside it
                self.reader = ReadAhead(self.ds, max(self.num_workers, self._window - self.depth))
                weakref.finalize(self.pool, self.reader.close)  # a loader dropped unclosed stops its thread too
        return self.pool

    # ------------------------------------------------------------------ batches

    def cuts(self, run: RunKey, plans: PlanRun, reclaim: Callable[[], None] = lambda: None):
        """A `Cut` per plan; `reclaim()` is called before slots are counted (the caller frees the slots whose copies
        have finished)."""
        self.ds.check_files()  # a shard truncated or replaced between epochs is an error here, not a SIGBUS later
        try:
            if self.num_workers:
                yield from self._worker_batches(run, plans, reclaim)
            else:
                for bp in plans:
                    if bp.at == plans.block_at(bp.at).first:
                        self._want(plans, bp.at)
                    layout = self.members.batch(len(bp), *bp.out_hw(self.ds.sizes))
                    host = torch.empty(layout.total, dtype=torch.uint8, pin_memory=self.pin).numpy()
                    token = self.ds.acquire(bp.index)  # remote shards: local and held while they are cut
                    try:
                        # copied in this process: a shard truncated under its map would be a SIGBUS, not an error
                        self.ds.check_shards(bp.index)
                        code = bp.code if self.apply_codes else None
                        fill(self.ds, *layout.views(host), bp.index, bp.y, bp.x, code, self.members.scale)
                        if self.degrade is not None:
                            with self.hooks.timed("degrade"):
                                degrade_window(self.ds, *layout.views(host), bp.index, code, self._degrade_rows(bp))
                        if self.evict:
                            self.ds.dontneed(bp.index)
                        if self.ds.transient:
                            self.ds.drop_evicted()
                    finally:
                        self.ds.release(token)
                    yield Cut((bp,), layout, host, self.apply_codes)
        except LoaderError:
            self.close()  # the other workers stop too; the next iteration starts fresh ones
            raise

    def _want(self, plans: PlanRun, b: int) -> None:
        """Remote shards: start downloading what batches b, b+1, ... of this run's block of b and the next block read,
        in that order (called again as the run enters each block)."""
        if self.ds.remote and b < len(plans):
            block = plans.block_at(b)
            self.ds.want(block.column("index")[block.start(plans[b]):])
            if block.first + len(block) < len(plans):
                self.ds.want(plans.block_at(block.first + len(block)).column("index"))

    def _task(self, slot: int, plans: PlanRun, b: int) -> WindowTask:
        bp = plans[b]
        self._tokens[slot] = self.ds.acquire(bp.index)  # remote shards: local and held until the slot is done
        h, w = bp.out_hw(self.ds.sizes)
        return WindowTask(slot, bp.index, bp.y, bp.x, bp.code if self.apply_codes else None, h, w, self.members,
                          self._degrade_rows(bp), self.evict)

    @property
    def _window(self) -> int:
        """Batches asked to be read ahead of the one being cut: READ_AHEAD_MAX of shards, or half of the memory
        available if less (their pages wait in the page cache until cut; clean, so reclaimable under pressure), at most
        a block of the plan or an epoch, and at least two per worker. It spans the workers' start-up too: what is read
        meanwhile is then cut at the page cache's speed while the disk reads on."""
        if self._batches_ahead is None:
            within = min(BLOCK, -(-len(self.ds) // max(1, self.cfg.max_batch)))  # no further than a block, an epoch
            fit = batches_within(self.ds, self.cfg.max_batch * self.cfg.frames, READ_AHEAD_MAX)
            self._batches_ahead = max(2 * self.num_workers, min(within, fit))
        return self._batches_ahead

    def _hand_out(self, run: RunKey, b: int) -> None:
        """Batch b of `run` goes to the workers: the reader is told, and given the next block of the plan while it
        holds fewer batches beyond it than its window, or than the batches handed out so far (at least FIRST_BLOCK),
        continuing into the following epochs as the workers do. Filling the window at once would plan and look up a
        window of batches (256) before the first one is cut, which an index bigger than memory reads from disk (9-12 s
        at 10^8 samples, 2-core VM); so the distance read ahead grows with the batches cut, a block at a time (a
        long run's first blocks are short: `plan.run.FIRST_BLOCK`)."""
        reader = self.reader
        if reader is None:
            return
        if self._queued_to is None:
            self._queued_to = (run, b)  # the reader's batch 0
        serial, self._handed = self._handed, self._handed + 1
        if self._queued_to and reader.queued <= serial + min(reader.window, FIRST_BLOCK + serial):
            self._queued_to = self._queue_block(*self._queued_to)
        reader.cutting(serial)

    def _queue_block(self, run: RunKey, k: int) -> tuple:
        """Queue batches k, ... of `run` to the end of their block on the reader; the next (run, batch) to queue (()
        past a run of empty epochs: nothing to read ahead into)."""
        for _ in range(3):
            plans = self.plan_for(*run)
            if k < len(plans):
                return run, self.reader.add_block(plans, k)
            run, k = next_run(run), 0
        return ()

    def _submit(self, run: RunKey, b: int, reclaim) -> tuple[RunKey, int]:
        """Queue tasks until the ring is full, continuing into the following epoch; returns the next (run, b)."""
        reclaim()
        skipped = 0
        while self._free:
            plans = self.plan_for(*run)
            if b >= len(plans):
                run, b = next_run(run), 0
                skipped += 1
                if skipped > 2:  # empty epochs (the rest of a finished epoch): nothing to run ahead into
                    break
                continue
            if (run, plans.block_number(b)) != self._wanted:
                self._wanted = (run, plans.block_number(b))
                self._want(plans, b)
            slot = self._free.popleft()
            self.pool.submit(self._task(slot, plans, b))
            self._pending.append((run, b, slot))
            self._hand_out(run, b)
            b += 1
        return run, b

    def _wait(self, slot: int) -> None:
        while slot not in self._done:
            got, err = self.pool.get()
            self._done[got] = err
        err = self._done.pop(slot)
        self.ds.release(self._tokens.pop(slot, None))
        if err is not None:
            raise worker_error(*err)

    def _drain(self) -> None:
        """Wait out tasks queued for a batch sequence that is not going to be used (out-of-order set_epoch)."""
        while self._pending:
            _, _, slot = self._pending.popleft()
            try:
                self._wait(slot)
            except LoaderError:
                raise
            except Exception:  # noqa: BLE001 - the data is discarded anyway
                pass
            self._free.append(slot)

    def _release(self, slot: int, pool: WorkerPool) -> None:
        if pool is self.pool:  # a slot of a pool closed since (after a worker error) is not this ring's
            self._free.append(slot)

    def _worker_batches(self, run: RunKey, plans: PlanRun, reclaim):
        pool = self._ensure()
        if self._pending and self._pending[0][:2] != (run, 0):
            self._drain()
        if not self._pending and self.reader is not None:  # reading starts again here: what it queued is not cut
            self.reader.reset()
            self._handed, self._queued_to = 0, None
        nxt = (self._pending[-1][0], self._pending[-1][1] + 1) if self._pending else (run, 0)
        nxt = self._submit(*nxt, reclaim)
        for b, bp in enumerate(plans):
            got, bb, slot = self._pending.popleft()
            if (got, bb) != (run, b):
                raise LoaderError(f"internal: the ring delivered epoch {got[0]} batch {bb} where epoch {run[0]} "
                                  f"batch {b} was expected")
            with self.hooks.timed("wait"):
                self._wait(slot)
            layout = self.members.batch(len(bp), *bp.out_hw(self.ds.sizes))
            yield Cut((bp,), layout, pool.ring[slot], self.apply_codes,
                      release=lambda slot=slot, pool=pool: self._release(slot, pool))
            nxt = self._submit(*nxt, reclaim)
