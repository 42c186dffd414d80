"""What a loader's processes cost while it is timed: peak resident memory (sampled in a thread) and CPU seconds,
summed over the processes a `pids` callable names (this process and `loader.worker_pids()`, asked anew each time,
since workers start with the first batch)."""

from __future__ import annotations

import os
import threading
from typing import Callable, Iterable, Iterator

import psutil

Pids = Callable[[], Iterable[int]]


def processes_of(*loaders) -> list[int]:
    """This process and the loaders' workers now running."""
    return [os.getpid(), *(pid for loader in loaders for pid in loader.worker_pids())]


def _processes(pids: Pids) -> Iterator[psutil.Process]:
    for pid in list(pids()):
        try:
            yield psutil.Process(pid)
        except psutil.Error:  # a worker that ended since it was listed
            pass


def cpu_seconds(pids: Pids) -> float:
    total = 0.0
    for p in _processes(pids):
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


class PeakMemory:
    """Peak of the summed resident memory of the processes `pids` names, sampled in a thread while in the context."""

    def __init__(self, pids: Pids, interval: float = 0.05):
        self.pids, self.interval, self.peak, self._stop = pids, interval, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0
            try:
                for p in _processes(self.pids):
                    try:
                        total += p.memory_info().rss
                    except psutil.Error:
                        pass
            except Exception:  # noqa: BLE001 - a loader closing under the sample: skip this sample, not the rest
                total = 0
            self.peak = max(self.peak, total)
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
