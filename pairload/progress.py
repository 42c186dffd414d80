"""The CLI's progress bar for the commands that work through many pairs (make-pairs, pack, measuring), on stderr
when it is a terminal, and where such a command stops on a Ctrl-C that Python dropped (`interrupts`)."""

from __future__ import annotations

import contextlib
import sys
from typing import Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .interrupts import noted


@contextlib.contextmanager
def progress(label: str, unit: str = "pairs") -> Iterator:
    """`update(done, total)` for a command's library call (its `on_progress`): it draws the bar, and raises
    KeyboardInterrupt once a Ctrl-C was noted that a fork of the command's workers dropped."""
    with noted() as check, Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(),
                                    TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), transient=False,
                                    console=Console(stderr=True), disable=not sys.stderr.isatty(),
                                    auto_refresh=False) as bar:
        task = bar.add_task(label, total=None, rate="")

        def update(done: int, total: int) -> None:
            check()
            elapsed = bar.tasks[0].elapsed or 0.0
            rate = f"{done / elapsed:,.0f} {unit}/s" if elapsed > 0 else ""
            bar.update(task, completed=done, total=total, rate=rate, refresh=True)  # no refresh thread: see pack._pool

        yield update
