"""MAI inside bigger LangGraph / LangChain apps: subgraphs, chat agents, streaming, resume."""

import asyncio
import base64
import operator
from typing import Annotated, NotRequired, TypedDict

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command

from mai_graph import BackendError, ConfigError, ImageError, ScriptedBackend, create_mai_graph
from mai_graph.adapters.langchain import MAIChatModel, create_mai_chat_graph, messages_to_input

OPTIONS = ["red", "blue", "green", "yellow"]
COT = "the square is blue not red so option B"


def transfer_pair(**kw):
    small = ScriptedBackend({"short": "A", "cot": COT, "s2": "C"}, name="small", **kw)
    large = ScriptedBackend({"short": "B", "answer": "D"}, name="large")
    return small, large


# -- streaming ---------------------------------------------------------------------------------


def test_custom_stream_has_token_and_metrics_events():
    g = create_mai_graph(*transfer_pair()).compile()
    updates, tokens, metrics = [], [], []
    for mode, chunk in g.stream(
        {"question": "Which?", "options": OPTIONS}, context={}, stream_mode=["updates", "custom"]
    ):
        if mode == "updates":
            updates.extend(chunk)
        elif chunk["event"] == "token":
            tokens.append((chunk["node"], chunk["role"], chunk["text"]))
        else:
            metrics.append(chunk)
    assert updates == ["prepare", "verify", "reason", "extract", "sparsify", "answer"]
    assert [m["node"] for m in metrics] == ["verify", "verify", "reason", "extract", "answer"]
    reasoning = "".join(t for node, role, t in tokens if node == "reason")
    assert reasoning == COT
    assert ("answer", "large", "D") in tokens


async def test_async_stream_from_a_parent_with_subgraphs():
    mai = create_mai_graph(*transfer_pair()).compile(name="mai")

    class Parent(TypedDict):
        question: str
        options: NotRequired[list[str]]
        answer: NotRequired[str]
        route: NotRequired[str]
        log: Annotated[list[str], operator.add]

    def after(state: Parent):
        return {"log": [f"mai said {state['answer']} via {state['route']}"]}

    b = StateGraph(Parent)
    b.add_node("mai", mai)  # shared keys: question, options, answer, route
    b.add_node("after", after)
    b.add_edge(START, "mai")
    b.add_edge("mai", "after")
    b.add_edge("after", END)
    parent = b.compile()
    namespaces, custom = set(), []
    async for ns, mode, chunk in parent.astream(
        {"question": "Which?", "options": OPTIONS, "log": []},
        context={},
        stream_mode=["updates", "custom"],
        subgraphs=True,
    ):
        namespaces.add(ns[0].split(":")[0] if ns else "")
        if mode == "custom":
            custom.append(chunk)
    assert "mai" in namespaces
    assert sum(1 for c in custom if c["event"] == "metrics") == 5
    final = await parent.ainvoke({"question": "Which?", "options": OPTIONS, "log": []}, context={})
    assert final["log"] == ["mai said D via transfer"]


def test_parent_context_reaches_the_subgraph():
    from mai_graph import MAIContext, MAIState

    small, large = transfer_pair()
    mai = create_mai_graph(small, large).compile(name="mai")
    b = StateGraph(MAIState, context_schema=MAIContext)
    b.add_node("mai", mai)
    b.add_edge(START, "mai")
    parent = b.compile()
    out = parent.invoke({"question": "Which?", "options": OPTIONS}, context={"policy": "small"})
    assert out["route"] == "small" and out["answer"] == "A"


# -- chat agents -------------------------------------------------------------------------------


def png_data_url(png):
    return "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode()


def test_messages_to_input_reads_text_image_and_options(png):
    msg = HumanMessage(
        content=[
            {"type": "text", "text": "Which colour"},
            {"type": "image_url", "image_url": {"url": png_data_url(png)}},
            {"type": "text", "text": "is the square?"},
        ],
        additional_kwargs={"options": OPTIONS},
    )
    state = messages_to_input([AIMessage("hi"), msg])
    assert state["question"] == "Which colour is the square?"
    assert state["image"].startswith("data:image/png;base64,")
    assert state["options"] == dict(zip("ABCD", OPTIONS))  # validated once, lettered
    as_file = messages_to_input([HumanMessage(content=[{"type": "image", "url": str(png)}, "Q?"])])
    assert as_file["image"] == str(png)
    b64 = messages_to_input(
        [HumanMessage(content=[{"type": "image", "base64": "AAAA", "mime_type": "image/png"}, "Q"])]
    )
    assert b64["image"] == "data:image/png;base64,AAAA"
    url = messages_to_input(
        [HumanMessage(content=[{"type": "image_url", "image_url": "https://x/y.png"}])]
    )
    assert url["image"] == "https://x/y.png"  # the graph's image policy decides (off by default)
    with pytest.raises(ImageError, match="no usable source"):
        messages_to_input([HumanMessage(content=[{"type": "image_url", "image_url": ""}])])
    with pytest.raises(ConfigError, match="no human message"):
        messages_to_input([AIMessage("hi")])


def test_chat_agent_with_mai_as_a_subgraph(png):
    small, large = transfer_pair()
    chat = create_mai_chat_graph(small, large).compile(name="mai_expert")

    def greet(state: MessagesState):
        return {"messages": [AIMessage("Let me ask the experts.")]}

    b = StateGraph(MessagesState)
    b.add_node("greet", greet)
    b.add_node("mai_expert", chat)
    b.add_edge(START, "greet")
    b.add_edge("greet", "mai_expert")
    b.add_edge("mai_expert", END)
    agent = b.compile(checkpointer=InMemorySaver())
    question = HumanMessage(
        content=[{"type": "text", "text": "Which colour is the square?"},
                 {"type": "image_url", "image_url": {"url": png_data_url(png)}}],
        additional_kwargs={"options": OPTIONS},
    )  # fmt: skip
    out = agent.invoke({"messages": [question]}, {"configurable": {"thread_id": "chat"}})
    reply = out["messages"][-1]
    assert isinstance(reply, AIMessage) and reply.content == "D"
    assert reply.response_metadata["route"] == "transfer"
    assert reply.response_metadata["latency_s"] > 0
    assert len(reply.response_metadata["metrics"]) == 5
    usage = reply.usage_metadata
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    metrics = reply.response_metadata["metrics"]
    reasoning = sum(m["generated_tokens"] for m in metrics if m["node"] == "reason")
    assert usage["output_token_details"]["reasoning"] == reasoning > 0
    assert usage["input_token_details"]["cache_read"] == sum(m["cached_tokens"] or 0
                                                             for m in metrics)  # fmt: skip
    assert small.requests[0].image is not None  # the image went through


# -- LangChain chat model ----------------------------------------------------------------------


def chat_model(**kw):
    small, large = transfer_pair()
    return MAIChatModel(small=small, large=large, options=OPTIONS, **kw)


def test_chat_model_invoke_batch_and_chain():
    model = chat_model()
    msg = model.invoke("Which colour is the square?")
    assert msg.content == "D" and msg.response_metadata["route"] == "transfer"
    assert [m.content for m in model.batch(["Q1?", "Q2?", "Q3?"])] == ["D", "D", "D"]
    chain = (
        ChatPromptTemplate.from_messages([("human", "Question: {q}")]) | model | StrOutputParser()
    )
    assert chain.invoke({"q": "Which colour?"}) == "D"
    per_call = model.invoke("Which?", context={"policy": "large"})
    assert per_call.response_metadata["route"] == "large" and per_call.content == "B"


async def test_chat_model_async_and_streaming():
    model = chat_model()
    msg = await model.ainvoke("Which colour is the square?")
    assert msg.content == "D"
    chunks = [c async for c in model.astream("Which colour is the square?")]
    assert "".join(c.content for c in chunks) == "D"
    assert chunks[-1].usage_metadata["output_tokens"] > 0
    assert chunks[-1].usage_metadata["output_token_details"]["reasoning"] > 0
    assert chunks[-1].response_metadata["route"] == "transfer"


def test_chat_model_sync_stream_and_early_exit_routes():
    small = ScriptedBackend({"short": "B"}, name="small")
    large = ScriptedBackend({"short": "B"}, name="large")
    model = MAIChatModel(small=small, large=large, options=OPTIONS)
    chunks = list(model.stream("Which?"))
    assert "".join(c.content for c in chunks) == "B"
    assert chunks[-1].response_metadata["route"] == "agree"


def test_chat_model_says_what_it_does_not_support():
    model = chat_model()
    with pytest.raises(NotImplementedError, match="does not call tools"):
        model.bind_tools([])
    with pytest.raises(ConfigError, match="stop sequences"):
        model.invoke("Which?", stop=["\n"])


# -- persistence, resume, review ---------------------------------------------------------------


def test_failed_answer_resumes_without_recomputing(durable_checkpoints):
    small = ScriptedBackend({"short": "A", "cot": COT, "s2": "C"}, name="small")
    large = ScriptedBackend(
        {"short": "B", "answer": "D"}, name="large", fail={"answer": [BackendError("engine down")]}
    )
    cfg = {"configurable": {"thread_id": "resume"}}
    with durable_checkpoints.saver() as saver:  # SQLite and PostgreSQL
        g = create_mai_graph(small, large, retry_policy=None).compile(checkpointer=saver)
        with pytest.raises(BackendError, match="engine down"):
            g.invoke({"question": "Which?", "options": OPTIONS}, cfg, context={})
        assert g.get_state(cfg).next == ("answer",)
    # A new process would reopen the database: resume on the same thread.
    with durable_checkpoints.saver() as saver:
        g = create_mai_graph(small, large, retry_policy=None).compile(checkpointer=saver)
        out = g.invoke(None, cfg, context={})
    assert out["route"] == "transfer" and out["answer"] == "D"
    assert [r.purpose for r in small.requests] == ["short", "cot", "s2"]  # nothing recomputed
    assert [r.purpose for r in large.requests] == ["short", "answer", "answer"]
    assert [m["node"] for m in out["metrics"]] == [
        "verify",
        "verify",
        "reason",
        "extract",
        "answer",
    ]


def test_review_interrupt_accept_and_override(saver):
    small, large = transfer_pair()
    g = create_mai_graph(small, large, review=True).compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "review"}}
    first = g.invoke({"question": "Which?", "options": OPTIONS}, cfg, context={})
    (pending,) = first["__interrupt__"]
    assert pending.value["small_answer"] == "A" and pending.value["agree"] is False
    out = g.invoke(Command(resume={"answer": "the blue one"}), cfg, context={})
    assert out["route"] == "human" and out["canonical"] == "B"
    assert large.calls("answer") == []
    cfg2 = {"configurable": {"thread_id": "review2"}}
    g.invoke({"question": "Which?", "options": OPTIONS}, cfg2, context={})
    assert g.invoke(Command(resume="continue"), cfg2, context={})["route"] == "transfer"


def test_review_is_off_by_default():
    from langgraph.checkpoint.memory import InMemorySaver

    g = create_mai_graph(*transfer_pair()).compile(checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "no-review"}}
    out = g.invoke({"question": "Which?", "options": OPTIONS}, cfg, context={})
    assert out["route"] == "transfer" and "__interrupt__" not in out


def test_review_as_a_run_setting_and_a_bad_resume_asks_again(saver):
    g = create_mai_graph(*transfer_pair()).compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "review-setting"}}
    first = g.invoke({"question": "Which?", "options": OPTIONS}, cfg, context={"review": True})
    (pending,) = first["__interrupt__"]
    assert pending.value["allowed"] == ["continue", "answer"]
    again = g.invoke(Command(resume={"answr": "B"}), cfg, context={"review": True})
    (pending,) = again["__interrupt__"]
    assert "error" in pending.value
    out = g.invoke(Command(resume={"answer": "the blue one"}), cfg, context={"review": True})
    assert out["route"] == "human" and out["canonical"] == "B"


# -- node policies ------------------------------------------------------------------------------


def test_node_timeout_stops_a_hung_backend():
    small = ScriptedBackend({"short": "A"}, name="small", latency=5)
    large = ScriptedBackend({"short": "A"}, name="large")
    g = create_mai_graph(small, large, timeouts={"verify": 0.2}, retry_policy=None).compile()

    async def go():
        start = asyncio.get_running_loop().time()
        with pytest.raises(Exception) as err:
            await g.ainvoke({"question": "Which?", "options": OPTIONS}, context={})
        return asyncio.get_running_loop().time() - start, err.value

    elapsed, exc = asyncio.run(go())
    assert elapsed < 4  # well before the backend's 5 s answer
    assert "timeout" in type(exc).__name__.lower() or "timed out" in str(exc).lower()
