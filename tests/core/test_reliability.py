"""Reliability on the fake backends: bad inputs, cancellation bursts, server faults, limits.

The same bad-input table runs on the real engines in tests/engines/test_bad_input_on_engines.py.
"""

import asyncio
import time

import pytest
from PIL import Image

from mai_graph import BackendError, ConfigError, GenerationRequest, ImageError, MAIContext, arun
from mai_graph.backends.fake import ScriptedBackend
from mai_graph.inputs.limits import (
    MAX_ASPECT_RATIO,
    MIN_IMAGE_SIDE,
    check_prompt_length,
    check_question,
    fit_image,
)
from mai_graph.inputs.sources import image_ref
from tests.bad_inputs import CASES, OPTIONS, QUESTION, run_case


@pytest.fixture
def good_image(tmp_path):
    path = tmp_path / "good.png"
    Image.new("RGB", (96, 64), (200, 30, 30)).save(path)
    return path


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_bad_input_on_fakes(case, tmp_path, good_image):
    small = ScriptedBackend({"short": "A"}, name="small")
    large = ScriptedBackend({"short": "A"}, name="large")
    await run_case(case, "fake", small, large, tmp_path / "case", good_image)


# -- limits --------------------------------------------------------------------------------------


def test_small_images_are_scaled_up_keeping_their_aspect_ratio():
    ref = fit_image(image_ref(Image.new("RGB", (4, 700), (1, 2, 3))))
    assert (ref["width"], ref["height"]) == (MIN_IMAGE_SIDE, 5600)
    same = image_ref(Image.new("RGB", (32, 6400)))
    assert fit_image(same) is same  # at the limits: unchanged
    with pytest.raises(ImageError, match="aspect ratio"):
        fit_image(image_ref(Image.new("RGB", (int(32 * MAX_ASPECT_RATIO) + 32, 32))))


def test_question_and_prompt_limits_name_the_limit_and_the_fix():
    assert check_question("  Why?  ") == "  Why?  "
    for bad in (None, 3, "", "   "):
        with pytest.raises(ConfigError, match="non-empty string"):
            check_question(bad)
    check_prompt_length("m", 4095, 4096)
    with pytest.raises(ConfigError, match=r"4,096 tokens.*max_model_len=4,096") as err:
        check_prompt_length("small-vlm", 4096, 4096, purpose="short")
    assert err.value.parameter == "question" and "shorten the question" in str(err.value)
    with pytest.raises(ConfigError) as err:
        check_prompt_length("small-vlm", 5000, 4096, purpose="s2")
    assert err.value.parameter == "cot_max_tokens" and "lower cot_max_tokens" in str(err.value)


# -- cancellation --------------------------------------------------------------------------------


@pytest.mark.slow
async def test_a_burst_of_cancelled_runs_leaves_nothing_in_flight(good_image):
    small = ScriptedBackend({"short": "A", "cot": "x " * 50, "s2": "A"}, name="small", latency=0.05)
    large = ScriptedBackend({"short": "B", "answer": "A"}, name="large", latency=0.05)
    ctx = MAIContext(cot_max_tokens=64)
    tasks = [
        asyncio.create_task(arun(QUESTION, str(good_image), options=OPTIONS, small=small,
                                 large=large, context=ctx))
        for _ in range(100)
    ]  # fmt: skip
    await asyncio.sleep(0.01)
    for i, task in enumerate(tasks):  # cancel at different stages of the runs
        if i % 2 == 0:
            task.cancel()
        if i % 10 == 0:
            await asyncio.sleep(0.01)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    cancelled = sum(isinstance(r, asyncio.CancelledError) for r in results)
    assert cancelled == 50
    assert all(not isinstance(r, BaseException) for i, r in enumerate(results) if i % 2)
    assert small.in_flight == large.in_flight == 0
    assert small.max_in_flight > 10  # the burst really ran concurrently


# -- OpenAI-compatible servers: down, dropped mid-stream, too slow ----------------------------


class Stub:
    """A loopback HTTP server that answers a chat completion in one of several broken ways."""

    def __init__(self, mode):
        self.mode, self.server, self.port = mode, None, None

    async def __aenter__(self):
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc):
        self.server.close()
        await self.server.wait_closed()

    async def handle(self, reader, writer):
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        try:
            if self.mode == "silent":
                await asyncio.sleep(60)
            elif self.mode == "drop":
                chunk = (
                    'data: {"id":"1","object":"chat.completion.chunk","created":0,"model":"m",'
                    '"choices":[{"index":0,"delta":{"content":"half"},"finish_reason":null}]}\n\n'
                )
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                             b"transfer-encoding: chunked\r\n\r\n")  # fmt: skip
                writer.write(f"{len(chunk):x}\r\n{chunk}\r\n".encode())
                await writer.drain()
                await asyncio.sleep(0.2)
                writer.transport.abort()  # the server dies mid-stream
                return
        finally:
            writer.close()

    def backend(self, **kw):
        from mai_graph.backends.openai import OpenAIBackend

        return OpenAIBackend.from_url(f"http://127.0.0.1:{self.port}/v1", "m", **kw)


def _request():
    return GenerationRequest(
        ({"role": "user", "content": [{"type": "text", "text": "x"}]},), max_tokens=8
    )


@pytest.mark.server
async def test_server_dropping_the_stream_is_a_transient_error_naming_the_model():
    pytest.importorskip("openai")
    async with Stub("drop") as stub:
        start = time.monotonic()
        with pytest.raises(BackendError, match="m: the connection to the server broke") as err:
            await stub.backend().generate(_request())
    assert err.value.transient and time.monotonic() - start < 10


@pytest.mark.server
async def test_server_slower_than_the_timeout_fails_within_the_timeout():
    pytest.importorskip("openai")
    async with Stub("silent") as stub:
        start = time.monotonic()
        with pytest.raises(BackendError, match=r"did not finish within timeout_s=0.5 s") as err:
            await stub.backend(timeout_s=0.5).generate(_request())
    assert err.value.transient and err.value.parameter == "timeout_s"
    assert time.monotonic() - start < 3


@pytest.mark.server  # a server that is down: a closed loopback port
async def test_graph_over_a_down_server_fails_fast_after_its_retries():
    pytest.importorskip("openai")
    from mai_graph.backends.openai import OpenAIBackend
    from tests.servers import free_port

    backend = OpenAIBackend.from_url(f"http://127.0.0.1:{free_port()}/v1", "tiny")
    start = time.monotonic()
    with pytest.raises(BackendError, match="tiny: server unreachable"):
        await arun(QUESTION, options=OPTIONS, small=backend, large=backend)
    assert time.monotonic() - start < 10  # three attempts, 0.5 s and 1 s apart


def test_openai_backend_validates_its_timeout():
    pytest.importorskip("openai")
    from mai_graph.backends.openai import OpenAIBackend

    for bad in (0, -1, "10"):
        with pytest.raises(ConfigError, match="timeout_s"):
            OpenAIBackend.from_url("http://127.0.0.1:9/v1", "m", timeout_s=bad)
