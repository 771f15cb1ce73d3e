"""The trained pair on real engines: it answers held-out synthetic questions for real.

The items are the first of the manifest's held-out set (the evaluation's generator, seed 1000),
answered through the graph's own baselines and MAI; the bounds are far above chance (32%) and
below the held-out accuracies, so they catch a broken pair, not noise.
"""

import pytest

from mai_graph.pair import PAIR_DIR
from tests.pair_items import ask, held_out, right

pytestmark = pytest.mark.engine

N = 20


@pytest.fixture(scope="module", params=["vllm", "transformers"])
def trained(request):
    from mai_graph.backends.lifecycle import shutdown_backends, start_backends
    from mai_graph.loop import run_sync
    from mai_graph.pair import trained_backends

    if request.param == "vllm":
        pytest.importorskip("vllm", reason="vLLM is installed by scripts/install-cpu.sh")
    else:
        import torch

        torch.set_num_threads(1)
    small, large = trained_backends(request.param, PAIR_DIR)
    run_sync(start_backends(small, large))
    yield request.param, small, large
    shutdown_backends(small, large)


@pytest.fixture(scope="module")
def items(tmp_path_factory):
    return held_out(tmp_path_factory.mktemp("pair-items"), PAIR_DIR, N)


async def test_short_answers_beat_chance_and_the_large_beats_the_small(trained, items):
    _, small, large = trained
    hits = {"small": 0, "large": 0}
    for item, path in items:
        for policy in hits:
            result = await ask(item, path, small, large, policy=policy)
            hits[policy] += right(result.answer, item)
    assert hits["large"] >= 0.8 * N, hits
    assert hits["small"] >= 0.5 * N, hits
    assert hits["large"] > hits["small"], hits


async def test_mai_answers_for_real_and_its_reasoning_reads(trained, items):
    _, small, large = trained
    routes, correct = {}, 0
    for item, path in items:
        result = await ask(item, path, small, large)
        routes[result.route] = routes.get(result.route, 0) + 1
        correct += right(result.answer, item)
        if result.route in ("extract_agree", "transfer"):
            reasoning = next(m for m in result.metrics if m["node"] == "reason")
            assert 4 <= reasoning["generated_tokens"] <= 40  # a short reasoning, then the end
            assert result.s2_answer  # the S2 turn answered
    assert routes.get("agree", 0) >= N // 2, routes
    assert correct >= 0.8 * N, (correct, routes)


async def test_large_cot_reasons_and_answers(trained, items):
    _, small, large = trained
    correct = 0
    for item, path in items[:10]:
        result = await ask(item, path, small, large, policy="large_cot")
        assert result.route == "large_cot"
        correct += right(result.answer, item)
    assert correct >= 7
