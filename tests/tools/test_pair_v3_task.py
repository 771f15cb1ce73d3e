"""Task v3 (the third pair's): arrows to follow, reasoning whose every step is checkable."""

import collections
import json
import random
import re

import pytest

from mai_graph.answers import answers_match
from mai_graph.eval.synthetic import (
    COLOURS,
    DIRECTIONS,
    TASKS,
    cell_name,
    draw_item,
    make_synthetic,
    target_cell,
)
from mai_graph.pair.task import (
    chance_accuracy,
    heldout_items,
    mask_answer,
    reasoning_text,
    region_labels,
    train_item,
    wrong_reasoning,
)

V3 = TASKS["v3"]
_STEP = re.compile(r"(?:Start|Next) r(\d)c(\d) (\w+)(?: (\w+))?\.")


def _items(template, n=150):
    return [draw_item(template, random.Random(f"t3|{template}|{i}")) for i in range(n)]


def _picture(item):
    """What the picture shows, read back from its pixels: cell -> (colour, way)."""
    img = item.image.convert("RGB")
    fills = {rgb: name for name, rgb in COLOURS.items()}
    side = img.size[0] // 4
    out = {}
    for cell in range(16):
        r, c = divmod(cell, 4)
        box = [
            (x, y) for y in range(r * side, (r + 1) * side) for x in range(c * side, (c + 1) * side)
        ]
        hits = [(x, y) for x, y in box if img.getpixel((x, y)) in fills]
        if not hits:
            continue
        colour = fills[img.getpixel(hits[0])]
        cx = sum(x for x, _ in hits) / len(hits) - (c + 0.5) * side
        cy = sum(y for _, y in hits) / len(hits) - (r + 0.5) * side
        # a triangle's centroid sits towards its base: away from the way it points
        if abs(cx) > abs(cy):
            way = "left" if cx > 0 else "right"
        else:
            way = "up" if cy > 0 else "down"
        out[cell] = (colour, way)
    return out


@pytest.mark.parametrize("template", V3)
def test_the_picture_shows_the_scene(template):
    for item in _items(template, 20):
        assert _picture(item) == {cell: (colour, way) for way, colour, cell in item.scene}


def test_follow_answers_follow_the_arrows_from_a_unique_start():
    hops_seen = collections.Counter()
    for item in _items("follow", 200):
        words = item.row["question"].split()
        colour, hops = words[3], int(words[words.index("follow") + 1])
        hops_seen[hops] += 1
        at = {cell: (c, w) for w, c, cell in item.scene}
        starts = [cell for cell, (c, _) in at.items() if c == colour]
        assert len(starts) == 1
        cell = starts[0]
        for _ in range(hops):
            cell = target_cell(cell, at[cell][1])
            assert cell in at  # every hop lands on an arrow
        assert item.row["answer"] == at[cell][0]
        assert 4 <= len(item.scene) <= 8
    assert set(hops_seen) == {2, 3, 4}


def test_one_step_answers_and_options_without_a_layout_shortcut():
    for item in _items("colour_at", 100):
        at = {cell_name(cell): c for _, c, cell in item.scene}
        assert item.row["answer"] == at[item.row["question"].rstrip("?").split()[-1]]
    items = _items("way", 400)
    letters = collections.Counter(it.row["answer"] for it in items)
    assert min(letters[k] for k in "ABCD") > 60, letters
    for it in items:
        assert sorted(it.row["options"].values()) == sorted(DIRECTIONS)
        colour = it.row["question"].split()[4]
        (way,) = [w for w, c, _ in it.scene if c == colour]
        assert it.row["options"][it.row["answer"]] == way
    # the right letter does not follow the picture: not always the same way at "A"
    assert len({it.row["options"]["A"] for it in items}) == 4


@pytest.mark.parametrize("template", V3)
def test_reasoning_lists_the_picture_then_steps_each_checkable(template):
    for item in _items(template, 60):
        text = reasoning_text(item)
        assert text.endswith(f"Answer: {item.row['answer']}")
        at = {cell: (c, w) for w, c, cell in item.scene}
        listed = text.split(".")[0].removeprefix("I see ")
        assert listed == ", ".join(
            f"{cell_name(cell)} {at[cell][0]} {at[cell][1]}" for cell in sorted(at)
        )
        for row, col, colour, way in _STEP.findall(text):  # each step agrees with the picture
            cell = (int(row) - 1) * 4 + int(col) - 1
            assert at[cell][0] == colour and (not way or at[cell][1] == way)
        if template == "follow":
            hops = int(item.row["question"].split("follow ")[1].split()[0])
            assert len(_STEP.findall(text)) == hops + 1
            assert len(text.split()) >= 20  # writing it costs many short answers


@pytest.mark.parametrize("template", V3)
def test_wrong_reasoning_misreads_one_step(template):
    rng = random.Random(template)
    changed = 0
    for item in _items(template, 80):
        text, answer = wrong_reasoning(item, rng)
        assert text.endswith(f"Answer: {answer}") and text != reasoning_text(item)
        changed += answer != item.row["answer"]
        assert text.split(".")[0].count(",") >= len(item.scene) - 2  # still a full listing
    assert changed >= 40


def test_masking_and_labels_and_chance():
    item = _items("follow", 1)[0]
    masked = mask_answer(reasoning_text(item))
    assert "Answer" not in masked and masked.endswith(".")
    labels = region_labels(item)
    assert sum(1 for x in labels if x) == len(item.scene) and max(labels) <= 20
    assert chance_accuracy(V3) == pytest.approx((1 / 5 + 1 / 5 + 1 / 4) / 3)


def test_heldout_and_training_streams_of_v3(tmp_path):
    data = make_synthetic(tmp_path, n=6, seed=3, task="v3")
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    assert [r["meta"]["template"] for r in rows[:3]] == list(V3)
    for item, row in zip(heldout_items(6, seed=3, task="v3"), rows):
        assert item.row["question"] == row["question"] and item.row["answer"] == row["answer"]
    assert {train_item(0, step, 0, task="v3").template for step in range(40)} == set(V3)
    for template in V3:
        for item in _items(template, 10):
            row = item.row
            assert answers_match(
                row["answer"], row["answer"], row["kind"], options=row.get("options")
            )


def test_cell_names_are_ordinary_tokens_the_renderer_keeps_whole():
    """The graph's renderer encodes added tokens in caller text character by character (they
    could be control tokens); the v3 cell names are vocabulary entries instead, so a question's
    r2c3 is the same one token the reasoning writes, and every other text keeps its ids."""
    pytest.importorskip("transformers")
    from tokenizers import AddedToken

    from mai_graph.backends.render import control_literals, encode_as_text
    from mai_graph.pair.task import corpus
    from mai_graph.pair.train import with_whole_words
    from mai_graph.tiny.build import build_tokenizer

    texts = corpus(40, task="v3")
    words = [f" {cell_name(c)}" for c in range(16)]
    plain = build_tokenizer(texts, vocab_size=400)
    assert len(plain.encode(" r2c3", add_special_tokens=False)) > 1  # split by the BPE
    added = build_tokenizer(texts, vocab_size=400)
    added.add_tokens([AddedToken(w, normalized=False) for w in words])
    for before in (plain, added):
        after = with_whole_words(before, words)
        ids = [after.convert_tokens_to_ids(after.tokenize(w)) for w in words]
        assert all(len(i) == 1 for i in ids) and len({i[0] for i in ids}) == 16
        if before is added:  # the added tokens' ids are kept
            assert [i[0] for i in ids] == added.convert_tokens_to_ids(words)
        assert not set(words) & set(control_literals(after))
        question = "What colour is the arrow at r2c3?"
        assert encode_as_text(after, question)[-2] == ids[6][0]
        for text in [*texts[:60], "x r1c10 r9c9 ünï 12", "I see r1c2 red right."]:
            if before is added:  # the same ids as the added tokens gave
                want = added.encode(text, add_special_tokens=False)
                assert after.encode(text, add_special_tokens=False) == want
            assert after.decode(after.encode(text, add_special_tokens=False)) == text
        if before is plain:  # every text without a cell name keeps its ids
            for text in texts[:60]:
                if not any(w.strip() in text for w in words):
                    assert after.encode(text) == plain.encode(text)
