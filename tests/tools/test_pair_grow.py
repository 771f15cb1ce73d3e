"""A trained model continued deeper computes what it computed before (mai_graph.pair.grow)."""

import dataclasses
import random

import pytest

from mai_graph.pair import PAIRS
from mai_graph.pair.grow import deepen_state, layer_count


@pytest.mark.slow
def test_a_deepened_model_gives_the_trained_models_logits():
    torch = pytest.importorskip("torch")
    from transformers import AutoTokenizer, Qwen3VLForConditionalGeneration

    from mai_graph.pair.task import make_example, train_item
    from mai_graph.pair.train import PAIR_SPECS_V4, Batcher, build_processor, new_model

    torch.set_num_threads(1)
    folder = PAIRS["v4"] / "large"
    tok = AutoTokenizer.from_pretrained(folder)
    trained = Qwen3VLForConditionalGeneration.from_pretrained(folder).float().eval()
    state = trained.state_dict()
    old = layer_count(state)
    spec = PAIR_SPECS_V4["large"]
    deep_spec = dataclasses.replace(spec, tiny=dataclasses.replace(spec.tiny, num_layers=3 * old))
    deep = new_model(deep_spec, tok, seed=1).eval()
    deep.load_state_dict(deepen_state(state, 3 * old))
    assert layer_count(deep.state_dict()) == 3 * old
    items = [train_item(7, 0, j, task="v4") for j in range(3)]
    rng = random.Random(0)
    out = []
    for model in (trained, deep):
        b = Batcher(model, build_processor(tok, spec.image_side), tok)
        examples = [make_example(it, "cot", tok, rng, eos_id=b.eos) for it in items]
        batch = b.batch(examples, [it.image for it in items], share_prefix=False)
        with torch.no_grad():
            out.append(model(**batch.inputs, use_cache=False).logits)
    assert torch.allclose(out[0], out[1], atol=1e-4)
    fresh = new_model(deep_spec, tok, seed=1).eval()
    with torch.no_grad():
        assert not torch.allclose(fresh(**batch.inputs, use_cache=False).logits, out[1], atol=1e-2)


def _state(torch, n):
    tails = ("self_attn.o_proj.weight", "mlp.up_proj.weight")
    return {
        f"model.language_model.layers.{i}.{t}": torch.full((2,), float(i + 1))
        for i in range(n)
        for t in tails
    }


@pytest.mark.parametrize("layers", [0, 5, 18, 20])
def test_a_depth_that_does_not_spread_the_layers_evenly_is_refused(layers):
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="multiple of the trained one"):
        deepen_state(_state(torch, 12), layers)


@pytest.mark.parametrize("layers", [24, 36])
def test_each_trained_layer_is_followed_by_no_op_copies(layers):
    torch = pytest.importorskip("torch")
    grown = deepen_state(_state(torch, 12), layers)
    k = layers // 12
    assert layer_count(grown) == layers and len(grown) == 2 * layers
    for i in range(layers):
        o = grown[f"model.language_model.layers.{i}.self_attn.o_proj.weight"]
        up = grown[f"model.language_model.layers.{i}.mlp.up_proj.weight"]
        assert up.tolist() == [i // k + 1] * 2  # a copy of the trained layer before it
        assert o.tolist() == ([i // k + 1] * 2 if i % k == 0 else [0.0, 0.0])


def test_the_same_depth_is_a_copy_and_an_empty_state_is_refused():
    torch = pytest.importorskip("torch")
    state = {"model.language_model.layers.0.self_attn.o_proj.weight": torch.ones(2)}
    assert deepen_state(state, 1).keys() == state.keys()
    with pytest.raises(ValueError):
        deepen_state({"lm_head.weight": torch.ones(1)}, 2)
