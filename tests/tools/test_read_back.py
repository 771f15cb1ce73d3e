"""The reasoning read-back (benchmarks/read_back.py) counts each clause against the picture."""

import importlib.util
import random
from pathlib import Path

import pytest

from mai_graph.eval.synthetic import draw_item
from mai_graph.pair.task import reasoning_text, wrong_reasoning

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "read_back.py"


@pytest.fixture(scope="module")
def read_one():
    spec = importlib.util.spec_from_file_location("read_back", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.read_one


@pytest.mark.parametrize("template", ["colour_at", "way", "follow", "points", "reach"])
def test_a_true_reasoning_reads_back_right_in_every_clause(read_one, template):
    for i in range(30):
        item = draw_item(template, random.Random(f"rb|{template}|{i}"))
        c = read_one(item, reasoning_text(item))
        listed = 0 if template == "reach" else len(item.scene)  # reach: steps, no listing
        assert c["listed right"] == c["arrows"] == listed and c["missed"] == 0
        assert c["right"] == 1 and c["listed wrong"] == 0
        assert c["started right"] == c["walks"] == (template in ("follow", "reach"))
        assert c["steps that follow the previous one"] == c["steps"]
        assert c["walk clauses that read the picture right"] == c["walk clauses"]
        assert c["walk clauses"] == c["steps"] + c["walks"]
        assert c["ways read right"] == c["letters that follow the reasoning"] == c["choices"]


@pytest.mark.parametrize("template", ["points", "reach"])
def test_a_slip_is_found_where_it_is(read_one, template):
    rng = random.Random(template)
    for i in range(30):
        item = draw_item(template, random.Random(f"rb|{template}|{i}"))
        text, answer = wrong_reasoning(item, rng)
        c = read_one(item, text)
        assert c["right"] == (answer == item.row["answer"])
        if template == "points":  # the misread way is found, the letter still follows it
            assert c["ways read right"] == 0 and c["letters that follow the reasoning"] == 1
        elif not c["right"] and c["listed wrong"]:  # a misread way on the path
            assert c["walk clauses that read the picture right"] < c["walk clauses"]


def test_a_walk_from_the_wrong_start_and_a_letter_that_does_not_follow(read_one):
    item = draw_item("reach", random.Random("rb|start"))
    text = reasoning_text(item)
    start = text.split("Start ")[1].split()[0]
    other = next(f"r{r}c{c}" for r in range(1, 5) for c in range(1, 5) if f"r{r}c{c}" != start)
    c = read_one(item, text.replace(f"Start {start}", f"Start {other}"))
    assert c["started right"] == 0 and c["walks"] == 1
    item = draw_item("points", random.Random("rb|letter"))
    text = reasoning_text(item)
    wrong = next(k for k in "ABCD" if k != item.row["answer"])
    c = read_one(item, text.rsplit(" ", 1)[0] + f" {wrong}")
    assert c["ways read right"] == 1 and c["letters that follow the reasoning"] == 0
    assert c["right"] == 0
    assert read_one(item, "no idea")["reasonings"] == 1  # a reasoning without clauses counts
