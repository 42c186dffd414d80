"""A run to resume from the middle of an epoch: the first checkpoint the reference loop saves mid-epoch, kept."""

from __future__ import annotations

import shutil
from pathlib import Path

from pairload.recipes import train as train_module


def keep_first_mid_epoch_checkpoint(monkeypatch, folder: Path) -> None:
    """Until `monkeypatch.undo()`, the first checkpoint saved in the middle of an epoch is copied to folder/last.pt."""
    save = train_module.save_checkpoint

    def keep(path, state):
        save(path, state)
        if state["mid_epoch"] is not None and not (folder / "last.pt").exists():
            shutil.copy(path, folder / "last.pt")

    monkeypatch.setattr(train_module, "save_checkpoint", keep)
