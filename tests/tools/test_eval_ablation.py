"""The sparsification ablation (`mai-graph eval --sparsify-ablation`) on scripted models."""

import asyncio
import json
import random
import re

import pytest

from mai_graph import ScriptedBackend
from mai_graph.errors import ConfigError
from mai_graph.eval.ablation import arun_ablation, format_ablation
from mai_graph.eval.datasets import load_dataset
from mai_graph.eval.synthetic import draw_item, make_synthetic
from mai_graph.pair.task import reasoning_text

N = 6


def _text(request):
    parts = []
    for m in request.messages:
        content = m["content"]
        if isinstance(content, str):
            parts.append(content)
        else:
            parts += [c.get("text", "") for c in content if isinstance(c, dict)]
    return "\n".join(parts)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("v3-ablation")
    return make_synthetic(folder, n=N, seed=5, task="v3", templates=("colour_at",))


def _pair(path):
    """A small model that reasons right and answers short wrong, a large one that reads."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    reasoning = {}
    for i, row in enumerate(rows):  # the items make_synthetic drew
        item = draw_item("colour_at", random.Random(f"mai-synthetic|5|{i}"))
        assert item.row["question"] == row["question"]
        reasoning[row["id"]] = reasoning_text(item)

    def cot(request):
        seen = str(request.messages)
        return next(r for sample_id, r in reasoning.items() if sample_id in seen)

    def read(request):
        """A reader: the colour the transferred text binds to the asked cell."""
        text = _text(request)
        cell = re.search(r"arrow at (r\dc\d)\?", text).group(1)
        found = re.findall(rf"{cell},? (\w+)", text.split("arrow at")[-1])
        return found[0] if found else "unknown"

    small = ScriptedBackend({"short": "purple", "cot": cot, "s2": "green"}, name="s")
    large = ScriptedBackend({"short": "unknown", "answer": read}, name="l")
    return small, large


def test_the_ablation_measures_each_strategy_and_ratio(data):
    path = data
    samples = load_dataset(path).samples
    small, large = _pair(path)
    result = asyncio.run(
        arun_ablation(samples, small, large, ratios=(0.1, 0.4, 1.0), concurrency=2)
    )
    assert result["n"] == N and result["disagreements"] == N
    assert result["large_short"]["accuracy"] == 0.0
    strategies = result["strategies"]
    assert strategies["attention"] == {"available": False, "why": strategies["attention"]["why"]}
    assert "no scorer" in strategies["attention"]["why"]
    assert list(strategies["none"]["ratios"]) == ["1"]  # none keeps everything: measured once
    whole = strategies["none"]["ratios"]["1"]
    assert whole["accuracy"] == 1.0 and whole["dropped_mass"] == 0.0
    assert whole["reasoning_tokens_read"] == whole["reasoning_tokens_in"] > 10
    for name in ("surprisal", "relevance"):
        cells = strategies[name]["ratios"]
        assert list(cells) == ["0.1", "0.4", "1"]
        read = [cells[r]["reasoning_tokens_read"] for r in cells]
        assert read == sorted(read) and read[0] < read[-1] == whole["reasoning_tokens_in"]
        assert cells["0.1"]["dropped_mass"] > cells["1"]["dropped_mass"] == 0.0
        assert cells["0.1"]["prompt_tokens"] < cells["1"]["prompt_tokens"]
        # a kept cell keeps its colour: the reader answers from a tenth of the reasoning
        assert cells["0.1"]["accuracy"] == 1.0, name
    table = format_ablation(result)
    assert "| surprisal | 0.1 | 100.0% |" in table and "unavailable" in table


def test_bad_ablation_settings_are_refused():
    with pytest.raises(ConfigError, match="unknown sparsify strategies"):
        asyncio.run(arun_ablation([], None, None, strategies=("magic",)))
    with pytest.raises(ConfigError, match="keep ratios"):
        asyncio.run(arun_ablation([], None, None, ratios=(0.0,)))
