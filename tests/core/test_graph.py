"""The MAI graph on scripted backends: routes, policies, concurrency, metrics, prompts."""

import asyncio

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from mai_graph import (
    BackendError,
    ConfigError,
    FunctionBackend,
    MAIContext,
    ScriptedBackend,
    create_mai_graph,
)
from mai_graph.graph import route_after_extract, route_after_verify

OPTIONS = ["red", "blue", "green", "yellow"]
REASONING = "The square in the middle is blue and not red ; so the answer is B because 2 sides"


def pair(small_script, large_script, **kw):
    return ScriptedBackend(small_script, name="small", **kw), ScriptedBackend(
        large_script, name="large", **kw
    )


def graph(small, large, **kw):
    return create_mai_graph(small, large, **kw).compile()


def ask(g, context=None, **inputs):
    state = {"question": "Which colour is the square?", "options": OPTIONS, **inputs}
    return g.invoke(state, context=context or {})


def test_agree_ends_after_verify():
    small, large = pair({"short": "B"}, {"short": "B"})
    out = ask(graph(small, large))
    assert out["route"] == "agree" and out["canonical"] == "B"
    assert [(m["node"], m["role"]) for m in out["metrics"]] == [
        ("verify", "small"),
        ("verify", "large"),
    ]
    assert [r.purpose for r in small.requests] == ["short"]


def test_extract_agree_ends_after_s2():
    small, large = pair({"short": "A", "cot": REASONING, "s2": "B"}, {"short": "B"})
    out = ask(graph(small, large))
    assert out["route"] == "extract_agree" and out["answer"] == "B"
    assert [m["node"] for m in out["metrics"]] == ["verify", "verify", "reason", "extract"]
    assert large.calls("answer") == []


def test_transfer_runs_the_whole_flow():
    small, large = pair({"short": "A", "cot": REASONING, "s2": "C"}, {"short": "B", "answer": "D"})
    out = ask(graph(small, large))
    assert out["route"] == "transfer" and out["canonical"] == "D"
    assert [(m["node"], m["role"]) for m in out["metrics"]] == [
        ("verify", "small"),
        ("verify", "large"),
        ("reason", "small"),
        ("extract", "small"),
        ("answer", "large"),
    ]
    sp = out["sparsification"]
    assert sp["strategy"] == "surprisal" and sp["tokens_in"] == len(REASONING.split())
    assert 0 < sp["tokens_out"] < sp["tokens_in"]
    assert out["small_answer"] == "A" and out["large_answer"] == "B" and out["s2_answer"] == "C"


def test_s2_exit_can_be_disabled():
    small, large = pair({"short": "A", "cot": REASONING, "s2": "B"}, {"short": "B", "answer": "B"})
    out = ask(graph(small, large), context={"s2_exit": False})
    assert out["route"] == "transfer"


@pytest.mark.parametrize(
    ("policy", "calls"),
    [
        ("small", [("verify", "small")]),
        ("large", [("verify", "large")]),
        ("small_cot", [("reason", "small"), ("extract", "small")]),
        ("large_cot", [("reason", "large"), ("extract", "large")]),
    ],
)
def test_baseline_policies_are_routes_of_the_same_graph(policy, calls):
    small, large = pair(
        {"short": "A", "cot": REASONING, "s2": "C"}, {"short": "B", "cot": "x", "s2": "D"}
    )
    out = ask(graph(small, large), context={"policy": policy})
    assert out["route"] == policy
    assert [(m["node"], m["role"]) for m in out["metrics"]] == calls
    want = {"small": "A", "large": "B", "small_cot": "C", "large_cot": "D"}[policy]
    assert out["canonical"] == want


def test_verify_calls_are_concurrent():
    small, large = pair({"short": "A"}, {"short": "A"}, latency=0.2)
    seen = []

    class Probe:
        name = "probe"

        def __init__(self, inner):
            self.inner = inner

        async def generate(self, request):
            seen.append(("start", self.inner.name))
            try:
                return await self.inner.generate(request)
            finally:
                seen.append(("end", self.inner.name))

    g = graph(Probe(small), Probe(large))
    out = asyncio.run(g.ainvoke({"question": "q?", "options": OPTIONS}, context={}))
    assert out["route"] == "agree"
    # Both requests were in flight before either finished.
    assert [kind for kind, _ in seen[:2]] == ["start", "start"]


def test_one_failing_verify_call_cancels_the_other():
    cancelled = asyncio.Event()

    async def slow(request):
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "A"

    small = FunctionBackend(slow, name="slow")
    large = ScriptedBackend({"short": "A"}, name="large", fail={"short": [BackendError("boom")]})

    async def go():
        with pytest.raises(BackendError, match="boom"):
            await graph(small, large, retry_policy=None).ainvoke(
                {"question": "q?", "options": OPTIONS}, context={}
            )
        assert cancelled.is_set()

    asyncio.run(go())


def test_prompt_prefixes_are_shared_where_caching_needs_them():
    small, large = pair({"short": "A", "cot": REASONING, "s2": "C"}, {"short": "B", "answer": "D"})
    ask(graph(small, large))
    s_short, s_cot, s_s2 = small.calls("short")[0], small.calls("cot")[0], small.calls("s2")[0]
    l_short, l_answer = large.calls("short")[0], large.calls("answer")[0]
    # The two short prompts are identical (same prefix cache entry on both engines).
    assert s_short.messages == l_short.messages
    # S2 = the CoT conversation, then the reasoning as the assistant turn, then one user turn.
    assert s_s2.messages[: len(s_cot.messages)] == s_cot.messages
    assert s_s2.messages[len(s_cot.messages)]["role"] == "assistant"
    assert s_s2.messages[-1]["role"] == "user"
    # Transfer = the large model's verify prompt up to the question, then the reasoning.
    head = l_short.messages[1]["content"][:-1]
    assert l_answer.messages[0] == l_short.messages[0]
    assert l_answer.messages[1]["content"][: len(head)] == head
    instruction = l_short.messages[1]["content"][-1]["text"]
    assert l_answer.messages[1]["content"][-1]["text"].endswith(instruction)
    # The fake's prefix cache sees the shared prefixes.
    metrics = {(m["node"], m["role"]): m for m in ask(graph(small, large))["metrics"]}
    assert (
        metrics[("extract", "small")]["cached_tokens"]
        >= metrics[("reason", "small")]["prompt_tokens"]
    )


def test_every_request_has_explicit_budgets_and_choices():
    small, large = pair({"short": "A", "cot": REASONING, "s2": "C"}, {"short": "B", "answer": "D"})
    ctx = MAIContext(short_max_tokens=5, cot_max_tokens=40, cot_min_tokens=10, s2_max_tokens=3)
    ask(graph(small, large), context=ctx)
    by_purpose = {r.purpose: r for r in small.requests + large.requests}
    assert by_purpose["short"].max_tokens == 5 and by_purpose["short"].choices == (
        "A",
        "B",
        "C",
        "D",
    )
    assert (by_purpose["cot"].max_tokens, by_purpose["cot"].min_tokens) == (40, 10)
    assert by_purpose["cot"].choices is None
    assert by_purpose["s2"].max_tokens == 3
    assert by_purpose["answer"].max_tokens == 5


def test_open_question_has_no_choices_and_auto_matching():
    small, large = pair({"short": "Seven"}, {"short": "7 apples"})
    out = graph(small, large).invoke({"question": "How many apples?"}, context={})
    assert out["route"] == "agree" and out["canonical"] == "7 apples"
    assert small.requests[0].choices is None


def test_cot_budget_truncates_reasoning():
    long = " ".join(f"w{i}" for i in range(100))
    small, large = pair({"short": "A", "cot": long, "s2": "C"}, {"short": "B", "answer": "D"})
    out = ask(graph(small, large), context={"cot_max_tokens": 30})
    reason = [m for m in out["metrics"] if m["node"] == "reason"][0]
    assert reason["generated_tokens"] == 30 and reason["finish_reason"] == "length"


def test_reused_thread_starts_each_run_clean(saver):
    small, large = pair(
        {"short": ["A", "B"], "cot": REASONING, "s2": "C"}, {"short": ["B", "B"], "answer": "D"}
    )
    g = create_mai_graph(small, large).compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "t"}}
    first = g.invoke({"question": "q1?", "options": OPTIONS}, cfg, context={})
    second = g.invoke({"question": "q2?", "options": OPTIONS}, cfg, context={})
    assert first["route"] == "transfer" and second["route"] == "agree"
    assert len(second["metrics"]) == 2
    assert second.get("s2_answer") is None


def test_image_input_becomes_a_reference(png):
    small, large = pair({"short": "A"}, {"short": "A"})
    g = create_mai_graph(small, large).compile(checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "img"}}
    g.invoke({"question": "q?", "options": OPTIONS, "image": str(png)}, cfg, context={})
    state = g.get_state(cfg).values
    image = state["asked"]["image"]
    assert set(image) == {"path", "sha256", "width", "height"}
    assert small.requests[0].image["sha256"] == image["sha256"]


def test_a_reused_thread_never_inherits_image_or_options(png, saver):
    """Raw invoke on one thread: a yes/no question after a multiple-choice one with an image."""
    small, large = pair({"short": ["A", "yes"]}, {"short": ["A", "yes"]})
    g = create_mai_graph(small, large).compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "reuse"}}
    g.invoke({"question": "Which?", "options": ["yes", "no"], "image": str(png)}, cfg, context={})
    out = g.invoke({"question": "Is it raining?"}, cfg, context={})
    assert out["route"] == "agree" and out["canonical"] == "yes"
    last = small.requests[-1]
    assert last.image is None and last.choices is None
    assert "Options:" not in str(last.messages)
    request = g.get_state(cfg).values["asked"]
    assert request == {"question": "Is it raining?", "image": None, "options": None, "kind": "auto"}
    with pytest.raises(ConfigError, match="question"):
        g.invoke({"image": str(png)}, cfg, context={})  # no question of its own: refused


@pytest.mark.parametrize(
    ("inputs", "match"),
    [
        ({"question": ""}, "question must be a non-empty string"),
        ({"question": "q", "options": ["only one"]}, "need 2 to 26 options"),
        ({"question": "q", "options": "red, blue"}, "options must be a list"),
        ({"question": "q", "image": "/no/such/file.png"}, "image file not found"),
    ],
)
def test_bad_input_is_a_typed_error_before_any_model_call(inputs, match):
    small, large = pair({"short": "A"}, {"short": "A"})
    with pytest.raises((ConfigError, ValueError), match=match):
        graph(small, large).invoke(inputs, context={})
    assert small.requests == [] and large.requests == []


def test_bad_context_is_refused():
    small, large = pair({"short": "A"}, {"short": "A"})
    with pytest.raises(ConfigError, match=r"keep_ratio must be in \(0, 1\], got 1.5"):
        graph(small, large).invoke({"question": "q"}, context={"keep_ratio": 1.5})


def test_factory_validates_backends_and_options():
    small, large = pair({"short": "A"}, {"short": "A"})
    with pytest.raises(ConfigError, match="large must be a VLMBackend"):
        create_mai_graph(small, object())
    with pytest.raises(ConfigError, match="unknown nodes in timeouts"):
        create_mai_graph(small, large, timeouts={"verfy": 3})
    with pytest.raises(ConfigError, match="> 0"):
        create_mai_graph(small, large, timeouts=0)


def test_transient_backend_errors_are_retried():
    small = ScriptedBackend(
        {"short": "A"}, name="small", fail={"short": [BackendError("busy", transient=True)]}
    )
    large = ScriptedBackend({"short": "A"}, name="large")
    from langgraph.types import RetryPolicy

    from mai_graph.graph import is_transient

    policy = RetryPolicy(max_attempts=2, initial_interval=0.01, jitter=False, retry_on=is_transient)
    out = graph(small, large, retry_policy=policy).invoke(
        {"question": "q?", "options": OPTIONS}, context={}
    )
    assert out["route"] == "agree"
    assert len(small.calls("short")) == 2


def test_permanent_backend_errors_are_not_retried():
    small = ScriptedBackend({"short": "A"}, name="small", fail={"short": [BackendError("bad")]})
    large = ScriptedBackend({"short": "A"}, name="large")
    with pytest.raises(BackendError, match="bad"):
        graph(small, large).invoke({"question": "q?", "options": OPTIONS}, context={})
    assert len(small.calls("short")) == 1


def test_routing_functions_are_pure():
    assert route_after_verify({"route": "agree"}) == "done"
    assert route_after_verify({"route": None}) == "disagree"
    assert route_after_extract({"route": "extract_agree"}) == "done"
    assert route_after_extract({}) == "transfer"


def test_sync_and_async_invoke_agree():
    small, large = pair({"short": "A", "cot": REASONING, "s2": "C"}, {"short": "B", "answer": "D"})
    g = graph(small, large)
    a = ask(g)
    b = asyncio.run(
        g.ainvoke({"question": "Which colour is the square?", "options": OPTIONS}, context={})
    )
    assert a["route"] == b["route"] == "transfer"
    assert a["answer"] == b["answer"]


def test_speculative_cot_runs_during_verify_and_is_reused():
    small, large = pair(
        {"short": "A", "cot": REASONING, "s2": "C"}, {"short": "B", "answer": "D"}, latency=0.05
    )
    out = ask(graph(small, large), context={"speculative_cot": True})
    assert out["route"] == "transfer"
    assert small.max_in_flight == 2  # the short answer and the reasoning ran together
    assert sorted(r.purpose for r in small.requests) == ["cot", "s2", "short"]  # one CoT call
    assert [(m["node"], m["role"]) for m in out["metrics"]] == [
        ("verify", "small"),
        ("verify", "large"),
        ("reason", "small"),
        ("extract", "small"),
        ("answer", "large"),
    ]


def test_speculative_cot_is_cancelled_on_agreement():
    cancelled = []

    async def slow_cot(request):
        if request.purpose != "cot":
            return "A"
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.append(request.request_id)
            raise
        return "never"

    small = FunctionBackend(slow_cot, name="small")
    large = ScriptedBackend({"short": "A"}, name="large")
    out = ask(graph(small, large), context={"speculative_cot": True})
    assert out["route"] == "agree"
    assert len(cancelled) == 1
    assert [m["node"] for m in out["metrics"]] == ["verify", "verify"]


def test_reused_thread_with_explicit_none_drops_the_old_image(png, saver):
    small, large = pair({"short": ["A", "yes"]}, {"short": ["A", "yes"]})
    g = create_mai_graph(small, large).compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "img-reuse"}}
    g.invoke({"question": "q1?", "options": OPTIONS, "image": str(png)}, cfg, context={})
    g.invoke({"question": "q2?", "options": None, "image": None}, cfg, context={})
    assert small.requests[0].image is not None and small.requests[1].image is None
    assert small.requests[1].choices is None


@pytest.mark.parametrize("review", [False, True])
async def test_edges_route_in_place_without_a_thread(review):
    """An async run's routers (those reading the run's settings too) never leave the loop.

    LangGraph runs a plain sync router in a thread of the default executor under ``ainvoke``;
    the graph's routers are runnables evaluated in place, so a run makes no executor call.
    """
    small, large = pair({"short": "A", "cot": REASONING, "s2": "C"}, {"short": "B", "answer": "D"})
    g = create_mai_graph(small, large).compile(checkpointer=InMemorySaver())
    loop = asyncio.get_running_loop()
    hops = []
    real = loop.run_in_executor

    def counted(executor, fn, *args):
        hops.append(fn)
        return real(executor, fn, *args)

    loop.run_in_executor = counted  # type: ignore[method-assign]
    try:
        cfg = {"configurable": {"thread_id": f"edges-{review}"}}
        state = {"question": "Which colour is the square?", "options": OPTIONS}
        out = await g.ainvoke(state, cfg, context={"review": review})
    finally:
        loop.run_in_executor = real  # type: ignore[method-assign]
    if review:  # the router read the run's settings: the run paused for review
        assert "__interrupt__" in out and out.get("route") is None
    else:
        assert out["route"] == "transfer"
    assert hops == []
