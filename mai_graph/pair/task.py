"""The trained pair's task: synthetic pictures, the graph's own prompts, short reasoning.

Items come from :func:`mai_graph.eval.synthetic.draw_item` (the evaluation's generator), so
``mai-graph synth-data --seed S`` draws exactly the held-out items a training run evaluated on
with ``heldout_seed=S``. Every training prompt is built by the graph's request builders
(:mod:`mai_graph.calls`) and rendered with the chat template by
:func:`mai_graph.backends.render.render`, the same path the engines take: what the models
learned to answer is exactly what the graph asks.

The reasoning the models learn is short and says what the picture shows, then the answer:

=========  ===========================================================================
template   reasoning
=========  ===========================================================================
count      ``I see 5 shapes. Answer: 5``
colour     ``I see a red circle and a blue square. Answer: red``
exists     ``I see a green triangle. Answer: no``
tallest    ``The tallest bar is blue. Answer: B``
bars       ``I see 4 bars. Answer: 4``
=========  ===========================================================================

Task ``v2`` (the second pair's) asks compositional questions; its reasoning counts every
colour in a fixed order, then concludes from the counts, e.g. ``I count red 3, green 0, blue 2,
yellow 1, purple 0. So red 3 > blue 2. Answer: yes`` (about thirty tokens).

Task ``v3`` (the third pair's) asks about arrows in a grid; its reasoning first lists every
arrow in reading order (cell, colour, way), then takes the steps the question needs, each one
checkable against the picture, e.g. ``I see r1c2 red right, r1c3 blue down, r2c3 green left,
r3c4 purple up. Start r1c2 red right. Next r1c3 blue down. Next r2c3 green. Answer: green``
(a fifty-token chain for four hops; one-step questions end ``So r2c3 is green. Answer: green``).

Task ``v4`` names arrows by their cell: ``colour_at`` and ``points`` list the picture, then
conclude (``So r3c1 points up. Answer: B``); a ``reach`` reasoning is the steps alone, e.g.
``Start r1c4 blue down. Next r2c4 green down. Next r3c4 red. Answer: r3c4``.

Shapes are listed in reading order (row by row). The answer-extraction turn (S2) answers what
the reasoning concludes; the large model's transfer prompt shows it a sparsified reasoning that
is sometimes wrong, and it learns to answer the truth (see :func:`transfer_hint`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from mai_graph.answers import AnswerKind
from mai_graph.backends.render import render
from mai_graph.calls import Question, answer_request, cot_request, s2_request, short_request
from mai_graph.context import MAIContext
from mai_graph.eval.synthetic import (
    COLOURS,
    DIRECTIONS,
    SHAPES,
    TEMPLATES,
    SyntheticItem,
    cell_name,
    draw_item,
    target_cell,
    task_of,
)
from mai_graph.inputs.images import ImageRef
from mai_graph.scoring.base import must_keep, select_tokens, split_pieces
from mai_graph.scoring.mask import answer_statement

__all__ = [
    "PURPOSES",
    "Example",
    "Purpose",
    "chance_accuracy",
    "corpus",
    "heldout_items",
    "make_example",
    "mask_answer",
    "prompt_fingerprint",
    "option_marks",
    "region_labels",
    "question_of",
    "reasoning_text",
    "train_item",
    "transfer_hint",
    "wrong_reasoning",
]

Purpose = Literal["short", "cot", "s2", "answer"]
"""Which of the graph's calls a training example imitates.

- ``short``: the short answer (verification and the short baselines).
- ``cot``: the chain of thought (the target is the reasoning itself).
- ``s2``: the answer-extraction turn after a reasoning.
- ``answer``: the large model's answer after the transferred (sparsified) reasoning.
"""
PURPOSES: tuple[Purpose, ...] = ("short", "cot", "s2", "answer")

REGION_LABELS = 1 + len(SHAPES) * len(COLOURS) + 2 * len(COLOURS)
"""Classes of a picture region in the auxiliary perception loss: empty, a shape of a colour,
a bar of a colour, the tallest bar of a colour."""

CONTEXT = MAIContext()
"""The default settings: the prompts the trained pair answers are the graph's defaults."""

_PLACEHOLDER = cast(ImageRef, {"path": "-", "sha256": "0" * 64, "width": 1, "height": 1})
_CONTENT = set(COLOURS) | set(SHAPES) | {"yes", "no", ">", "<", "=", "-", "most"}
_CONTENT |= set(DIRECTIONS) | {cell_name(c) for c in range(16)}


@dataclass(frozen=True)
class Example:
    """One training example: prompt ids (one image placeholder) and the ids to learn."""

    prompt_ids: list[int]
    target_ids: list[int]
    purpose: Purpose
    template: str
    options: tuple[tuple[int, int, int], ...] = ()
    """Each option's last prompt position, letter index and 1 if right (:func:`option_marks`)."""


def train_item(
    seed: int,
    step: int,
    index: int,
    size: int = 128,
    weights: Sequence[float] | None = None,
    task: str = "v1",
) -> SyntheticItem:
    """A training item: the template is drawn at random (equally likely, or by ``weights``).

    Training streams are keyed ``mai-pair-train|seed|step|index`` (``v1``; other tasks add
    their name), apart from the evaluation's ``mai-synthetic|seed|i`` streams (held-out sets
    are the evaluation's).
    """
    key = f"mai-pair-train|{seed}|{step}|{index}" + ("" if task == "v1" else f"|{task}")
    rng = random.Random(key)
    templates = task_of(task)
    template = rng.choices(templates, weights)[0] if weights else rng.choice(templates)
    return draw_item(template, rng, size)


def heldout_items(n: int, seed: int, size: int = 128, task: str = "v1") -> list[SyntheticItem]:
    """The items ``make_synthetic(dir, n=n, seed=seed, size=size, task=task)`` writes."""
    templates = task_of(task)
    return [
        draw_item(templates[i % len(templates)], random.Random(f"mai-synthetic|{seed}|{i}"), size)
        for i in range(n)
    ]


def chance_accuracy(templates: Sequence[str] = TEMPLATES) -> float:
    """Accuracy of a uniform guess over each template's answers, averaged over ``templates``.

    count: 1 of 8; colour: 1 of 5; exists: 1 of 2; tallest: 1 of 3 or 4 options (mean);
    bars: 1 of 2 (3 or 4). Task v2: colour_count 1 of 10 (0 to 9), compare 1 of 2, difference
    1 of 8 (1 to 8), most and tallest_any 1 of 3 or 4 options. Task v3: colour_at and follow 1
    of 5 colours, way 1 of 4 options. Task v4: colour_at 1 of 5, points 1 of 4 options, reach 1
    of 16 cells.

    >>> round(chance_accuracy(), 4)
    0.3233
    """
    options = (1 / 3 + 1 / 4) / 2
    per = {"count": 1 / 8, "colour": 1 / 5, "exists": 1 / 2, "tallest": options, "bars": 1 / 2}
    per |= {"colour_count": 1 / 10, "compare": 1 / 2, "difference": 1 / 8, "most": options}
    per["tallest_any"] = options
    per |= {"colour_at": 1 / 5, "way": 1 / 4, "follow": 1 / 5, "points": 1 / 4, "reach": 1 / 16}
    return sum(per[t] for t in templates) / len(templates)


def option_marks(
    tokenizer: Any, prompt_ids: Sequence[int], options: dict[str, str], answer: str
) -> list[tuple[int, int, int]]:
    r"""Where each option ends in a prompt: ``(position, letter index, 1 if it is the answer)``.

    The graph lists options one a line (``A. r3c4``, :func:`mai_graph.prompts.question_block`);
    the position is the option text's last token. Training only: an auxiliary loss asks that
    token's final state for its letter and whether it is the right option, the two facts a
    one-pass choice answer has to bring together (an option's text, read against the picture,
    and the letter before it). Options not found (another prompt layout) are left out.

    >>> from mai_graph.pair.train import build_tokenizer
    >>> tok = build_tokenizer("v4")
    >>> ids = tok.encode("Options:\nA. r3c4\nB. r1c1\nAnswer", add_special_tokens=False)
    >>> [(tok.decode([ids[p]]), k, a) for p, k, a in option_marks(tok, ids, {"A": "r3c4",
    ...     "B": "r1c1"}, "B")]
    [(' r3c4', 0, 0), (' r1c1', 1, 1)]
    """
    newline = tokenizer.encode("\n", add_special_tokens=False)
    dot = tokenizer.encode(".", add_special_tokens=False)
    ids = list(prompt_ids)
    marks, start = [], 0
    for k, letter in enumerate(options):
        head = newline + tokenizer.encode(letter, add_special_tokens=False) + dot
        at = next(
            (i for i in range(start, len(ids) - len(head)) if ids[i : i + len(head)] == head), None
        )
        if at is None:
            continue
        end = next((i for i in range(at + len(head), len(ids)) if ids[i] in newline), len(ids))
        if end > at + len(head):
            marks.append((end - 1, k, int(letter == answer)))
            start = end
    return marks


def region_labels(item: SyntheticItem, grid: int = 4) -> list[int]:
    """What each of the ``grid`` x ``grid`` regions of the picture holds, row by row.

    Shapes (their grid is the regions): ``1 + shape * 5 + colour``; arrows (task v3):
    ``1 + way * 5 + colour`` (way: up, down, left, right); bar charts: ``16 +
    colour`` of the bar covering most of the region (at least a tenth of it), ``21 + colour``
    if it is the tallest bar; empty: 0. Training only: an auxiliary loss teaches the visual
    tokens what their regions hold.

    >>> import random
    >>> labels = region_labels(draw_item("count", random.Random(0)))
    >>> len(labels), sum(1 for x in labels if x) == int(draw_item("count",
    ...     random.Random(0)).row["answer"])
    (16, True)
    """
    colours = list(COLOURS)
    labels = [0] * (grid * grid)
    if item.scene and len(item.scene[0]) == 3:  # shapes or arrows: (kind, colour, cell)
        kinds = DIRECTIONS if item.scene[0][0] in DIRECTIONS else SHAPES
        for kind, colour, cell in item.scene:
            labels[cell] = 1 + kinds.index(kind) * len(colours) + colours.index(colour)
        return labels
    tallest = max(item.scene, key=lambda bar: bar[1])[0]
    img = item.image.convert("RGB")
    side = img.size[0] // grid
    fills = {rgb: i for i, rgb in enumerate(COLOURS.values())}
    pixels = img.load()
    for r in range(grid):
        for c in range(grid):
            counts: dict[int, int] = {}
            for y in range(r * side, (r + 1) * side):
                for x in range(c * side, (c + 1) * side):
                    k = fills.get(pixels[x, y])
                    if k is not None:
                        counts[k] = counts.get(k, 0) + 1
            if counts:
                best = max(counts, key=lambda k: counts[k])
                if counts[best] * 10 >= side * side:
                    top = len(colours) if colours[best] == tallest else 0
                    labels[r * grid + c] = 1 + len(SHAPES) * len(colours) + top + best
    return labels


def question_of(item: SyntheticItem, kind: AnswerKind | None = None) -> Question:
    """The graph's :class:`~mai_graph.state.Question` for an item (image as a placeholder).

    ``kind`` overrides the item's answer kind (e.g. ``auto``, as ``mai-graph run`` asks).
    """
    row = item.row
    options = row.get("options")
    return Question(
        question=row["question"], image=_PLACEHOLDER, options=options, kind=kind or row["kind"]
    )


def _listing(scene: Sequence[tuple[Any, ...]]) -> str:
    parts = [f"a {colour} {shape}" for shape, colour, _ in sorted(scene, key=lambda s: s[2])]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def reasoning_text(item: SyntheticItem, scene: Sequence[tuple[Any, ...]] | None = None,
                   answer: str | None = None) -> str:  # fmt: skip
    """The short reasoning for an item (its own scene and answer unless given).

    >>> import random
    >>> reasoning_text(draw_item("bars", random.Random(0)))
    'I see 4 bars. Answer: 4'
    """
    scene = item.scene if scene is None else scene
    answer = item.row["answer"] if answer is None else answer
    if item.template in _ARROWS:
        return _arrows_seen(item, scene, _hops(item))[0]
    if item.template in _V2_SHAPES:
        return _counted(item, _counts(scene))[0]
    if item.template == "tallest_any":
        return _bars_seen(item, scene)[0]
    if item.template == "count":
        return f"I see {answer} shape{'' if answer == '1' else 's'}. Answer: {answer}"
    if item.template == "bars":
        return f"I see {answer} bars. Answer: {answer}"
    if item.template == "tallest":
        colour = item.row["options"][answer]
        return f"The tallest bar is {colour}. Answer: {answer}"
    return f"I see {_listing(scene)}. Answer: {answer}"


_V2_SHAPES = ("colour_count", "compare", "difference", "most")


def _counts(scene: Sequence[tuple[Any, ...]]) -> dict[str, int]:
    return {c: sum(1 for _, colour, _ in scene if colour == c) for c in COLOURS}


def _asked(item: SyntheticItem) -> list[str]:
    """The colours a v2 shapes question names, in order."""
    return [w for w in item.row["question"].rstrip("?").split() if w in COLOURS]


def _conclude(item: SyntheticItem, counts: dict[str, int]) -> tuple[str, str]:
    """The conclusion a v2 reasoning draws from its counts, and the answer it gives."""
    t, asked = item.template, _asked(item)
    if t == "colour_count":
        c = asked[0]
        return f"So {c} {counts[c]}.", str(counts[c])
    if t in ("compare", "difference"):
        a, b = asked
        na, nb = counts[a], counts[b]
        if t == "compare":
            sign = ">" if na > nb else "<" if na < nb else "="
            return f"So {a} {na} {sign} {b} {nb}.", "yes" if na > nb else "no"
        return f"So {a} {na} - {b} {nb} = {na - nb}.", str(na - nb)
    options = item.row["options"]  # most: the option colour counted most (first on a tie)
    letter = max(options, key=lambda k: (counts[options[k]], -ord(k)))
    return f"So {options[letter]} {counts[options[letter]]} is the most.", letter


def _counted(item: SyntheticItem, counts: dict[str, int]) -> tuple[str, str]:
    """A v2 counting reasoning from ``counts``, and the answer it states."""
    listed = ", ".join(f"{c} {counts[c]}" for c in COLOURS)
    conclusion, answer = _conclude(item, counts)
    return f"I count {listed}. {conclusion} Answer: {answer}", answer


def _bars_seen(
    item: SyntheticItem, scene: Sequence[tuple[Any, ...]], top: str | None = None
) -> tuple[str, str]:
    """A v2 tallest-bar reasoning (``top`` taken for the tallest), and the letter it states."""
    colours = [c for c, _ in scene]
    top = top or max(scene, key=lambda bar: bar[1])[0]
    letter = next(k for k, c in item.row["options"].items() if c == top)
    listed = ", ".join(colours[:-1]) + " and " + colours[-1]
    return f"I see {listed} bars. The tallest is {top}. Answer: {letter}", letter


_ARROWS = ("colour_at", "way", "follow", "points", "reach")
"""The arrow templates (tasks v3 and v4)."""


def _hops(item: SyntheticItem) -> int:
    """The hops a ``follow`` or ``reach`` question asks for (0 for the one-step questions)."""
    if item.template not in ("follow", "reach"):
        return 0
    return int(item.row["question"].split(" follow ")[1].split()[0])


def _asked_cell(item: SyntheticItem) -> int:
    """The cell a v4 question names (``at r2c3``, ``Start at r2c3``)."""
    words = item.row["question"].rstrip("?").split()
    return next(c for c in range(16) if cell_name(c) in words)


def _walk(scene: Sequence[tuple[Any, ...]], start: int, hops: int) -> list[int] | None:
    """Cells visited following the arrows of ``scene`` from ``start`` (None: a dead end)."""
    at = {cell: way for way, _, cell in scene}
    cells = [start]
    for _ in range(hops):
        nxt = target_cell(cells[-1], at[cells[-1]])
        if nxt is None or nxt not in at:
            return None
        cells.append(nxt)
    return cells


def _arrows_seen(
    item: SyntheticItem, scene: Sequence[tuple[Any, ...]], hops: int
) -> tuple[str, str]:
    """A v3 reasoning over ``scene`` (following ``hops`` arrows), and the answer it states.

    Raises ValueError when the walk meets a dead end (a corrupted scene may).
    """
    by_cell = {cell: (way, colour) for way, colour, cell in scene}
    seen = ", ".join(f"{cell_name(c)} {by_cell[c][1]} {by_cell[c][0]}" for c in sorted(by_cell))
    words = item.row["question"].rstrip("?").split()
    if item.template == "colour_at":
        cell = next(c for c in by_cell if cell_name(c) == words[-1])
        colour = by_cell[cell][1]
        return f"I see {seen}. So {cell_name(cell)} is {colour}. Answer: {colour}", colour
    if item.template == "points":  # the first option whose arrow points the asked way
        way = words[-1]
        ways = {cell_name(c): w for c, (w, _) in by_cell.items()}
        letter, name = next(
            ((k, c) for k, c in item.row["options"].items() if ways.get(c) == way), ("", "")
        )
        if not letter:
            raise ValueError(f"no option points {way}")
        return f"I see {seen}. So {name} points {way}. Answer: {letter}", letter
    if item.template == "reach":
        start = _asked_cell(item)
        colour = by_cell[start][1]
    else:
        colour = words[words.index("the") + 1]
        start = next(c for c in sorted(by_cell) if by_cell[c][1] == colour)
    if item.template == "way":
        way = by_cell[start][0]
        letter = next((k for k, d in item.row["options"].items() if d == way), "")
        return f"I see {seen}. So {colour} points {way}. Answer: {letter}", letter
    cells = _walk(scene, start, hops)
    if cells is None:
        raise ValueError("the arrows lead off the grid or to an empty cell")
    steps = [f"Start {cell_name(start)} {colour} {by_cell[start][0]}."]
    steps += [f"Next {cell_name(c)} {by_cell[c][1]} {by_cell[c][0]}." for c in cells[1:-1]]
    end = by_cell[cells[-1]][1]
    steps.append(f"Next {cell_name(cells[-1])} {end}.")
    if item.template == "reach":  # every cell holds an arrow: the steps read them, no listing
        return f"{' '.join(steps)} Answer: {cell_name(cells[-1])}", cell_name(cells[-1])
    return f"I see {seen}. {' '.join(steps)} Answer: {end}", end


def _wrong_arrows(item: SyntheticItem, rng: random.Random) -> tuple[str, str]:
    """One realistic slip in a v3 or v4 reasoning, and the answer it states.

    An arrow's colour or way misread (in the listing and in the steps that follow from it),
    or, for ``follow`` and ``reach``, one hop too few or too many. A ``reach`` slip is always a
    way on the path (the walk turns where the misread arrow points), a ``points`` slip the
    answer's arrow misread and another option's taken for it: the stated answer changes.
    """
    scene, hops = list(item.scene), _hops(item)
    start_colour = scene[0][1] if item.template == "follow" else None
    walks = item.template in ("follow", "reach")
    for _ in range(20):
        kind = rng.random()
        if walks and kind < 0.25:  # miscounted hops
            tries = [h for h in (hops - 1, hops + 1) if h >= 1]
            try:
                return _arrows_seen(item, scene, rng.choice(tries))
            except ValueError:
                continue
        if item.template == "reach":
            j = rng.randrange(hops)  # a way on the path misread: the walk turns elsewhere
        elif walks:
            j = rng.randrange(hops + 1)  # a path arrow: its colour or its way misread
        elif item.template == "points":  # the answer's way misread, another's taken for it
            way = item.row["question"].rstrip("?").split()[-1]
            cells = {cell_name(c): i for i, (_, _, c) in enumerate(scene)}
            right = cells[item.row["options"][item.row["answer"]]]
            taken = cells[rng.choice([c for k, c in item.row["options"].items()
                                      if k != item.row["answer"]])]  # fmt: skip
            wrong = list(scene)
            wrong[right] = (rng.choice([d for d in DIRECTIONS if d != way]), *scene[right][1:])
            wrong[taken] = (way, *scene[taken][1:])
            return _arrows_seen(item, wrong, hops)  # an option now points the asked way
        else:
            words = item.row["question"].rstrip("?").split()
            j = next(i for i, (w, c, cell) in enumerate(scene)
                     if cell_name(cell) == words[-1] or c in words)  # fmt: skip
        way, colour, cell = scene[j]
        wrong = list(scene)
        misread_way = item.template in ("way", "reach") or (
            walks and j < hops and rng.random() < 0.6
        )
        if misread_way:
            wrong[j] = (rng.choice([d for d in DIRECTIONS if d != way]), colour, cell)
        elif item.template == "follow" and j == 0:
            continue  # the start's colour is what the question names
        else:
            others = [c for c in COLOURS if c not in (colour, start_colour)]
            wrong[j] = (way, rng.choice(others), cell)
        try:
            return _arrows_seen(item, wrong, hops)
        except ValueError:
            continue
    text, answer = _arrows_seen(item, scene, hops)
    if item.template == "reach":
        other = rng.choice([cell_name(c) for _, _, c in scene if cell_name(c) != answer])
    elif item.row.get("options"):
        other = rng.choice([k for k in item.row["options"] if k != answer])
    else:
        other = rng.choice([c for c in COLOURS if c not in (answer, start_colour)])
    return text.rsplit(" ", 1)[0] + f" {other}", other  # a last-word slip


def _wrong_v2(item: SyntheticItem, rng: random.Random) -> tuple[str, str]:
    if item.template == "tallest_any":
        top = max(item.scene, key=lambda bar: bar[1])[0]
        other = rng.choice([c for c, _ in item.scene if c != top])
        return _bars_seen(item, item.scene, other)
    counts = _counts(item.scene)
    asked = _asked(item) or [
        c for c in item.row["options"].values() if counts[c] == max(counts.values())
    ]
    colour = rng.choice(asked)
    step = rng.choice([-1, 1]) if counts[colour] else 1
    counts[colour] += step
    if item.template == "most" and rng.random() < 0.5:  # a runner-up counted too often
        counts[colour] -= step
        other = rng.choice([c for c in item.row["options"].values() if c != colour])
        counts[other] = counts[colour] + 1
    return _counted(item, counts)


def mask_answer(reasoning: str) -> str:
    """The reasoning without its stated final answer (what the masked transfer sends).

    The graph's own rule (:func:`~mai_graph.scoring.mask.answer_statement` on the text's
    pieces): everything from the last answer cue on is removed (the conclusion before it
    stays: it is reasoning, not the stated answer).

    >>> mask_answer("I count red 3. So red 3. Answer: 3")
    'I count red 3. So red 3.'
    """
    pieces = split_pieces(reasoning)
    hidden = set(answer_statement(pieces))
    return "".join(p for i, p in enumerate(pieces) if i not in hidden).rstrip()


def wrong_reasoning(item: SyntheticItem, rng: random.Random) -> tuple[str, str]:
    """A plausible wrong reasoning and its (wrong) answer: a near miss of what a model sees.

    Counts are off by one, a colour is misread, a shape is missed or imagined, another bar is
    taken for the tallest. (Task v2: one count off by one, or a runner-up counted too often;
    the conclusion follows the wrong counts, so its answer may still be right. Tasks v3 and v4:
    one arrow's colour or way misread, or one hop too few or too many; what follows is
    consistent with the slip.)
    """
    if item.template in _ARROWS:
        return _wrong_arrows(item, rng)
    if item.template in _V2_SHAPES or item.template == "tallest_any":
        return _wrong_v2(item, rng)
    t, row, scene = item.template, item.row, list(item.scene)
    if t == "count":
        k = int(row["answer"])
        wrong = str(rng.choice([x for x in (k - 1, k + 1) if 1 <= x <= 8]))
        return reasoning_text(item, answer=wrong), wrong
    if t == "bars":
        wrong = "3" if row["answer"] == "4" else "4"
        return reasoning_text(item, answer=wrong), wrong
    if t == "tallest":
        wrong = rng.choice([k for k in row["options"] if k != row["answer"]])
        return reasoning_text(item, answer=wrong), wrong
    words = row["question"].rstrip("?").split()
    if t == "colour":
        shape = words[-1]
        wrong = rng.choice([c for c in COLOURS if c != row["answer"]])
        scene = [(s, wrong if s == shape else c, cell) for s, c, cell in scene]
        return reasoning_text(item, scene=scene, answer=wrong), wrong
    colour, shape = words[-2], words[-1]  # exists: "Is there a {colour} {shape}?"
    if row["answer"] == "yes":  # miss it: misread the colour of every match
        other = rng.choice([c for c in COLOURS if c != colour])
        scene = [(s, other if (s, c) == (shape, colour) else c, cell) for s, c, cell in scene]
        return reasoning_text(item, scene=scene, answer="no"), "no"
    j = rng.randrange(len(scene))  # imagine it: take one shape for the asked one
    scene[j] = (shape, colour, scene[j][2])
    return reasoning_text(item, scene=scene, answer="yes"), "yes"


def transfer_hint(
    tokenizer: Any, reasoning: str, letters: Sequence[str], rng: random.Random
) -> tuple[str, list[int]]:
    """A sparsified reasoning as the graph's sparsify node would send it: text and token ids.

    Scores imitate surprisal (what a trained model finds unpredictable: colours, shapes,
    numbers, yes / no, letters score high, the template words low); the keep ratio is drawn
    from 0.1 to 1; selection is the graph's own (:func:`~mai_graph.scoring.base.select_tokens`,
    whole words, forced digits, letters and negations).
    """
    ids = list(tokenizer.encode(reasoning, add_special_tokens=False))
    tokens = [tokenizer.decode([i]) for i in ids]
    scores = []
    for piece in tokens:
        word = piece.strip().strip(".,:")
        content = word in _CONTENT or must_keep(word, letters)
        scores.append(rng.uniform(0.5, 3.0) if content else rng.uniform(0.0, 0.4))
    ratio = rng.choice((0.1, 0.2, 0.2, 0.3, 0.5, 1.0))
    kept = select_tokens(tokens, scores, ratio, whole_words=True, letters=letters).kept
    return "".join(tokens[i] for i in kept).strip(), [ids[i] for i in kept]


def make_example(
    item: SyntheticItem,
    purpose: Purpose,
    tokenizer: Any,
    rng: random.Random,
    *,
    eos_id: int,
    p_auto: float = 0.2,
    p_wrong_s2: float = 0.25,
    p_wrong_hint: float = 0.4,
    p_text_hint: float = 0.3,
    p_masked_hint: float = 0.0,
) -> Example:
    """A training example for one of the graph's calls on ``item``.

    Args:
        item: The drawn sample.
        purpose: Which call (see :data:`Purpose`).
        tokenizer: The pair's tokenizer (renders the chat template too).
        rng: Draws the example's variations.
        eos_id: The end-of-turn id (``<|im_end|>``), learned after every target.
        p_auto: Share of non-choice questions asked with the ``auto`` instruction.
        p_wrong_s2: Share of S2 examples whose reasoning is wrong (S2 answers what it says).
        p_wrong_hint: Share of transfer examples whose reasoning is wrong (the target is the
            truth either way).
        p_text_hint: Share of transfer examples sent as text (as over an OpenAI server) rather
            than as the kept token ids.
        p_masked_hint: Share of transfer examples whose stated final answer is removed
            (:func:`mask_answer`, as the evaluation's masked transfer sends them).
    """
    kind: AnswerKind = item.row["kind"]
    if kind != "choice" and rng.random() < p_auto:
        kind = "auto"
    q = question_of(item, kind)
    gold = item.row["answer"]
    if purpose == "short":
        messages, target = short_request(q, CONTEXT).messages, gold
    elif purpose == "cot":
        messages, target = cot_request(q, CONTEXT).messages, reasoning_text(item)
    elif purpose == "s2":
        if rng.random() < p_wrong_s2:
            text, target = wrong_reasoning(item, rng)
        else:
            text, target = reasoning_text(item), gold
        ids = list(tokenizer.encode(text, add_special_tokens=False)) + [eos_id]
        messages = s2_request(q, CONTEXT, text, ids).messages
    else:
        if rng.random() < p_wrong_hint:
            shown = wrong_reasoning(item, rng)[0]
        else:
            shown = reasoning_text(item)
        if p_masked_hint and rng.random() < p_masked_hint:  # no draw at 0: v1 streams unchanged
            shown = mask_answer(shown)
        hint, hint_ids = transfer_hint(tokenizer, shown, tuple(q["options"] or ()), rng)
        sent_ids = None if rng.random() < p_text_hint else hint_ids
        messages, target = answer_request(q, CONTEXT, hint, sent_ids).messages, gold
    prompt = render(tokenizer, messages, {eos_id}).token_ids
    target_ids = list(tokenizer.encode(target, add_special_tokens=False)) + [eos_id]
    options = item.row.get("options")
    marks = option_marks(tokenizer, prompt, options, gold) if options else []
    return Example(prompt, target_ids, purpose, item.template, tuple(marks))


def prompt_fingerprint(tokenizer: Any, task: str = "v1") -> str:
    """Hash of the token ids of the graph's prompts (every call and answer kind) on fixed items.

    The pair answers the prompts it was trained on; the manifest keeps this hash, and a test
    compares it with the prompts the graph builds now (a change means: retrain the pair).
    """
    import hashlib
    import json

    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    rendered = []
    for i in range(len(TEMPLATES)):
        item = train_item(-2, 0, i, task=task)
        for kind in (item.row["kind"], "auto"):
            q = question_of(item, kind)
            reasoning = reasoning_text(item)
            ids = list(tokenizer.encode(reasoning, add_special_tokens=False))
            for request in (
                short_request(q, CONTEXT),
                cot_request(q, CONTEXT),
                s2_request(q, CONTEXT, reasoning, ids + [eos]),
                answer_request(q, CONTEXT, reasoning, ids),
                answer_request(q, CONTEXT, reasoning, None),
            ):
                rendered.append(render(tokenizer, request.messages, {eos}).token_ids)
    return hashlib.sha256(json.dumps(rendered).encode()).hexdigest()[:16]


def corpus(n: int = 400, task: str = "v1") -> list[str]:
    """Texts the pair's tokenizer is trained on: every prompt and reasoning form of the task.

    Deterministic; rendered with the chat template, so role headers and instructions are in.
    """
    from mai_graph.tiny.build import CHAT_TEMPLATE

    class _Template:  # renders the chat template without a tokenizer
        def apply_chat_template(self, messages: Any, **kwargs: Any) -> str:
            from jinja2 import Template

            return Template(CHAT_TEMPLATE).render(
                messages=messages, add_generation_prompt=kwargs["add_generation_prompt"]
            )

    texts = []
    template = _Template()
    rng = random.Random("mai-pair-corpus")
    for i in range(n):
        item = train_item(-1, 0, i, task=task)
        q = question_of(item, "auto" if i % 4 == 0 and item.row["kind"] != "choice" else None)
        reasoning = reasoning_text(item)
        wrong, _ = wrong_reasoning(item, rng)
        hint = " ".join(w for w in reasoning.split() if rng.random() < 0.5) or reasoning
        for request in (
            short_request(q, CONTEXT),
            s2_request(q, CONTEXT, reasoning, None),
            answer_request(q, CONTEXT, hint, None),
        ):
            texts.append(_render_text(template, request.messages))
        texts += [reasoning, wrong, item.row["answer"], hint, mask_answer(reasoning)]
    texts += ["Warm-up."] + [str(k) for k in range(11)]
    return texts


def _render_text(template: Any, messages: Sequence[Any]) -> str:
    from mai_graph.backends.render import hf_messages

    return str(
        template.apply_chat_template(
            hf_messages(messages), tokenize=False, add_generation_prompt=True
        )
    )
