"""A Ctrl-C that is not lost: Python drops an exception raised while the process forks (in its fork handlers,
logging's for one), so a SIGINT arriving while a command starts its worker processes would let the command run to
its end and exit 0. `noted()` notes every SIGINT; `check()` raises it again where the command can stop.

And a Ctrl-C that reaches processes still starting: a terminal's reaches the whole process group, and a worker process
still importing what it runs would print a KeyboardInterrupt traceback. `held()` blocks SIGINT in the thread that
starts them, so that they start with it blocked (the mask is inherited across fork and exec); each sets it aside
(`set_aside()`: ignored, then unblocked, dropping one that came meanwhile) and the caller gets it once `held()` ends."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Callable, Iterator


@contextmanager
def noted() -> Iterator[Callable[[], None]]:
    """While open (in the main thread, where SIGINT has Python's default handler): a Ctrl-C raises KeyboardInterrupt
    as usual and is noted; the `check()` it gives raises KeyboardInterrupt once one was noted. Elsewhere, or when
    SIGINT is ignored or handled otherwise, nothing changes and `check()` does nothing."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield lambda: None
        return
    seen: list[int] = []

    def on_sigint(signum, frame):
        seen.append(signum)
        raise KeyboardInterrupt

    def check() -> None:
        if seen:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)
    try:
        yield check
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@contextmanager
def held() -> Iterator[None]:
    """SIGINT blocked in this thread while open (unless it was blocked already): processes started meanwhile start
    with it blocked until they `set_aside()`; this thread gets one that came meanwhile once it ends."""
    before = blocked(True)
    try:
        yield
    finally:
        if before is not None and signal.SIGINT not in before:
            blocked(False)


def set_aside(term: bool = True) -> None:
    """In a worker process: SIGINT (and SIGTERM, `term`) ignored, then unblocked (`held()`): the process that started
    it decides when it stops."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    blocked(False)


def blocked(block: bool):
    """Block (or unblock) SIGINT in this thread; returns the signals blocked before (None where there is no
    pthread_sigmask)."""
    if not hasattr(signal, "pthread_sigmask"):
        return None
    return signal.pthread_sigmask(signal.SIG_BLOCK if block else signal.SIG_UNBLOCK, {signal.SIGINT})
