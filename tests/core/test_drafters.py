"""Several drafts per run on scripted backends: quorum, ranking, transfer, sampling, streaming."""

import asyncio

import pytest

from mai_graph import ConfigError, MAIContext, ScriptedBackend, create_mai_graph, run
from mai_graph.lineup import Lineup, rank_drafts

OPTIONS = ["red", "blue", "green", "yellow"]
REASONING = "The square in the middle is blue and not red ; so the answer is B because 2 sides"


def drafter(name, short, s2="C", prob=None, cot=REASONING, **kw):
    probs = {"s2": prob} if prob is not None else None
    return ScriptedBackend({"short": short, "cot": cot, "s2": s2}, name=name, probs=probs, **kw)


def large_model(short="B", answer="D", **kw):
    return ScriptedBackend({"short": short, "answer": answer}, name="large", **kw)


def ask(graph, context=None, **inputs):
    state = {"question": "Which colour is the square?", "options": OPTIONS, **inputs}
    return graph.invoke(state, context=context or {})


def calls(out):
    return [(m["node"], m["role"], m.get("drafter")) for m in out["metrics"]]


def test_all_drafts_agreeing_with_the_large_model_end_the_run():
    d = [drafter(f"d{i}", "B") for i in range(3)]
    large = large_model("B")
    out = ask(create_mai_graph(d, large).compile())
    assert out["route"] == "agree" and out["canonical"] == "B"
    assert calls(out) == [("verify", "small", 0), ("verify", "small", 1),
                          ("verify", "small", 2), ("verify", "large", None)]  # fmt: skip
    assert [x["answer"] for x in out["drafts"]] == ["B", "B", "B"]
    assert [x["model"] for x in out["drafts"]] == ["d0", "d1", "d2"]
    assert out["small_answer"] == "B" and "stage" not in out


@pytest.mark.parametrize(("quorum", "route"), [("all", "transfer"), ("majority", "agree")])
def test_the_quorum_decides(quorum, route):
    d = [drafter("d0", "B"), drafter("d1", "B"), drafter("d2", "A")]
    out = ask(create_mai_graph(d, large_model("B")).compile(), {"draft_quorum": quorum})
    assert out["route"] == route


def test_a_majority_must_include_the_large_model():
    # Two of three drafts agree with each other, not with the large model: no exit.
    d = [drafter("d0", "A"), drafter("d1", "A"), drafter("d2", "B")]
    out = ask(create_mai_graph(d, large_model("B")).compile(), {"draft_quorum": "majority"})
    assert out["route"] == "transfer"


def test_the_confidence_gate_applies_to_every_draft():
    d = [
        ScriptedBackend({"short": "B"}, name="d0", probs={"short": 0.9}),
        ScriptedBackend(
            {"short": "B", "cot": REASONING, "s2": "C"}, name="d1", probs={"short": 0.4}
        ),  # fmt: skip
    ]
    large = ScriptedBackend({"short": "B", "answer": "B"}, name="large", probs={"short": 0.9})
    graph = create_mai_graph(d, large).compile()
    ctx = {"gate": "agree_confident", "gate_min_prob": 0.6}
    assert ask(graph, ctx | {"draft_quorum": "majority"})["route"] == "agree"
    d[0].script["cot"], d[0].script["s2"] = REASONING, "C"
    assert ask(graph, ctx)["route"] == "transfer"  # all: draft 1 is not sure enough


def test_escalation_ranks_the_drafts_and_the_best_leads():
    d = [drafter("d0", "A", s2="C", prob=0.3), drafter("d1", "A", s2="B", prob=0.8)]
    large = large_model("B")
    out = ask(create_mai_graph(d, large).compile())
    # Draft 1 is surest of its S2 answer, and that answer meets the large model's.
    assert out["route"] == "extract_agree" and out["answer"] == "B"
    assert [x["rank"] for x in out["drafts"]] == [1, 0]
    assert out["s2_answer"] == "B" and out["drafts"][1]["reasoning"] == REASONING
    assert calls(out)[3:] == [("reason", "small", 0), ("reason", "small", 1),
                              ("extract", "small", 0), ("extract", "small", 1)]  # fmt: skip


def test_agreement_ranking_prefers_the_answer_most_drafts_share():
    drafts = [
        {"s2_canonical": "C", "s2_prob": 0.99},
        {"s2_canonical": "D", "s2_prob": 0.5},
        {"s2_canonical": "D", "s2_prob": 0.6},
    ]
    assert rank_drafts(drafts, MAIContext()) == [0, 2, 1]
    assert rank_drafts(drafts, MAIContext(draft_rank="agreement")) == [2, 1, 0]


def test_the_best_two_reasonings_are_transferred_best_first():
    first = "red red red the square is red so A"
    second = "blue blue the square is blue so B"
    d = [
        drafter("d0", "A", s2="A", prob=0.2, cot=first),
        drafter("d1", "A", s2="C", prob=0.9, cot=second),
    ]
    large = large_model("B", "D")
    out = ask(create_mai_graph(d, large).compile(), {"transfer_drafts": 2, "sparsify": "none"})
    assert out["route"] == "transfer" and out["canonical"] == "D"
    prompt = large.calls("answer")[0].messages[1]["content"]
    texts = [p["text"] for p in prompt]
    assert "Key points from 2 other assistants' reasoning" in texts[-6]
    assert texts[-5:-1] == ["[1] ", second, "\n[2] ", first]
    sp = out["sparsification"]
    assert sp["tokens_in"] == len(first.split()) + len(second.split()) == sp["tokens_out"]


def test_one_transfer_reads_like_a_two_model_run():
    d = [drafter("d0", "A", prob=0.9), drafter("d1", "A", prob=0.1)]
    large = large_model("B")
    ask(create_mai_graph(d, large).compile())
    texts = [p["text"] for p in large.calls("answer")[0].messages[1]["content"]]
    assert texts[-3].startswith("Key points from another assistant's reasoning")


def test_k_sampled_drafts_of_one_small_model():
    small = ScriptedBackend({"short": ["B", "C", "B"], "cot": REASONING, "s2": "C"}, name="s")
    large = large_model("B")
    graph = create_mai_graph(small, large).compile()
    out = ask(graph, {"drafts": 3, "draft_quorum": "majority", "seed": 7, "temperature": 0.0})
    assert out["route"] == "agree" and len(out["drafts"]) == 3
    shorts = small.calls("short")
    assert [(r.temperature, r.seed) for r in shorts] == [(0.7, 7), (0.7, 8), (0.7, 9)]
    assert large.calls("short")[0].temperature == 0.0
    assert [m.get("drafter") for m in out["metrics"]] == [0, 1, 2, None]


def test_one_draft_is_the_two_model_run():
    small, large = drafter("s", "A"), large_model("B")
    out = ask(create_mai_graph(small, large).compile(), {"drafts": 1})
    assert "drafts" not in out and all("drafter" not in m for m in out["metrics"])
    assert [m["node"] for m in out["metrics"]] == [
        "verify",
        "verify",
        "reason",
        "extract",
        "answer",
    ]


class Gauge:
    """Counts the drafters' calls in flight at once, across drafters."""

    def __init__(self):
        self.live = self.peak = 0

    def wrap(self, backend):
        from mai_graph.backends.wrapper import WrapperBackend

        gauge = self

        class Gauged(WrapperBackend):
            async def generate_stream(self, request, on_text):
                gauge.live += 1
                gauge.peak = max(gauge.peak, gauge.live)
                try:
                    return await super().generate_stream(request, on_text)
                finally:
                    gauge.live -= 1

        return Gauged(backend)


def test_drafts_run_concurrently():
    d = [drafter(f"d{i}", "A", latency=0.05) for i in range(3)]
    large = large_model("B", latency=0.05)
    gauge = Gauge()
    out = asyncio.run(
        create_mai_graph([gauge.wrap(b) for b in d], large)
        .compile()
        .ainvoke({"question": "q?", "options": OPTIONS})
    )
    # Each round (verify, reason, extract) has the three drafters' calls in flight at once,
    # not one after another.
    assert out["route"] == "transfer" and gauge.peak == 3 and gauge.live == 0
    assert max(b.max_in_flight for b in d) == 1 and sum(len(b.requests) for b in d) == 9


def test_speculative_reasoning_of_every_draft():
    d = [drafter("d0", "A", latency=0.05), drafter("d1", "A", latency=0.05)]
    out = ask(create_mai_graph(d, large_model("B")).compile(), {"speculative_cot": True})
    reason_calls = [c for c in calls(out) if c[0] == "reason"]
    assert len(reason_calls) == 2 and out["route"] == "transfer"
    assert all("reasoning" in x for x in out["drafts"])
    agreeing = [drafter("d0", "B", latency=0.05), drafter("d1", "B", latency=0.05)]
    out = ask(create_mai_graph(agreeing, large_model("B")).compile(), {"speculative_cot": True})
    assert out["route"] == "agree" and not [c for c in calls(out) if c[0] == "reason"]


def test_stream_events_say_which_draft_made_each_call():
    d = [drafter("d0", "B"), drafter("d1", "B")]
    graph = create_mai_graph(d, large_model("B")).compile()
    events = [e for e in graph.stream({"question": "q?", "options": OPTIONS}, stream_mode="custom")]
    tokens = {(e["role"], e.get("drafter")) for e in events if e["event"] == "token"}
    assert tokens == {("small", 0), ("small", 1), ("large", None)}
    metrics = [e.get("drafter") for e in events if e["event"] == "metrics"]
    assert sorted(metrics, key=str) == [0, 1, None]


def test_baselines_use_the_first_drafter():
    d = [drafter("d0", "A"), drafter("d1", "C")]
    out = ask(create_mai_graph(d, large_model("B")).compile(), {"policy": "small"})
    assert out["route"] == "small" and out["canonical"] == "A" and "drafts" not in out


def test_one_failing_draft_fails_the_step():
    from mai_graph import BackendError

    d = [drafter("d0", "A"), ScriptedBackend({"short": "A"}, name="bad",
                                              fail={"short": [BackendError("down")]})]  # fmt: skip
    with pytest.raises(BackendError, match="down"):
        ask(create_mai_graph(d, large_model("B"), retry_policy=None).compile())


def test_lineups_are_validated():
    with pytest.raises(ConfigError, match="non-empty sequence"):
        create_mai_graph([], large_model())
    with pytest.raises(ConfigError, match=r"small\[1\] must be a VLMBackend"):
        create_mai_graph([drafter("d0", "A"), "qwen"], large_model())
    lineup = Lineup.of([drafter("d0", "A")], large_model())
    assert lineup.classic and lineup.draft_count(MAIContext(drafts=4)) == 4


def test_run_takes_drafters():
    d = [drafter("d0", "B"), drafter("d1", "B")]
    result = run("Which?", options=OPTIONS, small=d, large=large_model("B"))
    assert result.route == "agree" and [x["drafter"] for x in result.drafts] == [0, 1]
    assert "draft 1:" in result.format() and "small#1" in result.format()
