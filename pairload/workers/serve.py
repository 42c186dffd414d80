"""A worker's life: attach the ring, open the dataset, report READY, then execute tasks until told to stop or
until the loader is gone (its end of the socket closes). Every failure goes back to the loader with its type
name, message and traceback text; nothing is printed here.

Two channels. Each worker's own connection: loader → worker ("setup", {"ring": (shm name, depth, slot bytes),
"dataset": ShardDataset}) once; worker → loader ("ready", pid) or ("failed", error) once, then ("done", slot,
None | error) per task; an error is (type name, message, traceback text). And one task socket shared by every
worker (SOCK_SEQPACKET: each message, a pickled `WindowTask` or None, goes whole to exactly one worker), so an
idle worker takes the next task whoever would have been "due" (no batch waits behind a busy worker).
"""

from __future__ import annotations

import mmap
import os
import pickle
import socket
import sys
import traceback
from multiprocessing.connection import Connection

import numpy as np

from .. import interrupts
from .windows import WindowTask, run_window

READY, FAILED, DONE = "ready", "failed", "done"
MAX_TASK_BYTES = 128 << 10  # a task is a batch's rows (a few KB); within the kernel's default socket buffer
SHM_DIR = "/dev/shm"


def error_of(exc: BaseException) -> tuple[str, str, str]:
    """(type name, message, traceback text) of an exception, for the loader to raise again."""
    return type(exc).__name__, str(exc), "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def attach_ring(name: str, depth: int, slot_bytes: int) -> np.ndarray:
    """The loader's shared-memory ring as a (depth, slot_bytes) array. Opened as a plain file of /dev/shm, not
    through `SharedMemory`, whose resource tracker would otherwise claim (and remove) the loader's block."""
    fd = os.open(os.path.join(SHM_DIR, name.lstrip("/")), os.O_RDWR)
    try:
        buf = mmap.mmap(fd, depth * slot_bytes)
    finally:
        os.close(fd)
    return np.ndarray((depth, slot_bytes), dtype=np.uint8, buffer=buf)


def _keep_large_buffers() -> None:
    """glibc hands every freed buffer over 128 KB back to the kernel and faults fresh zeroed pages in for the next;
    keep them in this process's heap instead."""
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 256 << 20)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 512 << 20)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):  # not glibc: nothing to tune
        pass


def serve(conn: Connection, tasks: socket.socket) -> int:
    try:
        kind, setup = conn.recv()
        if kind != "setup":
            raise RuntimeError(f"expected a setup message first, found {kind!r}")
        ring = attach_ring(*setup["ring"])
        ds = setup["dataset"]
    except EOFError:
        return 0
    except BaseException as exc:  # noqa: BLE001 - reported to the loader, which raises it
        conn.send((FAILED, error_of(exc)))
        return 1
    conn.send((READY, os.getpid()))
    while True:
        try:
            data = tasks.recv(MAX_TASK_BYTES)
        except OSError:
            return 0
        if not data:  # the loader is gone (its end of the task socket closed): nothing is left to serve
            return 0
        task = pickle.loads(data)
        if task is None:
            return 0
        try:
            if not isinstance(task, WindowTask):
                raise TypeError(f"unknown task {type(task).__name__}")
            run_window(ds, ring, task)
            err = None
        except BaseException as exc:  # noqa: BLE001 - reported to the loader, which raises it
            err = error_of(exc)
        try:
            conn.send((DONE, task.slot, err))
        except (BrokenPipeError, OSError):
            return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # the loader decides when workers stop: Ctrl-C in a terminal reaches the whole process group, and the
    # loader's own handling (closing the pool) is what should answer it, not a traceback from every worker; SIGTERM
    # too (a scheduler signals every process of a job, torchrun a rank's group), while the run saves itself. A
    # worker ends with its sockets, whichever way the loader ends.
    interrupts.set_aside()  # (started with SIGINT blocked: one that came meanwhile is dropped)
    _keep_large_buffers()
    return serve(Connection(int(argv[0])), socket.socket(fileno=int(argv[1])))
