"""The DALI sources' run state on its own (`RunState`): which run is fed, following on into the next epoch,
leaving a run, and the buffers held while DALI may read them."""

import pytest

pytest.importorskip("nvidia.dali")

from pairload.hooks import Hooks  # noqa: E402
from pairload.loaders.dali.runs import RunState  # noqa: E402

pytestmark = pytest.mark.dali


def batches(run, n=3):
    return iter([(run, b) for b in range(n)])


def test_a_queued_run_is_fed_then_the_feed_ends_unless_it_follows_on():
    state = RunState(queue_depth=2)
    state.reset(runs=[(0, ())])
    state.queue((4, ()))
    assert list(state.feed(batches, lambda: None, Hooks().timed)) == [((4, ()), b) for b in range(3)]
    assert state.get_state()["last_run"] == (4, ()) and state.get_state()["queued"] == []

    state.start(follow=True)  # nothing queued: the run after the last one, then the next epochs
    feed = state.feed(batches, lambda: (5, ()), Hooks().timed)
    got = [next(feed) for _ in range(7)]
    assert got == [((5, ()), 0), ((5, ()), 1), ((5, ()), 2), ((6, ()), 0), ((6, ()), 1), ((6, ()), 2), ((7, ()), 0)]
    state.ended((5, ()))
    assert state.follows((6, ())) and not state.follows((5, ())) and not state.follows((7, ()))
    state.leave()  # the consumer jumps: the feed ends the run it is on at its next batch
    assert list(feed) == [] and state.cancel is False


def test_leaving_mid_run_cancels_and_the_feed_is_timed():
    state = RunState(queue_depth=1)
    state.queue((0, ()))
    state.delivering()
    seen = []
    hooks = Hooks()
    hooks.add(lambda stage, seconds: seen.append(stage))
    feed = state.feed(batches, lambda: None, hooks.timed)
    assert next(feed) == ((0, ()), 0)
    state.leave()
    assert state.cancel and list(feed) == []
    assert seen == ["feed", "feed"]  # the first batch, and the one taken before the cancel was seen
    state.built()
    assert state.get_state() == {"at": ("fresh",), "runs": [], "last_run": None, "queued": [], "fed": [],
                                 "follow": False, "cancel": False, "held": 0}


def test_a_fed_buffer_is_released_after_the_pipelines_queues_and_three_more():
    state = RunState(queue_depth=2)
    released, before = [], []
    for i in range(8):
        state.hold(lambda i=i: released.append(i), before=lambda: before.append(1))
    assert state.hold_limit == 5 and released == [0, 1, 2] and len(before) == 3
    state.release_held()
    assert released == list(range(8)) and state.get_state()["held"] == 0
