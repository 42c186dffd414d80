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
