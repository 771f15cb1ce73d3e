"""Task v4: arrows followed from a named cell, every step a read of the arrow at a named cell."""

import collections
import json
import random
import re

import pytest

from mai_graph.answers import answers_match
from mai_graph.eval.scorers import score
from mai_graph.eval.synthetic import (
    DIRECTIONS,
    REACH_HOPS,
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

V4 = TASKS["v4"]
_STEP = re.compile(r"(?:Start|Next) (r\dc\d) (\w+)(?: (\w+))?\.")
_CELL = re.compile(r"\br([1-4])c([1-4])\b")


def _items(template, n=150):
    return [draw_item(template, random.Random(f"t4|{template}|{i}")) for i in range(n)]


def _asked(item):
    """The cell a reach question starts from."""
    row, col = map(int, _CELL.search(item.row["question"]).groups())
    return (row - 1) * 4 + col - 1


def _walk(item, start, hops):
    at = {cell: way for way, _, cell in item.scene}
    cell = start
    for _ in range(hops):
        cell = target_cell(cell, at[cell])
        assert cell in at  # every hop lands on an arrow
    return cell


def test_reach_answers_the_cell_the_arrows_lead_to():
    hops_seen = collections.Counter()
    for item in _items("reach", 300):
        hops = int(item.row["question"].split(" follow ")[1].split()[0])
        hops_seen[hops] += 1
        end = _walk(item, _asked(item), hops)
        assert item.row["answer"] == cell_name(end)
        _walk(item, end, 1)  # the path goes on: where it ends is not the answer
        assert ("1 arrow." in item.row["question"]) == (hops == 1)  # plural only for several
        assert item.row["kind"] == "text"
    assert set(hops_seen) == set(range(REACH_HOPS[0], REACH_HOPS[1] + 1))
    # the answer is not the start, nor always a neighbour of it
    far = [
        it
        for it in _items("reach", 200)
        if it.row["answer"]
        not in {cell_name(t) for d in DIRECTIONS if (t := target_cell(_asked(it), d)) is not None}
    ]
    assert len(far) > 60


def test_points_options_are_cells_one_pointing_the_asked_way_in_no_layout_order():
    items = _items("points", 400)
    letters = collections.Counter(it.row["answer"] for it in items)
    assert min(letters[k] for k in "ABCD") > 60, letters
    for it in items:
        way = it.row["question"].rstrip("?").split()[-1]
        at = {cell_name(cell): w for w, _, cell in it.scene}
        options = it.row["options"]
        assert len(set(options.values())) == 4 and set(options.values()) <= set(at)
        assert [k for k, c in options.items() if at[c] == way] == [it.row["answer"]]
    # the options are not listed in the picture's reading order
    ordered = sum(list(it.row["options"].values()) == sorted(it.row["options"].values(),
                  key=lambda c: (c[1], c[3])) for it in items)  # fmt: skip
    assert ordered < 40


@pytest.mark.parametrize("template", V4)
def test_reasoning_reads_named_cells_and_ends_with_the_answer(template):
    for item in _items(template, 60):
        text = reasoning_text(item)
        assert text.endswith(f"Answer: {item.row['answer']}")
        at = {cell_name(cell): (c, w) for w, c, cell in item.scene}
        for cell, colour, way in _STEP.findall(text):  # each step agrees with the picture
            assert at[cell][0] == colour and (not way or at[cell][1] == way)
        if template == "reach":
            hops = int(item.row["question"].split(" follow ")[1].split()[0])
            steps = _STEP.findall(text)
            assert len(steps) == hops + 1 and steps[0][0] == cell_name(_asked(item))
            assert steps[-1][0] == item.row["answer"]
        if template == "points":
            name = item.row["options"][item.row["answer"]]
            assert f"So {name} points {item.row['question'].rstrip('?').split()[-1]}." in text


@pytest.mark.parametrize("template", V4)
def test_wrong_reasoning_changes_the_answer(template):
    """A slip in a v4 reasoning changes what it concludes (a slip that left the answer right
    would teach the large model nothing about checking)."""
    rng = random.Random(template)
    changed = 0
    items = _items(template, 100)
    for item in items:
        text, answer = wrong_reasoning(item, rng)
        assert text.endswith(f"Answer: {answer}") and text != reasoning_text(item)
        changed += answer != item.row["answer"]
        if template != "colour_at":
            scored = score(answer, item.row["answer"], item.row["kind"], item.row.get("options"))
            assert scored.correct == (answer == item.row["answer"])
    assert changed >= 0.9 * len(items)


def test_masking_labels_chance_and_streams(tmp_path):
    item = _items("reach", 1)[0]
    masked = mask_answer(reasoning_text(item))
    assert "Answer" not in masked and masked.endswith(".")
    labels = region_labels(item)
    assert sum(1 for x in labels if x) == len(item.scene)
    assert chance_accuracy(V4) == pytest.approx((1 / 5 + 1 / 16 + 1 / 4) / 3)
    data = make_synthetic(tmp_path, n=6, seed=3, task="v4")
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    assert [r["meta"]["template"] for r in rows[:3]] == list(V4)
    for it, row in zip(heldout_items(6, seed=3, task="v4"), rows):
        assert it.row["question"] == row["question"] and it.row["answer"] == row["answer"]
    assert {train_item(0, step, 0, task="v4").template for step in range(40)} == set(V4)
    for template in V4:
        for it in _items(template, 10):
            row = it.row
            assert answers_match(
                row["answer"], row["answer"], row["kind"], options=row.get("options")
            )


@pytest.mark.parametrize(
    ("answer", "right"),
    [("r3c4", True), ("R3C4", True), ("r3c4.", True), (" r3c4 ", True), ("Answer: r3c4", True),
     ("r4c3", False), ("r3c", False), ("r3c44", False), ("", False), ("r3c4 r4c4", False)],
)  # fmt: skip
def test_a_cell_answer_is_matched_as_text(answer, right):
    assert score(answer, "r3c4", "text", None).correct is right


@pytest.fixture(scope="module")
def v4_tokenizer():
    from mai_graph.pair.train import build_tokenizer

    return build_tokenizer("v4")


@pytest.mark.slow
@pytest.mark.parametrize("purpose", ["short", "cot", "s2", "answer"])
def test_option_marks_find_every_option_of_every_prompt(v4_tokenizer, purpose):
    from mai_graph.pair.task import make_example

    tok, rng = v4_tokenizer, random.Random(purpose)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    for i in range(40):
        item = train_item(3, 0, i, task="v4")
        ex = make_example(item, purpose, tok, rng, eos_id=eos, p_masked_hint=0.35)
        options = item.row.get("options")
        if not options:
            assert ex.options == ()
            continue
        texts = [tok.decode([ex.prompt_ids[at]]).strip() for at, _, _ in ex.options]
        assert texts == list(options.values())
        assert [k for _, k, _ in ex.options] == [0, 1, 2, 3]
        right = [list(options)[k] for _, k, r in ex.options if r]
        assert right == [item.row["answer"]]


@pytest.mark.slow
def test_option_marks_leave_out_what_a_prompt_does_not_list(v4_tokenizer):
    from mai_graph.pair.task import option_marks

    tok = v4_tokenizer
    ids = tok.encode("Question: which?\nA. r1c1\nC. r2c2\n", add_special_tokens=False)
    marks = option_marks(tok, ids, {"A": "r1c1", "B": "r4c4", "C": "r2c2"}, "C")
    assert [(tok.decode([ids[at]]).strip(), k, r) for at, k, r in marks] == [
        ("r1c1", 0, 0),
        ("r2c2", 2, 1),
    ]
    assert option_marks(tok, tok.encode("no options here", add_special_tokens=False),
                        {"A": "x"}, "A") == []  # fmt: skip


@pytest.mark.slow
def test_the_option_targets_sit_on_the_options_and_train_the_head(v4_tokenizer):
    torch = pytest.importorskip("torch")
    from mai_graph.pair.task import make_example
    from mai_graph.pair.train import (
        PAIR_SPECS_V4,
        Batcher,
        aux_head_for,
        build_processor,
        loss_of,
        new_model,
    )

    torch.set_num_threads(1)
    tok, spec = v4_tokenizer, PAIR_SPECS_V4["small"]
    assert spec.option_labels and all(PAIR_SPECS_V4[r].option_labels for r in PAIR_SPECS_V4)
    model = new_model(spec, tok, seed=0)
    batcher = Batcher(model, build_processor(tok, spec.image_side), tok)
    rng = random.Random(0)
    items = [it for it in (train_item(4, 0, j, task="v4") for j in range(30))
             if it.row.get("options")][:3] + [train_item(4, 0, 0, task="v4")]  # fmt: skip
    examples = [make_example(it, "short", tok, rng, eos_id=batcher.eos) for it in items]
    regions = [region_labels(it) for it in items]
    b = batcher.batch(examples, [it.image for it in items], regions=regions, options=True)
    ids = b.inputs["input_ids"]
    got = [tok.decode([int(ids[r, c])]).strip() for r, c in zip(b.option_rows, b.option_cols)]
    want = [v for it in items for v in (it.row.get("options") or {}).values()]
    assert got == want and len(got) == 12
    head = aux_head_for(spec)
    _, aux = loss_of(model, b, head)
    aux.backward()
    assert head.weight.grad[-(4 + 2) :].abs().sum() > 0  # the option outputs learn
    plain = batcher.batch(examples, [it.image for it in items], regions=regions)
    assert plain.option_rows is None
