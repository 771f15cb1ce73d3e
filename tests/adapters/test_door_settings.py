"""Settings that cannot work in a door are refused up front there, with the reason.

``review=True`` pauses a run for a human decision; resuming needs a checkpointer. ``run()``,
the CLI, the chat model and the endpoint compile without one: each refuses the setting before
any model call with a typed error (a 400 on the endpoint, streaming or not), never a raw
``KeyError`` or an empty answer that reads as success. A graph compiled with a checkpointer
pauses as documented. Token budgets that no prompt could fit in a model's context are refused
the same way, before the first call.
"""

from __future__ import annotations

import pytest

from mai_graph import MAIContext, ScriptedBackend, create_mai_graph, run
from mai_graph.adapters.endpoint.app import create_app
from mai_graph.backends.fake import demo_backends as fake_pair
from mai_graph.backends.recording import RecordingBackend
from mai_graph.cli import main
from mai_graph.errors import ConfigError
from tests.servers import in_process


def _pair():
    small, large = fake_pair()
    return RecordingBackend(small), RecordingBackend(large)


def test_run_refuses_review_without_a_checkpointer_before_any_call():
    small, large = _pair()
    with pytest.raises(ConfigError, match="needs a checkpointer") as info:
        run("Is it red?", small=small, large=large, context={"review": True})
    assert info.value.parameter == "review" and "InMemorySaver" in info.value.fix
    assert small.requests == [] and large.requests == []
    graph = create_mai_graph(small, large, review=True).compile()  # the graph-wide flag too
    with pytest.raises(ConfigError, match="needs a checkpointer"):
        graph.invoke({"question": "Is it red?"})


def test_the_cli_says_why(capsys):
    assert main(["run", "Is it red?", "--backend", "fake", "--set", "review=true"]) == 2
    err = capsys.readouterr().err
    assert "needs a checkpointer" in err and "internal error" not in err


def test_a_graph_with_a_checkpointer_pauses_for_review():
    from langgraph.checkpoint.memory import InMemorySaver

    small, large = _pair()
    graph = create_mai_graph(small, large).compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t"}}
    out = graph.invoke({"question": "Is it red?"}, thread, context=MAIContext(review=True))
    assert "__interrupt__" in out


def test_the_chat_model_refuses_review():
    from langchain_core.messages import HumanMessage

    from mai_graph.adapters.langchain import MAIChatModel

    small, large = _pair()
    chat = MAIChatModel(small=small, large=large, context={"review": True})
    with pytest.raises(ConfigError, match="needs a checkpointer"):
        chat.invoke([HumanMessage("Is it red?")])


@pytest.mark.parametrize("stream", [False, True])
def test_the_endpoint_answers_400_streaming_or_not(stream):
    openai = pytest.importorskip("openai")
    from mai_graph.adapters.endpoint.app import create_app

    small, large = _pair()
    with in_process(create_app(small, large)) as endpoint:  # the default: review isn't a client's
        client = endpoint.openai()
        with pytest.raises(openai.BadRequestError, match="does not let requests change"):
            client.chat.completions.create(
                model="mai", messages=[{"role": "user", "content": "Is it red?"}],
                extra_body={"mai": {"review": True}}, stream=stream,
            )  # fmt: skip
    with in_process(create_app(small, large, allowed_settings="all")) as endpoint:
        client = endpoint.openai()
        with pytest.raises(openai.BadRequestError) as info:
            out = client.chat.completions.create(
                model="mai", messages=[{"role": "user", "content": "Is it red?"}],
                extra_body={"mai": {"review": True}}, stream=stream,
            )  # fmt: skip
            if stream:
                list(out)
        assert "checkpointer" in str(info.value) and "review" in str(info.value)
    assert small.requests == [] and large.requests == []


class _Sized(ScriptedBackend):
    """A scripted backend that declares a context length, as the engines do."""

    def __init__(self, script, *, name, max_model_len):
        super().__init__(script, name=name)
        self.max_model_len = max_model_len


def _sized_pair(small_len=4096, large_len=4096):
    small = _Sized({"short": "A", "cot": "so A", "s2": "A"}, name="small", max_model_len=small_len)
    large = _Sized({"short": "B", "answer": "A"}, name="large", max_model_len=large_len)
    return RecordingBackend(small), RecordingBackend(large)


@pytest.mark.parametrize(
    "policy, settings, field",
    [
        ("mai", {"cot_max_tokens": 131_072}, "cot_max_tokens"),
        ("mai", {"cot_max_tokens": 4090, "s2_max_tokens": 16}, "cot_max_tokens"),
        ("small_cot", {"cot_max_tokens": 8192}, "cot_max_tokens"),
        ("large_cot", {"cot_max_tokens": 8192}, "cot_max_tokens"),
    ],
)
def test_budgets_that_cannot_fit_a_context_are_refused_before_any_call(policy, settings, field):
    small, large = _sized_pair()
    with pytest.raises(ConfigError) as err:
        run("Which colour?", options=["red", "blue"], small=small, large=large,
            context={"policy": policy, **settings})  # fmt: skip
    assert err.value.parameter == field and "max_model_len=4,096" in str(err.value)
    assert small.requests == large.requests == []


def test_a_transfer_that_cannot_fit_the_large_context_is_refused():
    small, large = _sized_pair(small_len=32_768, large_len=1024)
    with pytest.raises(ConfigError) as err:
        run("Which colour?", options=["red", "blue"], small=small, large=large,
            context={"cot_max_tokens": 4096, "max_transfer_tokens": 2048})  # fmt: skip
    assert err.value.parameter == "max_transfer_tokens" and "large" in str(err.value)
    out = run("Which colour?", options=["red", "blue"], small=small, large=large,
              context={"cot_max_tokens": 512, "max_transfer_tokens": 256})  # fmt: skip
    assert out.route in ("transfer", "extract_agree")


@pytest.mark.parametrize("stream", [False, True])
def test_the_endpoint_refuses_an_impossible_budget_with_a_400_before_any_call(stream):
    small, large = _sized_pair()
    app = create_app(small, large, allowed_settings="all")
    with in_process(app) as endpoint:
        resp = endpoint.client.post("/v1/chat/completions", json={
            "model": "mai", "stream": stream,
            "messages": [{"role": "user", "content": "Which colour?"}],
            "mai": {"cot_max_tokens": 131_072, "options": ["red", "blue"]},
        })  # fmt: skip
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == "mai.cot_max_tokens"
    assert "max_model_len=4,096" in resp.json()["error"]["message"]
    assert small.requests == large.requests == []


def test_the_transfer_budget_counts_each_transferred_draft():
    """Each transferred draft is sparsified on its own: one draft of 1,024 reasoning tokens
    fits a 4,096 context whatever transfer_drafts says; four drafts of 2,048 do not."""
    small, large = _sized_pair(small_len=32_768, large_len=4096)
    out = run("Which colour?", options=["red", "blue"], small=small, large=large,
              context={"cot_max_tokens": 1024, "max_transfer_tokens": 4096,
                       "transfer_drafts": 4})  # fmt: skip
    assert out.route in ("transfer", "extract_agree")
    with pytest.raises(ConfigError) as err:
        run("Which colour?", options=["red", "blue"], small=small, large=large,
            context={"cot_max_tokens": 2048, "max_transfer_tokens": 2048, "drafts": 4,
                     "transfer_drafts": 4})  # fmt: skip
    assert err.value.parameter == "max_transfer_tokens" and "8,192" in str(err.value)
