#!/usr/bin/env python3
"""Diagnostic switches for A/B runs on the GPU host, set before pairload runs (never by the library itself):

- `nobg`: an encoded split's decode calls run in the loading thread (no decode thread);
- `thread`: a JPEG split decoded by the loading process's decode thread instead of a decode process;
- `lowprio`: the loader's CUDA streams at the default priority instead of the highest;
- `switch`: the GIL handed over every 0.5 ms instead of every 5;
- `group`: an encoded split's batches cut a decode call at a time, one kernel launch and one degrade launch each,
  instead of one batch a launch;
- `ahead8`: a JPEG split's decode calls hold 8 batches instead of 4;
- `one`: one JPEG decode process instead of `jpegproc.PROCESSES`;
- `threads0`: each decode process's decoder given nvImageCodec's default CPU threads instead of `jpegproc.THREADS`;
- `ahead1`: the decode processes sent one call ahead instead of `jpegproc.CALLS_AHEAD`;
- `tightN` (e.g. `tight8`): a tiled split bigger than the memory that could cache it decoded in calls of N batches
  instead of `decoded.AHEAD_TILES_TIGHT`;
- `readersN` (e.g. `readers1`): a by-shard run read whole shard by shard with N reading threads instead of
  `streamed.READERS`;
- `pieceN` (e.g. `piece1024`): WILLNEED asked for in pieces of N KB instead of `willneed.PIECE`;
- `headsN` (e.g. `heads4`): the reading thread asks for the members' starts of N chunks beyond the one it works out
  instead of `ahead.HEADS_AHEAD`;
- `prelearn`: a tiled split's reading thread given every member's tables at construction (read then, timed apart),
  as if the index held them: its first epoch reads only the tiles its crops touch, with no header read;
- `wholefirst`: a tiled split's reading thread never reads a header: it asks for every member whole, as before
  `TileReads`;
- `headmerge`: where the index keeps a member's tile starts, its header is asked for in one request with its first
  run of tiles (reading the tiles between them) instead of a request of its own where the crop does not start at the
  first tile;
- `timeline`: the loader's construction and its decode processes' start written as events (wall-clock seconds, one
  JSON line each: pid, what, t) to the file $DIAG_TIMELINE (`benchmarks/cold_timeline.py` reads them).

    python benchmarks/diag_knobs.py nobg+lowprio -m pairload.train --shards PACK …
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import time
import types

import numpy as np


def apply(knobs: str) -> None:
    """Set the switches named in `knobs` ("a+b"; "" for none)."""
    for knob in filter(None, knobs.split("+")):
        if knob == "nobg":
            from pairload.cut.memory import decoded

            decoded.DecodedMemory.__init__ = _in_loading_thread(decoded.DecodedMemory.__init__)
        elif knob == "thread":
            from pairload.cut.memory import decoded

            decoded.PROCESS = False
        elif knob == "lowprio":
            from pairload import devices

            devices.LOADER_PRIORITY = 0
        elif knob == "switch":
            sys.setswitchinterval(0.0005)
        elif knob == "group":
            from pairload.loaders import shards

            shards.KERNEL_GROUP["decode"] = 1 << 10  # as many as a decode call holds
        elif knob == "ahead8":
            from pairload.cut.memory import decoded

            decoded.AHEAD = 8
        elif knob == "one":
            from pairload.cut.memory import jpegproc

            jpegproc.PROCESSES = 1
        elif knob == "threads0":
            from pairload.cut.memory import jpegproc

            jpegproc.THREADS = 0
        elif knob == "ahead1":
            from pairload.cut.memory import jpegproc

            jpegproc.CALLS_AHEAD = 1
        elif knob.startswith("tight") and knob[5:].isdigit():
            from pairload.cut.memory import decoded

            decoded.AHEAD_TILES_TIGHT = int(knob[5:])
        elif knob.startswith("readers") and knob[7:].isdigit():
            from pairload.read import streamed

            streamed.READERS = int(knob[7:])
        elif knob.startswith("piece") and knob[5:].isdigit():
            from pairload import willneed

            willneed.PIECE = int(knob[5:]) << 10
        elif knob.startswith("window") and knob[6:].isdigit():
            from pairload.cut.memory import decoded

            decoded.READ_AHEAD_BYTES = int(knob[6:]) << 20  # MB
        elif knob.startswith("heads") and knob[5:].isdigit():
            from pairload.read import ahead

            ahead.HEADS_AHEAD = int(knob[5:])
        elif knob == "prelearn":
            _prelearn()
        elif knob == "wholefirst":
            from pairload.cut.memory import tileplan

            def refusing(self, plans, read, learn=tileplan.TileReads.learn):
                return learn(self, plans, _refused)

            tileplan.TileReads.heads = lambda self, plans: (np.zeros(0, np.int64),) * 3
            tileplan.TileReads.learn = refusing
        elif knob == "headmerge":
            _head_merge()
        elif knob == "timeline":
            _timeline()
        elif knob == "childtimeline":  # set by `timeline` in the decode processes it starts
            _child_timeline()
        else:
            raise SystemExit(f"unknown knob {knob!r}: expected nobg, thread, lowprio, switch, group, ahead8, one, "
                             "threads0, ahead1, tightN, readersN, windowN (MB), pieceN (KB), headsN, prelearn, "
                             "wholefirst, headmerge or timeline")


class _Rows:
    """Samples as a plan of one batch (`TileReads.learn` reads their indices and count)."""

    def __init__(self, index):
        self.index = index

    def __len__(self) -> int:
        return len(self.index)


def _refused(shard, start, size):
    raise OSError("wholefirst: no header read")


def _head_merge() -> None:
    from pairload.cut.memory import tileplan

    def call(self, plans, read, orig=tileplan.TileReads.__call__):
        batch, shard, start, end = orig(self, plans, read)
        n = len(tileplan.read_ranges(self.source, self.table, plans, self.inputs, self.scale)[0])  # then the headers
        key = (batch * (1 << 20) + shard) * (1 << 40)
        order = np.argsort(key[:n] + start[:n])
        runs = (key[:n] + start[:n])[order]
        # each header's member's first run: the run of its batch and shard that starts first where the header ends
        at = np.searchsorted(runs, key[n:] + end[n:])
        ok = at < n
        ok[ok] = (runs[at[ok]] >> 40) == (key[n:][ok] >> 40)
        end = end.copy()
        end[n:][ok] = end[:n][order][at[ok]]
        return batch, shard, start, end

    tileplan.TileReads.__call__ = call


def _prelearn() -> None:
    from pairload.cut.memory import tileplan

    init = tileplan.TileReads.__init__

    def learnt(self, source, inputs, scale, decoding):
        init(self, source, inputs, scale, decoding)
        t0, n, fds = time.perf_counter(), len(source.sizes), {}

        def read(shard, start, size):
            fd = fds.get(shard)
            if fd is None:
                fd = fds[shard] = os.open(source.files[shard], os.O_RDONLY)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            return np.frombuffer(os.pread(fd, size, start), np.uint8)

        for a in range(0, n, 4096):
            rows = [_Rows(np.arange(a, min(n, a + 4096)))]
            for shard, start, end in zip(*(x.tolist() for x in self.heads(rows))):
                read(shard, 0, 0)  # opened and advised
                os.posix_fadvise(fds[shard], start, end - start, os.POSIX_FADV_WILLNEED)
            self.learn(rows, read)
        for fd in fds.values():
            os.close(fd)
        with open(os.environ.get("DIAG_PRELEARN", "/tmp/diag-prelearn.txt"), "a") as fh:  # (inside the epoch)
            fh.write(f"prelearn: {self.table.members} members' tables in {time.perf_counter() - t0:.3f} s\n")

    tileplan.TileReads.__init__ = learnt


def mark(what: str) -> None:
    """One event of the timeline, appended to $DIAG_TIMELINE (one short write: lines of processes do not mix)."""
    line = json.dumps({"pid": os.getpid(), "what": what, "t": time.time()}) + "\n"
    fd = os.open(os.environ.get("DIAG_TIMELINE", "/tmp/diag-timeline.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _timed(owner, name: str, what: str) -> None:
    """owner.name (a function, method or class) marks `what begin` and `what end` around each call."""
    fn = getattr(owner, name)

    def timed(*a, **k):
        mark(f"{what} begin")
        try:
            return fn(*a, **k)
        finally:
            mark(f"{what} end")

    setattr(owner, name, timed)


def _timeline() -> None:
    from pairload.cut import gpu, kernel, paths
    from pairload.cut.memory import decoded, jpegproc

    mark("loader process: knobs applied")
    from pairload.loaders import shards

    _timed(shards, "choose", "choose the cut path")
    decode = paths.PATHS["decode"]  # a frozen dataclass: its functions replaced by timed ones
    for name, what in (("why_not", "can the decode path run"), ("build", "build the decode path")):
        holder = types.SimpleNamespace(fn=getattr(decode, name))
        _timed(holder, "fn", what)
        object.__setattr__(decode, name, holder.fn)
    _timed(decoded.DecodedMemory, "__init__", "DecodedMemory()")
    _timed(jpegproc.JpegProcess, "__init__", "start a decode process")
    _timed(jpegproc.ProcessDecode, "ready", "wait for the decode processes")
    _timed(jpegproc.ProcessDecode, "reserve_samples", "device memory shared with them")
    _timed(gpu, "self_test", "self-test")
    _timed(kernel, "cut", "cut kernel")
    _timed(decoded.DecodedMemory, "_decode", "decode call (self-test)")
    popen = jpegproc.subprocess.Popen

    def child_popen(args, **k):  # the decode process runs under `childtimeline`
        if args[1:3] == ["-m", "pairload.workers.decode"]:
            args = [args[0], __file__, "childtimeline", *args[1:]]
        return popen(args, **k)

    jpegproc.subprocess.Popen = child_popen


def _child_timeline() -> None:
    mark("decode process: interpreter up")
    from multiprocessing.connection import Connection

    from pairload.workers import cudadrv, jpegs

    mark("decode process: numpy, pairload imported")
    from nvidia import nvimgcodec  # noqa: F401 - timed here, imported again (cached) by the process

    mark("decode process: nvImageCodec imported")
    _timed(cudadrv, "Device", "CUDA context")
    _timed(jpegs.JpegDecoders, "decode", "decode")
    _timed(jpegs, "JpegDecoders", "nvImageCodec decoders made")
    send = Connection.send

    def marked_send(self, obj):
        if isinstance(obj, tuple) and obj and obj[0] == "ready":
            mark("decode process: ready sent")
        return send(self, obj)

    Connection.send = marked_send


def _in_loading_thread(init):
    return lambda self, *a, **k: init(self, *a, **dict(k, background=False))


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[2] != "-m":
        raise SystemExit(__doc__)
    apply(sys.argv[1])
    sys.argv = [sys.argv[3], *sys.argv[4:]]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
