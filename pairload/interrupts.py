"""A Ctrl-C that is not lost: Python drops an exception raised while the process forks (in its fork handlers,
logging's for one), so a SIGINT arriving while a command starts its worker processes would let the command run to
its end and exit 0. `noted()` notes every SIGINT; `check()` raises it again where the command can stop."""

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
