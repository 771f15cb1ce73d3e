"""The sparsify node (`nodes/sparsify.py`) and `mai_graph/scoring/`: selection and the model-free
scorers (the attention scorer runs on a real model in `tests/engines/test_sparsify_on_engines.py`).
"""

import asyncio
import math

import pytest

from mai_graph import ConfigError, ScriptedBackend, create_mai_graph
from mai_graph.scoring import (
    ReasoningInput,
    RelevanceScorer,
    SurprisalScorer,
    binding_partners,
    must_keep,
    select_tokens,
    split_pieces,
    word_groups,
)

WORDS = [f" w{i}" for i in range(100)]


@pytest.mark.parametrize("ratio", [0.01, 0.1, 0.2, 0.25, 0.4, 0.5, 0.99, 1.0])
def test_ratio_is_exact_at_token_level(ratio):
    scores = [float((i * 37) % 101) for i in range(100)]
    sel = select_tokens([f"x{i}" for i in range(100)], scores, ratio, force_keep=False)
    assert len(sel.kept) == max(1, math.ceil(ratio * 100))


def test_keeps_the_highest_scores_in_original_order():
    tokens = ["a", "b", "c", "d", "e", "f"]
    sel = select_tokens(tokens, [1, 9, 2, 8, 3, 7], 0.5)
    assert sel.kept == (1, 3, 5)
    assert sel.dropped_mass == pytest.approx(6 / 30)


def test_ties_go_to_the_earlier_token():
    assert select_tokens(["a", "b", "c"], [1, 1, 1], 0.3).kept == (0,)


def test_forced_tokens_are_kept_and_count_toward_the_budget():
    tokens = ["x", " 42", "y", " (B)", "z", " not", "w", "v", "u", "t"]
    scores = [9, 0, 8, 0, 7, 0, 6, 5, 4, 3]
    sel = select_tokens(tokens, scores, 0.5)
    assert {1, 3, 5} <= set(sel.kept)
    assert len(sel.kept) == 5 and {0, 2} <= set(sel.kept)
    assert set(select_tokens(tokens, scores, 0.5, force_keep=False).kept) == {0, 2, 4, 6, 7}


def test_forced_tokens_beyond_the_budget_are_all_kept():
    tokens = [" 1", " 2", " 3", " 4", "a"]
    assert select_tokens(tokens, [0, 0, 0, 0, 9], 0.2).kept == (0, 1, 2, 3)


@pytest.mark.parametrize(
    ("token", "forced"),
    [("7", True), (" 3.5", True), ("B", True), ("(C)", True), ("D.", True), (" not", True),
     ("never", True), ("isn't", True), (" cat", False), (" a", False), ("I", True)],
)  # fmt: skip
def test_must_keep(token, forced):
    assert must_keep(token) is forced


def test_word_grouping_keeps_whole_words():
    tokens = ["The", " squ", "are", " is", " red", "dish", "."]
    assert word_groups(tokens) == [[0], [1, 2], [3], [4, 5, 6]]
    scores = [0, 5, 0, 0, 0, 0, 0]  # only " squ" scores, but the word goes whole
    sel = select_tokens(tokens, scores, 0.1, whole_words=True, force_keep=False)
    assert sel.kept == (1, 2)
    assert "".join(tokens[i] for i in sel.kept) == " square"


def _kept_text(tokens, sel):
    return "".join(tokens[i] for i in sel.kept).strip()


def _value_scores(tokens, colour=1.0):
    """Scores that favour numbers and cells (what a surprisal scorer does on counts): the
    words naming what the values are of score lower, the template words lowest."""
    words = {"red", "green", "blue", "yellow", "purple", "left", "right", "up", "down"}
    out = []
    for t in tokens:
        w = t.strip().strip(".,:")
        out.append(3.0 if any(ch.isdigit() for ch in w) else colour if w in words else 0.1)
    return out


def test_a_kept_count_keeps_its_colour():
    """The issue's case: 20% of a counting reasoning kept '0, 0, 3, 3, 1. 3 1 2. 2'; every
    count must keep the colour it counts."""
    text = "I count red 3, green 0, blue 2, yellow 1, purple 0. So red 3 > blue 2. Answer: 2"
    tokens = split_pieces(text)
    sel = select_tokens(tokens, _value_scores(tokens), 0.2, whole_words=True, letters=())
    kept = _kept_text(tokens, sel)
    assert "red 3, green 0, blue 2, yellow 1, purple 0." in kept
    assert "red 3 > blue 2." in kept or "red 3 blue 2." in kept
    for i in sel.kept:  # no count without the colour word right before it
        if tokens[i].strip(" .,").isdigit() and tokens[i - 1].strip() != "Answer:":
            assert i - 1 in sel.kept, kept


def test_a_kept_cell_keeps_what_is_in_it():
    text = ("I see r1c2 red right, r1c3 blue down, r2c3 green left. Start r1c2 red right. "
            "Next r1c3 blue down. Next r2c3 green. Answer: green")  # fmt: skip
    tokens = split_pieces(text)
    sel = select_tokens(
        tokens, _value_scores(tokens, colour=0.5), 0.2, whole_words=True, letters=()
    )
    kept = _kept_text(tokens, sel).split()
    for cell in ("r1c2", "r1c3", "r2c3"):
        for i, w in enumerate(kept):
            if w.strip(".,") == cell:
                assert kept[i + 1].strip(".,") in {"red", "blue", "green"}, kept


def test_binding_respects_clauses_and_splits_words_into_pieces():
    # a value at the start of its clause binds forward, never across the comma
    assert binding_partners(["red", " 3,", " 4", " green"], [1, 2, 2, 1], 2, skip={1, 2}) == (3,)
    assert binding_partners(["Answer:", " 3"], [1.0, 2.0], 1) == ()
    # a partner two words away keeps the word between: the phrase stays readable
    tokens = split_pieces("Then the arrow at r2c3 is green here.")
    sel = select_tokens(tokens, [0.1, 0.1, 0.2, 0.1, 3.0, 0.1, 1.0, 0.1], 0.1,
                        whole_words=True, letters=())  # fmt: skip
    assert _kept_text(tokens, sel) == "r2c3 is green"
    # a short clause (a list item, a fact) goes whole with its value
    tokens = split_pieces("I see r1c3 yellow down, r2c2 red up.")
    sel = select_tokens(tokens, [0, 0.5, 3, 0, 0, 3, 0, 0], 0.1, whole_words=True, letters=())
    assert _kept_text(tokens, sel) == "I see r1c3 yellow down, r2c2 red up."
    # pieces of one word are one unit: " purp" "le" goes whole with its count
    tokens = ["So", " we", " have", " counted", " purp", "le", " 4", "."]
    scores = [0.1, 0.1, 0.1, 0.1, 0.5, 0.1, 3.0, 0.0]
    sel = select_tokens(tokens, scores, 0.1, whole_words=True, letters=())
    assert _kept_text(tokens, sel) == "purple 4."
    # a negation keeps what it negates
    tokens = split_pieces("The square on the left is not red at all.")
    scores = [0.1, 0.5, 0.1, 0.1, 0.1, 0.1, 0.0, 0.9, 0.1, 0.1]
    sel = select_tokens(tokens, scores, 0.1, whole_words=True)
    assert _kept_text(tokens, sel) == "not red"
    # token-level selection (whole_words off) keeps exact ratios: no binding there
    assert select_tokens([" 1", " 2", " 3", " 4", "a"], [0, 0, 0, 0, 9], 0.2).kept == (0, 1, 2, 3)


def test_keep_mass_takes_the_fewest_top_tokens_covering_the_mass():
    tokens = ["a", "b", "c", "d"]
    sel = select_tokens(tokens, [6, 3, 1, 0], keep_mass=0.85, force_keep=False)
    assert sel.kept == (0, 1)
    assert 1 - sel.dropped_mass >= 0.85


def test_empty_and_very_short_reasoning():
    assert select_tokens([], [], 0.2).kept == ()
    assert select_tokens(["only"], [0.0], 0.2).kept == (0,)
    assert select_tokens(["a", "b"], [0.0, 0.0], 0.2).dropped_mass == 0.0


def test_reasoning_longer_than_the_context_is_capped():
    n = 50_000
    sel = select_tokens([f" t{i}" for i in range(n)], [float(i % 7) for i in range(n)], 1.0,
                        max_tokens=2048)  # fmt: skip
    assert len(sel.kept) == 2048
    assert list(sel.kept) == sorted(sel.kept)


@pytest.mark.parametrize(
    ("tokens", "scores", "kw", "match"),
    [
        (["a"], [1, 2], {}, "got 2 scores for 1 tokens"),
        (["a"], [1], {"keep_ratio": 0}, r"keep_ratio must be in \(0, 1\]"),
        (["a"], [-1], {}, "finite and non-negative"),
        (["a"], [float("nan")], {}, "finite and non-negative"),
        (["a"], [1], {"keep_mass": 1.5}, r"keep_mass must be in \(0, 1\]"),
    ],
)
def test_bad_selection_input(tokens, scores, kw, match):
    with pytest.raises(ConfigError, match=match):
        select_tokens(tokens, scores, **kw)


def reasoning(tokens, logprobs=None, question="Which colour is the square?", options=None):
    return ReasoningInput(tuple(tokens), None, logprobs, question, options, ())


def test_relevance_prefers_question_words():
    tokens = split_pieces("well the colour of the square looks red to me honestly")
    scores = asyncio.run(RelevanceScorer().score(reasoning(tokens, options=("red", "blue"))))
    best = {tokens[i].strip() for i in sorted(range(len(tokens)), key=lambda i: -scores[i])[:3]}
    assert best == {"colour", "square", "red"}


def test_surprisal_is_negative_logprob_and_needs_logprobs():
    scores = asyncio.run(SurprisalScorer().score(reasoning(["a", " b"], (-0.5, -3.0))))
    assert scores == [0.5, 3.0]
    with pytest.raises(ConfigError, match="surprisal strategy needs the logprob"):
        asyncio.run(SurprisalScorer().score(reasoning(["a", " b"])))


REASONING = "The square in the middle is red and not blue ; option A fits because 2 corners"


def run_sparsify(context, small_script=None, **graph_kw):
    small = ScriptedBackend(small_script or {"short": "A", "cot": REASONING, "s2": "C"}, name="s")
    large = ScriptedBackend({"short": "B", "answer": "D"}, name="l")
    g = create_mai_graph(small, large, **graph_kw).compile()
    out = g.invoke({"question": "Which colour is the square?", "options": ["red", "blue", "green",
                    "yellow"]}, context=context)  # fmt: skip
    return out, large


@pytest.mark.parametrize("strategy", ["surprisal", "relevance", "none"])
def test_node_records_what_it_kept(strategy):
    out, large = run_sparsify({"sparsify": strategy, "keep_ratio": 0.3})
    sp = out["sparsification"]
    n = len(REASONING.split())
    assert sp["strategy"] == strategy and sp["tokens_in"] == n
    if strategy == "none":
        assert sp["tokens_out"] == n and sp["dropped_mass"] == 0
    else:
        assert sp["tokens_out"] < n and 0 < sp["dropped_mass"] < 1
        assert sp["kept_ratio"] == pytest.approx(sp["tokens_out"] / n)
    assert sp["scoring_s"] >= 0
    transfer_part = large.calls("answer")[0].messages[1]["content"][-2]["text"]
    kept = transfer_part.split()
    words = REASONING.split()
    assert kept == [w for w in words if w in kept]  # original order
    assert {"2", "not", "A"} <= set(kept)  # forced


def test_attention_without_a_transformers_model_names_the_fix():
    with pytest.raises(ConfigError, match="has no scorer in this graph") as err:
        run_sparsify({"sparsify": "attention"})
    assert "AttentionScorer" in str(err.value)


def test_custom_scorers_are_validated_and_used():
    class Last:
        name = "custom"

        async def score(self, reasoning):
            return [float(i) for i in range(len(reasoning.tokens))]

    out, large = run_sparsify({"sparsify": "relevance", "keep_ratio": 0.2, "force_keep": False},
                              scorers={"relevance": Last()})  # fmt: skip
    words = REASONING.split()
    last = words[-math.ceil(0.2 * len(words)) :]  # the scorer favours later tokens
    assert large.calls("answer")[0].messages[1]["content"][-2]["text"] == " ".join(last)
    with pytest.raises(ConfigError, match="unknown scorer name"):
        create_mai_graph(ScriptedBackend(), ScriptedBackend(), scorers={"magic": Last()})
    with pytest.raises(ConfigError, match="must be a TokenScorer"):
        create_mai_graph(ScriptedBackend(), ScriptedBackend(), scorers={"relevance": object()})
