"""Task v2 (the second pair's): compositional questions, reasoning that counts, no shortcut."""

import collections
import json
import random

import pytest

from mai_graph.answers import answers_match
from mai_graph.errors import ConfigError
from mai_graph.eval.synthetic import COLOURS, TASKS, draw_item, make_synthetic, task_of
from mai_graph.pair.task import (
    chance_accuracy,
    heldout_items,
    mask_answer,
    reasoning_text,
    region_labels,
    train_item,
    wrong_reasoning,
)

V2 = TASKS["v2"]


def _items(template, n=150):
    return [draw_item(template, random.Random(f"t|{template}|{i}")) for i in range(n)]


def _counts(item):
    if item.template == "tallest_any":  # a chart: (colour, height) per bar
        return collections.Counter(colour for colour, _ in item.scene)
    return collections.Counter(colour for _, colour, _ in item.scene)


@pytest.mark.parametrize("template", V2)
def test_gold_answers_follow_from_the_scene(template):
    for item in _items(template):
        row, counts = item.row, _counts(item)
        asked = [w for w in row["question"].rstrip("?").split() if w in COLOURS]
        if template == "colour_count":
            assert row["answer"] == str(counts[asked[0]])
        elif template == "compare":
            assert row["answer"] == ("yes" if counts[asked[0]] > counts[asked[1]] else "no")
        elif template == "difference":
            assert int(row["answer"]) == counts[asked[0]] - counts[asked[1]] > 0
        elif template == "most":
            top = row["options"][row["answer"]]
            assert all(counts[top] > counts[c] for c in COLOURS if c != top)
        else:
            heights = dict(item.scene)
            assert row["options"][row["answer"]] == max(heights, key=heights.get)
        if template != "tallest_any":
            assert 3 <= len(item.scene) <= 9 and len(counts) >= 2


@pytest.mark.parametrize("template", ["most", "tallest_any"])
def test_option_order_is_independent_of_the_layout(template):
    """No position shortcut: the right letter is spread over the letters, and is not the
    position of the answer in the picture (left to right, or reading order)."""
    items = _items(template, 400)
    letters = collections.Counter(it.row["answer"] for it in items)
    assert min(letters[k] for k in "ABC") > 60, letters
    same_place = 0
    for it in items:
        index = ord(it.row["answer"]) - ord("A")
        answer = it.row["options"][it.row["answer"]]
        if template == "tallest_any":
            order = [c for c, _ in it.scene]
        else:
            order = list(dict.fromkeys(c for _, c, _ in sorted(it.scene, key=lambda s: s[2])))
        same_place += order.index(answer) == index if answer in order else 0
    assert same_place / len(items) < 0.45


@pytest.mark.parametrize("template", V2)
def test_reasoning_counts_then_concludes_with_the_gold_answer(template):
    for item in _items(template, 60):
        text = reasoning_text(item)
        assert text.endswith(f"Answer: {item.row['answer']}")
        if template != "tallest_any":
            counts = _counts(item)
            listed = text.split(".")[0].removeprefix("I count ")
            assert listed == ", ".join(f"{c} {counts[c]}" for c in COLOURS)
            assert 15 <= len(text.split()) <= 40  # about 30 tokens with the punctuation


@pytest.mark.parametrize("template", V2)
def test_wrong_reasoning_is_a_near_miss_whose_answer_follows_its_own_counts(template):
    rng = random.Random(template)
    changed = 0
    for item in _items(template, 80):
        text, answer = wrong_reasoning(item, rng)
        assert text.endswith(f"Answer: {answer}") and text != reasoning_text(item)
        changed += answer != item.row["answer"]
    assert changed >= 10  # near misses change the answer often (compare: near ties only)


def test_masking_removes_only_the_stated_answer():
    item = _items("compare", 1)[0]
    text = reasoning_text(item)
    masked = mask_answer(text)
    assert "Answer" not in masked and text.startswith(masked) and masked.endswith(".")
    assert mask_answer("no cue at all") == "no cue at all"


def test_region_labels_and_chance_cover_the_new_templates():
    for template in V2:
        item = _items(template, 1)[0]
        labels = region_labels(item)
        assert len(labels) == 16 and any(labels)
    assert 0.2 < chance_accuracy(V2) < 0.35


def test_heldout_and_training_streams_of_v2(tmp_path):
    data = make_synthetic(tmp_path, n=10, seed=3, task="v2")
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    assert [r["meta"]["template"] for r in rows[:5]] == list(V2)
    for item, row in zip(heldout_items(10, seed=3, task="v2"), rows):
        assert item.row["question"] == row["question"] and item.row["answer"] == row["answer"]
    train = [train_item(0, step, 0, task="v2") for step in range(60)]
    assert {it.template for it in train} == set(V2)
    # the v1 training stream is unchanged by the task argument
    assert train_item(0, 5, 3).row == train_item(0, 5, 3, task="v1").row


def test_unknown_task_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="unknown task"):
        task_of("v9")
    with pytest.raises(ConfigError, match="unknown task"):
        make_synthetic(tmp_path, n=2, task="v9")


def test_v2_answers_are_read_by_the_graphs_matching():
    for template in V2:
        for item in _items(template, 10):
            row = item.row
            kind, options = row["kind"], row.get("options")
            assert answers_match(row["answer"], row["answer"], kind, options=options)
