"""How worker processes start: fork only while this process runs a single thread, native ones included. A lock held
by another thread at fork time is never released in the child (an OpenMP pool torch started, DALI's executor threads),
so a forked worker can wait forever; spawn starts a fresh interpreter instead."""

from __future__ import annotations

import multiprocessing as mp
import os
import threading


def threads() -> int:
    """Threads of this process: the OS's count where it gives one (Python's own knows only its threads)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def start_method() -> str:
    """"fork" where it is safe now, else "spawn"."""
    return "fork" if "fork" in mp.get_all_start_methods() and threads() == 1 else "spawn"


# A fork server's BLAS and OpenMP pools held to one thread: numpy's OpenBLAS starts its threads on import, and a
# server with threads is no safer to fork from than this process
_SERVER_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
_server: tuple[str, ...] | None = None  # the modules the fork server this module started preloads


def pool_context(preload: tuple[str, ...]):
    """The context a pool of workers running code of `preload` starts in: fork where it is safe now (`start_method`);
    else a fork server started single-threaded that imports `preload` once, so that each worker is forked from it
    in milliseconds instead of starting an interpreter and importing numpy and OpenCV again (most of a second for 16
    spawned workers); spawn where no such server can be had (another one already runs in this process)."""
    if start_method() == "fork":
        return mp.get_context("fork")
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    global _server
    from multiprocessing import forkserver

    running = getattr(forkserver._forkserver, "_forkserver_pid", None) is not None
    if running and _server != tuple(preload):
        return mp.get_context("spawn")  # a server someone else started: its threads are unknown
    if not running:
        saved = {k: os.environ.get(k) for k in _SERVER_ENV}
        os.environ.update(_SERVER_ENV)
        try:
            forkserver.set_forkserver_preload(list(preload))
            forkserver.ensure_running()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        _server = tuple(preload)
    return mp.get_context("forkserver")
