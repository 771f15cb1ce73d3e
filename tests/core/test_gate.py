"""The early-exit gate on scripted backends: agree, agree_confident, never, large_confident_exit."""

import math

import pytest

from mai_graph import ConfigError, MAIContext, ScriptedBackend, create_mai_graph, run
from mai_graph.gate import after_disagreement, agreement_exits

OPTIONS = {"A": "red", "B": "blue", "C": "green", "D": "yellow"}
REASONING = "The square is blue, so B."


def pair(small_probs=None, large_probs=None, *, small_short="B", large_short="B", s2="B"):
    small = ScriptedBackend(
        {"short": small_short, "cot": REASONING, "s2": s2},
        name="small",
        probs=small_probs,
    )
    large = ScriptedBackend({"short": large_short, "answer": "C"}, name="large", probs=large_probs)
    return small, large


def ask(small, large, **ctx):
    g = create_mai_graph(small, large).compile()
    return g.invoke({"question": "Which colour?", "options": OPTIONS}, context=ctx)


def test_probabilities_reach_state_metrics_and_result():
    small, large = pair({"short": 0.9}, {"short": 0.6})
    out = ask(small, large)
    assert out["route"] == "agree"
    assert out["small_prob"] == pytest.approx(0.9) and out["large_prob"] == pytest.approx(0.6)
    probs = [m["answer_prob"] for m in out["metrics"]]
    assert probs == [pytest.approx(0.9), pytest.approx(0.6)]
    result = run("Which colour?", options=OPTIONS, small=small, large=large)
    assert result.small_prob == pytest.approx(0.9) and "p=0.90" in result.format()


def test_every_short_call_asks_for_logprobs_and_cot_gets_no_answer_prob():
    small, large = pair(small_short="A", s2="D")
    out = ask(small, large)
    assert out["route"] == "transfer"
    assert all(r.logprobs == 0 for r in small.requests + large.requests)
    by_node = {m["node"]: m for m in out["metrics"]}
    assert by_node["reason"]["answer_prob"] is None
    assert all(0 <= m["answer_prob"] <= 1 for m in out["metrics"] if m["node"] != "reason")


@pytest.mark.parametrize(
    ("small_p", "large_p", "route"),
    [
        (0.95, 0.9, "agree"),  # both sure: exit at verification
        (0.95, 0.4, "transfer"),  # large unsure: neither verification nor S2 may end the run
        (0.3, 0.9, "extract_agree"),  # small unsure at first; its S2 answer (p=0.8) is sure
    ],
)
def test_agree_confident_needs_both_probabilities(small_p, large_p, route):
    small, large = pair({"short": small_p, "s2": 0.8}, {"short": large_p})
    out = ask(small, large, gate="agree_confident", gate_min_prob=0.6)
    assert out["route"] == route


def test_agree_confident_without_probabilities_never_exits():
    def no_logprobs(request):
        from mai_graph import Generation

        return Generation("B", "fn", 1, 1, 0.0)

    from mai_graph import FunctionBackend

    small = FunctionBackend(lambda r: no_logprobs(r) if r.purpose != "cot" else REASONING, name="s")
    large = FunctionBackend(lambda r: no_logprobs(r) if r.purpose != "answer" else "C", name="l")
    g = create_mai_graph(small, large).compile()
    out = g.invoke({"question": "Which?", "options": OPTIONS}, context={"gate": "agree_confident"})
    assert out["route"] == "transfer" and out["small_prob"] is None


def test_gate_never_always_transfers():
    small, large = pair()
    out = ask(small, large, gate="never", s2_exit=True)
    assert out["route"] == "transfer"
    nodes = [m["node"] for m in out["metrics"]]
    assert nodes == ["verify", "verify", "reason", "extract", "answer"]


@pytest.mark.parametrize(("large_p", "route"), [(0.97, "large_confident"), (0.5, "transfer")])
def test_large_confident_exit(large_p, route):
    small, large = pair(small_short="A", large_probs={"short": large_p}, s2="D")
    out = ask(small, large, large_confident_exit=0.9)
    assert out["route"] == route
    if route == "large_confident":
        assert out["canonical"] == "B" and large.calls("answer") == []


def test_large_confident_exit_is_off_by_default():
    small, large = pair(small_short="A", large_probs={"short": 1.0}, s2="D")
    assert ask(small, large)["route"] == "transfer"


def test_gate_helpers():
    ctx = MAIContext(gate="agree_confident", gate_min_prob=0.5)
    assert agreement_exits("B", "B", 0.5, 0.5, ctx)
    assert not agreement_exits("B", "C", 0.99, 0.99, ctx)
    assert not agreement_exits("B", "B", None, 0.99, ctx)
    assert not agreement_exits("B", "B", 1.0, 1.0, MAIContext(gate="never"))
    assert after_disagreement(None, MAIContext(large_confident_exit=0.1)) == "escalate"
    assert (
        after_disagreement(0.99, MAIContext(large_confident_exit=0.5, gate="never")) == "escalate"
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("gate", "sometimes"),
        ("gate_min_prob", 1.5),
        ("gate_min_prob", -0.1),
        ("large_confident_exit", 0),
        ("large_confident_exit", 2),
    ],
)
def test_gate_settings_are_validated(field, value):
    with pytest.raises(ConfigError) as err:
        MAIContext(**{field: value})
    assert err.value.parameter == field


def test_scripted_probs_are_validated():
    with pytest.raises(ConfigError, match="probabilities"):
        ScriptedBackend({"short": "A"}, probs={"short": 1.5})


def test_scripted_probs_in_turn_and_zero():
    small = ScriptedBackend({"short": "A"}, probs={"short": [0.2, 0.0]})
    large = ScriptedBackend({"short": "A"})
    g = create_mai_graph(small, large).compile()
    first = g.invoke({"question": "Which?", "options": OPTIONS}, context={})
    second = g.invoke({"question": "Which?", "options": OPTIONS}, context={})
    assert first["small_prob"] == pytest.approx(0.2)
    assert second["small_prob"] == 0.0 and not math.isnan(second["small_prob"])


@pytest.mark.parametrize("text", ["Unknown", "unknown.", "Unanswerable", "I can't tell", "Unsure"])
def test_non_answers_never_end_a_run(text):
    small, large = pair(small_short=text, large_short=text, s2=text)
    small.script["short"] = large.script["short"] = text
    g = create_mai_graph(small, large).compile()
    out = g.invoke({"question": "What is written on the sign?"}, context={})
    assert out["route"] == "transfer"


def test_a_gold_unknown_still_scores():
    from mai_graph.answers import match_gold

    assert match_gold("Unknown.", "unknown", "text")
