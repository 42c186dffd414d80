"""The loader contract for resuming mid-epoch, for every kind: same world size (the exact tail, bit for bit) and
another world size (the rest of the epoch re-dealt, every sample once). Pixels encode the pair index."""

import json

import numpy as np
import pytest

from pairload import ConfigError, make_loader

from conftest import raw_and_shards

N = 50
KINDS = ["ram", "ram-workers", "wds", pytest.param("dali-external", marks=pytest.mark.dali),
         pytest.param("dali-file", marks=pytest.mark.dali)]
ELASTIC = ["ram", "wds", pytest.param("dali-external", marks=pytest.mark.dali),
           pytest.param("dali-file", marks=pytest.mark.dali)]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return raw_and_shards(tmp_path_factory.mktemp("resume"), N, size=(24, 32))


def loader(data, kind, *, rank=0, world_size=1, batch_size=3, last_batch="drop", **kw):
    name = "ram" if kind == "ram-workers" else kind
    workers = 2 if kind in ("ram-workers", "wds") else 0
    source = data / ("raw" if kind == "dali-file" else "shards")
    return make_loader(name, source, batch_size=batch_size, crop=16, seed=3, rank=rank, world_size=world_size,
                       last_batch=last_batch, num_workers=workers, **kw)


def batches(it, n=None):
    out = []
    for b in it:
        low, high = b.low.numpy(), b.high.numpy()
        assert np.array_equal(high, 255 - low)  # same crop and flips on both images
        out.append((list(b.keys), low.copy(), b.padded.numpy().copy()))
        if n is not None and len(out) == n:
            break
    return out


def pair_index(batch_low) -> list[int]:
    return [int(v) for v in batch_low[:, 0, 0, 0]]  # channel 0 encodes the pair index


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("k", [0, 2, 5])
def test_same_world_resume_gives_the_uninterrupted_tail_bit_for_bit(data, kind, k):
    full = loader(data, kind)
    full.set_epoch(1)
    ref = batches(full)
    cut = loader(data, kind)
    cut.set_epoch(1)
    it = iter(cut)
    head = batches(it, k) if k else []
    state = json.loads(json.dumps(cut.state_dict()))  # plain JSON values
    assert state["epoch"] == 1 and sum(b for _, b in state["consumed"]) == k
    resumed = loader(data, kind)
    resumed.load_state_dict(state)
    assert len(resumed) == len(ref) - k
    tail = batches(resumed)
    for (ka, la, pa), (kb, lb, pb) in zip(ref, head + tail):
        assert ka == kb and np.array_equal(la, lb) and np.array_equal(pa, pb)
    assert len(head) + len(tail) == len(ref)
    resumed.set_epoch(2)
    full.set_epoch(2)
    assert [b[0] for b in batches(resumed)] == [b[0] for b in batches(full)]  # then epochs go on as usual
    for ld in (full, cut, resumed):
        if hasattr(ld, "close"):
            ld.close()


def _run(data, kind, world_size, k, last_batch, epoch=0, state=None):
    """Each rank's batches (at most k of them when k is given), and one rank's state."""
    keys, states = [], []
    for r in range(world_size):
        ld = loader(data, kind, rank=r, world_size=world_size, last_batch=last_batch)
        if state is not None:
            ld.load_state_dict(state)
        else:
            ld.set_epoch(epoch)
        got = batches(iter(ld), k)
        keys.append([i for b in got for i in pair_index(b[1])])
        states.append(ld.state_dict())
        if hasattr(ld, "close"):
            ld.close()
    return keys, states[0]


@pytest.mark.parametrize("kind", ELASTIC)
@pytest.mark.parametrize("old, new", [(4, 2), (2, 3), (3, 1)])
@pytest.mark.parametrize("last_batch", ["drop", "partial"])
def test_resume_on_another_world_size_sees_every_sample_once(data, kind, old, new, last_batch):
    uninterrupted, _ = _run(data, kind, old, None, last_batch, epoch=1)
    expected = sorted(i for rank in uninterrupted for i in rank)
    first, state = _run(data, kind, old, 2, last_batch, epoch=1)
    second, _ = _run(data, kind, new, None, last_batch, state=state)
    seen = [i for rank in first + second for i in rank]
    assert len(seen) == len(set(seen)), "a sample was delivered twice"
    assert set(seen) <= set(range(N))
    if last_batch == "partial":
        assert sorted(seen) == list(range(N))
    else:  # drop: what the uninterrupted epoch skipped, and at most new - 1 more to keep ranks equal
        assert set(seen) <= set(expected) and len(expected) - len(seen) <= new - 1
    if last_batch == "drop":
        assert len({len(r) for r in second}) == 1  # every new rank delivers as many samples (same batch count)


def test_a_state_from_another_plan_is_refused_naming_the_difference(data):
    a = loader(data, "ram")
    it = iter(a)
    next(it)
    with pytest.raises(ConfigError, match=r"loader state: batch_size was 3 when it was saved, this loader has 2"):
        loader(data, "ram", batch_size=2).load_state_dict(a.state_dict())
    with pytest.raises(ConfigError, match=r"loader state: seed was 3 when it was saved, this loader has 4"):
        make_loader("ram", data / "shards", batch_size=3, crop=16, seed=4).load_state_dict(a.state_dict())
    with pytest.raises(ConfigError, match=r"expected a dict from a pairload loader's state_dict\(\)"):
        a.load_state_dict({"epoch": 1})
    older = {k: v for k, v in a.state_dict().items() if k != "order"}  # saved by a pairload that permuted epochs
    with pytest.raises(ConfigError, match=r"loader state: saved in the middle of epoch 0 by a pairload that ordered "
                       r"epochs otherwise \('numpy-permutation'; this one: 'feistel-6'\).* start epoch 1 from the "
                       r"state with state\['epoch'\] = 1 and state\['consumed'\] = \[\]"):
        loader(data, "ram").load_state_dict(older)
    b = loader(data, "ram")
    b.load_state_dict({**older, "epoch": 1, "consumed": []})  # an epoch's start is the same under any order
    assert b.epoch == 1


def test_wds_resumes_with_another_number_of_workers(data):
    # the parent plans every batch; workers only execute, so their number is not part of the plan
    a = loader(data, "wds")
    whole = batches(a)
    first = batches(loader(data, "wds"), 4)
    b = loader(data, "wds")
    it = iter(b)
    for _ in range(4):
        next(it)
    state = b.state_dict()
    c = make_loader("wds", data / "shards", batch_size=3, crop=16, seed=3, num_workers=3)
    c.load_state_dict(state)
    rest = batches(c)
    assert [k for k, _, _ in first + rest] == [k for k, _, _ in whole]
    assert all(np.array_equal(x[1], y[1]) for x, y in zip(first + rest, whole))
    for ld in (a, b, c):
        ld.close()
