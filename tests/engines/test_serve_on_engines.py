"""`mai-graph serve` in front of real engines (the tiny vLLM pair), driven by OpenAI clients."""

import asyncio
import base64

import pytest

from mai_graph.adapters.endpoint.app import create_app
from mai_graph.backends.steered import SteeredBackend
from tests.servers import serving_app

pytestmark = [pytest.mark.engine]

QUESTION = "Which colour is the large square in the centre of the image?"
OPTIONS = ["red", "blue", "green", "yellow"]


@pytest.mark.parametrize("engines", ["vllm"], indirect=True)
def test_endpoint_answers_streams_and_batches_on_real_engines(engines, scene):
    openai = pytest.importorskip("openai", reason="installed with the openai extra")
    chat_openai = pytest.importorskip("langchain_openai", reason="in the test extra").ChatOpenAI
    _, small, large = engines
    # Force the transfer route: the short answers disagree and S2 keeps the small answer.
    app = create_app(
        SteeredBackend(small, {"short": ["A"], "s2": ["C"]}),
        SteeredBackend(large, {"short": ["B"]}),
        api_keys=["k"],
        context={"cot_max_tokens": 32, "cot_min_tokens": 32},
    )
    image = "data:image/png;base64," + base64.b64encode(scene.read_bytes()).decode()
    messages = [{"role": "user", "content": [
        {"type": "text", "text": QUESTION}, {"type": "image_url", "image_url": {"url": image}}
    ]}]  # fmt: skip
    extra = {"mai": {"options": OPTIONS}}
    with serving_app(app) as url:
        with openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0) as client:
            out = client.chat.completions.create(model="mai", messages=messages, extra_body=extra)
        mai = out.model_extra["mai"]
        assert mai["route"] == "transfer" and mai["canonical"] in ("A", "B", "C", "D")
        by_node = {m["node"]: m for m in mai["metrics"]}
        assert by_node["reason"]["generated_tokens"] == 32
        assert by_node["reason"]["prompt_tokens"] > 100  # the image reached the engine
        assert by_node["answer"]["cached_tokens"] >= 64  # the verify prefix, from the cache
        assert out.usage.prompt_tokens == sum(m["prompt_tokens"] for m in mai["metrics"])
        assert out.usage.prompt_tokens_details.cached_tokens > 0

        model = chat_openai(model="mai", base_url=f"{url}/v1", api_key="k", max_retries=0,
                            stream_usage=True, extra_body=extra)  # fmt: skip
        chunks = list(model.stream(messages))
        text = "".join(c.content for c in chunks)
        assert text in ("A", "B", "C", "D")  # the answer, constrained to the option letters
        assert sum((c.usage_metadata or {}).get("total_tokens", 0) for c in chunks) > 100

        async def burst():
            async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="k") as c:
                return await asyncio.gather(
                    *(c.chat.completions.create(model="mai", messages=messages, extra_body=extra)
                      for _ in range(4))
                )  # fmt: skip

        outs = asyncio.run(burst())
        assert [o.model_extra["mai"]["route"] for o in outs] == ["transfer"] * 4

        # Two images in one message: both reach the engines, in every call.
        from mai_graph.tiny.build import draw_scene

        other = draw_scene(scene.parent / "other.png", 7)
        second = "data:image/png;base64," + base64.b64encode(other.read_bytes()).decode()
        two = [{"role": "user", "content": [
            *messages[0]["content"], {"type": "image_url", "image_url": {"url": second}}
        ]}]  # fmt: skip
        with openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0) as client:
            out2 = client.chat.completions.create(model="mai", messages=two, extra_body=extra)
        pairs = zip(mai["metrics"], out2.model_extra["mai"]["metrics"], strict=True)
        for one_image, two_images in pairs:
            assert two_images["prompt_tokens"] > one_image["prompt_tokens"] + 50, two_images
