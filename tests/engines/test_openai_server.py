"""The OpenAI-compatible path against a real `vllm serve` (the tiny small model, on CPU)."""

import asyncio
import os
import sys
import time

import pytest

from mai_graph import BackendError, GenerationRequest, MAIContext, arun
from mai_graph.backends.steered import SteeredBackend
from mai_graph.inputs.sources import image_ref
from tests.cluster import metric
from tests.servers import children, free_port, paused, serving

pytestmark = [pytest.mark.engine, pytest.mark.server]

QUESTION = (
    "Look at the picture of coloured shapes on a grey background. Which colour is the large "
    "square in the centre of the image, and how does it compare with the smaller circle?"
)
OPTIONS = ["red", "blue", "green", "yellow"]


@pytest.fixture(scope="module")
def server(tiny_pair, tmp_path_factory):
    pytest.importorskip("vllm", reason="vLLM is installed by scripts/install-cpu.sh")
    pytest.importorskip("openai", reason="installed with the openai extra")
    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny_pair[0]),
           "--served-model-name", "tiny-small", "--host", "127.0.0.1", "--port", str(port),
           "--enforce-eager", "--gpu-memory-utilization", "0.05", "--block-size", "32",
           "--max-model-len", "4096", "--enable-prompt-tokens-details",
            "--enable-per-request-metrics"]  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("vllm-serve") / "server.log"
    with serving(cmd, f"{base}/health", log, env=env) as proc:
        yield f"{base}/v1", base, proc


def backend(url):
    from mai_graph.backends.openai import OpenAIBackend

    return OpenAIBackend.from_url(url, "tiny-small")


async def test_graph_runs_through_the_server(server, scene):
    url, *_ = server
    small, large = backend(url), backend(url)
    result = await arun(
        QUESTION, str(scene), options=OPTIONS,
        small=SteeredBackend(small, {"short": ["A"], "s2": ["C"]}),
        large=SteeredBackend(large, {"short": ["B"]}),
        context=MAIContext(cot_max_tokens=48, cot_min_tokens=48),
    )  # fmt: skip
    assert result.route == "transfer"
    assert [m["node"] for m in result.metrics] == [
        "verify",
        "verify",
        "reason",
        "extract",
        "answer",
    ]
    by_node = {m["node"]: m for m in result.metrics}
    assert by_node["reason"]["generated_tokens"] == 48
    assert by_node["reason"]["prompt_tokens"] > 100  # the image reached the model
    assert by_node["extract"]["cached_tokens"] > 0  # S2 extends the CoT prompt
    assert by_node["answer"]["cached_tokens"] >= 96  # the verify prefix, in whole blocks
    assert result.canonical in ("A", "B", "C", "D")
    assert result.sparsification["tokens_in"] > 0
    # --enable-per-request-metrics: the engine's own stages come back with each call, and
    # --enable-prompt-tokens-details the image tokens (vLLM's multimodal_tokens).
    for m in result.metrics:
        assert m["queue_s"] >= 0 and m["prefill_s"] > 0 and m["decode_s"] >= 0, m
        assert m["queue_s"] + m["prefill_s"] + m["decode_s"] <= m["latency_s"] + 1e-6, m
    assert len({m["image_tokens"] for m in result.metrics}) == 1
    assert 0 < result.metrics[0]["image_tokens"] < result.metrics[0]["prompt_tokens"]
    assert by_node["reason"]["decode_s"] > by_node["verify"]["decode_s"]  # 48 tokens vs 1


async def test_one_step_distribution_over_the_server(server, scene):
    """top_logprobs of the first token: the distribution over the option letters."""
    from mai_graph.answers.distribution import answer_forms

    url, *_ = server
    options = {"A": "red", "B": "blue", "C": "green", "D": "yellow"}
    parts = [{"type": "image", "image": image_ref(str(scene))},
             {"type": "text", "text": "Which colour? A, B, C or D."}]  # fmt: skip
    messages = ({"role": "user", "content": parts},)
    one = await backend(url).generate(GenerationRequest(
        messages, max_tokens=4, logprobs=0, choices=tuple(options),
        distribution=answer_forms("choice", options),
    ))  # fmt: skip
    constrained = await backend(url).generate(
        GenerationRequest(messages, max_tokens=4, logprobs=0, choices=tuple(options))
    )
    if one.distribution is None:  # no letter among the top 20 first tokens: generated instead
        assert "top 20" in one.distribution_fallback and one.text == constrained.text
        return
    assert list(one.distribution) == list(options)
    assert sum(one.distribution.values()) == pytest.approx(1.0)
    assert one.text == max(one.distribution, key=one.distribution.get) == constrained.text
    assert one.generated_tokens == 1 and one.image_tokens > 0


async def test_choices_logprobs_and_token_ids(server, scene):
    url, *_ = server
    gen = await backend(url).generate(
        GenerationRequest(
            ({"role": "user", "content": [{"type": "image", "image": image_ref(scene)},
                                          {"type": "text", "text": "Colour?"}]},),
            max_tokens=16, min_tokens=16, logprobs=0, purpose="cot",
        )
    )  # fmt: skip
    assert gen.generated_tokens == 16 == len(gen.token_ids) == len(gen.logprobs) == len(gen.tokens)
    assert gen.ttft_s is not None and gen.ttft_s <= gen.latency_s
    pick = await backend(url).generate(
        GenerationRequest(
            ({"role": "user", "content": [{"type": "text", "text": "Pick one."}]},),
            max_tokens=4, choices=("yes", "no"), purpose="short",
        )
    )  # fmt: skip
    assert pick.text in ("yes", "no")
    # an answer probability the confidence gate can read (the sampled token's logprob, free)
    short = await backend(url).generate(
        GenerationRequest(
            ({"role": "user", "content": [{"type": "text", "text": "Pick one."}]},),
            max_tokens=4, choices=("yes", "no"), logprobs=0, purpose="short",
        )
    )  # fmt: skip
    assert short.logprobs is not None and len(short.logprobs) == short.generated_tokens
    from mai_graph.nodes._common import answer_probability

    assert 0.0 <= answer_probability(short) <= 1.0


async def test_cancel_aborts_the_server_request(server):
    url, base, proc = server
    request = GenerationRequest(
        ({"role": "user", "content": [{"type": "text", "text": "Talk."}]},),
        max_tokens=3000, min_tokens=3000, purpose="cot",
    )  # fmt: skip
    generated = metric(base, "vllm:generation_tokens_total")
    # The engine is paused while the request arrives, so the cancel lands before it can finish
    # however fast the engine is.
    with paused(children(proc.pid)):
        task = asyncio.create_task(backend(url).generate(request))
        await asyncio.sleep(1.0)
        assert not task.done(), task
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    deadline = time.monotonic() + 20
    while metric(base, "vllm:num_requests_running") > 0:
        assert time.monotonic() < deadline, "the server kept generating for a closed stream"
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.0)
    spent = metric(base, "vllm:generation_tokens_total") - generated
    assert spent < 3000, f"the server generated {spent:.0f} tokens for a closed stream"
    print(f"cancelled: the server generated {spent:.0f} of 3000 tokens")


async def test_unreachable_server_is_a_transient_backend_error():
    with pytest.raises(BackendError, match="unreachable") as err:
        await backend(f"http://127.0.0.1:{free_port()}/v1").generate(
            GenerationRequest(
                ({"role": "user", "content": [{"type": "text", "text": "x"}]},), max_tokens=2
            )  # fmt: skip
        )
    assert err.value.transient
