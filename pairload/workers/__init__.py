"""The worker runtime: processes started as `python -m pairload.workers` (never through multiprocessing's spawn,
so they import neither torch nor the user's `__main__`, and scripts need no main guard). A worker attaches the
loader's shared ring, opens the shards it is given, and executes tasks: it never plans. Numpy only.

`windows` holds the one task kind (cut a planned batch's windows into a ring slot), `serve` the loop and its
messages; `pairload.cut.workers` is the parent side.
"""
