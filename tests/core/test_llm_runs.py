"""Each model call as a LangChain chat-model run: ls_* metadata and usage where LangSmith looks.

Driven through the public doors (a compiled graph, the chat model, the chat graph) with a
LangChain callback handler standing in for LangSmith's tracer.
"""

from __future__ import annotations

import base64

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import HumanMessage

from mai_graph import (
    BackendError,
    FunctionBackend,
    MAIChatModel,
    ScriptedBackend,
    create_mai_chat_graph,
    create_mai_graph,
)

OPTIONS = ["red", "blue", "green", "yellow"]


class Recorder(BaseCallbackHandler):
    """What LangSmith's tracer would receive."""

    def __init__(self) -> None:
        self.chains: dict = {}
        self.models: dict = {}
        self.ended: dict = {}
        self.errors: dict = {}

    def on_chain_start(self, serialized, inputs, *, run_id, parent_run_id=None, **kw):
        self.chains[run_id] = (kw.get("name"), parent_run_id)

    def on_chat_model_start(self, serialized, messages, *, run_id, parent_run_id=None, **kw):
        self.models[run_id] = {
            "parent": parent_run_id,
            "messages": messages[0],
            "metadata": kw.get("metadata") or {},
            "tags": kw.get("tags") or [],
            "name": kw.get("name"),
        }

    def on_llm_end(self, response, *, run_id, **kw):
        self.ended[run_id] = response

    def on_llm_error(self, error, *, run_id, **kw):
        self.errors[run_id] = error


def transfer_pair():
    small = ScriptedBackend({"short": "A", "cot": "blue square two circles", "s2": "B"}, name="s")
    large = ScriptedBackend({"short": "C", "answer": "B"}, name="l")
    return small, large


def inner_runs(rec: Recorder) -> list[dict]:
    return [m for m in rec.models.values() if "mai:model_call" in m["tags"]]


def test_every_call_of_a_graph_run_is_a_chat_model_run_of_its_node():
    rec = Recorder()
    graph = create_mai_graph(*transfer_pair()).compile()
    out = graph.invoke({"question": "Which?", "options": OPTIONS}, {"callbacks": [rec]}, context={})
    assert out["route"] == "transfer"
    runs = [(rid, m) for rid, m in rec.models.items() if "mai:model_call" in m["tags"]]
    assert len(runs) == len(out["metrics"]) == 5
    for (rid, m), metrics in zip(runs, out["metrics"]):
        node, _ = rec.chains[m["parent"]]
        assert node == metrics["node"]
        meta = m["metadata"]
        assert meta["ls_provider"] == "mai-graph" and meta["ls_model_type"] == "chat"
        assert meta["ls_model_name"] == metrics["model"]
        assert meta["mai_role"] == metrics["role"] and "ls_max_tokens" in meta
        assert "nostream" in m["tags"]
        message = rec.ended[rid].generations[0][0].message
        usage = message.usage_metadata
        assert usage["input_tokens"] == metrics["prompt_tokens"]
        assert usage["output_tokens"] == metrics["generated_tokens"]
        assert usage["input_token_details"]["cache_read"] == (metrics["cached_tokens"] or 0)
        assert message.content == metrics["text"]
        assert rec.ended[rid].llm_output["model_name"] == metrics["model"]


def test_the_chat_models_inner_calls_nest_under_its_own_run(png):
    rec = Recorder()
    b64 = base64.b64encode(png.read_bytes()).decode()
    small, large = transfer_pair()
    chat = MAIChatModel(small=small, large=large, options=OPTIONS)
    reply = chat.invoke(
        [
            HumanMessage(
                content=[
                    {"type": "text", "text": "Which colour?"},
                    {"type": "image", "base64": b64, "mime_type": "image/png"},
                ]
            )
        ],  # fmt: skip
        config={"callbacks": [rec]},
    )
    assert reply.response_metadata["route"] == "transfer"
    outer = [rid for rid, m in rec.models.items() if "mai:model_call" not in m["tags"]]
    assert len(outer) == 1
    inner = inner_runs(rec)
    assert len(inner) == 5
    for m in inner:  # chat model -> graph -> node -> call
        node, graph_run = rec.chains[m["parent"]]
        assert rec.chains[graph_run][1] == outer[0]
        text = "\n".join(str(x.content) for x in m["messages"])
        assert "[image " in text and b64[:32] not in text  # the hash, never the bytes
    total = sum(rec.ended[rid].generations[0][0].message.usage_metadata["input_tokens"]
                for rid, m in rec.models.items() if "mai:model_call" in m["tags"])  # fmt: skip
    assert total == reply.usage_metadata["input_tokens"]


async def test_the_chat_graphs_messages_stream_carries_only_its_answer():
    rec = Recorder()
    graph = create_mai_chat_graph(*transfer_pair()).compile()
    seen = []
    async for message, _meta in graph.astream(
        {"messages": [HumanMessage("Which colour?")]},
        {"callbacks": [rec]},
        stream_mode="messages",
    ):
        seen.append(message)
    assert len(inner_runs(rec)) == 5
    # No inner call (short answers, reasoning) leaks into the messages stream.
    assert "blue square" not in "".join(str(m.content) for m in seen)
    assert seen and seen[-1].usage_metadata["input_tokens"] > 0


def test_a_failed_call_reports_its_error_to_the_callbacks():
    rec = Recorder()

    def broken(request):
        if request.purpose == "cot":
            raise BackendError("engine fell over", parameter="request")
        return "A"

    graph = create_mai_graph(
        FunctionBackend(broken, name="s"), ScriptedBackend({"short": "C"}, name="l")
    ).compile()
    with pytest.raises(BackendError):
        graph.invoke({"question": "Which?", "options": OPTIONS}, {"callbacks": [rec]}, context={})
    assert len(rec.errors) == 1
    (error,) = rec.errors.values()
    assert isinstance(error, BackendError)


def test_without_callbacks_no_run_is_reported(monkeypatch):
    from mai_graph import llm_runs

    started = []
    monkeypatch.setattr(llm_runs, "_messages", lambda request: started.append(request) or [])
    graph = create_mai_graph(*transfer_pair()).compile()
    assert graph.invoke({"question": "Which?", "options": OPTIONS}, context={})["route"]
    assert started == []
