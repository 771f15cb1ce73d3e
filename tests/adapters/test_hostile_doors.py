"""Hostile input at every public door: the Python API, the CLI, the endpoint, the chat model.

The tables are tests/bad_inputs.py (questions, images, options: run here through the chat
model, the endpoint and the CLI; tests/core/test_reliability.py runs them through ``arun`` and
tests/engines/ on the tiny vLLM pair) and tests/hostile.py (settings, the endpoint's wire, the
chat model's messages, command lines). Each case must give a typed error naming the problem
(an HTTP 4xx naming the field, an exit status 2), never a traceback, a 500 or an empty
answer; after each, the door answers a good question. The backends are fakes that record
their calls, so "never reached a model" is checked too.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
from PIL import Image

from mai_graph import MAIChatModel, ScriptedBackend, run
from mai_graph.backends.recording import RecordingBackend
from mai_graph.cli import EXIT_OK, EXIT_USAGE, main
from mai_graph.errors import MAIError
from tests import bad_inputs, hostile
from tests.servers import InProcess, in_process, serving_app

httpx = pytest.importorskip("httpx")

KEY = "sk-hostile-doors"
GOOD = "Which colour is the large shape in the image?"


def agreeing() -> tuple[RecordingBackend, RecordingBackend]:
    return (RecordingBackend(ScriptedBackend({"short": "A"}, name="small")),
            RecordingBackend(ScriptedBackend({"short": "A"}, name="large")))  # fmt: skip


def data_url_of(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


@pytest.fixture(scope="module")
def good_image(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("hostile") / "good.png"
    Image.new("RGB", (96, 64), (200, 30, 30)).save(path)
    return path


@pytest.fixture(scope="module")
def endpoint():
    """(the app in process, small, large): one app with every setting open, shared by the
    module."""
    from mai_graph.adapters.endpoint.app import create_app

    small, large = agreeing()
    app = create_app(small, large, api_keys=[KEY], allowed_settings="all")
    with in_process(app) as served:
        yield served, small, large


def post(served: InProcess, body, headers=None, key: str | None = KEY) -> httpx.Response:
    head = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"} if key else {
        "Content-Type": "application/json"}  # fmt: skip
    head.update(headers or {})
    if not isinstance(body, bytes):  # escaped as JSON allows: lone surrogates travel too
        body = json.dumps(body).encode()
    return served.client.post("/v1/chat/completions", content=body, headers=head)


def post_declared(url: str, body: bytes, declared: int) -> httpx.Response:
    """``body`` sent with a ``Content-Length`` of ``declared``, over a bare socket to a real
    server at ``url``."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {parts.hostname}\r\n"
            f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {declared}\r\nConnection: close\r\n\r\n")  # fmt: skip
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(head.encode() + body)
        data = b""
        while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < int(
            re.search(rb"content-length: (\d+)", data.lower() + b"content-length: 1").group(1)
        ):  # fmt: skip
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    status_line, rest = data.split(b"\r\n", 1)
    payload = rest.split(b"\r\n\r\n", 1)[1]
    return httpx.Response(int(status_line.split()[1]), content=payload)


def good_request(image: Path) -> dict:
    content = [{"type": "text", "text": GOOD},
               {"type": "image_url", "image_url": {"url": data_url_of(image)}}]  # fmt: skip
    return {"model": "mai", "messages": [{"role": "user", "content": content}],
            "mai": {"options": bad_inputs.OPTIONS}}  # fmt: skip


def still_answers(served: InProcess, image: Path) -> None:
    resp = post(served, good_request(image))
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == "A"


def refused(resp: httpx.Response, status: int, match: str, param: str | None = None) -> None:
    assert resp.status_code == status, (resp.status_code, resp.text[:500])
    error = resp.json()["error"]
    assert re.search(match, error["message"]), error
    if param is not None:
        assert error["param"] == param, error
    assert "Traceback" not in resp.text and "object at 0x" not in resp.text


# -- the shared input table through the other doors ----------------------------------------


def _inline(case: bad_inputs.Case, folder: Path, image: Path) -> dict | None:
    """The case's inputs as a remote caller sends them (images inline), or None if it cannot."""
    args = bad_inputs.inputs(case, folder, image)
    if not isinstance(args["image"], str) or not isinstance(args["question"], str):
        return None  # bytes, numbers, references: Python objects
    path = Path(args["image"])
    if not path.is_file():
        return None
    try:
        json.dumps(args["options"])
    except TypeError:  # a set cannot travel as JSON
        return None
    return {**args, "image": data_url_of(path)}


@pytest.mark.parametrize("case", bad_inputs.CASES, ids=[c.id for c in bad_inputs.CASES])
def test_input_table_through_the_endpoint(case, endpoint, good_image, tmp_path):
    served, small, large = endpoint
    args = _inline(case, tmp_path / "case", good_image)
    if args is None:
        pytest.skip("a path or a Python object: not something a remote client can send")
    content = [{"type": "text", "text": args["question"]},
               {"type": "image_url", "image_url": {"url": args["image"]}}]  # fmt: skip
    body = {"model": "mai", "messages": [{"role": "user", "content": content}],
            "mai": {"options": args["options"]}}  # fmt: skip
    before = len(small.requests)
    resp = post(served, body)
    if case.error is not None and "fake" in case.on:
        refused(resp, 400, case.match)
        assert len(small.requests) == before, "a bad input reached a model"
    else:
        assert resp.status_code == 200, resp.text
    still_answers(served, good_image)


@pytest.mark.parametrize("case", bad_inputs.CASES, ids=[c.id for c in bad_inputs.CASES])
async def test_input_table_through_the_chat_model(case, good_image, tmp_path):
    from langchain_core.messages import HumanMessage

    args = _inline(case, tmp_path / "case", good_image)
    if args is None:
        args = bad_inputs.inputs(case, tmp_path / "case", good_image)
        image = args["image"]
        if not (isinstance(args["question"], str) and isinstance(image, str)
                and Path(image).is_file()):  # fmt: skip
            pytest.skip("not expressible as a message: a missing file, a Python object")
        args = {**args, "image": data_url_of(Path(args["image"]))}
    small, large = agreeing()
    chat = MAIChatModel(small=small, large=large)
    message = HumanMessage(
        content=[
            {"type": "text", "text": args["question"]},
            {"type": "image_url", "image_url": {"url": args["image"]}},
        ]
    )
    if case.error is not None and "fake" in case.on:
        with pytest.raises(case.error) as err:
            await chat.ainvoke([message], options=args["options"])
        assert re.search(case.match, str(err.value)) and "Fix: " in str(err.value)
        assert small.requests == large.requests == []
    else:
        reply = await chat.ainvoke([message], options=args["options"])
        assert reply.content == "A"
    good = HumanMessage(
        content=[
            {"type": "text", "text": GOOD},
            {"type": "image_url", "image_url": {"url": data_url_of(good_image)}},
        ]
    )
    assert (await chat.ainvoke([good], options=bad_inputs.OPTIONS)).content == "A"  # fmt: skip


@pytest.mark.parametrize("case", bad_inputs.CASES, ids=[c.id for c in bad_inputs.CASES])
def test_input_table_through_the_cli(case, good_image, tmp_path, capsys):
    args = bad_inputs.inputs(case, tmp_path / "case", good_image)
    if not isinstance(args["question"], str) or not isinstance(args["image"], str):
        pytest.skip("the CLI's question and image are strings by construction")
    try:
        options = json.dumps(args["options"])
    except TypeError:
        pytest.skip("a Python object: the CLI takes options as JSON")
    status = main(["run", args["question"], "--image", args["image"], "--options", options])
    out = capsys.readouterr()
    if case.error is not None and "fake" in case.on:
        assert status == EXIT_USAGE, (status, out.err[-500:])
        assert re.search(case.match, out.err) and "Fix: " in out.err, out.err
    else:
        assert status == EXIT_OK, out.err[-500:]
    assert "Traceback" not in out.err
    assert main(["run", GOOD, "--image", str(good_image), "--option", "red",
                 "--option", "blue"]) == EXIT_OK  # fmt: skip
    capsys.readouterr()


# -- settings through three doors ----------------------------------------------------------


@pytest.mark.parametrize("case", hostile.SETTINGS, ids=[c.id for c in hostile.SETTINGS])
def test_bad_settings_through_the_api(case, good_image):
    small, large = agreeing()
    with pytest.raises(MAIError) as err:
        run(GOOD, str(good_image), options=hostile.OPTIONS, small=small, large=large,
            context={case.field: case.value})  # fmt: skip
    assert re.search(case.match, str(err.value)) and "Fix: " in str(err.value), str(err.value)
    assert err.value.parameter == case.field
    assert small.requests == large.requests == []


@pytest.mark.parametrize("case", hostile.SETTINGS, ids=[c.id for c in hostile.SETTINGS])
def test_bad_settings_through_the_cli(case, good_image, capsys):
    status = main(["run", GOOD, "--image", str(good_image),
                   "--set", f"{case.field}={json.dumps(case.value)}"])  # fmt: skip
    err = capsys.readouterr().err
    assert status == EXIT_USAGE, err[-500:]
    assert re.search(case.match, err) and "Traceback" not in err, err[-500:]


@pytest.mark.parametrize("case", hostile.SETTINGS, ids=[c.id for c in hostile.SETTINGS])
def test_bad_settings_through_the_endpoint(case, endpoint, good_image):
    served, small, _ = endpoint
    body = good_request(good_image)
    body["mai"][case.field] = case.value
    before = len(small.requests)
    refused(post(served, body), 400, case.match, f"mai.{case.field}")
    assert len(small.requests) == before
    still_answers(served, good_image)


# -- the endpoint's wire, the chat model's messages, the command line ----------------------


# A length declared apart from the body travels over a bare socket, and the transport's limits
# exist only in a real server: those cases serve the same app under uvicorn too (loopback).
WIRE = [pytest.param(c, marks=pytest.mark.server) if c.declared is not None or c.served else c
        for c in hostile.WIRE]  # fmt: skip


@pytest.mark.parametrize("case", WIRE, ids=[c.id for c in hostile.WIRE])
def test_hostile_requests_to_the_endpoint(case, endpoint, good_image):
    served, small, _ = endpoint
    before = len(small.requests)
    key = KEY if case.authorized else None
    if case.declared is not None:
        with serving_app(served.app) as url:
            resp = post_declared(url, case.body, case.declared)
    elif case.served:
        head = {"Authorization": f"Bearer {key}"} if key else {}
        with serving_app(served.app) as url, httpx.Client(timeout=30) as http:
            resp = http.post(f"{url}/v1/chat/completions", json=case.body,
                             headers={**head, **case.headers})  # fmt: skip
    else:
        resp = post(served, case.body, case.headers, key=key)
    refused(resp, case.status, case.match, case.param)
    assert len(small.requests) == before, "a refused request reached a model"
    still_answers(served, good_image)


@pytest.mark.parametrize("case", hostile.CHAT, ids=[c.id for c in hostile.CHAT])
async def test_hostile_messages_to_the_chat_model(case, good_image):
    from langchain_core.messages import HumanMessage

    small, large = agreeing()
    chat = MAIChatModel(small=small, large=large)
    url = data_url_of(good_image)
    kwargs = {} if case.options is None else {"options": case.options}
    with pytest.raises(MAIError) as err:
        await chat.ainvoke(case.messages(url), **kwargs)
    assert type(err.value).__name__ == case.error, repr(err.value)
    assert re.search(case.match, str(err.value)) and "Fix: " in str(err.value), str(err.value)
    assert "object at 0x" not in str(err.value)
    assert small.requests == large.requests == []
    good = HumanMessage(
        content=[{"type": "text", "text": GOOD}, {"type": "image_url", "image_url": {"url": url}}]
    )
    assert (await chat.ainvoke([good], options=hostile.OPTIONS)).content == "A"


@pytest.mark.parametrize("case", hostile.CLI, ids=[c.id for c in hostile.CLI])
def test_hostile_command_lines(case, tmp_path, good_image, capsys, monkeypatch):
    monkeypatch.delenv("MAI_GRAPH_SERVE_API_KEY", raising=False)
    (tmp_path / "notes.png").write_text("just some text\n")
    argv = [a.replace("{tmp}", str(tmp_path)).replace("{image}", str(good_image))
            for a in case.argv]  # fmt: skip
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse's own refusals
        status = exc.code
    err = capsys.readouterr().err
    assert status == case.status, (status, err[-800:])
    assert re.search(case.match, err), err[-800:]
    assert "Traceback" not in err
    assert (tmp_path / "notes.png").read_text() == "just some text\n", "a user's file changed"
