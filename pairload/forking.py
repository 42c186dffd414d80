"""How worker processes start: fork only while this process runs a single thread, native ones included. A lock held
by another thread at fork time is never released in the child (an OpenMP pool torch started, DALI's executor threads),
so a forked worker can wait forever; spawn starts a fresh interpreter instead (a start-up cost per pool that weighs
most on a small pack).

numpy and OpenCV each load an OpenBLAS whose pthread pool starts with the library, so any process that imported them
runs 2 + (2 x cores - 2) threads. Those pools are idle between BLAS calls, and OpenBLAS shuts them down itself before
every fork (its `pthread_atfork` handler): `start_method` does the same first, where no other Python thread could be
inside a BLAS call, and then counts. OpenBLAS starts its pool again on its next call."""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import threading
import time
from pathlib import Path

PACKAGE_ROOT = str(Path(__file__).resolve().parents[1])  # the folder holding `pairload`, for its processes' path
QUIESCE_WAIT_S = 0.2  # how long the threads of the pools shut down may take to end
_PTHREADS = 1  # openblas_get_parallel(): 0 sequential, 1 its own pthread pool, 2 OpenMP (threads not its own)


def threads() -> int:
    """Threads of this process: the OS's count where it gives one (Python's own knows only its threads)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _openblas_libraries() -> list[str]:
    """Paths of the OpenBLAS libraries loaded in this process (numpy's, OpenCV's, …)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split(None, 5)[5].strip() for line in maps if line.count(" ") >= 5 and "openblas" in line}
    except OSError:
        return []
    return sorted(p for p in paths if "openblas" in os.path.basename(p) and os.path.isfile(p))


def quiesce_blas() -> int:
    """Shut down the idle thread pools of the loaded pthread OpenBLAS builds, as OpenBLAS does before a fork; returns
    how many it shut down. Only while this is Python's only thread, so that no BLAS call can be running."""
    if threading.active_count() != 1:
        return 0
    done = 0
    for path in _openblas_libraries():
        try:
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        except OSError:
            continue
        parallel = next((getattr(lib, name) for name in ("openblas_get_parallel", "scipy_openblas_get_parallel64_",
                                                         "scipy_openblas_get_parallel")
                         if hasattr(lib, name)), None)
        if parallel is None or not hasattr(lib, "blas_thread_shutdown_") or parallel() != _PTHREADS:
            continue
        lib.blas_thread_shutdown_()
        done += 1
    return done


def start_method() -> str:
    """"fork" where it is safe now (idle OpenBLAS pools shut down first), else "spawn"."""
    if "fork" not in mp.get_all_start_methods():
        return "spawn"
    if threads() > 1 and quiesce_blas():
        # a pool's threads may still be ending as the shut-down returns (2 runs in 25 here counted one more, gone
        # within 50 ms): spawning then would be for nothing
        deadline = time.monotonic() + QUIESCE_WAIT_S
        while threads() > 1 and time.monotonic() < deadline:
            time.sleep(0.001)
    return "fork" if threads() == 1 else "spawn"


TRACKER_QUIET = "ignore::UserWarning:multiprocessing.resource_tracker"


def spawn_context():
    """multiprocessing's spawn context, its resource tracker started first where this process has none, with its
    leak warning off. A spawned pool's queues hold named semaphores, which the tracker removes once the process that
    made them is gone; killed with SIGKILL, a pack would otherwise leave two lines of "leaked semaphore objects" after
    it, about a clean-up that is done and asks nothing of the user."""
    from multiprocessing import resource_tracker

    tracker = resource_tracker._resource_tracker  # noqa: SLF001 - the process-wide tracker, no public handle
    if tracker._fd is None:  # noqa: SLF001 - not started yet: the tracker takes this environment as it starts
        before = os.environ.get("PYTHONWARNINGS")
        os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [before, TRACKER_QUIET]))
        try:
            resource_tracker.ensure_running()
        finally:
            if before is None:
                del os.environ["PYTHONWARNINGS"]
            else:
                os.environ["PYTHONWARNINGS"] = before
    return mp.get_context("spawn")


def pool_context():
    """The context of a pool of workers: `start_method`'s, with `spawn_context`'s tracker where it spawns."""
    method = start_method()
    return spawn_context() if method == "spawn" else mp.get_context(method)


def child_env() -> dict[str, str]:
    """The environment a process of pairload's own starts with (`python -m pairload....`): this one's, with the
    folder holding the pairload this process runs first on its path (a source tree not installed, a benchmark's
    other tree)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [PACKAGE_ROOT, env.get("PYTHONPATH")]))
    return env


def death(code: int | None) -> str:
    """How a child process ended, from its return code, as messages say it."""
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"
