"""Chains of more than two models on scripted backends: stages, escalation, routes, metrics."""

import pytest

from mai_graph import ConfigError, ScriptedBackend, create_mai_graph, run
from mai_graph.graph import mermaid

OPTIONS = ["red", "blue", "green", "yellow"]
REASONING = "The square in the middle is blue and not red ; so the answer is B because 2 sides"


def model(name, short, answer="D", s2="C", **kw):
    return ScriptedBackend(
        {"short": short, "answer": answer, "cot": REASONING, "s2": s2}, name=name, **kw
    )


def ask(graph, context=None, config=None, **inputs):
    state = {"question": "Which colour is the square?", "options": OPTIONS, **inputs}
    return graph.invoke(state, config, context=context or {})


def trail(out):
    return [(m["node"], m["model"], m["stage"]) for m in out["metrics"]]


def test_agreement_at_the_first_stage_never_calls_the_larger_models():
    m0, m1, m2 = model("m0", "B"), model("m1", "B"), model("m2", "B")
    out = ask(create_mai_graph(m0, m1, m2).compile())
    assert (out["route"], out["stage"]) == ("agree", 1)
    assert trail(out) == [("verify", "m0", 1), ("verify", "m1", 1)]
    assert m2.requests == []


def test_a_transfer_answer_is_verified_by_the_next_model():
    m0, m1, m2 = model("m0", "A"), model("m1", "B", answer="C"), model("m2", "C")
    out = ask(create_mai_graph(m0, m1, m2).compile())
    assert (out["route"], out["stage"], out["canonical"]) == ("agree", 2, "C")
    assert trail(out) == [
        ("verify", "m0", 1), ("verify", "m1", 1), ("reason", "m0", 1), ("extract", "m0", 1),
        ("answer", "m1", 1), ("escalate", "m2", 2),
    ]  # fmt: skip
    assert out["small_answer"] == "C" and out["large_answer"] == "C"  # stage 2's pair
    assert [r.purpose for r in m2.requests] == ["short"]


def test_disagreement_escalates_again_with_the_same_nodes():
    m0, m1, m2 = model("m0", "A"), model("m1", "B", answer="C", s2="A"), model("m2", "D")
    out = ask(create_mai_graph(m0, m1, m2).compile())
    assert (out["route"], out["stage"], out["canonical"]) == ("transfer", 2, "D")
    assert trail(out)[5:] == [("escalate", "m2", 2), ("reason", "m1", 2), ("extract", "m1", 2),
                              ("answer", "m2", 2)]  # fmt: skip
    roles = [(m["node"], m["role"]) for m in out["metrics"] if m["stage"] == 2]
    assert roles == [("escalate", "large"), ("reason", "small"), ("extract", "small"),
                     ("answer", "large")]  # fmt: skip
    # The second stage starts clean: its reasoning is the middle model's, its S2 answer too.
    assert out["s2_answer"] == "A" and out["sparsification"]["tokens_in"] > 0


def test_s2_agreement_ends_a_later_stage():
    m0, m1, m2 = model("m0", "A"), model("m1", "B", answer="C", s2="D"), model("m2", "D")
    out = ask(create_mai_graph(m0, m1, m2).compile())
    assert (out["route"], out["stage"]) == ("extract_agree", 2)
    assert m2.calls("answer") == []


def test_four_models_run_to_the_last_stage():
    models = [model("m0", "A"), model("m1", "B", answer="A", s2="C"),
              model("m2", "B", answer="C", s2="A"), model("m3", "D", answer="B")]  # fmt: skip
    out = ask(create_mai_graph(*models).compile())
    assert (out["route"], out["stage"], out["canonical"]) == ("transfer", 3, "B")
    assert [m["stage"] for m in out["metrics"] if m["node"] == "escalate"] == [2, 3]


def test_baselines_compare_the_smallest_and_the_largest():
    m0, m1, m2 = model("m0", "A"), model("m1", "B"), model("m2", "C", s2="D")
    graph = create_mai_graph(m0, m1, m2).compile()
    assert ask(graph, {"policy": "large"})["canonical"] == "C"
    assert ask(graph, {"policy": "small"})["canonical"] == "A"
    out = ask(graph, {"policy": "large_cot"})
    assert out["canonical"] == "D" and {m["model"] for m in out["metrics"]} == {"m2"}
    assert m1.requests == []


def test_a_reused_thread_starts_every_run_at_stage_one(saver):
    m0, m1 = model("m0", ["A", "B"]), model("m1", "B", answer="C")
    m2 = model("m2", "D", answer="D")
    graph = create_mai_graph(m0, m1, m2).compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "t"}}
    assert ask(graph, config=cfg)["stage"] == 2
    out = ask(graph, config=cfg)
    assert (out["route"], out["stage"]) == ("agree", 1)
    assert [m["node"] for m in out["metrics"]] == ["verify", "verify"]


def test_the_confidence_gate_reads_the_handed_on_answer_probability():
    m0 = model("m0", "A")
    m1 = model("m1", "B", answer="C", probs={"answer": 0.3, "short": 0.9})
    m2 = model("m2", "C", probs={"short": 0.95})
    graph = create_mai_graph(m0, m1, m2).compile()
    ctx = {"gate": "agree_confident", "gate_min_prob": 0.5}
    out = ask(graph, ctx)
    assert out["stage"] == 2 and out["route"] == "transfer"  # m1's answer was not sure enough
    m1.probs["answer"] = 0.8
    assert ask(graph, ctx)["route"] == "agree"


def test_events_and_records_carry_the_stage():
    m0, m1, m2 = model("m0", "A"), model("m1", "B", answer="C"), model("m2", "C")
    graph = create_mai_graph(m0, m1, m2).compile()
    events = list(graph.stream({"question": "q?", "options": OPTIONS}, stream_mode="custom"))
    seen = {(e["event"], e.get("node"), e["role"], e["stage"]) for e in events}
    assert ("token", "escalate", "large", 2) in seen
    assert ("metrics", "answer", "large", 1) in seen


def test_drafters_and_a_chain_together():
    d = [model("d0", "A"), model("d1", "A")]
    m1, m2 = model("m1", "B", answer="C"), model("m2", "C")
    result = run("Which?", options=OPTIONS, small=d, large=[m1, m2])
    assert (result.route, result.stage) == ("agree", 2)
    assert [m.get("drafter") for m in result.metrics[:3]] == [0, 1, None]
    assert "stage 2" in result.format() and "large@2" in result.format()


def test_shapes_of_the_graph():
    two = create_mai_graph(model("a", "A"), model("b", "B")).compile()
    assert not any(n.startswith("escalate") for n in two.get_graph().nodes)
    three = create_mai_graph(model("a", "A"), model("b", "B"), model("c", "C"))
    nodes = set(three.compile().get_graph().nodes)
    # the chain is unrolled when the graph is built: each later stage has its own nodes
    steps = ("escalate", "reason", "extract", "sparsify", "answer")
    assert {f"{step}_2" for step in steps} <= nodes  # the chain (b, c) has two stages
    assert "escalate_3" not in nodes and "escalate" not in nodes
    assert "escalate_2" in mermaid(3) and "escalate_3" in mermaid(4) and "escalate" not in mermaid()
    create_mai_graph(model("a", "A"), model("b", "B"), model("c", "C"), timeouts={"escalate": 5})
    with pytest.raises(ConfigError, match=r"larger\[0\] must be a VLMBackend"):
        create_mai_graph(model("a", "A"), model("b", "B"), "qwen-32b")
    two_out = ask(two)
    assert "stage" not in two_out and all("stage" not in m for m in two_out["metrics"])
