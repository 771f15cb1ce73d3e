"""The v2 pair on vLLM: compositional questions, reasoning that counts, the masked transfer.

Ten held-out items of task v2 (the manifest's seed): the pair answers well above chance (26%),
the small model's reasoning counts every colour before concluding, and a transfer forced on
every item reads the reasoning with and without its stated answer on the real engines (the
masked one never carries ``Answer:``). The bounds catch a broken pair, not noise; the measured
accuracies are in the manifest and docs/tiny-pair.md.
"""

import pytest

from mai_graph.pair import PAIRS
from tests.pair_items import ask, held_out, right

pytestmark = pytest.mark.engine

N = 10


@pytest.fixture(scope="module")
def pair():
    pytest.importorskip("vllm", reason="vLLM is installed by scripts/install-cpu.sh")
    from mai_graph.backends.lifecycle import shutdown_backends, start_backends
    from mai_graph.loop import run_sync
    from mai_graph.pair import trained_backends

    small, large = trained_backends("vllm", PAIRS["v2"])
    run_sync(start_backends(small, large))
    yield small, large
    shutdown_backends(small, large)


@pytest.fixture(scope="module")
def items(tmp_path_factory):
    return held_out(tmp_path_factory.mktemp("v2-items"), PAIRS["v2"], N, task="v2")


async def test_the_v2_pair_answers_and_its_reasoning_counts(pair, items):
    small, large = pair
    correct = 0
    for item, path in items:
        result = await ask(item, path, small, large, gate="never", s2_exit=False)
        assert result.route == "transfer"
        correct += right(result.answer, item)
        reasoning = next(m for m in result.metrics if m["node"] == "reason")
        assert 15 <= reasoning["generated_tokens"] <= 60
    assert correct >= 0.5 * N


async def test_the_masked_transfer_on_real_engines(pair, items):
    small, large = pair
    for item, path in items[:5]:
        result = await ask(item, path, small, large, gate="never", s2_exit=False,
                           transfer_mask_answer=True, sparsify="none")  # fmt: skip
        assert result.route == "transfer"
        assert "Answer" not in (result.transfer or "")
        assert result.sparsification["masked_tokens"] >= 2
        assert result.answer
