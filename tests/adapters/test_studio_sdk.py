"""The served graphs driven with the official `langgraph_sdk` client against a real `langgraph dev`.

The server runs without `--allow-blocking`, on the fake backend: review on, a bad resume that asks
again, a good resume; the context form's schema; typos through the server; the chat graph
streaming its tokens in `messages` mode; a reused thread asked a different kind of question.
"""

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.servers import free_port, serving

pytestmark = pytest.mark.server
ROOT = Path(__file__).resolve().parents[2]
LATENCY_S = 0.4
"""Seconds each call of the served fake pair takes (a transfer run: about five of them)."""


@pytest.fixture(scope="module")
def otlp(tmp_path_factory):
    """An OTLP/HTTP receiver the server exports its spans to (``MAI_GRAPH_OTEL=otlp``)."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the otel extra")
    from tests.otlp_receiver import receiver

    with receiver(tmp_path_factory.mktemp("otlp")) as running:
        yield running


@pytest.fixture(scope="module")
def url(tmp_path_factory, otlp):
    cli = Path(sys.executable).parent / "langgraph"
    if not cli.exists() and not shutil.which("langgraph"):
        pytest.skip("langgraph-cli is installed with the studio extra")
    port = free_port()
    env = {**os.environ, "LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGGRAPH_NO_VERSION_CHECK": "true",
           "MAI_GRAPH_BACKEND": "fake", "MAI_GRAPH_FAKE_LATENCY_S": str(LATENCY_S),
           "MAI_GRAPH_OTEL": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint,
           "OTEL_BSP_SCHEDULE_DELAY": "100"}  # fmt: skip
    cmd = [str(cli) if cli.exists() else "langgraph", "dev", "--no-browser", "--no-reload",
           "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    assert "--allow-blocking" not in cmd
    log = tmp_path_factory.mktemp("studio-sdk") / "server.log"
    base = f"http://127.0.0.1:{port}"
    with serving(cmd, f"{base}/ok", log, env=env, cwd=ROOT, timeout=90):
        yield base


@pytest.fixture
def client(url):
    from langgraph_sdk import get_client

    return get_client(url=url)


async def _interrupts(client, thread_id):
    state = await client.threads.get_state(thread_id)
    return [i for task in state["tasks"] for i in task.get("interrupts", [])]


async def test_context_form_schema_has_descriptions_bounds_and_enums(client):
    (assistant,) = await client.assistants.search(graph_id="mai")
    schemas = await client.assistants.get_schemas(assistant["assistant_id"])
    context = schemas["context_schema"]["properties"]
    assert all(prop.get("description") for prop in context.values())
    assert context["keep_ratio"]["exclusiveMinimum"] == 0 and context["keep_ratio"]["maximum"] == 1
    assert context["gate"]["enum"] == ["agree", "agree_confident", "agree_joint", "never"]
    assert context["review"]["type"] == "boolean"
    inputs = schemas["input_schema"]["properties"]
    assert "data URL" in inputs["image"]["description"]
    assert "{" in inputs["options"]["description"]


async def test_review_from_the_run_context_bad_resume_asks_again(client):
    thread = await client.threads.create()
    tid = thread["thread_id"]
    question = {"question": "Which colour is the square?", "options": {"A": "red", "B": "blue"}}
    await client.runs.wait(tid, "mai", input=question, context={"review": True})
    (pending,) = await _interrupts(client, tid)
    assert pending["value"]["allowed"] == ["continue", "answer"]
    assert pending["value"]["question"] == question["question"]

    await client.runs.wait(tid, "mai", command={"resume": {"answr": "B"}}, context={"review": True})
    (again,) = await _interrupts(client, tid)
    assert "error" in again["value"]  # asked again, thread not locked

    out = await client.runs.wait(
        tid, "mai", command={"resume": {"answer": "the blue one"}}, context={"review": True}
    )
    assert out["route"] == "human" and out["canonical"] == "B"
    assert await _interrupts(client, tid) == []


async def test_review_off_by_default(client):
    out = await client.runs.wait(None, "mai", input={"question": "Is the square red?"})
    assert out["route"] and "__interrupt__" not in out


async def test_the_servers_runs_are_traced_to_an_otlp_receiver(client, otlp):
    """MAI_GRAPH_OTEL=otlp in langgraph dev's environment: node and call spans, exported."""
    import asyncio

    out = await client.runs.wait(
        None, "mai", input={"question": "Which colour?", "options": ["red", "blue"]}
    )
    assert out["route"]
    calls: list = []
    for _ in range(100):  # the batch processor exports every 100 ms
        spans = otlp.spans()
        calls = [s for s in spans if s["name"].startswith("chat ")]
        if len(calls) >= len(out["metrics"]):
            break
        await asyncio.sleep(0.1)
    ids = {s["span_id"]: s for s in spans}
    assert len(calls) >= len(out["metrics"]) >= 2
    for call in calls:
        assert ids[call["parent_id"]]["name"].startswith("node ")
        assert call["attributes"]["gen_ai.usage.input_tokens"] > 0
    assert {s["service"] for s in spans if s["scope"] == "mai_graph"} == {"mai-graph"}


async def test_a_typo_in_the_context_is_an_error_naming_the_key(client):
    thread = await client.threads.create()
    with pytest.raises(Exception) as err:
        out = await client.runs.wait(
            thread["thread_id"], "mai", input={"question": "Is it red?"},
            context={"kep_ratio": 0.3}, raise_error=True,
        )  # fmt: skip
        pytest.fail(f"the run succeeded: {out}")
    assert "kep_ratio" in str(err.value)


async def test_a_reused_thread_answers_each_question_with_its_own_inputs(client):
    thread = await client.threads.create()
    tid = thread["thread_id"]
    first = await client.runs.wait(
        tid, "mai", input={"question": "Which colour?", "options": ["red", "blue"]}
    )
    assert first["canonical"] in ("A", "B")
    second = await client.runs.wait(tid, "mai", input={"question": "Is the square red?"})
    assert second["canonical"] in ("yes", "no")  # not a letter: the options were not inherited
    state = await client.threads.get_state(tid)
    assert state["values"]["asked"]["options"] is None


async def test_chat_graph_streams_its_reply_in_messages_mode(client):
    (assistant,) = await client.assistants.search(graph_id="mai_chat")
    chunks, finals = [], []
    async for part in client.runs.stream(
        None,
        assistant["assistant_id"],
        input={"messages": [{"role": "human", "content": "Is the square red?"}]},
        stream_mode="messages-tuple",
    ):
        if part.event == "messages":
            message, meta = part.data
            assert meta["langgraph_node"] == "mai"
            chunks.append(message)
        elif part.event == "values":
            finals.append(part.data)
    assert chunks, "no message chunks were streamed"
    text = "".join(m["content"] for m in chunks if m["type"] == "AIMessageChunk")
    assert text.strip() in ("yes", "no")
    assert all(m.get("name") == "mai" for m in chunks if m["type"] == "AIMessageChunk")


def _question_on(route: str, options=None) -> str:
    """A question the demo pair answers on ``route`` (transfer: five calls in a row)."""
    from mai_graph import run
    from mai_graph.backends.fake import demo_backends

    for i in range(50):
        question = f"Is the square red? ({i})"
        small, large = demo_backends(latency=0)
        if run(question, options=options, small=small, large=large).route == route:
            return question
    raise AssertionError(f"no question on the {route} route")


def _transfer_question() -> str:
    return _question_on("transfer")


async def _settled(client, tid, timeout=30.0):
    import asyncio
    import time

    deadline = time.monotonic() + timeout
    while True:
        (latest, *_) = await client.runs.list(tid)
        if latest["status"] not in ("pending", "running"):
            return latest["status"], time.monotonic()
        assert time.monotonic() < deadline, "the run never settled"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("on_disconnect", ["cancel", "continue"])
async def test_a_stream_its_client_left_is_cancelled_when_asked(client, on_disconnect):
    """langgraph-api keeps a run whose streaming client left (``on_disconnect="continue"``,
    its default, so a client can rejoin); ``on_disconnect="cancel"`` ends it at once, and the
    graph's model calls are cancelled with it (docs/studio.md)."""
    import time

    thread = await client.threads.create()
    tid = thread["thread_id"]
    stream = client.runs.stream(
        tid, "mai", input={"question": _transfer_question()}, stream_mode="updates",
        on_disconnect=on_disconnect,
    )  # fmt: skip
    async for part in stream:
        if part.event == "updates":
            break  # the first node's update: the client leaves mid-run
    await stream.aclose()
    left = time.monotonic()
    status, settled = await _settled(client, tid)
    if on_disconnect == "cancel":
        assert status == "interrupted", status
        assert settled - left < 3 * LATENCY_S + 1.0, "the run went on after its client left"
    else:
        assert status == "success"


async def test_the_shared_bad_input_table_through_the_server(client, tmp_path):
    """The refusals of tests/bad_inputs.py as a Studio client meets them, all at once: each
    run fails with the typed error's message (problem and fix) and no traceback, and the
    server then answers a good question."""
    import asyncio
    import re

    from PIL import Image

    from tests.adapters.test_hostile_doors import _inline, data_url_of
    from tests.bad_inputs import CASES, inputs

    good = tmp_path / "good.png"
    Image.new("RGB", (96, 64), (200, 30, 30)).save(good)
    cases = [c for c in CASES if c.error is not None and "fake" in c.on]

    async def one(case):
        args = _inline(case, tmp_path / case.id, good)
        if args is None:
            args = inputs(case, tmp_path / case.id, good)
            if not isinstance(args["question"], str):
                return None  # not expressible as JSON input
            try:
                json.dumps(args)
            except TypeError:  # bytes, sets, iterators: Python objects
                return None
        try:
            out = await client.runs.wait(None, "mai", input=args, raise_error=True)
        except Exception as exc:  # the run's error, as the SDK raises it
            text = str(exc)
            ok = re.search(case.match, text) or "not allowed" in text  # server paths: refused
            return None if ok and "Traceback" not in text else f"{case.id}: {text[-300:]}"
        return f"{case.id}: answered {out}"

    problems = [p for p in await asyncio.gather(*(one(c) for c in cases)) if p]
    assert not problems, "\n".join(problems)
    question = _question_on("agree", ["red", "blue"])  # one call per model
    after = await client.runs.wait(
        None, "mai", input={"question": question, "image": data_url_of(good),
                            "options": ["red", "blue"]}, raise_error=True,
    )  # fmt: skip
    assert after["route"] == "agree"
