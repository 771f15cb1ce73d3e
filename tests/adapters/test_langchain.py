"""LangChain fit: names, nested traces, tracing params, structured output, messages streaming."""

from typing import Literal
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.exceptions import OutputParserException
from langchain_core.messages import HumanMessage
from pydantic import BaseModel

from mai_graph import ConfigError, MAIChatModel, ScriptedBackend, create_mai_chat_graph

REASONING = "The square is blue and not red, so B."


def transfer_pair():
    small = ScriptedBackend({"short": "yes", "cot": REASONING, "s2": "yes"}, name="small")
    large = ScriptedBackend({"short": "no", "answer": "no it is not raining"}, name="large")
    return small, large


class Recorder(BaseCallbackHandler):
    """Records every run start with its parent."""

    def __init__(self):
        self.runs: list[tuple[str, UUID, UUID | None]] = []

    def on_chat_model_start(self, serialized, messages, *, run_id, parent_run_id=None, **kw):
        self.runs.append(("chat_model", run_id, parent_run_id))

    def on_chain_start(self, serialized, inputs, *, run_id, parent_run_id=None, **kw):
        self.runs.append((kw.get("name") or "chain", run_id, parent_run_id))


def _one_trace(recorder):
    roots = [r for r in recorder.runs if r[2] is None]
    ids = {run_id for _, run_id, _ in recorder.runs}
    orphans = [r for r in recorder.runs if r[2] is not None and r[2] not in ids]
    assert len(roots) == 1 and roots[0][0] == "chat_model" and not orphans
    return roots[0]


@pytest.mark.parametrize("mode", ["invoke", "ainvoke", "batch"])
async def test_the_inner_graph_nests_inside_the_chat_models_run(mode):
    chat = MAIChatModel(small=ScriptedBackend("yes"), large=ScriptedBackend("yes"))
    recorder = Recorder()
    config = {"callbacks": [recorder]}
    if mode == "invoke":
        chat.invoke("Is it blue?", config)
    elif mode == "ainvoke":
        await chat.ainvoke("Is it blue?", config)
    else:
        chat.batch(["Is it blue?"], config)
    root = _one_trace(recorder)
    graph_runs = [r for r in recorder.runs if r[0] == "mai"]
    assert graph_runs and all(parent == root[1] for _, _, parent in graph_runs)
    assert any(r[0] == "verify" for r in recorder.runs)  # the nodes are traced too


async def test_streaming_makes_one_trace():
    chat = MAIChatModel(small=ScriptedBackend("yes"), large=ScriptedBackend("yes"))
    recorder = Recorder()
    list(chat.stream("Is it blue?", {"callbacks": [recorder]}))
    _one_trace(recorder)
    recorder = Recorder()
    [c async for c in chat.astream("Is it blue?", {"callbacks": [recorder]})]
    _one_trace(recorder)


def test_tracing_params_name_the_provider_and_models():
    chat = MAIChatModel(small=ScriptedBackend("A", name="qwen-2b"), large=ScriptedBackend("A"))
    params = chat._get_ls_params()
    assert params["ls_provider"] == "mai-graph"
    assert params["ls_model_name"] == "qwen-2b+scripted"
    assert params["ls_model_type"] == "chat"


def test_names_reach_the_node_and_the_reply():
    graph = create_mai_chat_graph(*transfer_pair(), name="vision").compile(name="vision")
    assert "vision" in graph.get_graph().nodes
    out = graph.invoke({"messages": [HumanMessage("Is it raining?")]})
    assert out["messages"][-1].name == "vision"
    chat = MAIChatModel(small=ScriptedBackend("yes"), large=ScriptedBackend("yes"), name="eyes")
    assert chat.invoke("Is it blue?").name == "eyes"


async def test_messages_stream_mode_yields_the_answer_tokens():
    graph = create_mai_chat_graph(*transfer_pair()).compile()
    question = HumanMessage("Is it raining?")
    pieces = []
    async for message, meta in graph.astream({"messages": [question]}, stream_mode="messages"):
        pieces.append(message.content)
        assert meta["langgraph_node"] == "mai"
    assert "".join(pieces).startswith("no it is not raining")
    assert len([p for p in pieces if p]) >= 3  # token by token, not one final message


class Colour(BaseModel):
    colour: Literal["red", "blue", "green"]


class Answer(BaseModel):
    raining: bool


def test_structured_output_multiple_choice():
    small = ScriptedBackend({"short": "B"}, name="small")
    large = ScriptedBackend({"short": "B"}, name="large")
    chat = MAIChatModel(small=small, large=large)
    result = chat.with_structured_output(Colour).invoke("Which colour is the car?")
    assert result == Colour(colour="blue")
    assert large.requests[0].choices == ("A", "B", "C")
    assert "A. red" in str(large.requests[0].messages)


async def test_structured_output_yes_no_and_include_raw():
    chat = MAIChatModel(small=ScriptedBackend("no"), large=ScriptedBackend("No."))
    out = await chat.with_structured_output(Answer, include_raw=True).ainvoke("Is it raining?")
    assert out["parsed"] == Answer(raining=False) and out["parsing_error"] is None
    assert out["raw"].response_metadata["route"] == "agree"


def test_structured_output_unreadable_answer():
    chat = MAIChatModel(small=ScriptedBackend("maybe"), large=ScriptedBackend("maybe"))
    structured = chat.with_structured_output(Answer)
    with pytest.raises(OutputParserException, match="not one of"):
        structured.invoke("Is it raining?")
    raw = chat.with_structured_output(Answer, include_raw=True).invoke("Is it raining?")
    assert raw["parsed"] is None and isinstance(raw["parsing_error"], OutputParserException)


class Free(BaseModel):
    description: str


class Two(BaseModel):
    colour: Literal["red", "blue"]
    shade: Literal["light", "dark"]


@pytest.mark.parametrize(
    "schema", [Free, Two, {"type": "object"}, dict, Literal["a", "b"]], ids=str
)
def test_structured_output_refuses_what_mai_cannot_answer(schema):
    chat = MAIChatModel(small=ScriptedBackend("A"), large=ScriptedBackend("A"))
    with pytest.raises(ConfigError, match="Literal") as err:
        chat.with_structured_output(schema)
    assert err.value.parameter == "schema"


def test_tools_are_still_refused_clearly():
    chat = MAIChatModel(small=ScriptedBackend("A"), large=ScriptedBackend("A"))
    with pytest.raises(NotImplementedError, match="does not call tools"):
        chat.bind_tools([])


def test_chat_model_and_chat_graph_take_drafters_and_a_chain():
    drafters = [ScriptedBackend({"short": "no"}, name=f"d{i}") for i in range(2)]
    chain = [ScriptedBackend({"short": "no"}, name="m1"), ScriptedBackend("yes", name="m2")]
    chat = MAIChatModel(small=drafters, large=chain)
    reply = chat.invoke("Is the sky green?")
    assert reply.response_metadata["route"] == "agree" and reply.content.lower() == "no"
    assert chat._get_ls_params()["ls_model_name"] == "d0,d1+m1,m2"
    graph = create_mai_chat_graph(drafters, chain).compile()
    out = graph.invoke({"messages": [("human", "Is the sky green?")]})
    assert out["messages"][-1].content.lower() == "no"


@pytest.mark.parametrize("small, large", [(None, "ok"), ("ok", None), ([], "ok"), ("ok", 3)])
def test_backends_that_are_not_backends_are_refused_at_construction(small, large):
    ok = ScriptedBackend("A", name="ok")
    with pytest.raises(ConfigError, match="small|large") as err:
        MAIChatModel(small=ok if small == "ok" else small, large=ok if large == "ok" else large)
    assert err.value.parameter in ("small", "large") and err.value.fix
