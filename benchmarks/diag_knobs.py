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
- `ahead1`: the decode processes sent one call ahead instead of `jpegproc.CALLS_AHEAD`.

    python benchmarks/diag_knobs.py nobg+lowprio -m pairload.train --shards PACK …
"""

from __future__ import annotations

import runpy
import sys


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
        else:
            raise SystemExit(f"unknown knob {knob!r}: expected nobg, thread, lowprio, switch, group, ahead8, one, "
                             "threads0 or ahead1")


def _in_loading_thread(init):
    return lambda self, *a, **k: init(self, *a, **dict(k, background=False))


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[2] != "-m":
        raise SystemExit(__doc__)
    apply(sys.argv[1])
    sys.argv = [sys.argv[3], *sys.argv[4:]]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
