"""Option distributions read off one decode step, on real engines.

The tiny toy pair (vLLM CPU and transformers), the tiny pair on Qwen's real vocabulary (vLLM
and transformers); ``vllm serve`` in ``tests/engines/test_openai_server.py``. Random weights:
the distributions are checked for what holds whatever the weights (over the allowed answers,
summing to 1, the answer their argmax and the same as the constrained generation's).
"""

import asyncio
import math

import pytest

from mai_graph import MAIContext, arun
from mai_graph.answers.distribution import answer_forms
from mai_graph.backends.base import GenerationRequest
from mai_graph.inputs.sources import image_ref
from tests.engines.test_qwen_on_engines import qwen_engines, qwen_transformers  # noqa: F401

pytestmark = pytest.mark.engine

OPTIONS = {"A": "red", "B": "blue", "C": "green", "D": "yellow"}


def ask(image, question, **options):
    parts = [{"type": "image", "image": image}, {"type": "text", "text": question}]
    return GenerationRequest(({"role": "user", "content": parts},), max_tokens=4, logprobs=0,
                             **options)  # fmt: skip


def check_one_step(gen, answers):
    assert gen.distribution_fallback is None, gen.distribution_fallback
    assert list(gen.distribution) == list(answers)
    assert math.fsum(gen.distribution.values()) == pytest.approx(1.0, abs=1e-9)
    assert all(0 <= p <= 1 for p in gen.distribution.values())
    assert gen.text == max(gen.distribution, key=gen.distribution.get)
    assert gen.generated_tokens == 1
    assert math.exp(gen.logprobs[0]) == pytest.approx(gen.distribution[gen.text])


async def one_step_and_constrained(backend, image):
    letters = tuple(OPTIONS)
    forms = answer_forms("choice", OPTIONS)
    question = "Which colour is the square? A red, B blue, C green, D yellow."
    one = await backend.generate(ask(image, question, choices=letters, distribution=forms))
    constrained = await backend.generate(ask(image, question, choices=letters))
    yes_no = await backend.generate(
        ask(
            image, "Is the square red? Answer yes or no.", distribution=answer_forms("yes_no", None)
        )
    )
    return one, constrained, yes_no


def check_backend(backend, image, single_token_yes_no=True):
    one, constrained, yes_no = asyncio.run(one_step_and_constrained(backend, image))
    check_one_step(one, OPTIONS)
    # Greedy constrained decoding takes the most likely allowed first token: the same answer
    # the distribution's argmax names.
    assert one.text == constrained.text, (one.distribution, constrained.text)
    assert constrained.distribution is None and constrained.generated_tokens >= 1
    if yes_no.distribution_fallback is None:
        check_one_step(yes_no, {"yes": 0, "no": 0})
    else:  # a vocabulary without single-token yes / no forms says so
        assert not single_token_yes_no and "single token" in yes_no.distribution_fallback


def test_on_the_toy_pair(engines, scene):
    _, small, large = engines
    for backend in (small, large):
        check_backend(backend, image_ref(str(scene)), single_token_yes_no=False)


@pytest.mark.parametrize("kind", ["qwen_engines", "qwen_transformers"])
def test_on_the_real_qwen_vocabulary(kind, request, scene):
    found = request.getfixturevalue(kind)
    for backend in found if isinstance(found, tuple | list) else (found,):
        check_backend(backend, image_ref(str(scene)))


async def test_a_run_on_engines_records_each_models_distribution(engines, scene):
    _, small, large = engines
    result = await arun(
        "Which colour is the square?", str(scene), options=list(OPTIONS.values()),
        small=small, large=large, context=MAIContext(cot_max_tokens=16),
    )  # fmt: skip
    for dist in (result.small_distribution, result.large_distribution):
        assert set(dist) == set(OPTIONS) and math.fsum(dist.values()) == pytest.approx(1.0)
    verify = [m for m in result.metrics if m["node"] == "verify"]
    assert len(verify) == 2 and all(m["generated_tokens"] == 1 for m in verify)
    assert {m["answer_prob"] for m in verify} == {
        result.small_distribution[result.small_answer],
        result.large_distribution[result.large_answer],
    }


def test_a_request_that_must_write_more_falls_back_and_says_why(engines, scene):
    _, small, _ = engines
    request = ask(image_ref(str(scene)), "Which?", min_tokens=2,
                  distribution=answer_forms("choice", OPTIONS))  # fmt: skip
    gen = asyncio.run(small.generate(request))
    assert gen.distribution is None and "min_tokens" in gen.distribution_fallback
    assert gen.generated_tokens >= 2
