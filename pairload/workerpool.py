"""The worker processes of `pack`, `make-pairs` and `audit` as a pool: started the safe way (`forking`), quiet when
their command is stopped, and watched. A worker that dies under it (the out-of-memory killer, a decoder crashing on a
file) takes its task with it, and multiprocessing's pool would wait for that task forever: every result is waited for
a little at a time here, and a dead worker is a `WorkerDiedError` naming how it ended and the files it was on."""

from __future__ import annotations

import ctypes
import functools
import itertools
import multiprocessing
import multiprocessing.pool
import os
import signal
import sys
import time

from . import interrupts
from .errors import WorkerDiedError
from .forking import death

WATCH_S = 0.5  # how long a result is waited for before the workers are looked at
KILL_WAIT_S = 5.0  # how long a killed worker is waited for
SLOT_BYTES = 2048  # a worker's pid and the files it is on
PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
ORPHAN_WAIT_S = 1.0  # how long a worker whose pipe broke waits to see its parent gone (the kernel closes the
# parent's files before it hands its children over)


class WorkerPool(multiprocessing.pool.Pool):
    """A pool whose workers end quietly with the command that started them (killed with it on Linux; elsewhere on the
    broken pipe to it, without a traceback from each), and whose `imap`/`imap_unordered` raise `WorkerDiedError`
    when one of them dies rather than wait for its task."""

    def __init__(self, workers: int, context, command: str, initializer=None, initargs: tuple = ()) -> None:
        self.command = command  # whose workers they are, for the message
        self._started: list = []  # every worker process this pool started, the replacements of dead ones too
        slots = 2 * workers  # replacements take the next slots, so a dead worker's stays as it left it
        self._doing = context.Array("c", slots * SLOT_BYTES, lock=False)
        self._slots = context.Value("i", 0)
        # a Ctrl-C while the workers start waits, blocked, in this thread (the command answers it once they have
        # started) and in each worker until it ignores it (`_init_worker`): a worker still starting, importing what
        # it runs, would print a KeyboardInterrupt traceback. The pool's threads, started here, keep it blocked, so
        # a replacement worker starts the same way.
        with interrupts.held():
            super().__init__(workers, initializer=_init_worker,
                             initargs=(os.getpid(), self._doing, self._slots, initializer, initargs), context=context)

    def Process(self, ctx, *args, **kwds):  # noqa: N802 - the name multiprocessing.pool.Pool calls
        kwds["target"] = functools.partial(_quiet_when_orphaned, kwds["target"])
        process = ctx.Process(*args, **kwds)
        self._started.append(process)
        return process

    # (the tasks are batched here: multiprocessing's own batches come back as a generator, which cannot be waited on
    # a little at a time)
    def imap(self, func, iterable, chunksize: int = 1):
        return self._watched(super().imap(functools.partial(_each, func), _batches(iterable, chunksize)))

    def imap_unordered(self, func, iterable, chunksize: int = 1):
        return self._watched(super().imap_unordered(functools.partial(_each, func), _batches(iterable, chunksize)))

    def _watched(self, results):
        checked = time.monotonic()
        while True:
            try:
                batch = results.next(timeout=WATCH_S)
            except StopIteration:
                return
            except multiprocessing.TimeoutError:
                batch = ()
            if time.monotonic() - checked >= WATCH_S:  # also while the other workers' results flow
                self.check()
                checked = time.monotonic()
            yield from batch

    def terminate(self) -> None:
        if self._dead() is None:
            return super().terminate()
        # A worker died. It may have died holding a lock of the pool's queues (reading a task, sending a result) or
        # half-way through a result, and multiprocessing's own teardown would then wait forever. Its threads are left
        # blocked where they are (daemon threads), the other workers killed, and the teardown it would run at exit
        # cancelled (private parts of multiprocessing.pool, the same from Python 3.8 to 3.13).
        self._worker_handler._state = multiprocessing.pool.TERMINATE  # noqa: SLF001 - no more replacements
        self._state = multiprocessing.pool.TERMINATE  # noqa: SLF001
        self._terminate.cancel()  # noqa: SLF001
        for process in self._started:
            if process.exitcode is None:
                process.kill()
        for process in self._started:
            process.join(KILL_WAIT_S)

    def join(self) -> None:
        if self._dead() is None:
            super().join()

    def _dead(self):
        """The first worker of this pool that died (ended otherwise than with code 0), or None."""
        return next((p for p in list(self._started) if p.exitcode not in (None, 0)), None)

    def check(self) -> None:
        """Raises `WorkerDiedError` if a worker of this pool has died."""
        dead = self._dead()
        if dead is not None:
            raise WorkerDiedError(self._died(dead.pid, dead.exitcode))

    def _died(self, pid: int, code: int) -> str:
        files = _files_of(bytes(self._doing), pid)
        on = f" while it read {files}" if files else ""
        cause = ("most likely the system's out-of-memory killer: run it with fewer --workers, or with more memory"
                 if code == -signal.SIGKILL else
                 "a decoder crashed on a file: check that file (open it in another program), or move it aside")
        return f"{self.command}: worker process {pid} {death(code)}{on}, and its work is lost ({cause}); " \
               f"{self.command} stopped"


def _batches(iterable, size: int):
    items = iter(iterable)
    while batch := list(itertools.islice(items, size)):
        yield batch


def _each(func, batch: list) -> list:
    return [func(item) for item in batch]


def _files_of(doing: bytes, pid: int) -> str:
    """What the worker `pid` said it was on, from the pool's slots."""
    for k in range(0, len(doing), SLOT_BYTES):
        slot = doing[k:k + SLOT_BYTES].split(b"\0")
        if len(slot) > 1 and slot[0] == str(pid).encode():
            return slot[1].decode(errors="replace")
    return ""


_parent: int | None = None  # the process of the command that started this worker
_slot: memoryview | None = None  # this worker's slot of the pool's shared `_doing`


def doing(*paths) -> None:
    """Says, in a worker, which files it is on now (for the message if it dies on them); nothing in the parent."""
    if _slot is None:
        return
    said = f"{os.getpid()}\0{' and '.join(str(p) for p in paths if p is not None)}\0".encode(errors="replace")
    said = said[:SLOT_BYTES - 1] + b"\0" if len(said) > SLOT_BYTES else said
    _slot[:len(said)] = said


def _init_worker(parent: int, shared, slots, initializer, initargs: tuple) -> None:
    global _parent, _slot
    _parent = parent
    with slots.get_lock():
        index = slots.value
        slots.value += 1
    whole = memoryview(shared).cast("B")
    per = len(whole) // SLOT_BYTES
    _slot = whole[index % per * SLOT_BYTES:(index % per + 1) * SLOT_BYTES]
    # Ctrl-C reaches the whole process group: the command answers it (its workers stopped, a pack's partial shards
    # deleted), not a KeyboardInterrupt traceback from every worker
    interrupts.set_aside(term=False)  # blocked as the pool started it: one that came meanwhile is dropped now
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # Pool.terminate's signal, whatever handler the parent had
    if sys.platform.startswith("linux"):
        # a command killed with SIGKILL cannot stop its workers: the kernel does, as it dies (a worker's results have
        # nowhere to go then, so there is nothing to unwind)
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the command died before the request: no signal will come
        os._exit(1)
    if initializer is not None:
        initializer(*initargs)


def _quiet_when_orphaned(target, *args) -> None:
    """The pool's worker loop; a broken pipe to a parent that is gone ends the worker without a traceback."""
    try:
        target(*args)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        deadline = time.monotonic() + ORPHAN_WAIT_S
        while _parent is not None and time.monotonic() < deadline:
            if os.getppid() != _parent:
                os._exit(1)
            time.sleep(0.01)
        raise
