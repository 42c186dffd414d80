"""The worker pool of `pack`, `make-pairs` and `audit` (`pairload.workerpool`): results in order or not, batched or
not, and a worker that dies while it works is an error naming its signal and what it said it was on
(multiprocessing's own pool waits for the dead worker's task forever). Spawned workers (a fork of a test process
that runs threads could hang): they import this module for the function they run."""

import os
import signal
import threading
import time

import pytest

from pairload.errors import WorkerDiedError
from pairload.forking import spawn_context
from pairload.workerpool import WorkerPool, doing


def square_or_die(k: int) -> int:
    doing(f"photo-{k}.jpg")
    if k == 13:
        os.kill(os.getpid(), signal.SIGSEGV)
    return k * k


@pytest.fixture
def pool():
    with WorkerPool(2, spawn_context(), "make-pairs") as p:
        yield p


@pytest.mark.parametrize("chunksize", [1, 4])
def test_the_pool_gives_every_result(pool, chunksize):
    assert list(pool.imap(square_or_die, range(13), chunksize)) == [k * k for k in range(13)]
    assert sorted(pool.imap_unordered(square_or_die, range(13), chunksize)) == [k * k for k in range(13)]


def test_a_worker_that_dies_is_named_with_what_it_was_on(pool):
    caught: list[BaseException] = []

    def consume():
        try:
            list(pool.imap_unordered(square_or_die, range(20), 3))
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            caught.append(exc)

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "the pool waited for the dead worker's task"
    assert len(caught) == 1 and isinstance(caught[0], WorkerDiedError), caught
    message = str(caught[0])
    assert message.startswith("make-pairs: worker process ") and "was killed by SIGSEGV while it read photo-13.jpg" \
        in message and "a decoder crashed" in message, message


def slow_or_die(k: int) -> int:
    if k == 13:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.05)
    return k


def test_a_dead_worker_is_noticed_while_the_others_still_deliver(pool):
    # 2 workers, 200 tasks of 50 ms: ~5 s of work left after the death, whose error must come long before
    assert list(pool.imap(square_or_die, range(8))) == [k * k for k in range(8)]  # the workers have started
    start = time.monotonic()
    with pytest.raises(WorkerDiedError, match="was killed by SIGKILL"):
        for _ in pool.imap_unordered(slow_or_die, range(200)):
            pass
    assert time.monotonic() - start < 3.0


def test_a_ctrl_c_while_spawned_workers_start_prints_no_traceback_from_them(tmp_path):
    # the workers' initializer lives in a module whose import takes a second: a spawned worker imports it (as it
    # unpickles what it runs) before it can set SIGINT aside, and the Ctrl-C comes meanwhile
    import subprocess
    import sys

    import psutil

    (tmp_path / "slow_start.py").write_text("import time\ntime.sleep(1.5)\n\ndef init():\n    pass\n")
    script = ("import sys, time\n"
              "from pairload.forking import spawn_context\n"
              "from pairload.workerpool import WorkerPool\n"
              "pool = WorkerPool(2, spawn_context(), 'pack', initializer=__import__('slow_start').init)\n"
              "try:\n"
              "    time.sleep(20)\n"
              "except KeyboardInterrupt:\n"
              "    pool.terminate()\n"
              "    print('stopped', file=sys.stderr)\n")
    path = os.pathsep.join([str(tmp_path), os.path.dirname(os.path.dirname(os.path.abspath(__file__)))])
    proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={**os.environ, "PYTHONPATH": path},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 30  # the command's own import of slow_start, then its workers', each 1.5 s
    while time.monotonic() < deadline and len(psutil.Process(proc.pid).children()) < 2:
        time.sleep(0.01)
    time.sleep(0.3)  # the workers are importing slow_start now
    starting = [p for p in psutil.Process(proc.pid).children() if "spawn_main" in " ".join(p.cmdline())]
    assert len(starting) == 2, "the workers had not started"
    os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the command and its workers
    _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err and err.strip() == "stopped", err


def test_a_ctrl_c_while_a_loaders_workers_start_prints_no_traceback_from_them(tmp_path):
    # the loader's worker processes (python -m pairload.workers) import numpy and pairload before they can set
    # SIGINT aside; a terminal's Ctrl-C meanwhile is the loading process's to answer, not a traceback from each
    import subprocess
    import sys

    import psutil

    from pairload.pack.writer import PackOptions, pack

    from conftest import make_raw

    make_raw(tmp_path / "raw", 4, split="train", size=(32, 48))
    pack(tmp_path / "raw", tmp_path / "shards", PackOptions(workers=1))
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(  # a slow start, in the processes the loader starts
        "import os, time\nif os.environ.get('PAIRLOAD_TEST_SLOW_START'):\n    time.sleep(1.5)\n")
    script = ("import os, sys, time\n"
              "import pairload\n"
              f"loader = pairload.make_loader('ram', {str(tmp_path / 'shards')!r}, batch_size=2, crop=16, "
              "num_workers=2, device='cpu')\n"
              "os.environ['PAIRLOAD_TEST_SLOW_START'] = '1'\n"
              "try:\n"
              "    loader.start_workers()\n"
              "    time.sleep(20)\n"
              "except KeyboardInterrupt:\n"
              "    loader.close()\n"
              "    print('stopped', file=sys.stderr)\n")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True,
                            start_new_session=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), here])},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60

    def workers() -> list:
        return [p for p in psutil.Process(proc.pid).children() if "pairload.workers" in " ".join(p.cmdline())]
    while time.monotonic() < deadline and len(workers()) < 2:
        time.sleep(0.01)
    time.sleep(0.3)  # the workers are starting (sitecustomize) now
    assert len(workers()) == 2, "the workers had not started"
    os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the loading process and its workers
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err and err.strip() == "stopped", err
