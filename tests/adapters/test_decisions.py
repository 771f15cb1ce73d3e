"""MAIDecisionModel: LangChain decision questions about images and text, answered by MAI.

Through LangChain's own doors: ``invoke`` / ``ainvoke`` / ``batch`` of the decision model,
LangChain's ``ModelRouterMiddleware`` in a ``create_agent`` agent, and a LangGraph node; the
fakes answer, so routes and probabilities are exact (real engines:
``tests/engines/test_distributions_on_engines.py``).
"""

from __future__ import annotations

import base64
import io
import math

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.decisions import Box, Choice, Noul, NoulCriteria, Score
from langchain_core.messages import AIMessage, HumanMessage
from PIL import Image

from mai_graph import ConfigError, ImageError, ImagePolicy, MAIDecisionModel, ScriptedBackend

COLOURS = {"red": "a warm colour", "blue": None, "green": None}


def png_b64(colour=(200, 20, 20)) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (48, 40), colour).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def picture_message(text="Here is the picture.") -> HumanMessage:
    return HumanMessage(content=[
        {"type": "text", "text": text},
        {"type": "image", "base64": png_b64(), "mime_type": "image/png"},
    ])  # fmt: skip


def agreeing(answer="A", small_dist=None, large_dist=None):
    small = ScriptedBackend({"short": answer}, name="small", probs={"short": small_dist or 0.8})
    large = ScriptedBackend({"short": answer}, name="large",
                            probs={"short": large_dist or 0.9})  # fmt: skip
    return small, large


def test_a_choice_about_an_image_takes_the_answering_models_distribution():
    small, large = agreeing("A", large_dist={"A": 0.7, "B": 0.2, "C": 0.1})
    decide = MAIDecisionModel(small=small, large=large)
    out = decide.invoke({
        "state": picture_message(),
        "questions": {"colour": Choice(instructions="Which colour is the square?",
                                       criteria=COLOURS)},
    })  # fmt: skip
    answer = out.choices["colour"]
    assert answer.choice == "red"
    assert answer.probabilities == pytest.approx({"red": 0.7, "blue": 0.2, "green": 0.1})
    assert answer.confidence == pytest.approx(0.7)
    meta = out.metadata["colour"]
    assert meta["route"] == "agree" and meta["answered_by"] == "large"
    assert meta["call"] == "verify" and meta["distribution"] == "one_step"
    assert len(meta["metrics"]) == 2
    # The models saw the image and the labels as options (with their descriptions).
    (request,) = large.calls("short")
    assert request.images and request.images[0]["width"] == 48
    prompt = " ".join(p["text"] for m in request.messages for p in m["content"]
                      if p["type"] == "text")  # fmt: skip
    assert "red: a warm colour" in prompt and "Here is the picture." in prompt
    assert out.usage["input_tokens"] == sum(m["prompt_tokens"] for m in meta["metrics"])
    assert out.model == "small+large"


def test_a_noul_is_the_probability_of_yes():
    small = ScriptedBackend({"short": "no"}, name="s", probs={"short": 0.6})
    large = ScriptedBackend({"short": "no"}, name="l", probs={"short": {"yes": 0.25, "no": 0.75}})
    decide = MAIDecisionModel(small=small, large=large)
    out = decide.invoke({
        "state": {"ticket": "the square is blue", "image": {"type": "image",
                                                            "base64": png_b64(),
                                                            "mime_type": "image/png"}},
        "questions": {"red": Noul(instructions="Is the square red?",
                                  criteria=NoulCriteria(true="clearly red", false="any other"))},
    })  # fmt: skip
    assert out.nouls["red"].noul == pytest.approx(0.25)
    (request,) = large.calls("short")
    text = " ".join(p["text"] for m in request.messages for p in m["content"]
                    if p["type"] == "text")  # fmt: skip
    assert "Yes means: clearly red" in text and "the square is blue" in text
    assert request.images  # the image inside a mapping state reached the models


def test_on_the_transfer_route_the_answer_after_reading_decides():
    small = ScriptedBackend({"short": "A", "cot": "it looks red, so A", "s2": "A"}, name="s")
    large = ScriptedBackend(
        {"short": "B", "answer": "A"},
        name="l",
        probs={"short": 0.6, "answer": {"A": 0.8, "B": 0.15, "C": 0.05}},
    )
    decide = MAIDecisionModel(small=small, large=large)
    out = decide.invoke({"state": picture_message(), "questions": {
        "colour": Choice(instructions="Which colour?", criteria=COLOURS)}})  # fmt: skip
    meta = out.metadata["colour"]
    assert meta["route"] == "transfer" and meta["call"] == "answer"
    assert out.choices["colour"].choice == "red"
    assert out.choices["colour"].probabilities["red"] == pytest.approx(0.8)
    assert out.usage["output_token_details"]["reasoning"] > 0


def test_several_questions_share_one_stored_image_and_its_prefix():
    small, large = agreeing("A")
    decide = MAIDecisionModel(small=small, large=large)
    questions = {f"q{i}": Choice(instructions=f"Question {i}?", criteria=COLOURS)
                 for i in range(4)}  # fmt: skip
    out = decide.invoke({"state": picture_message(), "questions": questions})
    assert set(out.choices) == set(questions)
    calls = large.calls("short")
    assert len(calls) == 4 and len({c.images[0]["sha256"] for c in calls}) == 1
    # The first question ran alone and filled the cache; the rest read its image prefix.
    cached = [m["cached_tokens"] for q in list(questions)[1:]
              for m in out.metadata[q]["metrics"] if m["role"] == "large"]  # fmt: skip
    assert all(c >= large.image_tokens for c in cached)


async def test_ainvoke_and_batch():
    small, large = agreeing("B")
    decide = MAIDecisionModel(small=small, large=large)
    request = {"state": "The square is blue.",
               "questions": {"c": Choice(instructions="Colour?", criteria=COLOURS)}}  # fmt: skip
    assert (await decide.ainvoke(request)).choices["c"].choice == "blue"
    outs = decide.batch([request, request])
    assert [o.choices["c"].choice for o in outs] == ["blue", "blue"]


@pytest.mark.parametrize(
    "questions, error",
    [
        ({}, "at least one question"),
        ({"s": Score(instructions="How red?", criteria=["no", "very"])}, "Choice and Noul"),
        ({"b": Box(instructions="Where?")}, "Choice and Noul"),
        ({"c": Choice(instructions="Which?", criteria={str(i): None for i in range(27)})},
         "at most 26"),
        ({"c": Choice(instructions=[{"type": "image", "base64": "AAAA"}], criteria=COLOURS)},
         "instructions hold an image"),
    ],
)  # fmt: skip
def test_questions_mai_cannot_answer_are_refused_before_any_call(questions, error):
    small, large = agreeing()
    decide = MAIDecisionModel(small=small, large=large)
    with pytest.raises(ConfigError, match=error):
        decide.invoke({"state": "x", "questions": questions})
    assert small.requests == [] and large.requests == []


def test_states_mai_cannot_read_are_refused():
    small, large = agreeing()
    decide = MAIDecisionModel(small=small, large=large)
    question = {"c": Choice(instructions="Which?", criteria=COLOURS)}
    with pytest.raises(ConfigError, match="video"):
        decide.invoke({"state": [{"type": "video", "base64": "AAAA"}], "questions": question})
    # A URL image, from a caller the default policy does not trust with fetches.
    with pytest.raises(ImageError):
        decide.invoke({"state": [{"type": "image", "url": "http://169.254.169.254/x.png"}],
                       "questions": question})  # fmt: skip
    with pytest.raises(ImageError):
        MAIDecisionModel(small=small, large=large, image_policy=ImagePolicy()).invoke(
            {"state": [{"type": "image", "url": "/etc/passwd"}], "questions": question}
        )
    assert small.requests == []


class Runs(BaseCallbackHandler):
    def __init__(self):
        self.llm = []
        self.parents = {}

    def on_chain_start(self, serialized, inputs, *, run_id, parent_run_id=None, **kw):
        self.parents[run_id] = parent_run_id
        # A decision model's own run: LangChain opens it as a run of type "llm".
        if kw.get("run_type") == "llm":
            self.llm.append((run_id, parent_run_id, kw.get("metadata") or {}))

    def on_chat_model_start(self, serialized, messages, *, run_id, parent_run_id=None, **kw):
        self.llm.append((run_id, parent_run_id, kw.get("metadata") or {}))


def test_the_decision_run_carries_ls_metadata_and_its_calls_nest_under_it():
    small, large = agreeing("A")
    decide = MAIDecisionModel(small=small, large=large)
    runs = Runs()
    decide.invoke({"state": "x", "questions": {"c": Choice(instructions="?", criteria=COLOURS)}},
                  config={"callbacks": [runs]})  # fmt: skip
    outer = [r for r in runs.llm if r[2].get("ls_model_name") == "small+large"]
    assert len(outer) == 1 and outer[0][2]["ls_provider"] == "mai-graph"
    inner = [r for r in runs.llm if r[2].get("mai_node") == "verify"]
    assert len(inner) == 2 and {r[2]["ls_model_name"] for r in inner} == {"small", "large"}
    for _, parent, _ in inner:  # each call under its node, under the graph, under the decision
        chain = []
        while parent is not None:
            chain.append(parent)
            parent = runs.parents.get(parent)
        assert outer[0][0] in chain


def test_langchains_model_router_routes_on_mais_choice():
    """LangChain's ModelRouterMiddleware takes MAIDecisionModel as its classifier."""
    pytest.importorskip("langchain.agents.middleware", reason="the langchain package")
    from langchain.agents import create_agent
    from langchain.agents.middleware import ModelChoice, ModelRouterMiddleware
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    fast = GenericFakeChatModel(messages=iter([AIMessage("from the fast model")]))
    strong = GenericFakeChatModel(messages=iter([AIMessage("from the strong model")]))
    small, large = agreeing("B", large_dist={"A": 0.1, "B": 0.9})
    router = ModelRouterMiddleware(
        choices={
            "fast": ModelChoice(model=fast, criteria="Simple questions about a picture."),
            "strong": ModelChoice(model=strong, criteria="Hard reasoning about a picture."),
        },
        instructions="Which model should answer?",
        classifier=MAIDecisionModel(small=small, large=large),
    )
    agent = create_agent(fast, middleware=[router])
    out = agent.invoke({"messages": [picture_message("Count the shapes step by step.")]})
    assert out["messages"][-1].content == "from the strong model"
    route = out["model_route"]
    assert route.choice == "strong" and route.confidence == pytest.approx(0.9)
    assert math.fsum(route.probabilities.values()) == pytest.approx(1.0)
    (request,) = large.calls("short")
    assert request.images  # the human message's image reached MAI


async def test_in_a_langgraph_node():
    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    small, large = agreeing("A")
    decide = MAIDecisionModel(small=small, large=large)

    class S(TypedDict, total=False):
        message: HumanMessage
        colour: str
        sure: float

    async def classify(state: S) -> S:
        out = await decide.ainvoke({"state": state["message"], "questions": {
            "colour": Choice(instructions="Which colour?", criteria=COLOURS)}})  # fmt: skip
        answer = out.choices["colour"]
        return {"colour": answer.choice, "sure": answer.confidence}

    graph = StateGraph(S)
    graph.add_node("classify", classify)
    graph.add_edge(START, "classify")
    graph.add_edge("classify", END)
    result = await graph.compile().ainvoke({"message": picture_message()})
    assert result["colour"] == "red" and 0 < result["sure"] <= 1


@pytest.mark.parametrize("small, large", [(None, "ok"), ("ok", None), ("ok", []), (5, "ok")])
def test_backends_that_are_not_backends_are_refused_at_construction(small, large):
    ok = ScriptedBackend({"short": "A"}, name="ok")
    with pytest.raises(ConfigError, match="small|large") as err:
        MAIDecisionModel(small=ok if small == "ok" else small, large=ok if large == "ok" else large)
    assert err.value.parameter in ("small", "large") and err.value.fix


def _nested(depth):
    value = "a red square"
    for _ in range(depth):
        value = {"inner": [value]}
    return value


def _cyclic():
    state = {"note": "a red square", "items": []}
    state["items"].append(state)
    return state


@pytest.mark.parametrize(
    ("state", "error"),
    [
        (_nested(5_000), "nests deeper than 64 levels"),
        (_cyclic(), "holds itself"),
        ([[["a red square"] * 200] * 200] * 200, "more than 100,000 values"),
    ],
    ids=["5,000 deep", "cyclic", "8 million values through shared lists"],
)
def test_deep_cyclic_or_huge_states_are_refused_before_any_call(state, error):
    small, large = agreeing()
    decide = MAIDecisionModel(small=small, large=large)
    question = {"c": Choice(instructions="Which colour?", criteria=COLOURS)}
    with pytest.raises(ConfigError, match=error) as err:
        decide.invoke({"state": state, "questions": question})
    assert err.value.parameter == "state" and "Fix: " in str(err.value)
    deep = {"c": Choice(instructions=_nested(100), criteria=COLOURS)}
    with pytest.raises(ConfigError, match="instructions nests deeper") as err:
        decide.invoke({"state": "a red square", "questions": deep})
    assert small.requests == [] and large.requests == []
    shared = ["a red square"]  # the same list twice is no cycle
    out = decide.invoke({"state": {"a": shared, "b": shared}, "questions": question})
    assert out.choices["c"].choice in COLOURS
