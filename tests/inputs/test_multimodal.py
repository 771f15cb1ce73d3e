"""Several images and a video per question, on scripted backends: inputs, prompts, limits,
the image policy, the chat adapter, the CLI and the OpenAI request body."""

import base64
import io
import json

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from PIL import Image

from mai_graph import (
    ConfigError,
    ImageError,
    ImagePolicy,
    MAIChatModel,
    ScriptedBackend,
    create_mai_graph,
    run,
)
from mai_graph.adapters.langchain import messages_to_input
from mai_graph.calls import read_question
from mai_graph.context import MAIContext
from mai_graph.errors import ImageAccessError, ImageMismatchError
from mai_graph.inputs.limits import check_media, check_mm_limits
from mai_graph.inputs.video import (
    load_video,
    resolve_video,
    sample_indices,
)

COLOURS = [(200, 30, 30), (30, 200, 30), (30, 30, 200)]


@pytest.fixture
def pictures(tmp_path):
    paths = []
    for i, colour in enumerate(COLOURS):
        path = tmp_path / f"pic{i}.png"
        Image.new("RGB", (64 + 8 * i, 48), colour).save(path)
        paths.append(str(path))
    return paths


def write_mp4(path, frames=40, fps=10, size=(96, 64)):
    cv2 = pytest.importorskip("cv2")
    np = pytest.importorskip("numpy")
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, size)
    for i in range(frames):
        frame = np.zeros((size[1], size[0], 3), np.uint8)
        frame[:, : (i * size[0]) // frames] = (40, 80, 200)  # a bar growing over time
        writer.write(frame)
    writer.release()
    return path


@pytest.fixture
def clip(tmp_path):
    return write_mp4(tmp_path / "clip.mp4")


def gif_bytes(frames=10, ms=100):
    images = [Image.new("RGB", (64, 48), (20 * i, 100, 50)) for i in range(frames)]
    buf = io.BytesIO()
    images[0].save(buf, format="GIF", save_all=True, append_images=images[1:], duration=ms)
    return buf.getvalue()


def pair(answer="yes"):
    return ScriptedBackend(answer, name="small"), ScriptedBackend(answer, name="large")


def media_parts(request):
    return [p["type"] for p in request.messages[1]["content"]]


# -- several images --------------------------------------------------------------------------


def test_every_image_reaches_every_call_in_order_before_the_question(pictures):
    small, large = (
        ScriptedBackend({"short": "A", "cot": "red then green then blue", "s2": "C"}, name="small"),
        ScriptedBackend({"short": "B", "answer": "D"}, name="large"),
    )
    result = run(
        "Which picture is green?",
        pictures[0],
        images=pictures[1:],
        options=["first", "second", "third", "none"],
        small=small,
        large=large,
    )
    assert result.route == "transfer"
    hashes = None
    for request in small.requests + large.requests:
        assert media_parts(request)[:4] == ["image", "image", "image", "text"]
        seen = [r["sha256"] for r in request.images]
        hashes = hashes or seen
        assert seen == hashes and len(set(seen)) == 3
    widths = [r["width"] for r in small.requests[0].images]
    assert widths == [64, 72, 80]  # image first, then images, as given
    # The fake engine's prefix cache serves the images and the question to later calls.
    short, answer = large.calls("short")[0], large.calls("answer")[0]
    rec = {m["node"]: m for m in result.metrics if m["role"] == "large"}
    assert rec["answer"]["cached_tokens"] >= 3 * 64
    assert short.messages[1]["content"][:4] == answer.messages[1]["content"][:4]


def test_request_holds_the_lists_and_one_image_keeps_its_shape(pictures):
    small, large = pair()
    graph = create_mai_graph(small, large).compile(checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "t"}}
    graph.invoke({"question": "Same?", "image": pictures[0], "images": pictures[1:]}, cfg)
    request = graph.get_state(cfg).values["asked"]
    assert [r["width"] for r in request["images"]] == [64, 72, 80]
    assert request["image"] == request["images"][0] and "videos" not in request
    graph.invoke({"question": "Same?", "image": pictures[0]}, cfg)
    request = graph.get_state(cfg).values["asked"]
    assert request["images"] == [request["image"]] and len(small.requests[-1].images) == 1
    graph.invoke({"question": "Only text?"}, cfg)  # nothing inherited from earlier runs
    assert graph.get_state(cfg).values["asked"] == {
        "question": "Only text?",
        "image": None,
        "options": None,
        "kind": "auto",
    }
    assert small.requests[-1].images == []


def test_images_must_be_a_list(pictures):
    with pytest.raises(ImageError, match="images must be a list"):
        run("q?", images=pictures[0], small=ScriptedBackend("yes"), large=ScriptedBackend("yes"))


def test_image_count_is_checked_before_any_image_is_decoded(tmp_path):
    policy = ImagePolicy.trusted(max_images=2)
    graph = create_mai_graph(*pair(), image_policy=policy).compile()
    missing = [str(tmp_path / f"no{i}.png") for i in range(3)]  # never read
    with pytest.raises(ImageError, match="3 images, over the limit of 2"):
        graph.invoke({"question": "q?", "images": missing})


def test_total_pixels_of_images_and_frames_are_limited(pictures, clip):
    graph = create_mai_graph(*pair(), image_policy=ImagePolicy.trusted(max_total_pixels=10_000))
    with pytest.raises(
        ImageError, match=r"pixels together \(image 3 of 3, .*\), over the limit of 10,000"
    ):
        graph.compile().invoke({"question": "q?", "images": pictures})
    ctx = MAIContext(max_frames=4)
    q = read_question({"question": "q?", "video": str(clip)}, ctx)
    with pytest.raises(ImageError, match="over the limit"):
        check_media([], list(q["videos"]), ImagePolicy.trusted(max_total_pixels=96 * 64 * 3))


def test_an_engine_limit_fails_the_run_before_any_model_call(pictures):
    small, large = pair()
    large.media_limits = {"image": 2, "video": 0}
    with pytest.raises(ConfigError, match="3 image\\(s\\), over this engine's limit of 2"):
        run("q?", images=pictures, small=small, large=large)
    assert small.requests == [] and large.requests == []


def test_mm_limits_are_validated():
    assert check_mm_limits(None) == {"image": 4, "video": 1}
    for bad in ({"audio": 1}, {"image": -1}, {"video": True}, [("image", 2)]):
        with pytest.raises(ConfigError, match="limit_mm_per_prompt"):
            check_mm_limits(bad)


# -- video -----------------------------------------------------------------------------------


def test_video_frames_are_sampled_by_the_run_settings(clip):
    small, large = pair()
    result = run(
        "Does the bar grow?", video=str(clip), small=small, large=large, video_fps=2.0, max_frames=6
    )
    assert result.route == "agree"
    request = small.requests[0]
    assert media_parts(request)[:2] == ["video", "text"]
    (video,) = request.videos
    assert video["indices"] == sample_indices(40, 10.0, 2.0, 6) == [0, 8, 16, 23, 31, 39]
    assert video["fps"] == pytest.approx(10.0) and video["total_frames"] == 40
    assert (video["width"], video["height"]) == (96, 64) and video["frame_images"] == []
    # State holds a reference, never pixels: it is plain JSON.
    json.dumps(video)
    frames = load_video(video)
    assert len(frames) == 6 and frames[0].size == (96, 64)
    # A different sampling is a different reference (and engine cache key).
    other = read_question({"question": "q", "video": str(clip)}, MAIContext(max_frames=4))
    assert other["videos"][0]["sha256"] != video["sha256"]


def test_images_come_before_the_video(pictures, clip):
    small, large = pair()
    run("What changed?", pictures[0], video=str(clip), small=small, large=large, max_frames=4)
    assert media_parts(small.requests[0])[:3] == ["image", "video", "text"]


def test_video_as_frames_and_as_an_animated_gif(pictures, tmp_path):
    same_size = [pictures[0]] * 8
    q = read_question({"question": "q", "video": same_size}, MAIContext(video_fps=1.0))
    (video,) = q["videos"]
    assert video["path"] == "" and video["total_frames"] == 8 and len(video["frame_images"]) == 8
    q = read_question(
        {"question": "q", "video": {"frames": same_size, "fps": 4.0}}, MAIContext(video_fps=1.0)
    )
    assert q["videos"][0]["indices"] == [0, 7]  # 2 seconds at 1 frame per second
    with pytest.raises(ImageError, match="share one size"):
        read_question({"question": "q", "video": pictures}, MAIContext())
    gif = "data:video/gif;base64," + base64.b64encode(gif_bytes()).decode()
    (video,) = read_question({"question": "q", "video": gif}, MAIContext())["videos"]
    assert video["fps"] == pytest.approx(10.0) and video["indices"] == [0, 9]


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (b"not a video at all", "cannot decode video"),
        ("https://example.com/v.mp4", "video URLs are not fetched"),
        ({"frames": [], "fps": 2}, "non-empty list of images"),
        ({"frames": ["x"], "fps": 0}, "fps must be a positive number"),
        (12, "unsupported video source"),
    ],
)
def test_bad_videos_fail_with_a_fix(source, message):
    pytest.importorskip("cv2")
    with pytest.raises(ImageError, match=message):
        resolve_video(source)


def test_video_references_are_verified(clip, tmp_path):
    video = resolve_video(str(clip), max_frames=4)
    from mai_graph.inputs.images import PIXELS

    PIXELS.clear()
    assert len(load_video(video)) == 4  # decoded again, same frames
    PIXELS.clear()
    write_mp4(clip, frames=80)  # changed on disk
    with pytest.raises(ImageMismatchError):
        load_video(video)
    forged = {**video, "sha256": "0" * 64}
    with pytest.raises(ImageMismatchError):
        resolve_video(forged, ImagePolicy.untrusted(roots=[str(tmp_path)]))


def test_untrusted_callers_send_videos_inline_or_under_the_roots(clip, tmp_path):
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    inside = write_mp4(allowed / "v.mp4")
    policy = ImagePolicy.untrusted(roots=[str(allowed)])
    graph = create_mai_graph(*pair(), image_policy=policy).compile()
    with pytest.raises(ImageAccessError, match="is not allowed"):
        graph.invoke({"question": "q?", "video": str(clip)})
    with pytest.raises(ImageAccessError):
        graph.invoke({"question": "q?", "video": {"frames": ["/etc/hostname"] * 2}})
    data = "data:video/mp4;base64," + base64.b64encode(clip.read_bytes()).decode()
    assert graph.invoke({"question": "q?", "video": data})["route"] == "agree"
    assert graph.invoke({"question": "q?", "video": str(inside)})["route"] == "agree"
    small_cap = ImagePolicy.untrusted(roots=[str(allowed)], max_bytes=100)
    with pytest.raises(ImageError, match="over the limit of 100"):
        resolve_video(data, small_cap)


async def test_images_and_video_are_decoded_off_the_event_loop(pictures, clip, monkeypatch):
    from blockbuster import blockbuster_ctx

    from mai_graph.inputs import images

    images.PIXELS.clear()
    graph = create_mai_graph(*pair()).compile()
    await graph.ainvoke({"question": "warm up?"})
    data = "data:video/mp4;base64," + base64.b64encode(clip.read_bytes()).decode()
    with blockbuster_ctx():
        out = await graph.ainvoke({"question": "q?", "images": pictures, "video": data})
        assert out["route"] == "agree"
        out = await graph.ainvoke({"question": "q?", "video": {"frames": pictures[:1] * 4}})
        assert out["route"] == "agree"


def test_fake_backends_count_video_tokens(clip):
    small, large = pair()
    result = run("q?", video=str(clip), small=small, large=large, max_frames=8)
    text_only = run("q?", small=small, large=large)
    extra = result.metrics[0]["prompt_tokens"] - text_only.metrics[0]["prompt_tokens"]
    assert extra == 64 * 4  # 8 frames pair up into 4 steps of 64 tokens


# -- entry points ----------------------------------------------------------------------------


def png_url(colour):
    buf = io.BytesIO()
    Image.new("RGB", (40, 40), colour).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def test_chat_adapter_keeps_every_image_and_the_video(clip):
    urls = [png_url(c) for c in COLOURS]
    video = "data:video/mp4;base64," + base64.b64encode(clip.read_bytes()).decode()
    message = HumanMessage(
        content=[
            {"type": "text", "text": "Which one"},
            {"type": "image_url", "image_url": {"url": urls[0]}},
            {"type": "image", "base64": urls[1].split(",")[1], "mime_type": "image/png"},
            {"type": "image_url", "image_url": urls[2]},
            {"type": "video_url", "video_url": {"url": video}},
            {"type": "text", "text": "matches the video?"},
        ]
    )
    inputs = messages_to_input([message])
    assert inputs["image"] == urls[0] and inputs["images"] == urls[1:]
    assert inputs["video"] == video and inputs["question"] == "Which one matches the video?"
    small, large = pair()
    reply = MAIChatModel(small=small, large=large).invoke([message])
    assert reply.response_metadata["route"] == "agree"
    assert len(small.requests[0].images) == 3 and len(small.requests[0].videos) == 1
    two_videos = HumanMessage(content=[{"type": "video_url", "video_url": video}] * 2)
    with pytest.raises(ImageError, match="one video"):
        messages_to_input([two_videos])


def test_cli_takes_image_several_times_and_a_video(capsys, pictures, clip):
    from mai_graph.cli import EXIT_OK, main

    argv = ["run", "Same?", "--json", "--video", str(clip), "--set", "max_frames=4"]
    for path in pictures:
        argv += ["--image", path]
    assert main(argv) == EXIT_OK
    data = json.loads(capsys.readouterr().out)
    assert data["route"]


def test_openai_body_sends_each_image_and_the_video_frames_with_their_hashes(pictures, clip):
    pytest.importorskip("openai")
    from mai_graph.backends.openai import OpenAIBackend

    q = read_question(
        {"question": "q?", "images": pictures, "video": str(clip)}, MAIContext(max_frames=6)
    )
    from mai_graph.calls import short_request

    request = short_request(q, MAIContext())
    backend = OpenAIBackend(object(), "m")  # type: ignore[arg-type]
    body = backend.body(request)
    parts = body["messages"][1]["content"]
    assert [p["type"] for p in parts[:5]] == ["image_url"] * 3 + ["video_url", "text"]
    assert [p["uuid"] for p in parts[:3]] == [r["sha256"] for r in q["images"]]
    video_url = parts[3]["video_url"]["url"]
    assert video_url.startswith("data:video/jpeg;base64,")
    frames = video_url.split(",", 1)[1].split(",")
    assert len(frames) == 6 and parts[3]["uuid"] == q["videos"][0]["sha256"]
    assert Image.open(io.BytesIO(base64.b64decode(frames[0]))).size == (96, 64)
    assert "media_io_kwargs" not in body["extra_body"]
    meta = OpenAIBackend(object(), "m", send_video_metadata=True).body(request)  # type: ignore[arg-type]
    io_kwargs = meta["extra_body"]["media_io_kwargs"]["video"]
    assert io_kwargs["frames_indices"] == q["videos"][0]["indices"]
    assert io_kwargs["num_frames"] == -1
    assert io_kwargs["fps"] == pytest.approx(10.0) and io_kwargs["total_num_frames"] == 40
    long_ctx = MAIContext(max_frames=40, video_fps=10.0)
    long = read_question({"question": "q?", "video": str(clip)}, long_ctx)
    with pytest.raises(ConfigError, match="reads the first 32"):
        backend.body(short_request(long, MAIContext()))


def test_generated_media_tokens_are_not_spliced_as_media(tiny_pair):
    """A model may write <|image_pad|> (random weights do when sampling): spliced into the S2
    prompt it must not read as one more image."""
    from mai_graph.backends.render import media_ids, render

    pytest.importorskip("transformers")
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_pair[0])
    tok = processor.tokenizer
    pad = tok.convert_tokens_to_ids("<|image_pad|>")
    assert pad in media_ids(tok)
    generated = tok.encode("the answer", add_special_tokens=False)
    messages = (
        {"role": "user", "content": [{"type": "text", "text": "q?"}]},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "x"}],
            "token_ids": [generated[0], pad, generated[-1]],
        },  # fmt: skip
        {"role": "user", "content": [{"type": "text", "text": "answer only"}]},
    )
    rendered = render(tok, messages, set(), template=processor)
    assert pad not in rendered.token_ids
    ((start, end),) = rendered.spans
    assert end - start == 3  # positions kept: the span lines up with the reasoning's tokens
