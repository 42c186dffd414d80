"""Worker processes that fill the slots of one shared, page-locked ring, for the `ram` and `wds` loaders.

Workers are spawned (never forked from a process that may hold CUDA or threads), exit within a fraction of a
second when their parent is gone, and report READY once started. Every wait on them has a timeout and checks
that all are alive, so a dead worker becomes a `LoaderError` naming it instead of a hang.
"""

from __future__ import annotations

import os
import queue
import signal
import time
import weakref
from multiprocessing import get_context, shared_memory

import numpy as np
import torch

from .. import errors
from ..read.assemble import FAILED, READY
from ..errors import LoaderError


def _death(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


def _size(path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


def worker_error(err) -> Exception:
    """The exception a worker reported as (type name, message): the PairloadError subclass of that name."""
    kind, message = err
    cls = getattr(errors, kind, None)
    return cls(message) if isinstance(cls, type) and issubclass(cls, errors.PairloadError) else RuntimeError(message)


class WorkerPool:
    """`num_workers` processes running `target(*args, worker, shm_name, depth, slot_bytes, tasks, results,
    parent_pid)`, a ring of `depth` slots of `slot_bytes`, one task queue per worker (or one shared) and one
    result queue. Torn down by `close()` or when garbage collected."""

    POLL_S = 0.5

    def __init__(self, target, args: tuple, *, num_workers: int, depth: int, slot_bytes: int, pin: bool,
                 name: str, shared_tasks: bool, files=(), file_bytes=()):
        self.depth, self.slot_bytes = depth, slot_bytes
        self.files, self.file_bytes = list(files), list(file_bytes)
        self.shm = shared_memory.SharedMemory(create=True, size=depth * slot_bytes)
        self.ring = np.ndarray((depth, slot_bytes), dtype=np.uint8, buffer=self.shm.buf)
        self.tensor = torch.from_numpy(self.ring)
        self.pinned = False
        if pin:
            err = torch.cuda.cudart().cudaHostRegister(self.tensor.data_ptr(), depth * slot_bytes, 0)
            self.pinned = int(err) == 0  # otherwise copies still work, synchronously
        ctx = get_context("spawn")
        shared = ctx.Queue() if shared_tasks else None
        self.tasks = [shared or ctx.Queue() for _ in range(num_workers)]
        self.results = ctx.Queue()
        self.ready: set[int] = set()
        self._checked = time.monotonic()
        self.procs = [ctx.Process(target=target, daemon=True, name=f"{name}-{k}",
                                  args=(*args, k, self.shm.name, depth, slot_bytes, self.tasks[k], self.results,
                                        os.getpid()))
                      for k in range(num_workers)]
        self._finalizer = weakref.finalize(self, WorkerPool._teardown, self.procs, self.tasks, self.shm, self.tensor,
                                           self.pinned)
        for p in self.procs:
            p.start()

    @staticmethod
    def _teardown(procs, tasks, shm, tensor, pinned) -> None:
        for p, q in zip(procs, tasks):
            if p.is_alive():
                try:
                    q.put(None)
                except (OSError, ValueError):
                    pass
        for p in procs:
            if p.pid is not None:
                p.join(timeout=5)
                if p.is_alive():
                    p.terminate()
                    p.join(timeout=1)
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

    def _poll(self):
        """At most POLL_S of waiting for one worker message: READY and FAILED are handled here, a result is returned
        (else None). Every worker's liveness is checked at least every POLL_S seconds: a batch lost with a dead
        worker would otherwise be waited for forever."""
        now = time.monotonic()
        if now - self._checked > self.POLL_S:
            self._checked = now
            self.check_alive()
        try:
            msg = self.results.get(timeout=self.POLL_S)
        except queue.Empty:
            return None
        if msg[0] == READY:
            self.ready.add(msg[1])
            return None
        if msg[0] == FAILED:
            raise worker_error(msg[1])
        return msg

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Block until every worker has started (opened what it needs and attached the ring)."""
        deadline = time.monotonic() + timeout
        while len(self.ready) < len(self.procs):
            if time.monotonic() > deadline:
                raise LoaderError(f"loader workers did not start within {timeout:.0f} s")
            self._poll()  # no task has been given yet: only READY or FAILED can come

    def get(self):
        """The next result from any worker; raises LoaderError naming a worker that died."""
        while (msg := self._poll()) is None:
            pass
        return msg

    def check_alive(self) -> None:
        dead = [p for p in self.procs if p.exitcode is not None]
        if not dead:
            return
        p = dead[0]
        what = f"loader worker {p.name} (pid {p.pid}) {_death(p.exitcode)}"
        if p.exitcode == -signal.SIGBUS:
            changed = [str(f) for f, size in zip(self.files, self.file_bytes) if _size(f) != size]
            hint = (f"; {', '.join(changed)} changed size while the loader read it" if changed else
                    "; a shard was truncated or replaced while the loader read it") + ": repack, then restart"
        elif p.pid not in self.ready and p.exitcode == 1:
            hint = (" before it started (its error is printed above). If your script makes the loader at module "
                    "level, put that code under `if __name__ == \"__main__\":`: workers are started with the spawn "
                    "method and import your script again")
        elif p.exitcode == -signal.SIGKILL:
            hint = " (often the out-of-memory killer: see `dmesg`); restart the job, with fewer num_workers if so"
        else:
            hint = "; restart the job"
        raise LoaderError(what + hint)
