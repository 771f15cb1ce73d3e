"""The engine paths on the real Qwen vocabulary (tiny random weights, Qwen3-VL's own tokenizer,
chat template and processor settings): vLLM CPU engines and transformers.

What the toy pair makes trivial is asserted here: constrained choices over options several
tokens long that share a prefix, answer probabilities that are products over several tokens,
S2 served from the prefix cache with the real template, image token counts at real processor
settings (checked against what the engine itself counted), stop ids.
"""

import asyncio
import math
from pathlib import Path

import pytest
from PIL import Image

from mai_graph.backends.base import GenerationRequest
from mai_graph.inputs.sources import image_ref
from mai_graph.inputs.video import resolve_video
from mai_graph.loop import run_sync

pytestmark = pytest.mark.engine

# Images as a deployment meets them: square, 16:9, a tall receipt (at the real processor's
# settings). The engines skip vLLM's multimodal memory profiling, which would run the vision
# tower on a 16.7 Mpx dummy image (minutes on a CPU); the KV cache is sized explicitly on CPU.
SIZES = [(448, 448), (1280, 720), (600, 2000)]
ENGINE = {"skip_mm_profiling": True}


@pytest.fixture(scope="module")
def qwen_engines(qwen_pair):
    pytest.importorskip("vllm")
    from mai_graph.backends.lifecycle import shutdown_backends, start_backends
    from mai_graph.backends.vllm import VLLMBackend

    small_dir, large_dir = qwen_pair
    small = VLLMBackend(str(small_dir), name="qwen-small", **ENGINE)
    large = VLLMBackend(str(large_dir), name="qwen-large", **ENGINE)
    run_sync(start_backends(small, large))
    yield small, large
    shutdown_backends(small, large)


@pytest.fixture(scope="module")
def qwen_transformers(qwen_pair):
    import torch

    from mai_graph.backends.transformers import TransformersBackend

    torch.set_num_threads(1)
    return TransformersBackend(str(qwen_pair[0]), name="qwen-small-hf")


def picture(tmp_path: Path, size, name="p.png"):
    img = Image.new("RGB", size, (120, 120, 120))
    img.paste((200, 30, 30), (size[0] // 4, size[1] // 4, size[0] // 2, size[1] // 2))
    img.save(tmp_path / name)
    return image_ref(str(tmp_path / name))


def ask(parts, **options):
    messages = ({"role": "user", "content": parts},)
    return GenerationRequest(messages, **{"max_tokens": 8, **options})


def text(value):
    return {"type": "text", "text": value}


@pytest.mark.parametrize("backend_kind", ["vllm", "transformers"])
def test_choices_over_multi_token_options_that_share_a_prefix(backend_kind, request, tmp_path):
    from nodes._common import answer_probability

    backend = (request.getfixturevalue("qwen_engines")[0] if backend_kind == "vllm"
               else request.getfixturevalue("qwen_transformers"))  # fmt: skip
    tok = backend.tokenizer
    assert len(tok.encode("dark red", add_special_tokens=False)) == 2
    image = picture(tmp_path, (448, 448))
    req = ask([{"type": "image", "image": image}, text("Which colour? dark red or dark blue")],
              choices=("dark red", "dark blue"), logprobs=0)  # fmt: skip
    gen = asyncio.run(backend.generate(req))
    assert gen.text in ("dark red", "dark blue")
    ids = [t for t in gen.token_ids if t not in (151645, 151643)]
    assert tok.decode(ids) == gen.text
    # The answer is several tokens (under a grammar not always the canonical split: vLLM's
    # constrained decoding may spell "dark blue" as "dar" + "k" + " blue"), and its
    # probability is the product over the tokens as drawn.
    assert len(ids) >= 2
    product = math.prod(math.exp(lp) for lp in gen.logprobs)
    assert answer_probability(gen) == pytest.approx(product, rel=1e-6)
    assert 0 < answer_probability(gen) <= 1
    letters_req = ask([text("A, B, C or D?")], choices=("A", "B", "C", "D"), logprobs=0)
    letters = asyncio.run(backend.generate(letters_req))
    assert letters.text in "ABCD" and len(letters.text) == 1


def test_image_token_counts_match_the_engine(qwen_engines, tmp_path):
    """What mai-graph counts before submitting equals what the engine expanded."""
    from mai_graph.backends.render import render

    small, _ = qwen_engines
    refs = [picture(tmp_path, size, f"{size[0]}x{size[1]}.png") for size in SIZES]
    cases = [[r] for r in refs] + [refs[:2]]
    for images in cases:
        parts = [{"type": "image", "image": r} for r in images] + [text("Describe.")]
        req = ask(parts, max_tokens=1)
        rendered = render(small.tokenizer, req.messages, set(), template=small.translator.template)
        counted = len(rendered.token_ids) + sum(
            small.translator.image_tokens(r) - 1 for r in images
        )
        gen = run_sync(small.generate(req))
        assert gen.prompt_tokens == counted, [r["width"] for r in images]
    # Real processor arithmetic: 448 x 448 -> 14 x 14 tokens of 32 x 32 pixels.
    assert small.translator.image_tokens(refs[0]) == 196
    assert small.translator.image_tokens(refs[2]) > small.translator.image_tokens(refs[1]) > 196


def test_video_token_counts_match_the_engine(qwen_engines, tmp_path):
    from mai_graph.backends.render import render

    small, _ = qwen_engines
    frames = []
    for i in range(8):
        frame = tmp_path / f"f{i}.png"
        Image.new("RGB", (320, 240), (30 * i, 100, 100)).save(frame)
        frames.append(str(frame))
    video = resolve_video({"frames": frames, "fps": 2.0}, video_fps=2.0, max_frames=8)
    req = ask([{"type": "video", "video": video}, text("What changes?")], max_tokens=1)
    rendered = render(small.tokenizer, req.messages, set(), template=small.translator.template)
    counted = len(rendered.token_ids) + small.translator.video_tokens(video) - 1
    gen = run_sync(small.generate(req))
    assert small.translator.video_tokens(video) > 0
    assert gen.prompt_tokens == counted


def test_s2_and_the_transfer_are_served_from_the_prefix_cache(qwen_engines, tmp_path):
    """A forced transfer run on the real template: S2 re-reads its cached conversation."""
    from mai_graph.latency.bench import measure
    from mai_graph.tiny.demo import demo_image

    small, large = qwen_engines
    image = demo_image(tmp_path / "demo.png")
    result = run_sync(measure(small, large, image, repeats=1, concurrency=0, short=4, cot=96))
    assert result.routes_ok, result.routes
    assert result.s2_cached_share >= 0.95
    assert result.transfer_cached_share >= 0.5


def test_stop_ids_are_qwen3_vls(qwen_engines):
    small, _ = qwen_engines
    assert small.translator.eos == {151645, 151643}
    gen = run_sync(small.generate(ask([text("Say something.")], max_tokens=12)))
    assert "<|im_end|>" not in gen.text and "<|endoftext|>" not in gen.text
    assert gen.finish_reason in ("stop", "length")


def test_videos_with_processor_kwargs_are_refused_before_the_engine(qwen_engines, tmp_path,
                                                                     monkeypatch):  # fmt: skip
    """vLLM 0.32 hands every mm_processor_kwargs to Qwen3-VL's video processor, which refuses
    them: such a video request is refused here, naming the cause, before the engine."""
    from mai_graph import ConfigError

    small, _ = qwen_engines
    monkeypatch.setattr(small.translator, "mm_kwargs", {"max_pixels": 1_310_720})
    frames = []
    for i in range(4):
        frame = tmp_path / f"g{i}.png"
        Image.new("RGB", (64, 64), (40 * i, 0, 0)).save(frame)
        frames.append(str(frame))
    video = resolve_video({"frames": frames, "fps": 2.0}, video_fps=2.0, max_frames=4)
    with pytest.raises(ConfigError, match="mm_processor_kwargs") as err:
        run_sync(small.generate(ask([{"type": "video", "video": video}, text("?")])))
    assert "video" in str(err.value)
    assert run_sync(small.engine_idle())


@pytest.fixture(scope="module")
def qwen_transformers_pair(qwen_pair, qwen_transformers):
    from mai_graph.backends.transformers import TransformersBackend

    return qwen_transformers, TransformersBackend(str(qwen_pair[1]), name="qwen-large-hf")


def test_transformers_s2_reuses_its_cache_and_counts_images(qwen_transformers_pair, tmp_path):
    """The transformers backend on the real vocabulary: forced routes, S2 over its own KV cache,
    and the image token count of its processor at the real settings."""
    from mai_graph.latency.bench import measure
    from mai_graph.tiny.demo import demo_image

    small, large = qwen_transformers_pair
    image = demo_image(tmp_path / "demo.png")
    result = asyncio.run(measure(small, large, image, repeats=1, concurrency=0, short=4, cot=48))
    assert result.routes_ok, result.routes
    assert result.s2_cached_share >= 0.95
    from mai_graph.backends.render import render

    ref = picture(tmp_path, (448, 448))
    req = ask([{"type": "image", "image": ref}, text("?")], max_tokens=1)
    gen = asyncio.run(small.generate(req))
    rendered = render(small.tokenizer, req.messages, set(), template=small.processor)
    assert gen.prompt_tokens == len(rendered.token_ids) + 196 - 1  # 448 / 32 squared tokens


def test_a_thinking_template_on_transformers(tmp_path_factory, tmp_path):
    """Thinking template: the CoT call opens <think>, short answers are asked with thinking off,
    and S2 over the reasoning is served from the cache (its prompt extends the CoT's exactly)."""
    import os

    from mai_graph.backends.render import render, thinking_for
    from mai_graph.backends.transformers import TransformersBackend
    from mai_graph.latency.bench import route_once
    from mai_graph.tiny.build import build_tiny_pair
    from mai_graph.tiny.demo import demo_image

    base = os.environ.get("MAI_GRAPH_TINY_DIR")
    root = Path(base) / "qwen-thinking" if base else tmp_path_factory.mktemp("thinking")
    small_dir, large_dir = build_tiny_pair(root, vocab="qwen", template="thinking")
    small = TransformersBackend(str(small_dir), name="think-small")
    large = TransformersBackend(str(large_dir), name="think-large")
    image = demo_image(tmp_path / "demo.png")
    result, fs, _ = asyncio.run(route_once(small, large, image, "transfer", short=4, cot=48))
    assert result.route == "transfer"
    tok = small.tokenizer
    endings = {}
    for req, _ in fs.calls:
        ids = render(tok, req.messages, set(), template=small.processor,
                     thinking=thinking_for(req.purpose)).token_ids  # fmt: skip
        endings[req.purpose] = tok.decode(ids[-8:])
    assert endings["cot"].endswith("<|im_start|>assistant\n<think>\n")
    assert endings["short"].endswith("<think>\n\n</think>\n\n")
    assert endings["s2"].endswith("<think>\n\n</think>\n\n")
    (cot_req, cot_gen), (s2_req, s2_gen) = [c for c in fs.calls if c[0].purpose in ("cot", "s2")]
    shared = cot_gen.prompt_tokens + len(cot_gen.token_ids) - 1
    assert s2_gen.cached_tokens >= 0.95 * shared


@pytest.mark.parametrize("strategy", ["attention", "surprisal"])
def test_sparsification_keeps_whole_words_of_real_subword_reasoning(
    qwen_transformers_pair, tmp_path, strategy
):
    """The small model's reasoning in real sub-word tokens, scored by attention (transformers)
    or surprisal: what the large model reads is whole words, its ids spliced as generated."""
    from mai_graph import MAIContext, arun
    from mai_graph.backends.recording import ForcedBackend
    from mai_graph.scoring.base import word_groups
    from mai_graph.tiny.demo import DEMO_OPTIONS, DEMO_QUESTION, demo_image

    small, large = qwen_transformers_pair
    lengths = {"short": 4, "cot": 64, "s2": 4, "answer": 4}
    fs = ForcedBackend(small, {"short": "A", "s2": "C"}, lengths)
    fl = ForcedBackend(large, {"short": "B", "answer": "D"}, lengths)
    image = demo_image(tmp_path / "demo.png")
    ctx = MAIContext(cot_max_tokens=64, short_max_tokens=4, s2_max_tokens=4, sparsify=strategy,
                     keep_ratio=0.3, whole_words=True)  # fmt: skip
    result = asyncio.run(arun(f"{DEMO_QUESTION} ({strategy})", str(image), options=DEMO_OPTIONS,
                              small=fs, large=fl, context=ctx))  # fmt: skip
    assert result.route == "transfer" and result.transfer is not None
    ((_, cot),) = fs.calls_for("cot")
    kept = result.sparsification["tokens_out"]
    assert 0 < kept < len(cot.tokens)
    ((answer_req, _),) = fl.calls_for("answer")
    spliced = [p for m in answer_req.messages for p in m["content"] if p.get("token_ids")]
    assert spliced, "the kept reasoning goes to the large model as token ids"
    # Whole words only: the words read are a subsequence of the reasoning's whole words
    # (a word cut in half would not be one of them).
    words = [w for g in word_groups(cot.tokens) for w in "".join(cot.tokens[i] for i in g).split()]
    rest = iter(words)
    assert all(any(w == x for x in rest) for w in result.transfer.split()), result.transfer
