"""The transformers backend: capabilities, lifecycle, decode loop, KV-cache store, attention.

Fast tests use fakes (a character tokenizer, fixed logits, fake caches and loaders); the ones
marked ``engine`` load the tiny random-weight Qwen3-VL pair.
"""

import asyncio
import importlib
import importlib.util
import inspect
import math
import subprocess
import sys
import threading

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mai_graph.backends.base import (  # noqa: E402
    GenerationRequest,
    VLMBackend,
    capabilities_of,
    provider_of,
)
from mai_graph.backends.transformers import TransformersBackend  # noqa: E402
from mai_graph.backends.transformers import backend as backend_module  # noqa: E402
from mai_graph.backends.transformers.attention import (  # noqa: E402
    attention_implementations,
    eager_attention,
)
from mai_graph.backends.transformers.decode import ChoiceTrie, decode, make_generator  # noqa: E402
from mai_graph.backends.transformers.kv_cache import KVCacheStore  # noqa: E402
from mai_graph.errors import ConfigError  # noqa: E402

PACKAGE = "mai_graph.backends.transformers"


def ask(text="Which colour is the square?", image=None, **kwargs):
    content = ([{"type": "image", "image": image}] if image is not None else []) + [
        {"type": "text", "text": text}
    ]
    return GenerationRequest(({"role": "user", "content": content},), **kwargs)


# -- import and capabilities ------------------------------------------------------------------


@pytest.mark.parametrize("missing", ["torch", "transformers"])
def test_a_missing_extra_is_named_at_import(monkeypatch, missing):
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name == missing else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    monkeypatch.delitem(sys.modules, PACKAGE)
    with pytest.raises(ImportError, match=r'pip install "mai-graph\[transformers\]"') as err:
        importlib.import_module(PACKAGE)
    assert missing in str(err.value)


def test_import_loads_neither_torch_nor_transformers():
    code = (
        f"import sys, {PACKAGE}; "
        "heavy = [m for m in ('torch', 'transformers') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_declares_every_capability():
    backend = TransformersBackend("/no/such/checkpoint")  # nothing loads until it must
    assert isinstance(backend, VLMBackend)
    caps = capabilities_of(backend)
    assert caps.stream and caps.logprobs and caps.distribution
    assert caps.vocabulary and caps.attention and caps.managed
    assert provider_of(backend) == "transformers"
    assert inspect.iscoroutinefunction(TransformersBackend.vocab_fingerprint)


def test_cache_entries_is_validated():
    with pytest.raises(ConfigError, match="cache_entries must be an integer >= 0, got -1"):
        TransformersBackend("/x", cache_entries=-1)


# -- lifecycle (fake loaders) -----------------------------------------------------------------


class FakeTokenizer:
    """Characters a..i are ids 1..9; id 0 is end of turn."""

    eos_token_id = 0

    def encode(self, text, add_special_tokens=False):
        return [ord(c) - ord("a") + 1 for c in text]

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(ord("a") + i - 1) for i in ids if i)

    def get_vocab(self):
        return {chr(ord("a") + i - 1) if i else "<eos>": i for i in range(10)}


class FakeProcessor:
    tokenizer = FakeTokenizer()
    image_processor = object()


@pytest.fixture
def fake_loaders(monkeypatch):
    calls = []

    def load_model(source, dtype, **kwargs):
        calls.append(("model", threading.get_ident()))
        return object()

    def load_processor(source, name):
        calls.append(("processor", threading.get_ident()))
        return FakeProcessor()

    monkeypatch.setattr(backend_module, "load_model", load_model)
    monkeypatch.setattr(backend_module, "load_processor", load_processor)
    return calls


async def test_start_loads_in_a_worker_thread_once(fake_loaders):
    backend = TransformersBackend("ckpt")
    loop_thread = threading.get_ident()
    await backend.start()
    await backend.start()
    assert [kind for kind, _ in fake_loaders] == ["model", "processor"]
    assert all(thread != loop_thread for _, thread in fake_loaders)


async def test_vocab_fingerprint_loads_only_the_processor_off_the_loop(fake_loaders):
    backend = TransformersBackend("ckpt")
    loop_thread = threading.get_ident()
    fingerprint = await backend.vocab_fingerprint()
    assert fingerprint == await TransformersBackend("other").vocab_fingerprint()
    assert len(fingerprint) == 16
    assert [kind for kind, _ in fake_loaders] == ["processor", "processor"]
    assert all(thread != loop_thread for _, thread in fake_loaders)


async def test_shutdown_releases_what_it_loaded_and_is_idempotent(fake_loaders):
    backend = TransformersBackend("ckpt")
    await backend.start()
    backend._caches.store([1, 2, 3], FakeCache(3))
    backend.shutdown()
    backend.shutdown()
    assert backend._model is None and backend._processor is None and len(backend._caches) == 0
    await backend.start()  # loads again
    assert [kind for kind, _ in fake_loaders] == ["model", "processor"] * 2


def test_shutdown_keeps_a_model_the_caller_passed_in():
    model, processor = object(), FakeProcessor()
    backend = TransformersBackend(model, processor)
    backend.shutdown()
    assert backend._model is model and backend._processor is processor


# -- decode loop (fixed logits, no model) -----------------------------------------------------


def fixed_logits(vocab=10, seed=0):
    return torch.randn(vocab, generator=torch.Generator().manual_seed(seed))


def run_decode(logits, **request):
    request.setdefault("max_tokens", 4)
    return decode(logits, lambda token: logits, ask(**request), FakeTokenizer(), {0})


def test_constrained_logprobs_are_renormalized_over_the_allowed_answers():
    """As vLLM reports them: the choice constraint is part of the distribution sampled from."""
    logits = fixed_logits()
    out = run_decode(logits, choices=("ab", "c", "hg"), logprobs=0)
    assert FakeTokenizer().decode(out.token_ids) in ("ab", "c", "hg")
    first = [1, 3, 8]  # the first tokens of the three choices
    renormalized = float(torch.log_softmax(logits[first], dim=-1)[first.index(out.token_ids[0])])
    assert out.logprobs[0] == pytest.approx(renormalized)
    assert out.logprobs[0] > float(torch.log_softmax(logits, dim=-1)[out.token_ids[0]])
    assert 0 < math.exp(sum(out.logprobs)) <= 1


def test_logprobs_ignore_the_min_tokens_ban_on_end_of_turn():
    logits = torch.zeros(10)
    logits[0] = 5.0  # end of turn is the model's favourite
    out = run_decode(logits, min_tokens=2, max_tokens=3, logprobs=0)
    assert out.token_ids[:2] != [0, 0] and out.token_ids[-1] == 0
    assert out.logprobs == pytest.approx(
        [float(torch.log_softmax(logits, -1)[t]) for t in out.token_ids]
    )


def test_no_logprobs_unless_asked():
    assert run_decode(fixed_logits()).logprobs is None


def test_unseeded_sampling_draws_fresh_randomness():
    logits = torch.zeros(1000)
    runs = [run_decode(logits, temperature=1.0, max_tokens=8).token_ids for _ in range(3)]
    assert len({tuple(r) for r in runs}) == 3


def test_seeded_sampling_is_reproducible():
    logits = torch.zeros(1000)
    a, b, c = (
        run_decode(logits, temperature=1.0, max_tokens=8, seed=s).token_ids for s in (3, 3, 4)
    )
    assert a == b != c
    zero = [run_decode(logits, temperature=1.0, max_tokens=8, seed=0).token_ids for _ in (1, 2)]
    assert zero[0] == zero[1]
    assert make_generator(0).initial_seed() == 0


def test_greedy_ignores_the_seed():
    logits = fixed_logits(seed=5)
    assert run_decode(logits, seed=1).token_ids == run_decode(logits, seed=2).token_ids


def test_cancel_aborts_before_the_next_token():
    cancel = threading.Event()
    logits = torch.zeros(10)
    logits[1] = 1.0

    def step(token):
        cancel.set()
        return logits

    out = decode(logits, step, ask(max_tokens=5), FakeTokenizer(), {0}, cancel=cancel)
    assert out.finish_reason == "abort" and out.token_ids == [1]


def test_choice_trie_waits_for_the_longest_choice():
    trie = ChoiceTrie(FakeTokenizer(), ("a", "ab"), {0})
    assert trie.next_tokens([]) == [1]
    assert trie.next_tokens([1]) == [2]
    assert not trie.complete([1]) and trie.complete([1, 2])
    assert trie.next_tokens([1, 2]) == [0]


# -- KV-cache store (fake caches) -------------------------------------------------------------


class FakeCache:
    def __init__(self, n):
        self.n = n

    def get_seq_length(self):
        return self.n

    def crop(self, k):
        self.n += k  # k is negative: drop from the end


def test_lookup_finds_the_longest_prefix_and_crops_a_copy():
    store = KVCacheStore(4)
    store.store([1, 2, 3], FakeCache(3))
    store.store([1, 2, 3, 4, 5, 6], FakeCache(6))
    reused, cache = store.lookup([1, 2, 3, 4, 9])
    assert reused == 4 and cache.get_seq_length() == 4
    assert store.lookup([1, 2, 3, 4, 5, 6, 7])[1].get_seq_length() == 6  # stored copy intact
    assert store.lookup([1, 2, 3])[0] == 2  # the last id is always left to prefill
    assert store.lookup([1, 2, 3, 4, 9], min_prefix=5) == (0, None)  # e.g. inside the image
    assert store.lookup([7, 8]) == (0, None)


def test_store_keeps_the_most_recently_used():
    store = KVCacheStore(2)
    for ids in ([1, 1], [2, 2], [3, 3]):
        store.store(ids, FakeCache(2))
    assert len(store) == 2 and store.lookup([1, 1, 0]) == (0, None)
    off = KVCacheStore(0)
    off.store([1, 2], FakeCache(2))
    assert len(off) == 0


# -- attention implementation (fake model) ----------------------------------------------------


class FakeConfig:
    def __init__(self, impl):
        self._attn_implementation = impl


class FakeModel:
    def __init__(self, top, text, vision):
        self.config = FakeConfig(top)
        self.config.sub_configs = {"text_config": None, "vision_config": None}
        self.config.text_config = FakeConfig(text)
        self.config.vision_config = FakeConfig(vision)

    def set_attn_implementation(self, impl):
        impl = (
            impl
            if isinstance(impl, dict)
            else dict.fromkeys(["", "text_config", "vision_config"], impl)
        )
        self.config._attn_implementation = impl.get("", self.config._attn_implementation)
        for key in ("text_config", "vision_config"):
            sub = getattr(self.config, key)
            sub._attn_implementation = impl.get(key, sub._attn_implementation)


@pytest.mark.parametrize(
    "impl", [("sdpa", "sdpa", "sdpa"), ("flash_attention_2", "flash_attention_2", "sdpa")]
)
def test_eager_attention_restores_what_the_model_had(impl):
    model = FakeModel(*impl)
    before = attention_implementations(model.config)
    with eager_attention(model):
        assert set(attention_implementations(model.config).values()) == {"eager"}
    assert attention_implementations(model.config) == before


def test_eager_attention_restores_after_an_error():
    model = FakeModel("sdpa", "sdpa", "sdpa")
    with pytest.raises(RuntimeError), eager_attention(model):
        raise RuntimeError("boom")
    assert set(attention_implementations(model.config).values()) == {"sdpa"}


# -- the tiny Qwen3-VL model ------------------------------------------------------------------


@pytest.fixture(scope="module")
def picture(tmp_path_factory):
    from PIL import Image, ImageDraw

    from mai_graph.inputs.sources import image_ref

    path = tmp_path_factory.mktemp("tf-backend") / "scene.png"
    img = Image.new("RGB", (160, 128), (128, 128, 128))
    ImageDraw.Draw(img).rectangle((50, 30, 110, 90), fill=(220, 30, 30))
    img.save(path)
    return image_ref(path)


@pytest.fixture(scope="module")
def small(tiny_pair):
    backend = TransformersBackend(str(tiny_pair[0]), name="tiny-small")
    yield backend
    backend.shutdown()


def implementations(backend):
    return attention_implementations(backend.model.config)


async def s2_request(backend, picture, n=24):
    """A CoT turn, then an extraction turn over its exact ids (the attention prompt)."""
    cot = ask("Think about the colour of the square.", picture, max_tokens=n, min_tokens=n)
    gen = await backend.generate(cot)
    messages = (
        *cot.messages,
        {"role": "assistant", "content": [{"type": "text", "text": gen.text}],
         "token_ids": list(gen.token_ids)},
        {"role": "user", "content": [{"type": "text", "text": "So the answer is?"}]},
    )  # fmt: skip
    return GenerationRequest(messages, max_tokens=1, purpose="attention"), gen


@pytest.mark.engine
async def test_constrained_answer_logprobs_match_the_model_renormalized_over_choices(
    small, picture
):
    from mai_graph.backends.transformers.decode import ChoiceTrie

    choices = ("red", "blue", "green", "yellow")
    gen = await small.generate(ask(image=picture, max_tokens=4, choices=choices, logprobs=0))
    assert gen.text in choices and len(gen.logprobs) == len(gen.token_ids)
    # Teacher-force the answer through the model without any constraint.
    model = small.model
    inputs = small.prepare(ask(image=picture, max_tokens=4))
    inputs.pop("spans")
    answer = torch.tensor([list(gen.token_ids)])
    ids = torch.cat([inputs["input_ids"], answer], dim=1)
    start = int(inputs["position_ids"].max()) + 1
    tail = torch.arange(start, start + answer.shape[1]).view(1, 1, -1).expand(3, 1, -1)
    positions = torch.cat([inputs["position_ids"], tail], dim=2)
    with torch.inference_mode():
        logits = (
            model(
                input_ids=ids,
                position_ids=positions,
                pixel_values=inputs["pixel_values"],
                image_grid_thw=inputs["image_grid_thw"],
            )
            .logits[0]
            .float()
        )
    n = inputs["input_ids"].shape[1]
    trie = ChoiceTrie(small.tokenizer, choices, [])
    expected = []
    for i, t in enumerate(gen.token_ids):
        allowed = trie.next_tokens(list(gen.token_ids[:i]))
        row = torch.full_like(logits[n - 1 + i], float("-inf"))
        row[allowed] = logits[n - 1 + i][allowed]
        expected.append(float(torch.log_softmax(row, dim=-1)[t]))
    assert gen.logprobs == pytest.approx(expected, abs=1e-4)
    assert 0 < math.exp(sum(gen.logprobs)) <= 1


@pytest.mark.engine
async def test_sampling_is_fresh_unless_seeded(small, picture):
    def sampled(seed):
        return ask(image=picture, max_tokens=12, min_tokens=12, temperature=1.0, seed=seed)

    seeded = [(await small.generate(sampled(11))).token_ids for _ in range(2)]
    fresh = [(await small.generate(sampled(None))).token_ids for _ in range(2)]
    assert seeded[0] == seeded[1]
    assert fresh[0] != fresh[1]


@pytest.mark.engine
async def test_attention_keeps_the_default_implementation(small, picture):
    request, gen = await s2_request(small, picture)
    before = implementations(small)
    assert before[""] == "sdpa"
    cheap = await small.attention(request)
    full = await small.attention(request, full=True)
    assert implementations(small) == before
    assert len(cheap) == len(full) == gen.generated_tokens


@pytest.mark.engine
@pytest.mark.parametrize(
    "impl", ["eager", {"": "sdpa", "text_config": "sdpa", "vision_config": "eager"}]
)
async def test_attention_keeps_a_chosen_implementation(tiny_pair, small, picture, impl):
    backend = TransformersBackend(str(tiny_pair[0]), attn_implementation=impl)
    await backend.start()
    try:
        before = implementations(backend)
        request, _ = await s2_request(backend, picture)
        scores = await backend.attention(request)
        await backend.attention(request, full=True)
        assert implementations(backend) == before
        reference = await small.attention(request)
        assert max(abs(a - b) for a, b in zip(scores, reference)) <= 1e-4 * max(reference)
    finally:
        backend.shutdown()


@pytest.mark.engine
async def test_shutdown_aborts_the_running_request(tiny_pair, picture):
    backend = TransformersBackend(str(tiny_pair[0]))
    await backend.start()
    task = asyncio.create_task(
        backend.generate(ask(image=picture, max_tokens=2000, min_tokens=2000))
    )

    async def until_busy():
        while not backend.busy:
            await asyncio.sleep(0.01)

    await asyncio.wait_for(until_busy(), timeout=60)
    await asyncio.to_thread(backend.shutdown)
    gen = await task
    assert gen.finish_reason == "abort" and gen.generated_tokens < 2000
    assert backend._model is None
    backend.shutdown()


def test_max_model_len_is_validated():
    for bad in (0, 1, "4096", True, 2.5):
        with pytest.raises(ConfigError, match="max_model_len must be an integer"):
            TransformersBackend("unused", max_model_len=bad)


@pytest.mark.engine
async def test_a_prompt_longer_than_the_context_is_refused_before_its_prefill(tiny_pair, picture):
    """A long question under the question cap meets the context check, not the machine's
    memory: refused with the prompt's size and the fix before any forward pass, through
    ``arun``, and the backend answers the next question."""
    from mai_graph import arun

    backend = TransformersBackend(str(tiny_pair[0]), name="tiny-small", max_model_len=512)
    calls = []
    real = backend._load_model

    def counting():
        model = real()
        if not getattr(model, "_counted", False):
            forward = model.forward

            def counted(*args, **kwargs):
                calls.append(1)
                return forward(*args, **kwargs)

            model.forward, model._counted = counted, True
        return model

    backend._load_model = counting
    try:
        assert backend.max_model_len == 512  # given: known before the model loads
        with pytest.raises(ConfigError) as err:
            await arun("apples " * 2000, picture, small=backend, large=backend,
                       context={"cot_max_tokens": 64})  # fmt: skip
        message = str(err.value)
        assert "does not fit the model's context of max_model_len=512" in message
        assert "tiny-small" in message and "Fix: " in message and calls == []
        gen = await backend.generate(ask(image=picture, max_tokens=2000, min_tokens=2000))
        assert gen.finish_reason == "length"
        assert gen.prompt_tokens + gen.generated_tokens == 512  # stopped at the context's end
        default = TransformersBackend(str(tiny_pair[0]))
        assert default.max_model_len is None  # not known before loading; reading never loads
        default.load()
        assert default.max_model_len == 8192  # the tiny model's max_position_embeddings
        default.shutdown()
    finally:
        backend.shutdown()
