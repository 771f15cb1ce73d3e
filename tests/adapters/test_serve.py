"""The OpenAI-compatible endpoint (`mai-graph serve`), driven by real OpenAI clients.

The app runs in process (Starlette's TestClient, no socket); the `openai` client and
LangChain's `ChatOpenAI` talk to it through their HTTP clients. What needs a real server runs
it under uvicorn on a free loopback port (marked `server`): a client that disconnects or times
out, a trickled body, a stop signal, the `mai-graph serve` command. Fake backends answer, so
routes and token counts are exact.
"""

import asyncio
import base64
import io
import json
import threading
import time

import httpx
import pytest
from PIL import Image

from mai_graph import BackendError, FunctionBackend, ImagePolicy, ScriptedBackend
from mai_graph.adapters.endpoint.app import create_app
from mai_graph.adapters.endpoint.server import api_keys_from
from mai_graph.backends.recording import RecordingBackend
from tests.servers import InProcess, in_process, serving_app

openai = pytest.importorskip("openai", reason="installed with the openai extra")
pytest.importorskip("uvicorn", reason="installed with the serve extra")

KEY = "sk-test-endpoint-key"
OPTIONS = ["red", "blue", "green"]


def data_url(colour=(200, 30, 30), size=(48, 40)) -> str:
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def running(app):
    """The app served in process (no socket)."""
    return in_process(app)


def client(served: InProcess | str, key=KEY, **kwargs):
    """The openai client on an in-process app, or on a real server's URL."""
    if isinstance(served, str):
        return openai.OpenAI(base_url=f"{served}/v1", api_key=key, max_retries=0, **kwargs)
    return served.openai(key, **kwargs)


def transfer_pair(**kwargs):
    """Small and large disagree, S2 keeps the small answer: the transfer route."""
    small = ScriptedBackend(
        {"short": "A", "cot": "The big square is red so the answer is A", "s2": "A"},
        name="small",
        **kwargs,
    )
    large = ScriptedBackend({"short": "B", "answer": "A"}, name="large", **kwargs)
    return small, large


@pytest.fixture
def served():
    """(the app in process, small, large) of an app with one API key, on the transfer route."""
    small, large = transfer_pair()
    with running(create_app(small, large, api_keys=[KEY])) as app:
        yield app, small, large


def question(text="Which colour is the square?", image=None):
    return [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": text},
                {"type": "image_url", "image_url": {"url": image or data_url()}},
            ],
        }
    ]


# -- the OpenAI client -------------------------------------------------------------------------


def test_completion_answers_with_usage_and_the_mai_field(served):
    endpoint, small, large = served
    with client(endpoint) as c:
        out = c.chat.completions.create(
            model="mai", messages=question(), extra_body={"mai": {"options": OPTIONS}}
        )
    assert out.choices[0].message.content == "A"
    assert out.choices[0].finish_reason == "stop" and out.object == "chat.completion"
    mai = out.model_extra["mai"]
    assert mai["route"] == "transfer" and mai["canonical"] == "A"
    assert [m["node"] for m in mai["metrics"]] == ["verify", "verify", "reason", "extract",
                                                   "answer"]  # fmt: skip
    metrics = mai["metrics"]
    assert out.usage.prompt_tokens == sum(m["prompt_tokens"] for m in metrics)
    assert out.usage.completion_tokens == sum(m["generated_tokens"] for m in metrics)
    assert out.usage.total_tokens == out.usage.prompt_tokens + out.usage.completion_tokens
    assert out.usage.prompt_tokens_details.cached_tokens == sum(
        m["cached_tokens"] or 0 for m in metrics
    )
    reasoning = [m["generated_tokens"] for m in metrics if m["node"] == "reason"]
    assert out.usage.completion_tokens_details.reasoning_tokens == sum(reasoning) > 0
    # The question, options and image reached the models (the image as a checked reference).
    prompt = small.calls("short")[0]
    assert (prompt.image["width"], prompt.image["height"]) == (48, 40)
    assert "Which colour is the square?" in json.dumps(prompt.messages)
    assert prompt.choices == ("A", "B", "C")


def test_stream_sends_the_answer_as_deltas_then_mai_and_usage(served):
    endpoint, *_ = served
    with client(endpoint) as c:
        stream = c.chat.completions.create(
            model="mai",
            messages=question(),
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"mai": {"options": OPTIONS}},
        )
        chunks = list(stream)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == "A"
    assert chunks[0].choices[0].delta.role == "assistant"
    finish = [ch for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert len(finish) == 1 and finish[0].choices[0].finish_reason == "stop"
    assert finish[0].model_extra["mai"]["route"] == "transfer"
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens > 0
    metrics = finish[0].model_extra["mai"]["metrics"]
    assert chunks[-1].usage.prompt_tokens == sum(m["prompt_tokens"] for m in metrics)


def test_stream_carries_the_answer_nodes_tokens_live():
    """On the transfer route the large model's answer streams token by token."""
    small, _ = transfer_pair()
    large = ScriptedBackend({"short": "no", "answer": "yes it is red"}, name="large")
    small.script.update({"short": "yes", "s2": "yes"})
    with running(create_app(small, large)) as endpoint, client(endpoint, key="unused") as c:
        chunks = list(c.chat.completions.create(model="mai", messages=question(), stream=True))
    pieces = [
        ch.choices[0].delta.content for ch in chunks if ch.choices and ch.choices[0].delta.content
    ]
    assert pieces == ["yes", " it", " is", " red"]


def test_models_lists_the_served_name(served):
    endpoint, *_ = served
    with client(endpoint) as c:
        assert [m.id for m in c.models.list()] == ["mai"]


def test_plain_string_content_and_early_exit():
    small = ScriptedBackend({"short": "yes"}, name="small")
    large = ScriptedBackend({"short": "Yes."}, name="large")
    with running(create_app(small, large, model_name="mai-vl")) as endpoint, client(endpoint) as c:
        out = c.chat.completions.create(
            model="mai-vl", messages=[{"role": "user", "content": "Is the sky blue?"}]
        )
    assert out.model_extra["mai"]["route"] == "agree"
    assert out.choices[0].message.content == "Yes." and out.model == "mai-vl"
    assert small.calls("short")[0].image is None


def test_drafters_and_a_chain_serve_like_a_pair():
    drafters = [ScriptedBackend({"short": "no"}, name=f"d{i}") for i in range(2)]
    chain = [ScriptedBackend({"short": "no"}, name="m1"), ScriptedBackend("yes", name="m2")]
    with running(create_app(drafters, chain)) as endpoint, client(endpoint) as c:
        out = c.chat.completions.create(
            model="mai", messages=[{"role": "user", "content": "Is the sky green?"}]
        )
    assert out.model_extra["mai"]["route"] == "agree"  # the drafters agree with m1: stage 1
    assert all(d.calls("short") for d in drafters) and not chain[1].calls("short")


def test_temperature_seed_and_max_tokens_set_the_run():
    small = ScriptedBackend({"short": "yes"}, name="small")
    large = ScriptedBackend({"short": "yes"}, name="large")
    with running(create_app(small, large)) as endpoint, client(endpoint) as c:
        c.chat.completions.create(
            model="mai", messages=question(), temperature=0.5, seed=7, max_tokens=3,
        )  # fmt: skip
    request = large.calls("short")[0]
    assert (request.temperature, request.seed, request.max_tokens) == (0.5, 7, 3)


# -- LangChain's ChatOpenAI --------------------------------------------------------------------


def test_langchain_chat_openai_invokes_and_streams(served):
    chat_openai = pytest.importorskip("langchain_openai", reason="in the test extra").ChatOpenAI
    from langchain_core.messages import HumanMessage

    endpoint, *_ = served
    model = chat_openai(
        model="mai", base_url=f"{endpoint.url}/v1", api_key=KEY, max_retries=0, stream_usage=True,
        extra_body={"mai": {"options": OPTIONS}}, http_client=endpoint.http(),
        http_async_client=endpoint.async_http(),
    )  # fmt: skip
    message = HumanMessage(
        content=[
            {"type": "text", "text": "Which colour is the square?"},
            {"type": "image_url", "image_url": {"url": data_url()}},
        ]
    )
    reply = model.invoke([message])
    assert reply.content == "A"
    assert reply.usage_metadata["total_tokens"] > 0
    assert reply.usage_metadata["input_token_details"]["cache_read"] >= 0
    chunks = list(model.stream([message]))
    assert "".join(c.content for c in chunks) == "A"
    assert (
        sum((c.usage_metadata or {}).get("output_tokens", 0) for c in chunks)
        == (reply.usage_metadata["output_tokens"])
    )

    async def many():
        return await model.abatch([[message]] * 4)

    assert [r.content for r in asyncio.run(many())] == ["A"] * 4


# -- refusals ----------------------------------------------------------------------------------


def test_api_key_is_required_and_checked(served):
    endpoint, *_ = served
    with client(endpoint, key="wrong") as c, pytest.raises(openai.AuthenticationError) as err:
        c.chat.completions.create(model="mai", messages=question())
    assert err.value.status_code == 401 and "API key" in err.value.message
    with client(endpoint, key="wrong") as c, pytest.raises(openai.AuthenticationError):
        c.models.list()
    plain = endpoint.client.post("/v1/chat/completions", json={"model": "mai", "messages": []})
    assert plain.status_code == 401 and plain.headers["www-authenticate"] == "Bearer"
    assert KEY not in plain.text
    assert endpoint.client.get("/health").json() == {"status": "ok"}


@pytest.mark.parametrize(
    ("extra", "param", "message"),
    [
        ({"mai": {"kep_ratio": 0.3}}, "mai.kep_ratio", "unknown context settings ['kep_ratio']"),
        ({"mai": {"keep_ratio": 2}}, "mai.keep_ratio", "keep_ratio must be in (0, 1]"),
        ({"mai": {"options": ["only"]}}, "mai.options", "options"),
        ({"n": 2}, "n", "n must be 1"),
        ({"stop": ["\n"]}, "stop", "stop sequences are not supported"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools", "tool calling"),
        ({"response_format": {"type": "json_object"}}, "response_format", "json_object"),
        ({"temperature": 9}, "temperature", "temperature must be in"),
        ({"max_tokens": 0}, "max_tokens", "max_tokens: Input should be greater than or equal to 1"),
        ({"mai": {"cot_max_tokens": 131072}}, "mai.cot_max_tokens", "does not let requests change"),
        (
            {"mai": {"system_prompt": "x" * 2_000_000}},
            "mai.system_prompt",
            "does not let requests change",
        ),
        ({"mai": {"drafts": 16}}, "mai.drafts", "does not let requests change"),
        ({"mai": "fast"}, "mai", "valid dictionary"),
    ],
)
def test_bad_settings_are_refused_with_400_naming_the_field(served, extra, param, message):
    endpoint, small, _ = served
    with client(endpoint) as c, pytest.raises(openai.BadRequestError) as err:
        c.chat.completions.create(model="mai", messages=question(), extra_body=extra)
    assert err.value.status_code == 400
    assert message in err.value.message
    assert err.value.body["param"] == param or param in err.value.message
    assert small.requests == []  # refused before any model call


def test_wrong_model_is_404(served):
    endpoint, *_ = served
    with client(endpoint) as c, pytest.raises(openai.NotFoundError, match="serves 'mai'"):
        c.chat.completions.create(model="gpt-4o", messages=question())


@pytest.mark.parametrize("stream", [False, True])
def test_image_policy_refuses_server_paths_and_urls_before_any_stream(served, png, stream):
    endpoint, small, _ = served
    with client(endpoint) as c:
        for source in (str(png), f"file://{png}", "http://127.0.0.1:1/cat.png", "/etc/passwd"):
            with pytest.raises(openai.BadRequestError) as err:
                c.chat.completions.create(
                    model="mai", messages=question(image=source), stream=stream
                )
            assert err.value.body["code"] in ("invalid_image",)
            assert "data URL" in err.value.message  # names what is accepted
    assert small.requests == []


def test_files_under_allowed_roots_are_read(png):
    small, large = transfer_pair()
    policy = ImagePolicy.untrusted(roots=[png.parent])
    with running(create_app(small, large, image_policy=policy)) as endpoint, client(endpoint) as c:
        c.chat.completions.create(model="mai", messages=question(image=str(png)))
    assert small.calls("short")[0].image["path"] == str(png)


def test_settings_clients_may_not_change_are_refused():
    small, large = transfer_pair()
    app = create_app(small, large, allowed_settings=["keep_ratio"], context={"cot_max_tokens": 64})
    with running(app) as endpoint, client(endpoint) as c:
        with pytest.raises(openai.BadRequestError, match="cot_max_tokens"):
            c.chat.completions.create(
                model="mai", messages=question(), extra_body={"mai": {"cot_max_tokens": 4096}}
            )
        with pytest.raises(openai.BadRequestError, match="temperature") as err:
            c.chat.completions.create(model="mai", messages=question(), temperature=1.5)
        assert err.value.body["param"] == "temperature"
        c.chat.completions.create(
            model="mai",
            messages=question(),
            extra_body={"mai": {"keep_ratio": 0.5, "options": OPTIONS}},
        )
    assert small.calls("cot")[0].max_tokens == 64  # the server's default held


def test_several_images_reach_both_models_in_order(served):
    endpoint, small, large = served
    three = question()
    for colour in ((0, 0, 200), (0, 200, 0)):
        three[0]["content"].append({"type": "image_url", "image_url": {"url": data_url(colour)}})
    with client(endpoint) as c:
        out = c.chat.completions.create(model="mai", messages=three)
    assert out.model_extra["mai"]["route"] == "transfer"
    for backend in (small, large):
        request = backend.calls("short")[0]
        assert len(request.images) == 3
        assert [ref["sha256"] for ref in request.images] == [
            ref["sha256"] for ref in large.calls("answer")[0].images
        ]


def test_other_content_parts_and_too_many_images_are_refused(served):
    endpoint, small, _ = served
    many = question()
    many[0]["content"] += [{"type": "image_url", "image_url": {"url": "not base64 !"}}] * 40
    audio = [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]
    with client(endpoint) as c:
        with pytest.raises(openai.BadRequestError, match="41 images, over the limit") as err:
            c.chat.completions.create(model="mai", messages=many)
        assert err.value.body["code"] == "invalid_image"
        with pytest.raises(openai.BadRequestError, match="not text or image_url"):
            c.chat.completions.create(model="mai", messages=audio)
        with pytest.raises(openai.BadRequestError, match="no user message"):
            c.chat.completions.create(model="mai", messages=[{"role": "system", "content": "x"}])
    assert not small.calls("short")  # nothing reached a model


# -- failures, concurrency, disconnects --------------------------------------------------------


def test_backend_failures_are_typed_http_errors_and_stream_error_events():
    down = BackendError("large: server unreachable or busy", transient=True)
    small = ScriptedBackend({"short": "yes"}, name="small")
    large = ScriptedBackend({"short": "yes"}, name="large", fail={"short": [down] * 6})
    app = create_app(small, large, retry_policy=None)
    with running(app) as endpoint, client(endpoint) as c:
        with pytest.raises(openai.InternalServerError) as err:
            c.chat.completions.create(model="mai", messages=question())
        assert err.value.status_code == 503 and "unreachable" in err.value.message
        with pytest.raises(openai.APIError, match="unreachable"):
            list(c.chat.completions.create(model="mai", messages=question(), stream=True))


def test_concurrent_requests_share_the_backends_within_max_concurrency():
    small, large = transfer_pair(latency=0.05)
    app = create_app(small, large, max_concurrency=3)

    async def burst(served):
        async with served.async_openai("x") as c:
            return await asyncio.gather(
                *(
                    c.chat.completions.create(
                        model="mai",
                        messages=question(f"Question {i}: which colour?"),
                        extra_body={"mai": {"options": OPTIONS}},
                    )
                    for i in range(9)
                )
            )

    with running(app) as served:
        outs = asyncio.run(burst(served))
    assert [o.choices[0].message.content for o in outs] == ["A"] * 9
    assert len(small.calls("short")) == 9  # one pair of backends served every run
    assert 2 <= small.max_in_flight <= 3  # runs overlapped, never more than allowed


@pytest.mark.server
def test_closing_the_stream_cancels_the_run():
    started, cancelled = threading.Event(), []

    async def slow(request):
        if request.purpose == "answer":
            started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append(time.monotonic())
                raise
        return {"short": "B"}.get(request.purpose, "A")

    small, _ = transfer_pair()
    large = FunctionBackend(slow, name="large")
    with serving_app(create_app(small, large)) as url:
        with httpx.stream(
            "POST",
            f"{url}/v1/chat/completions",
            json={"model": "mai", "messages": question(), "stream": True,
                  "mai": {"options": OPTIONS}},
            timeout=10,
        ) as resp:  # fmt: skip
            assert resp.status_code == 200
            lines = resp.iter_lines()
            assert next(lines).startswith("data: ")  # the role chunk
            deadline = time.monotonic() + 10
            while not started.is_set():
                assert time.monotonic() < deadline, "the answer call never started"
                time.sleep(0.02)
        closed = time.monotonic()
        deadline = closed + 5
        while not cancelled:
            assert time.monotonic() < deadline, "the run kept going after the client left"
            time.sleep(0.02)
    assert cancelled[0] - closed < 5


def test_api_keys_come_from_env_or_a_file(tmp_path):
    from mai_graph.errors import ConfigError

    assert api_keys_from({"MAI_GRAPH_SERVE_API_KEY": "a,b"}) == ["a", "b"]
    assert api_keys_from({}) == []
    keys = tmp_path / "keys"
    keys.write_text("k1\n\nk2\n")
    assert api_keys_from({"MAI_GRAPH_SERVE_API_KEY": "a"}, str(keys)) == ["k1", "k2"]
    for blank in (",", "  ", " , ,"):  # set to nothing: a mistake, not "no key"
        with pytest.raises(ConfigError, match="holds no key"):
            api_keys_from({"MAI_GRAPH_SERVE_API_KEY": blank})


@pytest.mark.server
def test_the_serve_command_serves_with_a_key_and_refuses_open_public_listening(capsys, monkeypatch):
    import os
    import subprocess
    import sys

    from mai_graph.cli import EXIT_USAGE, main
    from tests.servers import free_port, get

    monkeypatch.delenv("MAI_GRAPH_SERVE_API_KEY", raising=False)
    env = dict(os.environ)
    assert main(["serve", "--host", "0.0.0.0"]) == EXIT_USAGE
    assert "without an API key" in capsys.readouterr().err
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mai_graph.cli", "serve", "--port", str(port), "--model-name",
         "mai-test", "--set", "cot_max_tokens=64"],
        env={**env, "MAI_GRAPH_SERVE_API_KEY": KEY}, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if get(f"http://127.0.0.1:{port}/health")[0] == 200:
                    break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
                time.sleep(0.2)
        with client(f"http://127.0.0.1:{port}") as c:
            out = c.chat.completions.create(model="mai-test", messages=question())
        assert out.model_extra["mai"]["route"] in ("agree", "extract_agree", "transfer")
        with client(f"http://127.0.0.1:{port}", key="wrong") as c:
            with pytest.raises(openai.AuthenticationError):
                c.models.list()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert "serving 'mai-test'" in proc.stderr.read()


def test_clients_see_served_model_names_never_server_paths():
    """Per-call records name the served model and role, not the backends' local paths."""
    small = ScriptedBackend({"short": "A", "cot": "so A", "s2": "A"}, name="/srv/models/2b")
    large = ScriptedBackend({"short": "B", "answer": "A"}, name="/srv/models/8b")
    with running(create_app(small, large, api_keys=[KEY], model_name="vlm")) as endpoint:
        with client(endpoint) as c:
            out = c.chat.completions.create(
                model="vlm", messages=question(), extra_body={"mai": {"options": OPTIONS}}
            )
    body = out.model_dump_json()
    assert "/srv/models" not in body
    names = {m["model"] for m in out.model_extra["mai"]["metrics"]}
    assert names == {"vlm/small", "vlm/large"}
    assert all("text" not in m for m in out.model_extra["mai"]["metrics"])


def test_a_clients_budget_only_lowers_the_servers_and_the_default_allow_list():
    from mai_graph.adapters.endpoint.translate import CLIENT_SETTINGS

    small = ScriptedBackend({"short": "A"}, name="small")
    large = ScriptedBackend({"short": "A"}, name="large")
    rec_large = RecordingBackend(large)
    with running(create_app(small, rec_large, api_keys=[KEY])) as endpoint, client(endpoint) as c:
        c.chat.completions.create(model="mai", messages=question(), max_tokens=5000,
                                  extra_body={"mai": {"options": OPTIONS}})  # fmt: skip
    assert {r.max_tokens for r in rec_large.requests} == {16}  # the server's short budget
    assert "cot_max_tokens" not in CLIENT_SETTINGS and "review" not in CLIENT_SETTINGS
    assert {"keep_ratio", "gate", "temperature", "options"} - CLIENT_SETTINGS == {"options"}


@pytest.mark.server
def test_a_timed_out_request_frees_its_slot_and_its_engine_requests():
    """A non-streaming request whose client gave up is cancelled: its model call is aborted
    within a bounded time and the next request gets the server's one slot at once, instead of
    waiting for the abandoned run."""
    calls, aborted = [], []

    async def slow_first(request):
        calls.append(request.purpose)
        if len(calls) == 1:
            try:
                await asyncio.sleep(6.0)
            except asyncio.CancelledError:
                aborted.append(time.perf_counter())
                raise
        return "A"

    small = FunctionBackend(slow_first, name="small")
    large = FunctionBackend(lambda r: "A", name="large")
    with serving_app(create_app(small, large, api_keys=[KEY], max_concurrency=1)) as url:
        with client(url, timeout=0.5) as c, pytest.raises(openai.APITimeoutError):
            c.chat.completions.create(model="mai", messages=question())
        gave_up = time.perf_counter()
        with client(url, timeout=10) as c:
            out = c.chat.completions.create(model="mai", messages=question())
        waited = time.perf_counter() - gave_up
    assert out.choices[0].message.content == "A"
    assert aborted and aborted[0] - gave_up < 1.5, "the abandoned run was not cancelled"
    assert waited < 3.0, f"the next request waited {waited:.1f} s for the abandoned run's slot"


@pytest.mark.parametrize("declared", [True, False])
@pytest.mark.server
def test_a_body_over_the_limit_is_refused_before_it_is_read(declared):
    small, large = transfer_pair()
    app = create_app(small, large, api_keys=[KEY], max_body_bytes=100_000)
    body = json.dumps({"model": "mai", "messages": question(image=data_url(size=(400, 400)))
                       }).encode() + b" " * 200_000  # fmt: skip
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    with serving_app(app) as url, httpx.Client(timeout=10) as h:
        if declared:
            r = h.post(f"{url}/v1/chat/completions", content=body, headers=headers)
        else:  # no Content-Length: chunked, counted as it arrives
            r = h.post(f"{url}/v1/chat/completions", content=iter([body[:50_000], body[50_000:]]),
                       headers=headers)  # fmt: skip
        assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
        assert h.get(f"{url}/health").status_code == 200  # still serving


def test_json_nested_too_deep_is_a_400():
    small, large = transfer_pair()
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    with running(create_app(small, large, api_keys=[KEY])) as endpoint:
        r = endpoint.client.post("/v1/chat/completions", headers=headers,
                                 content=b"[" * 100_000 + b"]" * 100_000)  # fmt: skip
        assert r.status_code == 400 and "nests too deep" in r.json()["error"]["message"]


@pytest.mark.server
def test_a_stop_waits_for_runs_in_flight_at_most_the_shutdown_timeout():
    """SIGTERM (uvicorn's should_exit) with a run that would take 30 s: the server cancels it
    after the shutdown timeout, aborts its model call, runs the app's shutdown and exits."""
    import uvicorn

    from mai_graph.adapters.endpoint.server import server_config
    from tests.servers import free_port

    started, aborted = threading.Event(), []

    async def stuck(request):
        if request.purpose == "short":
            started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                aborted.append(time.monotonic())
                raise
        return "A"

    small = FunctionBackend(stuck, name="small")
    large = FunctionBackend(lambda r: "A", name="large")
    port = free_port()
    server = uvicorn.Server(server_config(create_app(small, large), port=port,
                                          shutdown_timeout_s=1.0))  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive()
        time.sleep(0.02)
    url = f"http://127.0.0.1:{port}"
    outcome = []

    def ask():
        try:
            with client(url, timeout=20) as c:
                c.chat.completions.create(model="mai", messages=question())
        except Exception as exc:
            outcome.append(exc)

    asker = threading.Thread(target=ask, daemon=True)
    asker.start()
    assert started.wait(10)
    stop = time.monotonic()
    server.should_exit = True  # what SIGTERM does
    thread.join(timeout=10)
    took = time.monotonic() - stop
    assert not thread.is_alive(), "the server did not stop"
    assert took < 4.0, f"the stop took {took:.1f} s with a 1 s shutdown timeout"
    assert aborted and aborted[0] - stop < 3.0, "the run in flight was never cancelled"
    asker.join(timeout=10)
    assert outcome, "the abandoned request cannot have been answered"
    cut = outcome[0]  # a 503 saying why, not uvicorn's plain-text 500
    assert isinstance(cut, openai.APIStatusError) and cut.status_code == 503, cut
    assert cut.body["code"] == "server_stopping" and "stopped before answering" in cut.message


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), True, "10"])
def test_the_shutdown_timeout_is_checked(bad):
    from mai_graph.adapters.endpoint.server import server_config
    from mai_graph.errors import ConfigError

    with pytest.raises(ConfigError, match="shutdown timeout"):
        server_config(None, shutdown_timeout_s=bad)


@pytest.mark.parametrize("seed", [10**40, -1, 2**63])
def test_a_seed_out_of_range_is_a_400_naming_seed(served, seed):
    endpoint, small, _ = served
    with client(endpoint) as c, pytest.raises(openai.BadRequestError) as err:
        c.chat.completions.create(model="mai", messages=question(), seed=seed)
    assert err.value.body["param"] == "seed" and "seed must be an integer" in err.value.message
    assert small.calls("short") == []


def test_error_messages_name_served_models_and_carry_no_object_reprs():
    """A backend's error naming its checkpoint path reaches the client with the served name;
    a library's object repr in a message is replaced."""
    from mai_graph.errors import ConfigError

    def too_long(request):
        raise ConfigError(
            "/srv/models/8b: the generate prompt has 9,000 tokens, which does not fit "
            "<vllm.engine.Thing object at 0x7f00ab>",
            parameter="question",
        )

    small = ScriptedBackend({"short": "A"}, name="/srv/models/2b")
    large = FunctionBackend(too_long, name="/srv/models/8b")
    with running(create_app(small, large, api_keys=[KEY])) as endpoint:
        with client(endpoint) as c, pytest.raises(openai.BadRequestError) as err:
            c.chat.completions.create(model="mai", messages=question())
        broken = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64).decode()
        with client(endpoint) as c, pytest.raises(openai.BadRequestError) as bad_image:
            c.chat.completions.create(model="mai", messages=question(image=broken))
    message = err.value.message
    assert "mai/large: the generate prompt" in message and "/srv/models" not in message
    assert "object at 0x" not in message and "object at 0x" not in bad_image.value.message
    assert "cannot decode image" in bad_image.value.message


@pytest.mark.server
def test_a_trickled_body_is_a_408_and_frees_its_admission_slot():
    """A client that sends its headers and then trickles the body cannot hold one of the
    endpoint's admission slots: after the body timeout it gets a 408, and the other request
    waiting for the one slot is answered."""
    import socket

    small, large = transfer_pair()
    app = create_app(small, large, api_keys=[KEY], max_preparing=1, body_timeout_s=1.0)
    with serving_app(app) as url:
        host, port = url.removeprefix("http://").split(":")
        sock = socket.create_connection((host, int(port)), timeout=10)
        sock.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n"
                      f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
                      "Content-Length: 100000\r\n\r\n{\"model\": ").encode())  # fmt: skip
        time.sleep(0.2)
        start = time.monotonic()
        with client(url, timeout=10) as c:
            out = c.chat.completions.create(model="mai", messages=question())
        waited = time.monotonic() - start
        reply = sock.recv(65536).decode()
        sock.close()
    assert out.choices[0].message.content == "A" and waited < 5
    assert reply.startswith("HTTP/1.1 408") and "request_timeout" in reply


# -- the transport before the key check (uvicorn as `mai-graph serve` configures it) ----------


def _raw(url: str, data: bytes, *, wait_s: float = 5) -> tuple[bytes, bool]:
    """Send ``data`` on a fresh connection; what came back, and whether the server closed it."""
    import socket

    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=wait_s) as sock:
        try:
            sock.sendall(data)
        except OSError:
            pass
        reply = b""
        try:
            while chunk := sock.recv(65536):
                reply += chunk
        except ConnectionResetError:
            pass
        except TimeoutError:
            return reply, False
    return reply, True


@pytest.mark.server
def test_the_transport_is_bounded_before_the_key_is_checked():
    """A head over the limit is a 431, a head that does not arrive in time a 408, a connection
    past the limit a 503, all before any key is checked and with OpenAI's error body; a keyless
    request is refused and its connection closed, so its body is not read on."""
    import socket

    small, large = transfer_pair()
    app = create_app(small, large, api_keys=[KEY])
    with serving_app(app, max_connections=4, head_timeout_s=0.5) as url:
        huge, closed = _raw(url, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-A: "
                            + b"a" * 20_000)  # fmt: skip
        assert huge.startswith(b"HTTP/1.1 431") and closed, huge[:200]
        error = json.loads(huge.split(b"\r\n\r\n", 1)[1])["error"]
        assert error["param"] == "headers" and error["code"] == "request_header_too_large"
        assert "8,192 bytes" in error["message"] and "Fix:" in error["message"]

        start = time.monotonic()
        slow, closed = _raw(url, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        assert slow.startswith(b"HTTP/1.1 408") and closed and time.monotonic() - start < 3
        assert b"did not arrive within 0.5 s" in slow

        keyless, closed = _raw(url, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                               b"Content-Length: 1000000\r\n\r\n{")  # fmt: skip
        assert keyless.startswith(b"HTTP/1.1 401") and closed, keyless[:200]
        early, closed = _raw(url, b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\n")
        assert early.startswith(b"HTTP/1.1 200") and closed, early[:200]  # its body unread

        behind, closed = _raw(url, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1"
                              b"\r\nX-A: " + b"a" * 20_000 + b"\r\n\r\n")  # fmt: skip
        assert behind.startswith(b"HTTP/1.1 200") and closed, behind[:200]
        assert b"HTTP/1.1 431" in behind  # a whole head over the limit, pipelined

        host, port = url.removeprefix("http://").split(":")
        held = [socket.create_connection((host, int(port)), timeout=5) for _ in range(4)]
        try:
            time.sleep(0.1)
            over, closed = _raw(url, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert over.startswith(b"HTTP/1.1 503") and closed, over[:200]
            assert b"too_many_connections" in over
        finally:
            for sock in held:
                sock.close()
        time.sleep(0.2)
        with client(url, timeout=10) as c:  # and a good request is answered
            out = c.chat.completions.create(model="mai", messages=question())
        assert out.choices[0].message.content == "A"
    assert small.calls("short") == [small.calls("short")[0]]  # only the good request's


@pytest.mark.parametrize(("keyword", "bad"), [("max_connections", 0), ("head_timeout_s", 0),
                                              ("max_head_bytes", 100)])  # fmt: skip
def test_the_transport_limits_are_checked(keyword, bad):
    from mai_graph.adapters.endpoint.server import server_config
    from mai_graph.errors import ConfigError

    with pytest.raises(ConfigError, match=keyword):
        server_config(None, **{keyword: bad})


@pytest.mark.server
def test_a_body_slower_than_the_minimum_rate_is_cut_at_the_grace_not_the_timeout():
    """A key holder trickling a body gives up its admission slot after ``BODY_GRACE_S``, not
    the 30 s body timeout: the request waiting behind it is answered within seconds."""
    import socket

    from mai_graph.adapters.endpoint.app import BODY_GRACE_S

    small, large = transfer_pair()
    app = create_app(small, large, api_keys=[KEY], max_preparing=1)
    with serving_app(app) as url:
        host, port = url.removeprefix("http://").split(":")
        sock = socket.create_connection((host, int(port)), timeout=10)
        sock.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n"
                      f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
                      "Content-Length: 100000\r\n\r\n{").encode())  # fmt: skip
        time.sleep(0.2)
        start = time.monotonic()
        with client(url, timeout=20) as c:
            out = c.chat.completions.create(model="mai", messages=question())
        waited = time.monotonic() - start
        reply = sock.recv(65536).decode()
        sock.close()
    assert out.choices[0].message.content == "A" and waited < BODY_GRACE_S + 2, waited
    assert reply.startswith("HTTP/1.1 408") and "slower than 64 KiB/s" in reply


# -- the server's own settings: checked at start, failures logged -------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "match"),
    [
        ("MAI_GRAPH_IMAGE_DIR", "file", "image store .* not a writable folder"),
        ("MAI_GRAPH_IMAGE_STORE_MB", "lots", "MAI_GRAPH_IMAGE_STORE_MB must be"),
        ("MAI_GRAPH_PIXEL_CACHE_MB", "-1", "MAI_GRAPH_PIXEL_CACHE_MB must be"),
    ],
)
def test_a_misconfigured_server_refuses_to_start(variable, value, match, tmp_path, monkeypatch):
    """Settings every request would use are checked when the app is made: a ConfigError naming
    the variable and the fix, instead of a failure per request."""
    from mai_graph.errors import ConfigError

    if value == "file":
        (tmp_path / "store").write_text("a file, not a folder")
        value = str(tmp_path / "store")
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError, match=match) as err:
        create_app(*transfer_pair())
    assert err.value.parameter == variable and err.value.fix


@pytest.mark.server
def test_the_serve_command_refuses_to_start_on_a_misconfigured_image_store(tmp_path):
    import os
    import subprocess
    import sys

    from mai_graph.cli import EXIT_USAGE
    from tests.servers import free_port

    (tmp_path / "store").write_text("a file, not a folder")
    env = {
        **os.environ,
        "MAI_GRAPH_BACKEND": "fake",
        "MAI_GRAPH_IMAGE_DIR": str(tmp_path / "store"),
    }
    cmd = [sys.executable, "-m", "mai_graph.cli", "serve", "--port", str(free_port())]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("mai-graph serve started on an image store that is a file")
    assert done.returncode == EXIT_USAGE, done.stderr
    assert "MAI_GRAPH_IMAGE_DIR" in done.stderr and "Fix:" in done.stderr
    assert "Traceback" not in done.stderr and "serving" not in done.stderr


def test_a_server_setting_failing_at_request_time_is_a_logged_5xx(tmp_path, monkeypatch, caplog):
    """The image store filling up, or its folder replaced by a file, after the start: the
    client gets a 5xx that names no server path (not a 400 blaming its request), and the
    server's log has the error with its traceback."""
    import logging
    import shutil

    store = tmp_path / "store"
    monkeypatch.setenv("MAI_GRAPH_IMAGE_DIR", str(store))
    monkeypatch.setenv("MAI_GRAPH_PIXEL_CACHE_MB", "0")  # every image goes to the store
    small, large = transfer_pair()
    with running(create_app(small, large, api_keys=[KEY])) as endpoint:
        (store / "recent.png").write_bytes(b"x" * 150)  # another request's image, just used
        monkeypatch.setenv("MAI_GRAPH_IMAGE_STORE_MB", "0.0002")  # 200 bytes: full
        with caplog.at_level(logging.ERROR, logger="mai_graph"):
            with client(endpoint) as c, pytest.raises(openai.APIStatusError) as full:
                c.chat.completions.create(model="mai", messages=question(image=data_url((1, 2, 3))))
            monkeypatch.delenv("MAI_GRAPH_IMAGE_STORE_MB")
            shutil.rmtree(store)
            store.write_text("a file, not a folder")
            with client(endpoint) as c, pytest.raises(openai.InternalServerError) as broken:
                c.chat.completions.create(model="mai", messages=question(image=data_url((4, 5, 6))))
    assert full.value.status_code == 503 and full.value.body["code"] == "server_setting_failed"
    assert "MAI_GRAPH_IMAGE_STORE_MB" in full.value.message and str(store) not in str(full.value)
    assert broken.value.status_code == 500 and str(store) not in str(broken.value)
    logged = [r for r in caplog.records if r.name.startswith("mai_graph")]
    assert len(logged) == 2 and all(r.levelno == logging.ERROR and r.exc_info for r in logged)
    assert "image store is full" in logged[0].getMessage()
    assert small.calls("short") == []


@pytest.mark.server
def test_the_serve_command_logs_a_500_with_its_traceback(tmp_path):
    """`mai-graph serve` whose image folder is replaced by a file after the start: the image
    request's 500 is in the server's log, with the traceback, at its default log level."""
    import os
    import shutil
    import sys

    from tests.servers import free_port, serving

    store, port = tmp_path / "store", free_port()
    store.mkdir()
    env = {**os.environ, "MAI_GRAPH_BACKEND": "fake", "MAI_GRAPH_IMAGE_DIR": str(store),
           "MAI_GRAPH_PIXEL_CACHE_MB": "0"}  # fmt: skip
    cmd = [sys.executable, "-m", "mai_graph.cli", "serve", "--port", str(port)]
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "server.log"
    with serving(cmd, f"{url}/health", log, env=env, timeout=120):
        shutil.rmtree(store)
        store.write_text("a file, not a folder")
        with httpx.Client(timeout=30) as h:
            r = h.post(f"{url}/v1/chat/completions",
                       json={"model": "mai", "messages": question()})  # fmt: skip
        time.sleep(0.3)
        text = log.read_text()
    assert r.status_code == 500 and "see the server's log" in r.json()["error"]["message"]
    assert "ERROR" in text and "preparing a request failed (500)" in text, text[-2000:]
    assert "Traceback (most recent call last)" in text and "FileExistsError" in text
