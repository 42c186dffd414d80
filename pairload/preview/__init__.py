"""Contact sheets of a shard folder for `pairload preview`: stored pairs, or a loader's augmented batch, as input |
target tiles with labels, shown through stated display transforms (`display`), drawn by `render`, chosen and
labelled by `sheets`, their source folders read by `meta`."""

from .display import Display, displays
from .render import Sheet, Tile
from .sheets import PreviewOptions, preview, write_sheet

__all__ = ["Display", "PreviewOptions", "Sheet", "Tile", "displays", "preview", "write_sheet"]
