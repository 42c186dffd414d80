"""SIGTERM stops a run where it is, saved: a scheduler's time limit or pre-emption (SLURM signals every process of
the job), `scancel`, `kill`, or torchrun passing on its own SIGTERM to its ranks. The signal only sets a flag; each
rank finishes the step in hand, the ranks agree at the next check (every few steps: one collective of one number,
all ranks at the same steps, and at each epoch's end), rank 0 writes last.pt with the loaders' state (as
--save-every-steps does) and every rank exits with code 143 and one line on rank 0. `--resume` goes on from there
exactly: the same batches, the same data digest as a run never stopped."""

from __future__ import annotations

import signal
import threading

import torch

from ..distributed import DistInfo, all_reduce_max

# training steps between two checks where there are several ranks (on a GPU a check waits once for the device: its
# answer is read on the host); a run of 3 s steps still stops within the 30 s torchrun and SLURM give before SIGKILL
CHECK_EVERY = 8
EXIT_CODE = 128 + signal.SIGTERM  # what a process ended by SIGTERM reports


class Stopped(Exception):
    """The ranks agreed to stop (a SIGTERM reached one of them): `epoch` (0-based) and `step` (within it; None at its
    end) where they stopped, and whether last.pt holds that (`saved`: the run has --out)."""

    def __init__(self, epoch: int, step: int | None, steps: int, saved: bool):
        where = f"at the end of epoch {epoch + 1}" if step is None else f"in epoch {epoch + 1} after step {step} of " \
                                                                          f"{steps}"
        super().__init__(f"stopped by SIGTERM {where}; " + (
            "last.pt holds the run there: the same command with --resume continues it exactly" if saved else
            "nothing was saved (no --out)"))
        self.epoch, self.step, self.saved = epoch, step, saved


class StopSignal:
    """SIGTERM's flag (`ask`, the handler) and the ranks' agreement on it (`agreed`)."""

    def __init__(self) -> None:
        self.asked = False
        self._before = None  # SIGTERM's handler before `install`

    def ask(self, *_signal) -> None:
        # (a second SIGTERM asks the same: under SLURM a rank gets one from the scheduler and one from torchrun)
        self.asked = True

    def install(self) -> bool:
        """Take SIGTERM in this process (the main thread only may) until `uninstall`; False where it cannot."""
        if threading.current_thread() is not threading.main_thread():
            return False
        self._before = signal.signal(signal.SIGTERM, self.ask)
        return True

    def uninstall(self) -> None:
        """SIGTERM's handler as it was before `install` (a caller's process, `main` run in it, keeps its own)."""
        if self._before is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._before)
            self._before = None

    def due(self, info: DistInfo, done: int) -> bool:
        """Whether the ranks check after their `done`-th step of an epoch (the same steps on every rank)."""
        if not info.distributed:
            return True  # nothing to agree on: a flag read
        return done % CHECK_EVERY == 0

    def agreed(self, info: DistInfo) -> bool:
        """Whether any rank was asked to stop; a collective when there are several (every rank calls it at once)."""
        if not info.distributed:
            return self.asked
        flag = torch.tensor([1.0 if self.asked else 0.0], device=info.device)
        return bool(all_reduce_max(flag).item())
