"""OpenTelemetry traces: run -> node -> call spans, nested under the caller's, never content.

On the fakes, through the public doors, with the SDK's in-memory exporter; and through a real
OTLP/HTTP receiver process fed by the ``mai-graph`` command (``tests/otlp_receiver.py``). The
same on real engines: ``tests/engines/test_tracing_on_engines.py``.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("opentelemetry.sdk", reason="installed with the otel extra")

from langchain_core.messages import HumanMessage  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode  # noqa: E402

from mai_graph import (  # noqa: E402
    BackendError,
    ConfigError,
    FunctionBackend,
    MAIChatModel,
    ScriptedBackend,
    arun,
    run,
    tracing,
)
from tests.otlp_receiver import receiver  # noqa: E402

OPTIONS = ["red", "blue", "green", "yellow"]
SECRET = "ZEBRA-MARKER-7781"


@pytest.fixture
def exporter():
    """Tracing on, into memory, for one test; off again afterwards."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracing.enable(provider)
    try:
        yield memory, provider
    finally:
        tracing.disable()


def transfer_pair(cot: str = "the square is blue and the circle is red"):
    small = ScriptedBackend({"short": "A", "cot": cot, "s2": "B"}, name="small-m")
    large = ScriptedBackend({"short": "C", "answer": "B"}, name="large-m")
    return small, large


def by_name(spans):
    out: dict[str, list] = {}
    for s in spans:
        out.setdefault(s.name, []).append(s)
    return out


def parent_of(span, spans):
    if span.parent is None:
        return None
    return next((s for s in spans if s.context.span_id == span.parent.span_id), None)


def test_a_transfer_run_is_one_run_span_over_node_spans_over_call_spans(exporter):
    memory, _ = exporter
    small, large = transfer_pair()
    result = run("Which colour?", options=OPTIONS, small=small, large=large)
    assert result.route == "transfer"
    spans = memory.get_finished_spans()
    names = by_name(spans)
    (root,) = names["invoke_agent mai"]
    assert root.attributes["mai.route"] == "transfer"
    assert root.attributes["mai.door"] == "python"
    assert root.attributes["gen_ai.agent.name"] == "mai"
    assert root.attributes["mai.gate.agreed"] is False
    total_in = sum(m["prompt_tokens"] for m in result.metrics)
    assert root.attributes["gen_ai.usage.input_tokens"] == total_in
    nodes = [s for s in spans if s.name.startswith("node ")]
    assert {s.attributes["mai.node"] for s in nodes} >= {
        "verify", "reason", "extract", "sparsify", "answer",
    }  # fmt: skip
    assert all(parent_of(s, spans) is root for s in nodes)
    calls = [s for s in spans if s.name.startswith("chat ")]
    assert len(calls) == len(result.metrics) == 5
    for span, rec in zip(sorted(calls, key=lambda s: s.start_time), result.metrics):
        a = span.attributes
        assert parent_of(span, spans).attributes["mai.node"] == rec["node"]
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.request.model"] == rec["model"]
        assert a["gen_ai.usage.input_tokens"] == rec["prompt_tokens"]
        assert a["gen_ai.usage.output_tokens"] == rec["generated_tokens"]
        assert a["gen_ai.response.finish_reasons"] == (rec["finish_reason"],)
        assert a["mai.role"] == rec["role"]
        assert a["mai.prefill_s"] == rec["prefill_s"] and a["mai.queue_s"] == 0.0
    sparsify = next(s for s in nodes if s.attributes["mai.node"] == "sparsify")
    assert 0 < sparsify.attributes["mai.sparsify.kept_ratio"] <= 1
    assert (
        root.attributes["mai.sparsify.kept_ratio"] == sparsify.attributes["mai.sparsify.kept_ratio"]
    )


def test_an_agreeing_run_records_the_gate_and_its_probabilities(exporter):
    memory, _ = exporter
    small = ScriptedBackend({"short": "B"}, name="s", probs={"short": 0.9})
    large = ScriptedBackend({"short": "B"}, name="l", probs={"short": 0.8})
    assert run("Which?", options=OPTIONS, small=small, large=large).route == "agree"
    (root,) = by_name(memory.get_finished_spans())["invoke_agent mai"]
    assert root.attributes["mai.route"] == "agree" and root.attributes["mai.gate.agreed"]
    assert root.attributes["mai.gate.small_prob"] == pytest.approx(0.9)
    assert root.attributes["mai.gate.large_prob"] == pytest.approx(0.8)


def test_spans_nest_under_the_callers_span_in_a_langgraph_app(exporter):
    """A LangGraph app calling MAI inside its own trace: MAI's spans are children of it."""
    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    memory, provider = exporter
    small, large = transfer_pair()

    class AppState(TypedDict, total=False):
        question: str
        answer: str

    async def ask(state: AppState) -> AppState:
        out = await arun(state["question"], options=OPTIONS, small=small, large=large)
        return {"answer": out.canonical}

    app = StateGraph(AppState)
    app.add_node("ask", ask)
    app.add_edge(START, "ask")
    app.add_edge("ask", END)
    compiled = app.compile()
    tracer = provider.get_tracer("user-app")

    async def go():
        with tracer.start_as_current_span("user request"):
            return await compiled.ainvoke({"question": "Which colour?"})

    assert asyncio.run(go())["answer"] == "B"
    spans = memory.get_finished_spans()
    (user,) = by_name(spans)["user request"]
    (root,) = by_name(spans)["invoke_agent mai"]
    assert parent_of(root, spans) is user
    assert {s.context.trace_id for s in spans} == {user.context.trace_id}


def test_a_compiled_graph_invoked_directly_nests_node_spans_under_the_current_span(exporter):
    from mai_graph import create_mai_graph

    memory, provider = exporter
    graph = create_mai_graph(*transfer_pair()).compile()
    with provider.get_tracer("user-app").start_as_current_span("outer"):
        out = graph.invoke({"question": "Which?", "options": OPTIONS}, context={})
    assert out["route"] == "transfer"
    spans = memory.get_finished_spans()
    (outer,) = by_name(spans)["outer"]
    nodes = [s for s in spans if s.name.startswith("node ")]
    assert nodes and all(parent_of(s, spans) is outer for s in nodes)
    calls = [s for s in spans if s.name.startswith("chat ")]
    assert len(calls) == 5 and all(parent_of(c, spans) in nodes for c in calls)


def _png_data_url() -> tuple[str, str]:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (40, 30), (12, 200, 90)).save(buf, format="PNG")
    b64 = base64.b64encode(buf.getvalue()).decode()
    return f"data:image/png;base64,{b64}", b64


def _dump(spans) -> str:
    return json.dumps(
        [
            {
                "name": s.name,
                "attributes": dict(s.attributes),
                "events": [(e.name, dict(e.attributes)) for e in s.events],
                "status": s.status.description,
                "resource": dict(s.resource.attributes),
            }
            for s in spans
        ],
        default=str,
    )


def test_spans_hold_no_question_answer_reasoning_or_image_bytes(exporter):
    memory, _ = exporter
    url, b64 = _png_data_url()
    cot = f"I think {SECRET}-reasoning the square is blue"
    small = ScriptedBackend({"short": "A", "cot": cot, "s2": "B"}, name="s")
    large = ScriptedBackend({"short": "C", "answer": "B"}, name="l")
    question = f"Which colour is the square? {SECRET}-question"
    options = [f"{SECRET}-red", "blue", "green"]
    result = run(question, url, options=options, small=small, large=large)
    assert result.route == "transfer"
    # The chat model door too, with the image as a LangChain image block.
    chat = MAIChatModel(small=small, large=large, options=options)
    chat.invoke([HumanMessage(content=[
        {"type": "text", "text": question},
        {"type": "image", "base64": b64, "mime_type": "image/png"},
    ])])  # fmt: skip
    spans = memory.get_finished_spans()
    assert len(by_name(spans)["invoke_agent mai"]) == 2
    dumped = _dump(spans)
    assert SECRET not in dumped
    assert b64[:40] not in dumped and b64[-40:] not in dumped
    assert "the square is blue" not in dumped


def test_a_failed_call_marks_its_spans_without_quoting_the_input(exporter):
    memory, _ = exporter

    def broken(request):
        if request.purpose == "cot":
            raise BackendError(f"engine fell over on {SECRET}", parameter="request")
        return "A" if request.purpose == "short" else "B"

    small = FunctionBackend(broken, name="s")
    large = ScriptedBackend({"short": "C", "answer": "B"}, name="l")
    with pytest.raises(BackendError):
        run(f"Which? {SECRET}", options=OPTIONS, small=small, large=large)
    spans = memory.get_finished_spans()
    failed = [s for s in spans if s.status.status_code == StatusCode.ERROR]
    names = {s.name for s in failed}
    assert {"chat s", "node reason", "invoke_agent mai"} <= names
    for span in failed:
        assert span.attributes["error.type"] == "BackendError"
        assert span.status.description == "BackendError (parameter request)"
    assert SECRET not in _dump(spans)


def test_calls_are_reported_by_the_graphs_wrapper_not_by_the_node(exporter):
    """A node core called outside the graph reaches the caller's backend unwrapped: no span.

    Through the graph the same call is a ``chat`` span named after the node and role that
    labelled it (the graph wraps every backend in its instrumentation).
    """
    from mai_graph.lineup import Lineup
    from mai_graph.nodes._common import offline
    from mai_graph.nodes.prepare import make_prepare
    from mai_graph.nodes.verify import verify

    memory, _ = exporter
    small, large = transfer_pair()
    lineup = Lineup.of(small, large)
    state = {"question": "Which?", "options": OPTIONS}
    runtime = offline()
    state = {**state, **asyncio.run(make_prepare(lineup, None, False).core(state, runtime))}
    asyncio.run(verify(state, runtime, lineup))
    assert len(small.requests) == len(large.requests) == 1
    assert memory.get_finished_spans() == ()

    asyncio.run(verify(state, runtime, lineup.instrumented()))
    calls = [s for s in memory.get_finished_spans() if s.name.startswith("chat ")]
    assert sorted(s.attributes["mai.role"] for s in calls) == ["large", "small"]
    assert {s.attributes["mai.node"] for s in calls} == {"verify"}


def test_tracing_off_records_nothing(exporter):
    memory, _ = exporter
    tracing.disable()
    assert not tracing.enabled()
    assert run("Which?", options=OPTIONS, small=transfer_pair()[0], large=transfer_pair()[1])
    assert memory.get_finished_spans() == ()


@pytest.mark.parametrize("value", ["yes please", "otel", "2"])
def test_an_unknown_tracing_mode_is_refused(value):
    with pytest.raises(ConfigError) as err:
        tracing.configure_from_env({"MAI_GRAPH_OTEL": value})
    assert err.value.parameter == "MAI_GRAPH_OTEL" and "otlp" in err.value.fix
    assert not tracing.enabled()


@pytest.mark.parametrize("value", ["", "0", "off"])
def test_tracing_stays_off_without_a_mode(value):
    assert tracing.configure_from_env({"MAI_GRAPH_OTEL": value}) is False


def test_the_command_line_refuses_a_bad_tracing_mode():
    env = {**os.environ, "MAI_GRAPH_OTEL": "sometimes"}
    proc = subprocess.run(
        [sys.executable, "-m", "mai_graph.cli", "run", "Is it red?"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "MAI_GRAPH_OTEL" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.server
def test_the_command_exports_its_trace_to_a_real_otlp_receiver(tmp_path):
    """``MAI_GRAPH_OTEL=otlp mai-graph run``: the spans arrive over OTLP/HTTP, flushed at exit."""
    with receiver(tmp_path) as otlp:
        env = {
            **os.environ,
            "MAI_GRAPH_OTEL": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint,
            "OTEL_SERVICE_NAME": "mai-test",
        }
        proc = subprocess.run(
            [sys.executable, "-m", "mai_graph.cli", "run", "Which colour?", "--json",
             "--option", "red", "--option", "blue"],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        spans = otlp.spans()
    names = [s["name"] for s in spans]
    (root,) = [s for s in spans if s["name"] == "invoke_agent mai"]
    assert root["service"] == "mai-test" and root["scope"] == "mai_graph"
    assert root["attributes"]["mai.route"] == out["route"]
    calls = [s for s in spans if s["name"].startswith("chat ")]
    assert len(calls) == len(out["metrics"]) and "node verify" in names
    ids = {s["span_id"]: s for s in spans}
    for call in calls:
        node = ids[call["parent_id"]]
        assert node["name"].startswith("node ") and ids[node["parent_id"]] is root
        assert call["kind"] == 3  # SPAN_KIND_CLIENT
        assert call["attributes"]["gen_ai.usage.input_tokens"] > 0
    assert len({s["trace_id"] for s in spans}) == 1


@pytest.mark.server
def test_with_no_collector_listening_the_command_exits_promptly(monkeypatch, capsys):
    """The exit hook flushes at most ``FLUSH_TIMEOUT_S``; the exporter's own retries (10 s by
    default) are cut short, and the dropped spans are reported."""
    import logging
    import socket
    import time

    from opentelemetry import trace

    from mai_graph.cli import main

    with socket.socket() as sock:  # a port nothing listens on (connections are refused)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("MAI_GRAPH_OTEL", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    assert not isinstance(trace.get_tracer_provider(), TracerProvider)  # one is built here
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logging.getLogger("mai_graph.tracing").addHandler(handler)
    try:
        assert main(["run", "Is it red?"]) == 0
        assert tracing.enabled()
        start = time.perf_counter()
        tracing.disable()  # what the exit hook runs
        took = time.perf_counter() - start
    finally:
        logging.getLogger("mai_graph.tracing").removeHandler(handler)
        tracing.disable()
    assert took < tracing.FLUSH_TIMEOUT_S + 2.5, took
    assert any("took no spans" in r.getMessage() for r in records)
    capsys.readouterr()


TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


@pytest.mark.parametrize("stream", [False, True])
def test_the_endpoint_nests_its_run_under_the_requests_traceparent(exporter, stream):
    pytest.importorskip("openai", reason="installed with the openai extra")
    from mai_graph.adapters.endpoint.app import create_app
    from tests.servers import in_process

    memory, _ = exporter
    key = "sk-tracing-secret-key-1234"
    url, b64 = _png_data_url()
    with in_process(create_app(*transfer_pair(), api_keys=[key])) as endpoint:
        client = endpoint.openai(key)
        header = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}
        content = [
            {"type": "text", "text": f"Which colour? {SECRET}"},
            {"type": "image_url", "image_url": {"url": url}},
        ]
        kwargs = dict(
            model="mai",
            messages=[{"role": "user", "content": content}],
            extra_body={"mai": {"options": OPTIONS}},
            extra_headers=header,
        )
        if stream:
            chunks = list(client.chat.completions.create(stream=True, **kwargs))
            assert chunks[-1].model_extra["mai"]["route"] == "transfer"
        else:
            reply = client.chat.completions.create(**kwargs)
            assert reply.model_extra["mai"]["route"] == "transfer"
    spans = memory.get_finished_spans()
    (root,) = by_name(spans)["invoke_agent mai"]
    assert root.attributes["mai.door"] == "endpoint"
    assert format(root.context.trace_id, "032x") == TRACE_ID
    assert format(root.parent.span_id, "016x") == PARENT_ID and root.parent.is_remote
    calls = [s for s in spans if s.name.startswith("chat ")]
    assert len(calls) == 5 and {format(s.context.trace_id, "032x") for s in spans} == {TRACE_ID}
    dumped = _dump(spans)
    assert key not in dumped and SECRET not in dumped and b64[:40] not in dumped


def test_a_bad_traceparent_starts_a_trace_of_its_own(exporter):
    from mai_graph.adapters.endpoint.app import create_app
    from tests.servers import in_process

    memory, _ = exporter
    with in_process(create_app(*transfer_pair())) as endpoint:
        for bad in ("nonsense", "00-" + "0" * 32 + "-" + "0" * 16 + "-01", "x" * 5000):
            reply = endpoint.client.post(
                "/v1/chat/completions",
                json={
                    "model": "mai",
                    "messages": [{"role": "user", "content": "Which colour?"}],
                    "mai": {"options": OPTIONS},
                },
                headers={"traceparent": bad},
            )
            assert reply.status_code == 200, reply.text
    roots = by_name(memory.get_finished_spans())["invoke_agent mai"]
    assert len(roots) == 3 and all(r.parent is None for r in roots)


async def test_a_streamed_chat_model_keeps_the_callers_span_current(exporter, caplog):
    """The chat model's streamed run span lives on the run's own task, never the caller's."""
    from opentelemetry import trace

    memory, provider = exporter
    small, large = transfer_pair()
    chat = MAIChatModel(small=small, large=large, options=OPTIONS)
    with provider.get_tracer("user-app").start_as_current_span("user request") as user:
        pieces = []
        async for chunk in chat.astream("Which colour?"):
            assert trace.get_current_span() is user  # not MAI's run span
            pieces.append(chunk.content)
        assert trace.get_current_span() is user
        # A consumer that leaves early: the run is cancelled on its task, the context intact.
        async for _ in chat.astream("Which colour?"):
            break
        assert trace.get_current_span() is user
    assert "".join(pieces)
    assert "Failed to detach context" not in caplog.text
    spans = memory.get_finished_spans()
    roots = by_name(spans)["invoke_agent mai"]
    (user_span,) = by_name(spans)["user request"]
    assert roots and all(parent_of(r, spans) is user_span for r in roots)
    assert any(r.attributes.get("mai.route") == "transfer" for r in roots)


def test_a_review_pause_is_not_an_error(exporter):
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    from mai_graph import create_mai_graph

    memory, _ = exporter
    graph = create_mai_graph(*transfer_pair(), review=True).compile(checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "review"}}
    first = graph.invoke({"question": "Which?", "options": OPTIONS}, cfg, context={})
    assert first["__interrupt__"]
    assert graph.invoke(Command(resume="continue"), cfg, context={})["route"] == "transfer"
    spans = memory.get_finished_spans()
    assert not [s for s in spans if s.status.status_code == StatusCode.ERROR]
    paused = [s for s in by_name(spans)["node review"] if s.attributes.get("mai.interrupted")]
    assert paused and "error.type" not in paused[0].attributes


def test_a_vllm_server_is_named_vllm_in_spans():
    from mai_graph.backends.base import provider_of
    from mai_graph.backends.openai import OpenAIBackend
    from mai_graph.backends.steered import SteeredBackend

    served = OpenAIBackend.from_url("http://127.0.0.1:9/v1", "m")
    assert provider_of(served) == "vllm" and provider_of(SteeredBackend(served, {})) == "vllm"
    other = OpenAIBackend.from_url("http://127.0.0.1:9/v1", "m", vllm_extras=False)
    assert provider_of(other) == "openai"
