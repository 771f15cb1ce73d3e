"""The whole MAI graph on real engines (vLLM CPU and transformers), with an image.

Random weights: the tests check routes, token counts, caching, cancellation and concurrency,
never the text. Routes are forced by narrowing what an engine may output for one step.
"""

import asyncio
import time

import pytest

from mai_graph import MAIContext, arun
from mai_graph.backends.recording import RecordingBackend
from mai_graph.backends.render import common_prefix, render
from mai_graph.backends.steered import SteeredBackend
from tests.servers import paused

pytestmark = pytest.mark.engine

QUESTION = (
    "Look at the picture of coloured shapes on a grey background. Which colour is the large "
    "square in the centre of the image, and how does it compare with the smaller circle?"
)
OPTIONS = ["red", "blue", "green", "yellow"]
COT = 64
ROUTES = {
    "agree": ({"short": ["A"]}, {"short": ["A"]}),
    "extract_agree": ({"short": ["A"], "s2": ["B"]}, {"short": ["B"]}),
    "transfer": ({"short": ["A"], "s2": ["C"]}, {"short": ["B"]}),
}


def ctx(**kw):
    return MAIContext(cot_max_tokens=COT, cot_min_tokens=COT, short_max_tokens=8, **kw)


def shared_prefix(backend, a, b):
    """Prompt ids two requests share (image placeholders unexpanded)."""
    tok = backend.tokenizer
    return common_prefix(
        render(tok, a.messages, set()).token_ids, render(tok, b.messages, set()).token_ids
    )


async def steered_run(small, large, route, scene, **kw):
    s_choices, l_choices = ROUTES[route]
    small_rec, large_rec = (
        RecordingBackend(SteeredBackend(small, s_choices)),
        RecordingBackend(SteeredBackend(large, l_choices)),
    )
    result = await arun(
        QUESTION, str(scene), options=OPTIONS, small=small_rec, large=large_rec, context=ctx(**kw)
    )
    return result, small_rec, large_rec


@pytest.mark.parametrize("route", list(ROUTES))
async def test_forced_routes(engines, scene, route):
    _, small, large = engines
    result, small_rec, large_rec = await steered_run(small, large, route, scene)
    assert result.route == route
    nodes = [m["node"] for m in result.metrics]
    want = {
        "agree": ["verify", "verify"],
        "extract_agree": ["verify", "verify", "reason", "extract"],
        "transfer": ["verify", "verify", "reason", "extract", "answer"],
    }[route]
    assert nodes == want
    for m in result.metrics:
        assert m["prompt_tokens"] > 100  # system + expanded image + question
        assert m["generated_tokens"] >= 1 and m["latency_s"] > 0
    if route != "agree":
        reason = next(m for m in result.metrics if m["node"] == "reason")
        assert reason["generated_tokens"] == COT  # forced length, counted by the engine
        assert reason["finish_reason"] == "length"


async def test_s2_and_transfer_reuse_cached_prefixes(engines, scene):
    kind, small, large = engines
    result, small_rec, large_rec = await steered_run(small, large, "transfer", scene)
    block = 32 if kind == "vllm" else 1
    cot_req, cot_gen = small_rec.call("cot")
    s2_req, s2_gen = small_rec.call("s2")
    # S2's prompt extends the CoT prompt + reasoning: everything before the new turn is cached.
    image_extra = cot_gen.prompt_tokens - len(
        render(small.tokenizer, cot_req.messages, set()).token_ids
    )
    s2_shared = cot_gen.prompt_tokens + COT - 1
    assert s2_gen.cached_tokens > 0
    assert s2_gen.cached_tokens >= (s2_shared // block) * block
    # The large model's transfer prompt shares system + image + question with its verify call.
    short_req, short_gen = large_rec.call("short")
    ans_req, ans_gen = large_rec.call("answer")
    shared = shared_prefix(large, short_req, ans_req) + image_extra
    assert shared > 100
    assert ans_gen.cached_tokens >= (shared // block) * block
    assert s2_gen.cached_tokens / s2_shared >= 0.9


async def test_baselines_on_engines(engines, scene):
    _, small, large = engines
    for policy, role in (("small_cot", "small"), ("large_cot", "large"), ("large", "large")):
        result = await arun(
            QUESTION,
            str(scene),
            options=OPTIONS,
            small=small,
            large=large,
            context=ctx(policy=policy),
        )
        assert result.route == policy
        assert {m["role"] for m in result.metrics} == {role}
        assert result.canonical in {"A", "B", "C", "D"}  # constrained to the option letters


async def test_cancelled_run_aborts_engine_requests(engines, scene):
    kind, small, large = engines
    long = MAIContext(cot_max_tokens=2000, cot_min_tokens=2000, short_max_tokens=8)
    s_choices, l_choices = ROUTES["transfer"]
    # vLLM's engines are paused while the cancel goes out: a CPU engine that is generating can
    # hold this process back until the run is done (the transformers models run in this one).
    # A run that still ended first (held back before the pause) is tried again.
    engines = small.engine_processes() + large.engine_processes() if kind == "vllm" else []
    for _attempt in range(3):
        task = asyncio.create_task(
            arun(QUESTION, str(scene), options=OPTIONS, small=SteeredBackend(small, s_choices),
                 large=SteeredBackend(large, l_choices), context=long)
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not busy(kind, small):
            assert time.monotonic() < deadline, "reasoning never started"
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        with paused(engines):
            if task.done():
                continue
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        break
    else:
        pytest.fail("three runs ended before their cancel")
    deadline = time.monotonic() + 10
    while busy(kind, small):
        assert time.monotonic() < deadline, "the engine kept working on a cancelled request"
        await asyncio.sleep(0.05)


def busy(kind, backend):
    if kind == "vllm":
        return backend.running_requests() > 0
    return backend.busy


async def test_sixteen_concurrent_graph_runs(engines, scene):
    _, small, large = engines
    runs = await asyncio.gather(*(steered_run(small, large, "transfer", scene) for _ in range(16)))
    assert [result.route for result, _, _ in runs] == ["transfer"] * 16
    assert all(len(result.metrics) == 5 for result, _, _ in runs)


async def test_streamed_text_equals_the_result(engines):
    from mai_graph import GenerationRequest

    _, small, _ = engines
    pieces = []
    request = GenerationRequest(
        ({"role": "user", "content": [{"type": "text", "text": "Describe the scene."}]},),
        max_tokens=200,
        min_tokens=200,
    )
    gen = await small.generate_stream(request, pieces.append)
    await asyncio.sleep(0.1)  # deltas from another thread land on this loop
    assert len(pieces) > 1
    assert "".join(pieces) == gen.text


async def test_answer_probabilities_are_real_and_recorded_per_call(engines, scene):
    """The confidence gate's inputs on real engines: each answer call's probability in [0, 1]."""
    _, small, large = engines
    result, _, _ = await steered_run(small, large, "transfer", scene)
    assert result.route == "transfer"
    for m in result.metrics:
        if m["node"] == "reason":
            assert m["answer_prob"] is None
        else:
            assert 0.0 <= m["answer_prob"] <= 1.0, m
    assert result.small_prob == result.metrics[0]["answer_prob"]
    # Steering narrows each answer to one allowed string: its probability among the allowed
    # answers is 1 on both engines (the constraint is part of the distribution).
    assert result.small_prob == pytest.approx(1.0) and result.large_prob == pytest.approx(1.0)
    sure, _, _ = await steered_run(
        small, large, "agree", scene, gate="agree_confident", gate_min_prob=0.99
    )
    assert sure.route == "agree"
    # Unsteered, the four option letters compete: a real probability strictly inside (0, 1].
    free = await arun(
        QUESTION, str(scene), options=OPTIONS, small=small, large=large, context=ctx(policy="large")
    )
    assert 0.0 < free.large_prob <= 1.0
    assert free.metrics[0]["answer_prob"] == free.large_prob
