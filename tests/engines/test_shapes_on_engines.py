"""Several images, a video, k drafts and a three-model chain on real engines (vLLM CPU and
transformers, the tiny Qwen3-VL pair).

Random weights: the tests check that every image and frame reaches the engine (prompt token
counts), prefix caching across a run's calls, routes, stages and draft records, never text.
Routes are forced by narrowing what an engine may output for one step.
"""

import pytest
from PIL import Image, ImageDraw

from mai_graph import MAIContext, arun
from mai_graph.backends.recording import RecordingBackend
from mai_graph.backends.render import common_prefix, render
from mai_graph.backends.steered import SteeredBackend

pytestmark = pytest.mark.engine

QUESTION = (
    "Look at the pictures of coloured shapes on a grey background. Which picture has the "
    "largest red square in its centre, and how does it compare with the others?"
)
OPTIONS = ["first", "second", "third", "none"]
COT = 32
TRANSFER = ({"short": ["A"], "s2": ["C"]}, {"short": ["B"]})


def ctx(**kw):
    return MAIContext(cot_max_tokens=COT, cot_min_tokens=COT, short_max_tokens=4, **kw)


@pytest.fixture(scope="module")
def pictures(tmp_path_factory):
    root = tmp_path_factory.mktemp("pictures")
    paths = []
    for i, side in enumerate((60, 100, 140)):
        img = Image.new("RGB", (256, 192), (128, 128, 128))
        ImageDraw.Draw(img).rectangle((128 - side // 2, 96 - side // 3, 128 + side // 2,
                                       96 + side // 3), fill=(220, 30, 30))  # fmt: skip
        path = root / f"p{i}.png"
        img.save(path)
        paths.append(str(path))
    return paths


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    cv2 = pytest.importorskip("cv2")
    np = pytest.importorskip("numpy")
    path = tmp_path_factory.mktemp("clip") / "clip.mp4"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 8, (160, 128))
    for i in range(24):
        frame = np.full((128, 160, 3), 128, np.uint8)
        frame[40:88, 10 + 5 * i : 50 + 5 * i] = (30, 30, 220)  # a red box moving right
        writer.write(frame)
    writer.release()
    return str(path)


def media_tokens(backend, request, gen):
    """Prompt tokens the engine counted beyond the rendered ids (expanded media)."""
    return gen.prompt_tokens - len(render(backend.tokenizer, request.messages, set()).token_ids)


def shared_prefix(backend, a, b):
    tok = backend.tokenizer
    return common_prefix(
        render(tok, a.messages, set()).token_ids, render(tok, b.messages, set()).token_ids
    )


def assert_cached_transfer(kind, small, large, small_rec, large_rec):
    """S2 reads the CoT prompt + reasoning from cache; the answer call its verify prefix."""
    block = 32 if kind == "vllm" else 1
    cot_req, cot_gen = small_rec.call("cot")
    _, s2_gen = small_rec.call("s2")
    s2_shared = cot_gen.prompt_tokens + COT - 1
    assert s2_gen.cached_tokens >= (s2_shared // block) * block
    short_req, short_gen = large_rec.call("short")
    ans_req, ans_gen = large_rec.call("answer")
    shared = shared_prefix(large, short_req, ans_req) + media_tokens(large, short_req, short_gen)
    assert ans_gen.cached_tokens >= (shared // block) * block
    return s2_gen.cached_tokens / s2_shared, ans_gen.cached_tokens / shared


async def test_every_image_reaches_the_engine_and_the_cache(engines, pictures):
    kind, small, large = engines
    small_rec = RecordingBackend(SteeredBackend(small, TRANSFER[0]))
    large_rec = RecordingBackend(SteeredBackend(large, TRANSFER[1]))
    one = await arun(QUESTION, pictures[0], options=OPTIONS, small=small, large=large,
                     context=ctx(policy="large"))  # fmt: skip
    result = await arun(
        QUESTION, pictures[0], images=pictures[1:], options=OPTIONS,
        small=small_rec, large=large_rec, context=ctx(),
    )  # fmt: skip
    assert result.route == "transfer"
    short_req, short_gen = large_rec.call("short")
    assert len(short_req.images) == 3
    per_image = media_tokens(large, short_req, short_gen) / 3
    assert per_image > 8  # each placeholder expanded to the image's tokens
    assert short_gen.prompt_tokens > one.metrics[0]["prompt_tokens"] + 2 * per_image - 3
    s2_share, answer_share = assert_cached_transfer(kind, small, large, small_rec, large_rec)
    assert s2_share >= 0.8 and answer_share >= 0.8


async def test_a_video_reaches_the_engine_and_the_cache(engines, clip):
    kind, small, large = engines
    small_rec = RecordingBackend(SteeredBackend(small, TRANSFER[0]))
    large_rec = RecordingBackend(SteeredBackend(large, TRANSFER[1]))
    result = await arun(
        "Which way does the box move?", video=clip, options=["left", "right", "up", "down"],
        small=small_rec, large=large_rec, context=ctx(video_fps=4.0, max_frames=8),
    )  # fmt: skip
    assert result.route == "transfer"
    short_req, short_gen = large_rec.call("short")
    (video,) = short_req.videos
    assert len(video["indices"]) == 8
    assert media_tokens(large, short_req, short_gen) > 4 * 8  # 4 frame pairs, several each
    assert_cached_transfer(kind, small, large, small_rec, large_rec)


async def test_k_sampled_drafts_on_one_engine(engines, pictures):
    _, small, large = engines
    small_rec = RecordingBackend(SteeredBackend(small, TRANSFER[0]))
    large_rec = RecordingBackend(SteeredBackend(large, {"short": ["B"]}))
    result = await arun(
        QUESTION, pictures[0], options=OPTIONS, small=small_rec, large=large_rec,
        context=ctx(drafts=3, transfer_drafts=2, seed=1),
    )  # fmt: skip
    assert result.route == "transfer" and len(result.drafts) == 3
    by_node = {}
    for m in result.metrics:
        by_node.setdefault(m["node"], []).append(m.get("drafter"))
    assert by_node == {"verify": [0, 1, 2, None], "reason": [0, 1, 2], "extract": [0, 1, 2],
                       "answer": [None]}  # fmt: skip
    cots = [r for r, _ in small_rec.calls_for("cot")]
    assert {(r.temperature, r.seed) for r in cots} == {(0.7, 1), (0.7, 2), (0.7, 3)}
    assert sorted(d["rank"] for d in result.drafts) == [0, 1, 2]
    texts = [p.get("text") for p in large_rec.call("answer")[0].messages[1]["content"]]
    assert "[1] " in texts and "\n[2] " in texts


async def test_three_model_chain_escalates_to_the_last_stage(engines, pictures):
    _, small, large = engines
    # small -> large -> large: the pair's large model is also the next stage's small one.
    first = RecordingBackend(SteeredBackend(small, {"short": ["A"], "s2": ["C"]}))
    middle = RecordingBackend(SteeredBackend(large, {"short": ["B"], "answer": ["C"], "s2": ["A"]}))
    last = RecordingBackend(SteeredBackend(large, {"short": ["D"]}))
    result = await arun(
        QUESTION, pictures[0], options=OPTIONS, small=first, large=[middle, last], context=ctx()
    )
    assert (result.route, result.stage) == ("transfer", 2)
    assert [(m["node"], m["stage"]) for m in result.metrics] == [
        ("verify", 1), ("verify", 1), ("reason", 1), ("extract", 1), ("answer", 1),
        ("escalate", 2), ("reason", 2), ("extract", 2), ("answer", 2),
    ]  # fmt: skip
    reason2 = middle.call("cot")[1]
    assert reason2.generated_tokens == COT
    # The last stage's short answer and its answer call share their image + question prefix.
    short_gen = last.call("short")[1]
    assert last.call("answer")[1].cached_tokens >= short_gen.prompt_tokens // 2
