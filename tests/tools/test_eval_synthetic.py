import json

import pytest
from PIL import Image

from mai_graph.errors import ConfigError
from mai_graph.eval.datasets import load_dataset
from mai_graph.eval.synthetic import COLOURS, TEMPLATES, make_synthetic


def test_same_seed_same_files(tmp_path):
    a = make_synthetic(tmp_path / "a", n=10, seed=3)
    b = make_synthetic(tmp_path / "b", n=10, seed=3)
    c = make_synthetic(tmp_path / "c", n=10, seed=4)
    assert a.read_text() == b.read_text()
    for row in map(json.loads, a.read_text().splitlines()):
        assert (a.parent / row["image"]).read_bytes() == (b.parent / row["image"]).read_bytes()
    assert a.read_text().replace("syn-3-", "syn-4-") != c.read_text()


def test_every_kind_loads_with_valid_gold_answers(tmp_path):
    data = load_dataset(make_synthetic(tmp_path, n=40, seed=1), on_bad_row="fail")
    assert len(data) == 40 and not data.problems
    assert {s.kind for s in data.samples} == {"choice", "yes_no", "number", "text"}
    assert {s.meta["template"] for s in data.samples} == set(TEMPLATES)
    for s in data.samples:
        assert Image.open(s.image).size == (128, 128)
        if s.meta["template"] == "colour":
            assert s.answer in COLOURS and s.question.startswith("What colour is the ")
        if s.meta["template"] == "tallest":
            assert set(s.options.values()) <= set(COLOURS) and s.answer in s.options
        if s.meta["template"] == "count":
            assert 1 <= int(s.answer) <= 8
    exists = [s.answer for s in data.samples if s.kind == "yes_no"]
    assert "yes" in exists and "no" in exists


def test_the_tallest_bar_is_drawn_tallest(tmp_path):
    data = load_dataset(make_synthetic(tmp_path, n=20, templates=("tallest",)))
    for s in data.samples:
        img = Image.open(s.image).convert("RGB")
        colour = COLOURS[s.options[s.answer]]
        pixels = [(x, y) for x in range(128) for y in range(128) if img.getpixel((x, y)) == colour]
        top = min(y for _, y in pixels)
        for other in s.options.values():
            others = [y for x in range(128) for y in range(128)
                      if img.getpixel((x, y)) == COLOURS[other]]  # fmt: skip
            assert top <= min(others)


def test_bad_arguments():
    with pytest.raises(ConfigError, match="n must be an integer from 1 to"):
        make_synthetic("unused", n=0)
    with pytest.raises(ConfigError, match="unknown templates"):
        make_synthetic("unused", templates=("pies",))
