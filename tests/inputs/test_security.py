"""Security guarantees of docs/security.md, end to end: graphs that serve others' input refuse
server paths, the graph never blocks its event loop, and no secret reaches state, checkpoints,
metrics, results, callbacks or logs."""

import base64
import http.server
import io
import json
import logging
import threading

import pytest
from PIL import Image

from mai_graph import create_mai_graph, demo_backends, image_ref, run
from mai_graph.errors import ImageAccessError, ImageMismatchError
from mai_graph.inputs.sources import ImagePolicy, resolve_image

SECRET = "sk-mai-test-0123456789abcdefSECRET"


def png_bytes(color=(10, 120, 200)):
    buf = io.BytesIO()
    Image.new("RGB", (24, 16), color).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture
def root(tmp_path):
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "in.png").write_bytes(png_bytes())
    (tmp_path / "out.png").write_bytes(png_bytes((1, 1, 1)))
    return allowed


# -- graphs that serve others' input -----------------------------------------------------------


async def test_untrusted_graph_accepts_inline_images_and_refuses_server_paths(root, tmp_path):
    graph = create_mai_graph(
        *demo_backends(), image_policy=ImagePolicy.untrusted(roots=[root])
    ).compile()
    data = base64.b64encode(png_bytes()).decode()
    for image in ("data:image/png;base64," + data, data, str(root / "in.png")):
        out = await graph.ainvoke({"question": "Is it blue?", "image": image})
        assert out["route"]
    for image in (str(tmp_path / "out.png"), str(tmp_path / "none.png"), "/etc/passwd"):
        with pytest.raises(ImageAccessError, match="not allowed"):
            await graph.ainvoke({"question": "Is it blue?", "image": image})
    forged = {**image_ref(root / "in.png"), "sha256": "f" * 64}
    with pytest.raises(ImageMismatchError):
        await graph.ainvoke({"question": "Is it blue?", "image": forged})


def test_python_callers_keep_local_paths(tmp_path):
    (tmp_path / "mine.png").write_bytes(png_bytes())
    small, large = demo_backends()
    assert run("Is it blue?", tmp_path / "mine.png", small=small, large=large).route


def test_studio_graph_uses_the_untrusted_policy_from_the_environment():
    from mai_graph.adapters import studio

    assert studio.image_policy == ImagePolicy.from_env()
    assert not studio.image_policy.allow_paths


# -- nothing blocks the event loop -------------------------------------------------------------


async def test_graph_runs_with_images_never_block_the_event_loop(root, tmp_path, monkeypatch):
    """Every image source, cold (new store folder, empty cache), under blockbuster's detector.

    ``langgraph dev`` runs the same detector (a lighter set of its checks);
    tests/adapters/test_studio.py runs the real server without ``--allow-blocking``.
    """
    from blockbuster import BlockingError, blockbuster_ctx

    from mai_graph.inputs import images

    monkeypatch.setenv("MAI_GRAPH_IMAGE_DIR", str(tmp_path / "new-store"))
    images.PIXELS.clear()
    data = png_bytes((7, 8, 9))
    trusted = create_mai_graph(*demo_backends()).compile()
    untrusted = create_mai_graph(
        *demo_backends(), image_policy=ImagePolicy.untrusted(roots=[root])
    ).compile()
    await trusted.ainvoke({"question": "warm up?"})  # LangGraph's own first-run imports
    sources = [
        "data:image/png;base64," + base64.b64encode(data).decode(),
        base64.b64encode(png_bytes((9, 8, 7))).decode(),
        str(root / "in.png"),
    ]
    with blockbuster_ctx():
        for graph in (trusted, untrusted):
            for source in sources:
                assert (await graph.ainvoke({"question": "Blue?", "image": source}))["route"]
        with pytest.raises(ImageAccessError):
            await untrusted.ainvoke({"question": "Blue?", "image": "/etc/passwd"})
        # The detector is live: the same work done on the loop is caught.
        with pytest.raises(BlockingError):
            resolve_image(png_bytes((1, 2, 3)))


# -- no secret reaches state, checkpoints, metrics, results, callbacks or logs -----------------


class _FakeOpenAI(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible chat endpoint that streams one answer and records auth headers."""

    seen_auth: list = []

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen_auth.append(self.headers.get("Authorization"))
        text = "no" if body["model"] == "large-model" else "I see blue. The answer is yes."

        def event(choices, usage=None):
            chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 0,
                     "model": body["model"], "choices": choices}  # fmt: skip
            if usage:
                chunk["usage"] = usage
            return f"data: {json.dumps(chunk)}\n\n".encode()

        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for word in text.split(" "):  # one token per word, with a logprob (for the scorers)
            logprobs = {"content": [{"token": word, "logprob": -0.5, "top_logprobs": []}]}
            delta = {"content": word if word == text.split(" ")[0] else " " + word}
            choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": None}
            self.wfile.write(event([choice]))
        self.wfile.write(event([{"index": 0, "delta": {}, "finish_reason": "stop"}]))
        usage = {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
        self.wfile.write(event([], usage) + b"data: [DONE]\n\n")

    def log_message(self, *args):
        pass


@pytest.fixture
def openai_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeOpenAI)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    _FakeOpenAI.seen_auth = []
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()
    server.server_close()


@pytest.mark.server
def test_no_secret_in_state_checkpoints_metrics_results_or_logs(
    openai_server, tmp_path, monkeypatch, caplog
):
    pytest.importorskip("openai")
    from langchain_core.callbacks import BaseCallbackHandler
    from langgraph.checkpoint.sqlite import SqliteSaver

    from mai_graph.adapters.langchain import MAIChatModel
    from mai_graph.backends.openai import OpenAIBackend

    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("MAI_GRAPH_IMAGE_DIR", str(tmp_path / "store"))
    caplog.set_level(logging.DEBUG)
    small = OpenAIBackend.from_url(openai_server, "small-model", api_key=SECRET)
    large = OpenAIBackend.from_url(openai_server, "large-model", api_key=SECRET)
    image = "data:image/png;base64," + base64.b64encode(png_bytes()).decode()
    seen: list[str] = []

    class Recorder(BaseCallbackHandler):
        def on_chat_model_start(self, serialized, messages, **kw):
            seen.append(repr((serialized, messages, kw)))

        def on_llm_end(self, response, **kw):
            seen.append(repr((response, kw)))

        def on_chain_start(self, serialized, inputs, **kw):
            seen.append(repr((serialized, inputs, kw)))

        def on_chain_end(self, outputs, **kw):
            seen.append(repr((outputs, kw)))

    db = tmp_path / "checkpoints.sqlite"
    with SqliteSaver.from_conn_string(str(db)) as saver:
        graph = create_mai_graph(small, large, retry_policy=None).compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "t1"}}
        out = graph.invoke({"question": "Is the square blue?", "image": image}, config)
        state = graph.get_state(config)
        history = list(graph.get_state_history(config))
    result = run("Is the square blue?", image, small=small, large=large)
    chat = MAIChatModel(small=small, large=large)
    reply = chat.invoke(
        [{"role": "user", "content": [{"type": "text", "text": "Blue?"},
                                      {"type": "image_url", "image_url": {"url": image}}]}],
        config={"callbacks": [Recorder()]},
    )  # fmt: skip

    assert f"Bearer {SECRET}" in _FakeOpenAI.seen_auth  # the key was in use
    places = {
        "checkpoint file": db.read_bytes().decode("latin-1"),
        "state": repr(state) + repr(history),
        "output and metrics": json.dumps(out, default=repr),
        "MAIResult": json.dumps(result.to_dict(), default=repr),
        "chat reply": repr(reply),
        "callbacks": "".join(seen),
        "logs": caplog.text,
        "backend and model reprs": repr(small) + repr(chat) + repr(chat._identifying_params),
    }
    assert out["metrics"] and caplog.text  # things were recorded and logged
    assert out["route"] == "transfer" and reply.content == "no"  # every node made its calls
    leaks = [where for where, text in places.items() if SECRET in text or SECRET[3:20] in text]
    assert not leaks, f"the API key leaked into: {leaks}"


# -- the chat adapter ----------------------------------------------------------------------------


def _image_message(source):
    from langchain_core.messages import HumanMessage

    image = {"type": "image_url", "image_url": {"url": source}}
    return [HumanMessage(content=[{"type": "text", "text": "Is it blue?"}, image])]


def test_chat_model_reads_no_server_files_by_default(root, tmp_path, monkeypatch):
    from mai_graph.adapters.langchain import MAIChatModel

    monkeypatch.delenv("MAI_GRAPH_IMAGE_ROOTS", raising=False)
    chat = MAIChatModel(small=demo_backends()[0], large=demo_backends()[1])
    data = base64.b64encode(png_bytes()).decode()
    assert chat.invoke(_image_message("data:image/png;base64," + data)).content
    messages = set()
    for source in (str(root / "in.png"), str(tmp_path / "none.png"), (root / "in.png").as_uri(),
                   "/etc/passwd", "https://example.com/cat.png"):  # fmt: skip
        with pytest.raises(ImageAccessError) as err:
            chat.invoke(_image_message(source))
        shown = source if len(source) <= 80 else source[:77] + "..."
        messages.add(str(err.value).replace(shown, "<given>"))
    assert len(messages) == 2  # one for every path; one for URLs (off)

    allowed = MAIChatModel(
        small=demo_backends()[0],
        large=demo_backends()[1],
        image_policy=ImagePolicy.untrusted(roots=[root]),
    )
    assert allowed.invoke(_image_message(str(root / "in.png"))).content


def test_chat_graph_follows_the_environment(root, monkeypatch):
    from mai_graph.adapters.langchain import create_mai_chat_graph

    monkeypatch.setenv("MAI_GRAPH_IMAGE_ROOTS", str(root))
    graph = create_mai_chat_graph(*demo_backends()).compile()
    out = graph.invoke({"messages": _image_message(str(root / "in.png"))})
    assert out["messages"][-1].content
    with pytest.raises(ImageAccessError):
        graph.invoke({"messages": _image_message(str(root.parent / "out.png"))})


@pytest.mark.server
def test_no_secret_from_the_serving_endpoint(openai_server, monkeypatch, caplog):
    """``mai-graph serve``: neither its clients' bearer key nor the backends' API key appears in
    a response (answer, refusal or authentication error) or in the logs."""
    openai = pytest.importorskip("openai")
    from mai_graph.adapters.endpoint.app import create_app
    from mai_graph.backends.openai import OpenAIBackend
    from tests.servers import in_process

    client_key = "sk-serve-client-key-9876543210CLIENT"
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    caplog.set_level(logging.DEBUG)
    small = OpenAIBackend.from_url(openai_server, "small-model", api_key=SECRET)
    large = OpenAIBackend.from_url(openai_server, "large-model", api_key=SECRET)
    image = "data:image/png;base64," + base64.b64encode(png_bytes()).decode()
    texts = []
    with in_process(create_app(small, large, api_keys=[client_key])) as endpoint:
        for key, source in ((client_key, image), (client_key, "/etc/passwd"),
                            (client_key[:-1] + "X", image)):  # fmt: skip
            content = [{"type": "text", "text": "Blue?"},
                       {"type": "image_url", "image_url": {"url": source}}]  # fmt: skip
            api = endpoint.openai(key)
            try:
                reply = api.chat.completions.create(
                    model="mai", messages=[{"role": "user", "content": content}]
                )
                texts.append(reply.model_dump_json())
            except openai.APIStatusError as exc:
                texts.append(f"{exc.status_code} {exc.response.text}")
    assert texts[0].count('"route"') and texts[1].startswith("400") and texts[2].startswith("401")
    assert f"Bearer {SECRET}" in _FakeOpenAI.seen_auth
    for text in (*texts, caplog.text):
        assert SECRET not in text and SECRET[3:20] not in text
        assert client_key not in text and client_key[3:20] not in text
