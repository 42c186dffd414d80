"""Where a paired source's pipeline stands, as one object (`RunState`): the runs its graph serves, the run it is
fed and those queued next, whether it runs on into the next epoch, the batches fed and not yet delivered, and the
host buffers DALI may still read. Pure Python: no DALI, no torch."""

from __future__ import annotations

from collections import deque
from typing import Callable, Iterator

from ...plan.run import RunKey, next_run


_END = object()


class RunState:
    """The feed's state machine. `at` is ("fresh",) after a build, ("end", run) after a whole run was delivered,
    None mid-run or without a pipeline. `reset()` starts a new feed; `get_state()` says where it stands."""

    def __init__(self, queue_depth: int):
        self.queue_depth = queue_depth  # how many fed batches the pipeline may still read (its prefetch queues)
        self.at: tuple | None = None
        self.defining: RunKey | None = None  # the run a pipeline is being defined for
        self.runs: list[RunKey] = []  # the runs the current graph was made for
        # (run, BatchPlan) of each batch fed to DALI, in order; (run, (BatchPlan, ...)) for an iteration that carries
        # several planned batches
        self.fed: deque = deque(maxlen=4096)
        self.queued: deque = deque()  # runs the feed is to deliver next
        self.last_run: RunKey | None = None  # the run the feed started last
        self.cancel = False  # the consumer left the run being fed: the feed ends it at its next batch
        self.follow = False  # the feed goes on into the next epoch (set while our iterator drives; kind external)
        self.held: deque = deque()  # release functions of fed host buffers, oldest first

    def reset(self, runs: list[RunKey] | None = None) -> None:
        """A new feed: nothing fed or queued, no run started; `runs`: the runs a new graph serves."""
        if runs is not None:
            self.runs = list(runs)
        self.fed.clear()
        self.queued.clear()
        self.last_run, self.cancel = None, False

    def get_state(self) -> dict:
        """A snapshot for diagnostics and tests (the buffers and plans themselves are not included)."""
        return {"at": self.at, "runs": list(self.runs), "last_run": self.last_run, "queued": list(self.queued),
                "fed": [run for run, _ in self.fed], "follow": self.follow, "cancel": self.cancel,
                "held": len(self.held)}

    # ---------------------------------------------------------------- transitions

    def built(self) -> None:
        self.at = ("fresh",)
        self.reset()

    def dropped(self) -> None:
        self.at = None
        self.reset()

    def start(self, follow: bool) -> None:
        """The consumer takes a run's batches (`follow`: the feed may go on into the next epoch)."""
        self.follow = follow

    def delivering(self) -> None:
        self.at = None

    def ended(self, run: RunKey) -> None:
        self.at = ("end", run)

    def follows(self, run: RunKey) -> bool:
        """Whether the pipeline, at the end of a run, is already delivering `run` (the next epoch, from its start)."""
        return self.follow and self.at is not None and self.at[0] == "end" and run == next_run(self.at[1])

    def leave(self) -> None:
        """Left mid-run, or the feed went on into an epoch not asked for: it ends at its next call."""
        self.cancel = self.at is None or self.follow

    def drained(self) -> None:
        self.cancel = False  # the feed has ended (or never ran again): the next one starts with the queued run
        self.fed.clear()

    def queue(self, run: RunKey) -> None:
        self.queued.append(run)

    def take(self) -> tuple:
        """(run, BatchPlan or the tuple of an iteration's plans) fed first and not yet delivered ((None, None) when
        there is none)."""
        return self.fed.popleft() if self.fed else (None, None)

    # ---------------------------------------------------------------- the feed

    def feed(self, inputs: Callable[[RunKey], Iterator], auto_next: Callable[[], RunKey | None], timed) -> Iterator:
        """The batches external_source takes: the queued run's `inputs(run)` (or `auto_next()`'s when none is
        queued), then, while following, the next epochs'. `timed(stage)`: a timing context (`Hooks.timed`)."""
        run = self.queued.popleft() if self.queued else auto_next()
        while run is not None and not self.cancel:
            self.last_run = run
            fed = 0
            batches = inputs(run)
            while True:
                with timed("feed"):
                    batch = next(batches, _END)
                if batch is _END or self.cancel:  # cancelled: the consumer left this run, end it here
                    break
                fed += 1
                yield batch
            del batches  # a generator left early closes now (its buffers go back), as a for loop's would
            # DALI's own iterators end an epoch at StopIteration; ours know its length, and the pipeline goes on
            # into the next epoch, which is what the consumer asks for next unless it jumps (`_ready_for`)
            if not (self.follow and fed) or self.cancel:
                break
            run = next_run(run)
        self.cancel = False

    # ---------------------------------------------------------------- held buffers

    @property
    def hold_limit(self) -> int:
        """Buffers held after they were fed: DALI reads a batch until it has left the pipeline's queues (+3)."""
        return self.queue_depth + 3

    def hold(self, release: Callable[[], None], before: Callable[[], None] | None = None) -> None:
        """Keep a fed batch's memory until DALI is past it: `release()` runs once `hold_limit` newer batches were
        fed (`before()` first, when any is released)."""
        self.held.append(release)
        if before is not None and len(self.held) > self.hold_limit:
            before()
        while len(self.held) > self.hold_limit:
            self.held.popleft()()

    def release_held(self) -> None:
        while self.held:
            self.held.popleft()()
