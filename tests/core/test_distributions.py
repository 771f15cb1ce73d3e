"""Option distributions in one decode step: the answer forms, first tokens, folding, the fakes,
and the records through the doors (the engines: ``tests/engines/test_distributions_on_engines.py``).
"""

from __future__ import annotations

import math

import pytest

from mai_graph import MAIContext, ScriptedBackend, run
from mai_graph.answers.distribution import (
    YES_NO_FORMS,
    answer_forms,
    first_token_ids,
    fold,
    pick,
)
from mai_graph.backends.base import GenerationRequest

OPTIONS = ["red", "blue", "green", "yellow"]


class Tok:
    """A tokenizer that spells what it is given by a table (one id per listed form)."""

    def __init__(self, table):
        self.table = table

    def encode(self, text, add_special_tokens=False):
        return self.table.get(text, [900 + i for i, _ in enumerate(text)])


def test_answer_forms_by_kind():
    assert answer_forms("choice", {"A": "x", "B": "y", "C": "z"}) == (
        ("A", ("A",)), ("B", ("B",)), ("C", ("C",)),
    )  # fmt: skip
    assert dict(answer_forms("yes_no", None)) == YES_NO_FORMS
    for kind in ("auto", "number", "text"):
        assert answer_forms(kind, None) is None
    assert answer_forms("choice", None) is None  # choice without options: nothing to read


def test_first_token_ids_fold_forms_and_say_why_they_cannot():
    yes_no = answer_forms("yes_no", None)
    tok = Tok({"yes": [1], "Yes": [2], "YES": [3, 4], "no": [5], "No": [6], "NO": [7]})
    assert first_token_ids(tok, yes_no) == {"yes": (1, 2), "no": (5, 6, 7)}
    # An answer with no single-token form, or a token shared by two answers: no distribution.
    assert "is not a single token" in first_token_ids(Tok({}), yes_no)
    shared = Tok({"yes": [1], "Yes": [1], "YES": [1], "no": [1], "No": [6], "NO": [7]})
    assert "start with the same token" in first_token_ids(shared, yes_no)


@pytest.mark.slow
def test_first_token_ids_on_the_real_qwen_vocabulary(qwen_pair):
    """Qwen's byte-level BPE writes every option letter and yes / no form as one token."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(qwen_pair[0]))
    letters = {chr(65 + i): str(i) for i in range(26)}
    ids = first_token_ids(tok, answer_forms("choice", letters))
    assert isinstance(ids, dict) and len(ids) == 26
    assert all(len(v) == 1 for v in ids.values())
    # Qwen2/3's published ids (qwen.tiktoken ranks): "A" is 32, "B" 33.
    assert ids["A"] == (32,) and ids["B"] == (33,)
    yes_no = first_token_ids(tok, answer_forms("yes_no", None))
    assert isinstance(yes_no, dict) and len(yes_no["yes"]) >= 2 and len(yes_no["no"]) >= 2


@pytest.mark.parametrize(
    "logprobs, ids, expected",
    [
        ({1: math.log(0.5), 2: math.log(0.3)}, {"A": [1], "B": [2]}, {"A": 0.625, "B": 0.375}),
        ({1: math.log(0.2), 2: math.log(0.2), 3: math.log(0.1)}, {"yes": [1, 2], "no": [3]},
         {"yes": 0.8, "no": 0.2}),
        ({}, {"A": [1], "B": [2]}, {"A": 0.5, "B": 0.5}),  # nothing seen: uniform
        ({1: float("-inf"), 2: float("nan")}, {"A": [1], "B": [2]}, {"A": 0.5, "B": 0.5}),
        ({1: 3.0, 2: math.log(0.5)}, {"A": [1], "B": [2]}, {"A": 2 / 3, "B": 1 / 3}),  # > 0 held
        ({"A": math.log(0.9), " B": 0.0}, {"A": ["A"], "B": ["B"]}, {"A": 1.0, "B": 0.0}),
    ],
)  # fmt: skip
def test_fold_sums_to_one_over_the_answers(logprobs, ids, expected):
    got = fold(logprobs, ids)
    assert list(got) == list(ids)
    assert math.fsum(got.values()) == pytest.approx(1.0)
    assert got == pytest.approx(expected)


def test_pick_takes_the_argmax_or_a_seeded_draw():
    dist = {"A": 0.1, "B": 0.6, "C": 0.3}
    assert pick(dist, 0.0, None) == "B"
    assert pick({"A": 0.5, "B": 0.5}, 0.0, None) == "A"  # the first of equals
    draws = [pick(dist, 1.0, seed) for seed in range(300)]
    assert draws == [pick(dist, 1.0, seed) for seed in range(300)]  # reproducible
    share = draws.count("B") / len(draws)
    assert 0.45 < share < 0.75
    assert {pick(dist, 0.05, seed) for seed in range(50)} == {"B"}  # cold: the argmax


def test_a_verification_run_records_both_distributions():
    small = ScriptedBackend({"short": "A"}, name="s", probs={"short": 0.7})
    large = ScriptedBackend({"short": "A"}, name="l", probs={"short": {"A": 0.6, "B": 0.4}})
    result = run("Which?", options=OPTIONS, small=small, large=large)
    assert result.route == "agree"
    assert result.small_distribution == pytest.approx({"A": 0.7, "B": 0.1, "C": 0.1, "D": 0.1})
    assert result.large_distribution == pytest.approx({"A": 0.6, "B": 0.4, "C": 0, "D": 0})
    assert result.small_prob == pytest.approx(0.7) and result.large_prob == pytest.approx(0.6)
    for record in result.metrics:
        assert math.fsum(record["distribution"].values()) == pytest.approx(1.0)
        assert record["distribution_fallback"] is None
    (request,) = small.calls("short")
    assert dict(request.distribution) == {letter: (letter,) for letter in "ABCD"}
    assert "A=0.70" in result.format()


def test_yes_no_questions_and_what_gets_no_distribution():
    small = ScriptedBackend({"short": "Yes"}, name="s", probs={"short": 0.8})
    large = ScriptedBackend({"short": "no"}, name="l")
    ctx = MAIContext(answer_kind="yes_no", gate="never", policy="small")
    result = run("Is it red?", small=small, large=large, context=ctx)
    assert result.small_distribution == pytest.approx({"yes": 0.8, "no": 0.2})
    # A free-text question asks for none; nor does verify_distribution=False.
    for ctx in (MAIContext(policy="small"), MAIContext(policy="small", verify_distribution=False,
                                                       answer_kind="yes_no")):  # fmt: skip
        out = run("Is it red?", small=ScriptedBackend({"short": "yes"}), large=large, context=ctx)
        assert out.small_distribution is None
        assert out.metrics[0]["distribution"] is None


def test_a_fallback_says_why_in_the_call_record():
    # The scripted text is not an answer form: the fake generates, and says so.
    small = ScriptedBackend({"short": "Probably B."}, name="s")
    large = ScriptedBackend({"short": "B"}, name="l")
    result = run("Which?", options=OPTIONS, small=small, large=large, policy="small",
                 constrain_choices=False)  # fmt: skip
    assert result.small_distribution is None
    assert "not one of" in result.metrics[0]["distribution_fallback"]
    # A request that must write more than one token cannot be read off one step.
    request = GenerationRequest(
        ({"role": "user", "content": [{"type": "text", "text": "x"}]},), 8, min_tokens=2,
        distribution=answer_forms("yes_no", None),
    )  # fmt: skip
    gen = run_request(ScriptedBackend("yes"), request)
    assert gen.distribution is None and "min_tokens" in gen.distribution_fallback


def run_request(backend, request):
    import asyncio

    return asyncio.run(backend.generate(request))


def test_eval_records_carry_the_distributions(tmp_path):
    from mai_graph.eval.datasets import load_dataset
    from mai_graph.eval.records import read_records
    from mai_graph.eval.runner import run_eval
    from mai_graph.eval.synthetic import make_synthetic

    data = load_dataset(make_synthetic(tmp_path / "data", n=6))
    small = ScriptedBackend({"short": "A", "cot": "so A", "s2": "A"}, name="s")
    large = ScriptedBackend({"short": "A", "answer": "A"}, name="l")
    run_eval(data.samples, small, large, out_dir=tmp_path / "out", policies=["mai"],
             progress=False)  # fmt: skip
    records = read_records(tmp_path / "out")
    calls = [c for run in records.of("mai") for c in run.calls if c.node == "verify"]
    bounded = [c for c in calls if c.distribution is not None]
    assert bounded and all(math.fsum(c.distribution.values()) == pytest.approx(1) for c in bounded)


# -- gate rules on distributions ------------------------------------------------------------


def test_agree_joint_takes_the_product_of_the_two_probabilities():
    from mai_graph.gate import agreement_exits

    ctx = MAIContext(gate="agree_joint", gate_min_prob=0.5)
    assert agreement_exits("B", "B", 0.8, 0.7, ctx)  # 0.56
    assert not agreement_exits("B", "B", 0.7, 0.7, ctx)  # 0.49: both >= 0.5 would pass
    assert agreement_exits("B", "B", 0.7, 0.7, ctx.replace(gate="agree_confident"))
    assert not agreement_exits("B", "C", 0.99, 0.99, ctx)
    assert not agreement_exits("B", "B", None, 0.99, ctx)


def test_a_run_ends_on_pooled_distributions_that_back_the_large_answer():
    small = ScriptedBackend(
        {"short": "A", "cot": "so A", "s2": "A"},
        name="s",
        probs={"short": {"A": 0.55, "B": 0.45, "C": 0, "D": 0}},
    )
    large = ScriptedBackend({"short": "B", "answer": "B"}, name="l",
                            probs={"short": {"A": 0.05, "B": 0.95, "C": 0, "D": 0}})  # fmt: skip
    pooled = run("Which?", options=OPTIONS, small=small, large=large, pooled_exit=0.65)
    assert pooled.route == "large_confident" and pooled.canonical == "B"  # (0.45 + 0.95) / 2
    assert small.calls("cot") == []
    strict = run("Which?", options=OPTIONS, small=small, large=large, pooled_exit=0.75)
    assert strict.route == "transfer"
    never = run("Which?", options=OPTIONS, small=small, large=large, pooled_exit=0.5,
                gate="never")  # fmt: skip
    assert never.route == "transfer"


@pytest.mark.slow
def test_calibrate_replays_the_distribution_rules_and_compares_them():
    import tempfile
    from pathlib import Path

    from mai_graph.eval import SimConfig, run_eval, simulated_pair
    from mai_graph.eval.calibrate import calibrate
    from mai_graph.eval.records import read_records
    from tests.tools.test_eval_calibrate import _samples

    with tempfile.TemporaryDirectory() as tmp:
        samples = [s for s in _samples(400) if s.kind == "choice"]
        small, large = simulated_pair(samples, SimConfig(seed=5))
        run_eval(samples, small, large, out_dir=Path(tmp), policies=["mai", "small", "large_cot"],
                 branches=True, concurrency=8, progress=False)  # fmt: skip
        result = calibrate(read_records(tmp), target_accuracy=0.5, confidence=0)
    labels = [s.setting for s in result.curve]
    assert any(s.gate == "agree_joint" for s in labels)
    assert any(s.pooled_exit is not None for s in labels)
    rules = {r["rule"]: r for r in result.rules}
    assert set(rules) == {"agree", "agree_confident", "agree_joint", "large_confident", "pooled"}
    plain = rules["agree"]["calibration"]
    for rule in rules.values():
        if rule["setting"] is None:
            continue
        cal = rule["calibration"]
        assert cal["accuracy"] >= plain["accuracy"] - 1e-12  # at plain agreement's accuracy
        assert 0 <= rule["held_out"]["early_exit_share"] <= 1
    assert rules["agree"]["setting"].startswith("agree, s2 on")
    assert "rules" in result.to_dict()
