"""Drawing a contact sheet: cells of (input | target) images (a targets-only split's: the target alone), or of clips
(a row of input frames over a row of target frames), each image scaled to one tile height (area resampling when
shrinking, nearest when enlarging, none at height 0), a label strip under each cell, header lines on top; the `Sheet`
keeps where every tile lies, so its pixels can be compared with what was shown. Numpy, OpenCV and Pillow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np

from ..errors import ConfigError
from ..plan.crops import is_whole

SIDES = ("input", "target")
MARGIN, GAP, PAD = 10, 4, 14  # sheet border; between a cell's two tiles; between cells
FONT_SIZE, LINE = 12, 15  # label text and its line height, pixels
BACKGROUND, INK, DIM = (28, 28, 28), (235, 235, 235), (160, 160, 160)
MIN_WIDTH = 480  # header lines stay readable over a sheet of a few small tiles
MAX_TILE_HEIGHT = 4096


def check_tile_height(tile_height: int) -> int:
    if not isinstance(tile_height, int) or not (tile_height == 0 or 8 <= tile_height <= MAX_TILE_HEIGHT):
        raise ConfigError.for_value("tile_height", tile_height, f"expected 0 (stored size) or 8 to {MAX_TILE_HEIGHT} "
                                    "pixels")
    return tile_height


def resampling(tile_height: int) -> str:
    """The sentence the sheet states about how images were scaled."""
    if tile_height == 0:
        return "every image at its stored size (no resampling)"
    return (f"every image scaled to {tile_height} px high (area averaging when shrinking, nearest neighbour when "
            "enlarging)")


@dataclass(frozen=True)
class Cell:
    """One pair as shown: its displayed HxWx3 uint8 images, one per side of `sides` (input and target; a stored
    target alone: ("target",)), and the lines of its label. One clip (`frames`: the keys of its T frames): `images`
    its T frames of each side in turn, drawn as a row of inputs over a row of targets."""

    key: str
    images: tuple[np.ndarray, ...]
    lines: tuple[str, ...]
    frames: tuple[str, ...] = ()
    sides: tuple[str, ...] = SIDES

    def rows(self, images) -> list[list[tuple[str, int, str, np.ndarray]]]:
        """`images` (this cell's, as shown) as rows of (side, frame, key, image): a pair's one row, a clip's one per
        side."""
        if not self.frames:
            return [[(side, 0, self.key, image) for side, image in zip(self.sides, images)]]
        t = len(self.frames)
        return [[(side, f, self.frames[f], images[r * t + f]) for f in range(t)] for r, side in enumerate(self.sides)]


@dataclass(frozen=True)
class Tile:
    """Where one displayed image lies on the sheet: cell `pair` (reading order), `side` ("input" or "target"), the
    rectangle `top`, `left`, `height`, `width` in pixels; `frame`: its number in a clip (`key`: that frame's)."""

    pair: int
    key: str
    side: str
    top: int
    left: int
    height: int
    width: int
    frame: int = 0

    def region(self, image: np.ndarray) -> np.ndarray:
        return image[self.top:self.top + self.height, self.left:self.left + self.width]


@dataclass(frozen=True)
class Sheet:
    """A rendered contact sheet: `image` HxWx3 uint8 RGB, the `tiles` drawn on it, the `header` lines it states and
    each cell's label lines (`labels`, in cell order); `frames`: a clip's frames on a sheet of clips (else 0);
    `sides`: what each cell shows (input and target, or the target alone)."""

    image: np.ndarray
    tiles: tuple[Tile, ...]
    header: tuple[str, ...]
    labels: tuple[tuple[str, ...], ...] = ()
    frames: int = 0
    sides: tuple[str, ...] = SIDES

    def tile(self, pair: int, side: str, frame: int = 0) -> np.ndarray:
        """The pixels of one tile (of a clip: of its frame `frame`), as they lie on the sheet."""
        found = [t for t in self.tiles if t.pair == pair and t.side == side and t.frame == frame]
        if not found:
            raise ConfigError(f"no tile ({pair}, {side!r}, frame {frame}) on this sheet of {self.count()}")
        return found[0].region(self.image)

    def count(self) -> str:
        """What the sheet shows: "5 pairs", "5 targets" (a targets-only split's), or "2 clips of 3 frames"."""
        cells = len(self.tiles) // (len(self.sides) * max(1, self.frames))
        if self.frames:
            return f"{cells} clips of {self.frames} frames"
        return f"{cells} pairs" if self.sides == SIDES else f"{cells} {self.sides[0]}s"

    def png(self) -> bytes:
        ok, data = cv2.imencode(".png", np.ascontiguousarray(self.image[..., ::-1]),
                                [cv2.IMWRITE_PNG_COMPRESSION, 9])
        if not ok:
            raise ConfigError(f"a sheet of {self.image.shape[1]}x{self.image.shape[0]} px could not be encoded as "
                              "PNG; lower -n or --tile-height")
        return data.tobytes()


def fit(image: np.ndarray, tile_height: int) -> np.ndarray:
    """`image` scaled to `tile_height` rows (0: as it is), keeping its aspect."""
    h, w = image.shape[:2]
    if tile_height == 0 or h == tile_height:
        return image
    width = max(1, round(w * tile_height / h))
    how = cv2.INTER_AREA if tile_height < h else cv2.INTER_NEAREST
    return cv2.resize(np.ascontiguousarray(image), (width, tile_height), interpolation=how)


def _font(size: int):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except (TypeError, ImportError, OSError):  # Pillow without FreeType: its fixed bitmap font
        return ImageFont.load_default()


def _clipped(font, text: str, width: int) -> str:
    """`text` cut (with an ellipsis) to fit `width` pixels."""
    if font.getlength(text) <= width:
        return text
    while text and font.getlength(text + "...") > width:
        text = text[:-1]
    return text + "..."


def _wrapped(font, text: str, width: int) -> list[str]:
    lines, line = [], ""
    for word in text.split(" "):
        trial = f"{line} {word}" if line else word
        if line and font.getlength(trial) > width:
            lines.append(line)
            line = word
        else:
            line = trial
    return lines + [line]


def render(cells: list[Cell], header: list[str], tile_height: int, columns: int = 0) -> Sheet:
    """The sheet of `cells` in `columns` per row (0: about square), each image already displayed (uint8 RGB) and
    scaled here to `tile_height` (0: stored size); `header` lines wrapped across the top."""
    check_tile_height(tile_height)
    if not cells:
        raise ConfigError("a preview sheet needs at least one pair")
    if not is_whole(columns) or columns < 0:
        raise ConfigError.for_value("columns", columns, "expected 0 (about square) or a number of pairs per row")
    cols = min(columns or math.ceil(math.sqrt(len(cells))), len(cells))
    rows = math.ceil(len(cells) / cols)
    grids = [cell.rows([fit(img, tile_height) for img in cell.images]) for cell in cells]
    cell_w = max(sum(img.shape[1] for *_, img in row) + GAP * (len(row) - 1) for grid in grids for row in grid)
    image_h = max(_row_heights(grid)[-1] for grid in grids)
    label_lines = max(len(cell.lines) for cell in cells)
    cell_h = image_h + 4 + label_lines * LINE
    font = _font(FONT_SIZE)
    width = max(MIN_WIDTH, 2 * MARGIN + cols * cell_w + (cols - 1) * PAD)
    head = [piece for line in header for piece in _wrapped(font, line, width - 2 * MARGIN)]
    top0 = MARGIN + len(head) * LINE + (PAD if head else 0)
    height = top0 + rows * cell_h + (rows - 1) * PAD + MARGIN
    canvas = np.empty((height, width, 3), dtype=np.uint8)
    canvas[:] = BACKGROUND
    tiles, labels = [], []
    for k, (grid, cell) in enumerate(zip(grids, cells)):
        top = top0 + (k // cols) * (cell_h + PAD)
        left = MARGIN + (k % cols) * (cell_w + PAD)
        for row, y in zip(grid, _row_heights(grid)):
            x = left
            for side, frame, key, img in row:
                canvas[top + y:top + y + img.shape[0], x:x + img.shape[1]] = img
                tiles.append(Tile(k, key, side, top + y, x, img.shape[0], img.shape[1], frame))
                x += img.shape[1] + GAP
        labels.append((left, top + image_h + 3, cell.lines))
    image = _draw_text(canvas, font, head, labels, cell_w)
    return Sheet(image=image, tiles=tuple(tiles), header=tuple(header), labels=tuple(cell.lines for cell in cells),
                 frames=len(cells[0].frames), sides=cells[0].sides)


def _row_heights(grid) -> list[int]:
    """The top of each row of a cell's grid, then the bottom of the last (GAP between rows)."""
    tops = [0]
    for row in grid:
        tops.append(tops[-1] + max(img.shape[0] for *_, img in row) + GAP)
    return tops[:-1] + [tops[-1] - GAP]


def _draw_text(canvas: np.ndarray, font, head: list[str], labels: list, cell_w: int) -> np.ndarray:
    """Header and label text drawn in the strips around the tiles (never over a tile)."""
    from PIL import Image, ImageDraw

    picture = Image.fromarray(canvas)
    draw = ImageDraw.Draw(picture)
    for i, line in enumerate(head):
        draw.text((MARGIN, MARGIN + i * LINE), line, fill=INK, font=font)
    for left, top, lines in labels:
        for i, line in enumerate(lines):
            draw.text((left, top + i * LINE), _clipped(font, line, cell_w), fill=INK if i == 0 else DIM, font=font)
    return np.asarray(picture).copy()
