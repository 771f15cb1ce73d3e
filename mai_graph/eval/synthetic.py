"""A synthetic visual-question dataset, drawn offline and deterministic by seed.

Each sample is a small PNG (128x128 by default) and one question from a few regular templates,
covering every answer kind:

========================  ==============================================  ========
template                  question                                        kind
========================  ==============================================  ========
``count``                 How many shapes are there?                      number
``colour``                What colour is the {shape}?                     text
``exists``                Is there a {colour} {shape}?                    yes_no
``tallest``               Which bar is tallest?  (options: bar colours)   choice
``bars``                  How many bars are there?                        number
========================  ==============================================  ========

Task ``v2`` (``TASKS["v2"]``) composes what is seen, so that short answers are hard and
step-by-step reasoning (count each colour, then conclude) helps:

==================  ================================================================  ========
template            question                                                          kind
==================  ================================================================  ========
``colour_count``    How many {colour} shapes are there?                               number
``compare``         Are there more {colour} shapes than {colour} shapes?              yes_no
``difference``      How many more {colour} shapes than {colour} shapes are there?     number
``most``            Which colour is most frequent?  (options: colours, shuffled)      choice
``tallest_any``     Which bar is tallest?  (options: bar colours, shuffled)           choice
==================  ================================================================  ========

Task ``v3`` (``TASKS["v3"]``) needs several sequential steps over things seen. Each occupied
cell of the 4x4 grid holds an arrow (a triangle pointing up, down, left or right) of a colour;
cells are named ``r{row}c{column}`` from ``r1c1`` (top left) to ``r4c4``:

==============  ==================================================================  ========
template        question                                                            kind
==============  ==================================================================  ========
``colour_at``   What colour is the arrow at r2c3?                                   text
``way``         Which way does the red arrow point?  (options: the four ways)       choice
``follow``      Start at the red arrow and follow 3 arrows. What colour do you      text
                reach?  (2 to 4 arrows)
==============  ==================================================================  ========

A ``follow`` scene holds a path: the start arrow points at the next cell's arrow, and so on
for k hops; 1 to 3 other arrows point anywhere. The start colour is unique in the picture;
``way`` asks about a colour that is unique too. One lookup answers ``colour_at`` and ``way``;
``follow`` takes k + 1 lookups, each depending on the one before.

Task ``v4`` (``TASKS["v4"]``) draws the same pictures and names every arrow by its cell, so
that no step searches the picture for a colour: each step reads the arrow at a named cell.

==============  ==================================================================  ========
template        question                                                            kind
==============  ==================================================================  ========
``colour_at``   What colour is the arrow at r2c3?                                   text
``points``      Which of these arrows points up?  (options: four cells with arrows,  choice
                exactly one pointing that way)
``reach``       Start at r2c3 and follow 3 arrows. Which cell do you reach?         text
                (1 to 6 arrows; the answer is a cell name, one of sixteen; every cell
                holds an arrow, so no walk stops early and only counting finds it)
==============  ==================================================================  ========

Its scenes hold 3 to 9 shapes in 2 to 4 colours; option order never follows the picture's
layout (no position shortcut). Shapes (circle, square, triangle) sit in the cells of a 4x4
grid; bar charts have 3 or 4 bars of distinct colours and heights. Templates take turns, so
every kind is present in any set of five or more samples. The output is a folder with
``images/`` and ``data.jsonl`` in the format :func:`~mai_graph.eval.datasets.load_dataset`
reads. :func:`draw_item` draws one sample in memory together with what was drawn (the scene),
for training models on the same task.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mai_graph.errors import ConfigError, check_int
from mai_graph.jsonin import parse_json

__all__ = [
    "COLOURS",
    "DIRECTIONS",
    "SHAPES",
    "TASKS",
    "TEMPLATES",
    "SyntheticItem",
    "draw_item",
    "make_synthetic",
    "cell_name",
    "task_of",
]

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 220),
    "yellow": (235, 200, 30),
    "purple": (140, 50, 170),
}
"""Colour names and their RGB fills."""

SHAPES = ("circle", "square", "triangle")
TEMPLATES = ("count", "colour", "exists", "tallest", "bars")
TASKS: dict[str, tuple[str, ...]] = {
    "v1": TEMPLATES,
    "v2": ("colour_count", "compare", "difference", "most", "tallest_any"),
    "v3": ("colour_at", "follow", "way"),
    "v4": ("colour_at", "reach", "points"),
}
"""The task's templates by task name: ``v1`` (the first trained pair's), ``v2`` (compositional),
``v3`` (arrows to follow: sequential steps), ``v4`` (arrows to follow from a named cell)."""
DIRECTIONS = ("up", "down", "left", "right")
"""The ways a ``v3`` or ``v4`` arrow points."""
STEP = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
"""Row and column change of one step in each direction."""
GRID = 4


def task_of(name: str) -> tuple[str, ...]:
    """The templates of task ``name``.

    >>> task_of("v2")[0]
    'colour_count'
    """
    if name not in TASKS:
        raise ConfigError(
            f"unknown task {name!r}; tasks are {sorted(TASKS)}",
            parameter="task",
            value=name,
            fix=f"use one of {sorted(TASKS)}",
        )
    return TASKS[name]


@dataclass(frozen=True)
class SyntheticItem:
    """One drawn sample: the picture, its question row and what the picture holds."""

    image: Any
    """The PIL image."""
    row: dict[str, Any]
    """``question``, ``answer``, ``kind`` and, for choices, ``options`` (as in ``data.jsonl``)."""
    template: str
    scene: tuple[tuple[Any, ...], ...]
    """Shapes: ``(shape, colour, cell)`` in drawing order (cell = row * 4 + column); arrows
    (task v3): ``(direction, colour, cell)``, the path first (in order), then the others; charts:
    ``(colour, height)`` per bar, left to right (height in tenths of the plot)."""


def draw_item(template: str, rng: random.Random, size: int = 128) -> SyntheticItem:
    """Draw one sample of ``template`` with ``rng`` (what :func:`make_synthetic` writes).

    Example:
        >>> item = draw_item("colour", random.Random(0))
        >>> item.row["question"].startswith("What colour is the "), len(item.scene) >= 1
        (True, True)
    """
    if template not in _DRAW:
        raise ConfigError(
            f"unknown template {template!r}; templates are {sorted(_DRAW)}",
            parameter="template",
            value=template,
        )
    image, row, scene = _DRAW[template](rng, size)
    return SyntheticItem(image, row, template, tuple(scene))


MIN_SIZE, MAX_SIZE = 64, 4096
"""Image sides ``make_synthetic`` draws (the upper bound keeps one picture under 50 MB)."""
MAX_SAMPLES = 1_000_000
"""Most samples one call draws."""


def make_synthetic(
    out_dir: str | Path,
    *,
    n: int = 50,
    seed: int = 0,
    size: int = 128,
    templates: tuple[str, ...] | None = None,
    task: str = "v1",
) -> Path:
    """Draw ``n`` samples into ``out_dir`` (``images/*.png`` and ``data.jsonl``).

    Args:
        out_dir: Target folder (created; existing files of the same names are replaced).
        n: Number of samples.
        seed: Same seed, same images and questions.
        size: Image side in pixels, :data:`MIN_SIZE` to :data:`MAX_SIZE`.
        templates: Which templates to use, taking turns (default: the task's).
        task: ``v1`` to ``v4`` (see :data:`TASKS`); ``templates`` may pick among any.

    Returns:
        The path of ``data.jsonl``.

    Example:
        >>> import tempfile
        >>> path = make_synthetic(tempfile.mkdtemp(), n=5)
        >>> [json.loads(line)["kind"] for line in path.read_text().splitlines()]
        ['number', 'text', 'yes_no', 'choice', 'number']
    """
    check_int(
        n,
        "n",
        minimum=1,
        maximum=MAX_SAMPLES,
        fix=f"draw at most {MAX_SAMPLES:,} samples per folder (use several seeds for more)",
    )
    check_int(
        size,
        "size",
        minimum=MIN_SIZE,
        maximum=MAX_SIZE,
        fix=f"give --size between {MIN_SIZE} and {MAX_SIZE} pixels (the pictures are drawn in "
        "memory: a side of 100,000 would need 30 GB)",
    )
    templates = task_of(task) if templates is None else tuple(templates)
    unknown = [t for t in templates if t not in _DRAW]
    if unknown or not templates:
        raise ConfigError(
            f"unknown templates {unknown}; templates are {sorted(_DRAW)}",
            parameter="templates",
            value=list(templates),
        )
    from mai_graph.files import output_folder

    root = output_folder(out_dir, flag="out_dir", what="synthetic dataset", owns=synthetic_folder)
    (root / "images").mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(n):
        rng = random.Random(f"mai-synthetic|{seed}|{i}")
        template = templates[i % len(templates)]
        sample_id = f"syn-{seed}-{i:05d}"
        image, row, _ = _DRAW[template](rng, size)
        image.save(root / "images" / f"{sample_id}.png", format="PNG")
        row = {"id": sample_id, "image": f"images/{sample_id}.png", **row}
        row["meta"] = {"template": template}
        lines.append(json.dumps(row))
    path = root / "data.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def synthetic_folder(folder: Path) -> bool:
    """Whether a folder holds only what :func:`make_synthetic` writes (it may be redrawn)."""
    names = {p.name for p in folder.iterdir()}
    if not names <= {"images", "data.jsonl"}:
        return False
    data = folder / "data.jsonl"
    if data.is_file():
        with data.open(encoding="utf-8", errors="replace") as fh:
            first = fh.readline()
        try:
            row = parse_json(first, parameter="data", what="line 1") if first.strip() else {}
        except ConfigError:
            return False
        if not isinstance(row, dict) or row and not str(row.get("id", "")).startswith("syn-"):
            return False
    images = folder / "images"
    return not images.exists() or (
        images.is_dir() and all(p.name.startswith("syn-") for p in images.iterdir())
    )


def _canvas(size: int) -> Any:
    from PIL import Image

    return Image.new("RGB", (size, size), (255, 255, 255))


def _draw_shape(draw: Any, shape: str, box: tuple[int, int, int, int], fill: Any) -> None:
    x0, y0, x1, y1 = box
    if shape == "circle":
        draw.ellipse(box, fill=fill)
    elif shape == "square":
        draw.rectangle(box, fill=fill)
    else:
        draw.polygon([((x0 + x1) // 2, y0), (x1, y1), (x0, y1)], fill=fill)


def _scene(
    rng: random.Random, size: int, items: list[tuple[str, str]]
) -> tuple[Any, list[tuple[str, str, int]]]:
    """Shapes ``(shape, colour)`` in random cells: the picture and ``(shape, colour, cell)``."""
    from PIL import ImageDraw

    img = _canvas(size)
    draw = ImageDraw.Draw(img)
    cell = size // GRID
    pad = max(2, cell // 6)
    placed = []
    for (shape, colour), slot in zip(items, rng.sample(range(GRID * GRID), len(items))):
        row, col = divmod(slot, GRID)
        box = (col * cell + pad, row * cell + pad, (col + 1) * cell - pad, (row + 1) * cell - pad)
        _draw_shape(draw, shape, box, COLOURS[colour])
        placed.append((shape, colour, slot))
    return img, placed


def _count(rng: random.Random, size: int) -> tuple[Any, dict[str, Any], list[Any]]:
    k = rng.randint(1, 8)
    items = [(rng.choice(SHAPES), rng.choice(list(COLOURS))) for _ in range(k)]
    row = {"question": "How many shapes are there?", "answer": str(k), "kind": "number"}
    img, placed = _scene(rng, size, items)
    return img, row, placed


def _colour(rng: random.Random, size: int) -> tuple[Any, dict[str, Any], list[Any]]:
    shapes = rng.sample(SHAPES, rng.randint(1, len(SHAPES)))  # each shape at most once
    items = [(s, rng.choice(list(COLOURS))) for s in shapes]
    shape, colour = rng.choice(items)
    row = {"question": f"What colour is the {shape}?", "answer": colour, "kind": "text"}
    img, placed = _scene(rng, size, items)
    return img, row, placed


def _exists(rng: random.Random, size: int) -> tuple[Any, dict[str, Any], list[Any]]:
    k = rng.randint(1, 4)
    items = [(rng.choice(SHAPES), rng.choice(list(COLOURS))) for _ in range(k)]
    if rng.random() < 0.5:
        shape, colour = rng.choice(items)
        answer = "yes"
    else:
        absent = [(s, c) for s in SHAPES for c in COLOURS if (s, c) not in items]
        shape, colour = rng.choice(absent)
        answer = "no"
    row = {"question": f"Is there a {colour} {shape}?", "answer": answer, "kind": "yes_no"}
    img, placed = _scene(rng, size, items)
    return img, row, placed


def _chart(rng: random.Random, size: int, k: int) -> tuple[Any, list[str], list[int]]:
    from PIL import ImageDraw

    colours = rng.sample(list(COLOURS), k)
    top = size - 12
    heights = rng.sample(range(2, 10), k)  # distinct tenths of the plot height
    img = _canvas(size)
    draw = ImageDraw.Draw(img)
    base = size - 6
    slot = (size - 8) // k
    width = max(6, slot * 2 // 3)
    for i, (colour, h) in enumerate(zip(colours, heights)):
        x0 = 4 + i * slot + (slot - width) // 2
        draw.rectangle((x0, base - top * h // 10, x0 + width, base), fill=COLOURS[colour])
    draw.line((2, base, size - 2, base), fill=(0, 0, 0), width=1)
    return img, colours, heights


def _tallest(rng: random.Random, size: int) -> tuple[Any, dict[str, Any], list[Any]]:
    img, colours, heights = _chart(rng, size, rng.randint(3, 4))
    letters = [chr(ord("A") + i) for i in range(len(colours))]
    tallest = heights.index(max(heights))
    row = {
        "question": "Which bar is tallest?",
        "options": dict(zip(letters, colours)),
        "answer": letters[tallest],
        "kind": "choice",
    }
    return img, row, list(zip(colours, heights))


def _bars(rng: random.Random, size: int) -> tuple[Any, dict[str, Any], list[Any]]:
    k = rng.randint(3, 4)
    img, colours, heights = _chart(rng, size, k)
    row = {"question": "How many bars are there?", "answer": str(k), "kind": "number"}
    return img, row, list(zip(colours, heights))


def _palette_scene(
    rng: random.Random, size: int, need: Any = None
) -> tuple[Any, list[tuple[str, str, int]], dict[str, int]]:
    """3 to 9 shapes in 2 to 4 colours (redrawn until ``need(counts)``): picture, scene, counts."""
    while True:
        palette = rng.sample(list(COLOURS), rng.randint(2, 4))
        items = [(rng.choice(SHAPES), rng.choice(palette)) for _ in range(rng.randint(3, 9))]
        counts = {c: sum(1 for _, col in items if col == c) for c in COLOURS}
        if len(_present(counts)) >= 2 and (need is None or need(counts)):
            img, placed = _scene(rng, size, items)
            return img, placed, counts


def _present(counts: dict[str, int]) -> list[str]:
    return [c for c in COLOURS if counts[c]]


def _colour_count(rng: random.Random, size: int) -> tuple[Any, dict[str, Any], list[Any]]:
    img, placed, counts = _palette_scene(rng, size)
    colour = rng.choice(_present(counts)) if rng.random() < 0.85 else rng.choice(list(COLOURS))
    row = {
        "question": f"How many {colour} shapes are there?",
        "answer": str(counts[colour]),
        "kind": "number",
    }
    return img, row, placed


def _compare(rng: random.Random, size: int) -> tuple[Any, dict[str, Any], list[Any]]:
    img, placed, counts = _palette_scene(rng, size)
    a, b = rng.sample(_present(counts), 2)
    if rng.random() < 0.15:  # sometimes a colour that is not there
        b = rng.choice([c for c in COLOURS if c != a])
    answer = "yes" if counts[a] > counts[b] else "no"
    row = {
        "question": f"Are there more {a} shapes than {b} shapes?",
        "answer": answer,
        "kind": "yes_no",
    }
    return img, row, placed


def _difference(rng: random.Random, size: int) -> tuple[Any, dict[str, Any], list[Any]]:
    def unequal(counts: dict[str, int]) -> bool:
        return len({counts[c] for c in _present(counts)}) > 1

    img, placed, counts = _palette_scene(rng, size, unequal)
    a, b = rng.sample([c for c in COLOURS if counts[c] or rng.random() < 0.3], 2)
    while counts[a] == counts[b]:
        a, b = rng.sample(list(COLOURS), 2)
    if counts[a] < counts[b]:
        a, b = b, a
    row = {
        "question": f"How many more {a} shapes than {b} shapes are there?",
        "answer": str(counts[a] - counts[b]),
        "kind": "number",
    }
    return img, row, placed


def _shuffled_options(rng: random.Random, colours: list[str]) -> dict[str, str]:
    """Options lettered in a random order (never the picture's layout)."""
    order = rng.sample(colours, len(colours))
    return {chr(ord("A") + i): c for i, c in enumerate(order)}


def _most(rng: random.Random, size: int) -> tuple[Any, dict[str, Any], list[Any]]:
    def unique_max(counts: dict[str, int]) -> bool:
        top = max(counts.values())
        return sum(1 for v in counts.values() if v == top) == 1

    img, placed, counts = _palette_scene(rng, size, unique_max)
    best = max(counts, key=lambda c: counts[c])
    k = rng.randint(3, 4)
    others = sorted((c for c in COLOURS if c != best), key=lambda c: (-counts[c], rng.random()))
    options = _shuffled_options(rng, [best, *others[: k - 1]])
    answer = next(letter for letter, c in options.items() if c == best)
    row = {
        "question": "Which colour is most frequent?",
        "options": options,
        "answer": answer,
        "kind": "choice",
    }
    return img, row, placed


def _tallest_any(rng: random.Random, size: int) -> tuple[Any, dict[str, Any], list[Any]]:
    img, colours, heights = _chart(rng, size, rng.randint(3, 4))
    options = _shuffled_options(rng, colours)
    best = colours[heights.index(max(heights))]
    row = {
        "question": "Which bar is tallest?",
        "options": options,
        "answer": next(letter for letter, c in options.items() if c == best),
        "kind": "choice",
    }
    return img, row, list(zip(colours, heights))


def cell_name(cell: int) -> str:
    """The name of a grid cell (``row * 4 + column``, from 0) in questions and reasoning.

    >>> cell_name(0), cell_name(6), cell_name(15)
    ('r1c1', 'r2c3', 'r4c4')
    """
    row, col = divmod(cell, GRID)
    return f"r{row + 1}c{col + 1}"


def target_cell(cell: int, direction: str) -> int | None:
    """The cell an arrow in ``cell`` points at (None: off the grid).

    >>> target_cell(0, "right"), target_cell(0, "up"), target_cell(5, "down")
    (1, None, 9)
    """
    row, col = divmod(cell, GRID)
    dr, dc = STEP[direction]
    row, col = row + dr, col + dc
    return row * GRID + col if 0 <= row < GRID and 0 <= col < GRID else None


def _draw_arrow(draw: Any, direction: str, box: tuple[int, int, int, int], fill: Any) -> None:
    x0, y0, x1, y1 = box
    mx, my = (x0 + x1) // 2, (y0 + y1) // 2
    tips = {
        "up": [(mx, y0), (x1, y1), (x0, y1)],
        "down": [(mx, y1), (x0, y0), (x1, y0)],
        "left": [(x0, my), (x1, y0), (x1, y1)],
        "right": [(x1, my), (x0, y1), (x0, y0)],
    }
    draw.polygon(tips[direction], fill=fill)


def _arrow_scene(
    rng: random.Random, size: int, hops: int, full: bool = False
) -> tuple[Any, list[tuple[str, str, int]]]:
    """A path of ``hops`` arrows (each pointing at the next cell's arrow) and 1 to 3 others.

    ``full``: every other cell holds an arrow too, so every arrow points at an arrow and no
    walk ends before its count of arrows does (where the path stops says nothing). The path's
    first arrow has a colour no other arrow has. Returns the picture and ``(direction,
    colour, cell)`` per arrow, the path first, in order.
    """
    from PIL import ImageDraw

    while True:  # a self-avoiding walk of ``hops`` steps
        cells = [rng.randrange(GRID * GRID)]
        ways: list[str] = []
        while len(cells) <= hops:
            moves = [
                (d, t) for d in DIRECTIONS
                if (t := target_cell(cells[-1], d)) is not None and t not in cells
            ]  # fmt: skip
            if not moves:
                break
            d, t = rng.choice(moves)
            ways.append(d)
            cells.append(t)
        if len(cells) == hops + 1:
            break
    last = [d for d in DIRECTIONS if target_cell(cells[-1], d) is not None]
    ways.append(rng.choice(last))
    free = [c for c in range(GRID * GRID) if c not in cells]
    others = rng.sample(free, len(free) if full else rng.randint(1, 3))
    for c in others:
        cells.append(c)
        ways.append(rng.choice([d for d in DIRECTIONS if target_cell(c, d) is not None]))
    start = rng.choice(list(COLOURS))
    colours = [start] + [rng.choice([c for c in COLOURS if c != start]) for _ in cells[1:]]
    img = _canvas(size)
    draw = ImageDraw.Draw(img)
    side = size // GRID
    pad = max(2, side // 6)
    placed = []
    for cell, way, colour in zip(cells, ways, colours):
        row, col = divmod(cell, GRID)
        box = (col * side + pad, row * side + pad, (col + 1) * side - pad, (row + 1) * side - pad)
        _draw_arrow(draw, way, box, COLOURS[colour])
        placed.append((way, colour, cell))
    return img, placed


def _colour_at(rng: random.Random, size: int) -> tuple[Any, dict[str, Any], list[Any]]:
    img, placed = _arrow_scene(rng, size, rng.randint(1, 3))
    _, colour, cell = rng.choice(placed)
    row = {
        "question": f"What colour is the arrow at {cell_name(cell)}?",
        "answer": colour,
        "kind": "text",
    }
    return img, row, placed


def _way(rng: random.Random, size: int) -> tuple[Any, dict[str, Any], list[Any]]:
    img, placed = _arrow_scene(rng, size, rng.randint(1, 3))
    unique = [a for a in placed if sum(1 for b in placed if b[1] == a[1]) == 1]
    way, colour, _ = rng.choice(unique)  # the start arrow's colour is always unique
    options = {chr(ord("A") + i): d for i, d in enumerate(rng.sample(DIRECTIONS, 4))}
    row = {
        "question": f"Which way does the {colour} arrow point?",
        "options": options,
        "answer": next(k for k, d in options.items() if d == way),
        "kind": "choice",
    }
    return img, row, placed


def _points(rng: random.Random, size: int) -> tuple[Any, dict[str, Any], list[Any]]:
    while True:
        img, placed = _arrow_scene(rng, size, rng.randint(1, 3))
        way, _, cell = rng.choice(placed)
        others = [c for w, _, c in placed if w != way]
        if len(others) >= 3:
            break
    cells = [cell, *rng.sample(others, 3)]
    rng.shuffle(cells)  # the options' order is drawn, never the picture's
    options = {chr(ord("A") + i): cell_name(c) for i, c in enumerate(cells)}
    row = {
        "question": f"Which of these arrows points {way}?",
        "options": options,
        "answer": "ABCD"[cells.index(cell)],
        "kind": "choice",
    }
    return img, row, placed


REACH_HOPS = (1, 6)
"""Fewest and most arrows a ``reach`` question follows."""


def _reach(rng: random.Random, size: int) -> tuple[Any, dict[str, Any], list[Any]]:
    hops = rng.randint(*REACH_HOPS)
    img, placed = _arrow_scene(rng, size, hops, full=True)
    row = {
        "question": f"Start at {cell_name(placed[0][2])} and follow {hops} "
        f"arrow{'' if hops == 1 else 's'}. Which cell do you reach?",
        "answer": cell_name(placed[hops][2]),
        "kind": "text",
    }
    return img, row, placed


def _follow(rng: random.Random, size: int) -> tuple[Any, dict[str, Any], list[Any]]:
    hops = rng.randint(2, 4)
    img, placed = _arrow_scene(rng, size, hops)
    row = {
        "question": f"Start at the {placed[0][1]} arrow and follow {hops} arrows. "
        "What colour do you reach?",
        "answer": placed[hops][1],
        "kind": "text",
    }
    return img, row, placed


_DRAW = {
    "count": _count,
    "colour": _colour,
    "exists": _exists,
    "tallest": _tallest,
    "bars": _bars,
    "colour_count": _colour_count,
    "compare": _compare,
    "difference": _difference,
    "most": _most,
    "tallest_any": _tallest_any,
    "colour_at": _colour_at,
    "way": _way,
    "follow": _follow,
    "points": _points,
    "reach": _reach,
}
