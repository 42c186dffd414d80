"""How long the device waits for data, measured without adding a synchronisation to the step.

On CUDA, an event is recorded on the compute stream right after a batch is handed over (the stream has
already been told to wait for that batch's copy) and another after the step's last kernel; the device is
idle for data between the end of one step and the start of the next. Events are read once, at the end.
On the CPU the wall time spent inside `next(loader)` is the wait.
"""

from __future__ import annotations

import time

import torch


class DataWait:
    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.device = device
        self.starts: list = []
        self.ends: list = []
        self.wait = 0.0
        self._t0 = 0.0
        self._first = None

    def before_next(self) -> None:
        if not self.cuda:
            self._t0 = time.perf_counter()
            if self._first is None:
                self._first = self._t0

    def got_batch(self) -> None:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record(torch.cuda.current_stream(self.device))
            self.starts.append(ev)
        else:
            self.wait += time.perf_counter() - self._t0

    def step_done(self) -> None:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record(torch.cuda.current_stream(self.device))
            self.ends.append(ev)

    def fraction(self) -> float:
        """Share of the time from the first batch to the last step's end that the device spent waiting."""
        if self.cuda:
            if len(self.starts) < 2 or not self.ends:
                return 0.0
            self.ends[-1].synchronize()
            gaps = sum(max(0.0, e.elapsed_time(s)) for e, s in zip(self.ends[:-1], self.starts[1:]))
            total = self.starts[0].elapsed_time(self.ends[-1])
            return gaps / total if total > 0 else 0.0
        total = time.perf_counter() - (self._first or time.perf_counter())
        return self.wait / total if total > 0 else 0.0
