"""Sparsification on real models: attention scores, token-id transfer, strategies in the graph."""

import pytest

from mai_graph import GenerationRequest, MAIContext, arun
from mai_graph.backends.steered import SteeredBackend
from mai_graph.prompts import cot_messages, s2_messages
from mai_graph.scoring import AttentionScorer

pytestmark = pytest.mark.engine

QUESTION = "Which colour is the large square in the centre of the picture of shapes?"
OPTIONS = ["red", "blue", "green", "yellow"]
FORCE = ({"short": ["A"], "s2": ["C"]}, {"short": ["B"]})


@pytest.fixture(scope="module")
def tf_small(tiny_pair):
    import torch

    torch.set_num_threads(1)
    from mai_graph.backends.transformers import TransformersBackend

    return TransformersBackend(str(tiny_pair[0]), name="tiny-small")


async def s2_request(backend, scene, n=96):
    from mai_graph.inputs.sources import image_ref

    ctx = MAIContext()
    cot = cot_messages(ctx, image_ref(scene), QUESTION, OPTIONS)
    gen = await backend.generate(GenerationRequest(cot, max_tokens=n, min_tokens=n, purpose="cot"))
    messages = s2_messages(ctx, cot, gen.text, gen.token_ids, "choice")
    return GenerationRequest(messages, max_tokens=1, purpose="attention"), gen


async def test_cheap_attention_equals_a_full_eager_pass(tf_small, scene):
    request, gen = await s2_request(tf_small, scene)
    cheap = await tf_small.attention(request)
    full = await tf_small.attention(request, full=True)
    assert len(cheap) == len(full) == gen.generated_tokens
    # Same rows of the same softmax; kernels differ only in float32 rounding.
    scale = max(full)
    assert max(abs(a - b) for a, b in zip(cheap, full)) <= 1e-4 * scale
    assert sum(cheap) > 0
    every_layer = await tf_small.attention(request, layers=[0, 1])
    assert every_layer != cheap  # the layer choice matters


async def test_attention_layers_are_validated(tf_small, scene):
    from mai_graph import ConfigError

    request, _ = await s2_request(tf_small, scene, n=8)
    with pytest.raises(ConfigError, match="layers must be within"):
        await tf_small.attention(request, layers=[7])


@pytest.mark.parametrize("strategy", ["attention", "surprisal", "relevance", "none"])
async def test_strategies_in_the_graph_with_token_id_transfer(engines, tiny_pair, scene, strategy):
    kind, small, large = engines
    # On vLLM the scorer loads its own transformers copy of the small model; on transformers it
    # reuses the small backend (the steering wrapper hides it from the default scorers).
    scorers = {"attention": AttentionScorer(str(tiny_pair[0]) if kind == "vllm" else small)}
    from mai_graph import create_mai_graph

    graph = create_mai_graph(
        SteeredBackend(small, FORCE[0]), SteeredBackend(large, FORCE[1]), scorers=scorers
    ).compile()
    ctx = MAIContext(sparsify=strategy, cot_max_tokens=64, cot_min_tokens=64, keep_ratio=0.25)
    state = await graph.ainvoke(
        {"question": QUESTION, "options": OPTIONS, "image": str(scene)}, context=ctx
    )
    assert state["route"] == "transfer"
    sp = state["sparsification"]
    # Special tokens (end of turn, and the ones random weights emit) are never transferred.
    assert sp["strategy"] == strategy and 32 < sp["tokens_in"] <= 64
    if strategy == "none":
        assert sp["tokens_out"] == sp["tokens_in"]
    else:
        assert sp["tokens_out"] < sp["tokens_in"]


async def test_kept_token_ids_reach_the_large_model(engines, scene):
    kind, small, large = engines
    seen = []

    class Spy:
        name = large.name

        def __getattr__(self, name):
            return getattr(large, name)

        async def generate(self, request):
            seen.append(request)
            return await large.generate(request)

        async def generate_stream(self, request, on_text):
            seen.append(request)
            return await large.generate_stream(request, on_text)

    result = await arun(
        QUESTION, str(scene), options=OPTIONS,
        small=SteeredBackend(small, FORCE[0]), large=SteeredBackend(Spy(), FORCE[1]),
        context=MAIContext(cot_max_tokens=64, cot_min_tokens=64),
    )  # fmt: skip
    assert result.route == "transfer"
    answer = next(r for r in seen if r.purpose == "answer")
    part = next(p for p in answer.messages[1]["content"] if p.get("token_ids"))
    assert 0 < len(part["token_ids"]) < 64
