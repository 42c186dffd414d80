"""Timing hooks that loaders offer, so that benchmarks and profilers measure a loader's stages without patching its
private methods (as SPDL's pipeline hooks do). A loader owns one `Hooks`; code around a stage writes
`with self.hooks.timed("convert"):`, which costs one attribute check when nobody listens."""

from __future__ import annotations

import time
from contextlib import nullcontext
from typing import Callable

Listener = Callable[[str, float], None]  # (stage name, seconds spent in it)


class Hooks:
    """Listeners called with (stage, seconds) after each timed stage. `add` returns a function that removes it."""

    def __init__(self) -> None:
        self._listeners: list[Listener] = []

    def add(self, listener: Listener) -> Callable[[], None]:
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def timed(self, stage: str):
        """A context timing `stage` for the listeners (a shared no-op context when there are none)."""
        return _Timed(stage, self._listeners) if self._listeners else _NOTHING


class _Timed:
    """One timed stage (a plain class: cheaper than a generator-based context on a path taken every batch)."""

    __slots__ = ("stage", "listeners", "start")

    def __init__(self, stage: str, listeners: list) -> None:
        self.stage, self.listeners = stage, listeners

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, *exc) -> None:
        seconds = time.perf_counter() - self.start
        for listener in list(self.listeners):
            listener(self.stage, seconds)


class StageTotals:
    """A listener that sums seconds and counts calls per stage: `loader.hooks.add(totals)`, then `totals.seconds`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def __call__(self, stage: str, seconds: float) -> None:
        self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds
        self.calls[stage] = self.calls.get(stage, 0) + 1


_NOTHING = nullcontext()
