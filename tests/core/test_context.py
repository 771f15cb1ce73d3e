import pytest

from mai_graph import ConfigError, MAIContext


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("policy", "fast", "policy must be one of"),
        ("answer_kind", "letters", "answer_kind must be one of"),
        ("sparsify", "magic", "sparsify must be one of"),
        ("keep_ratio", 0, r"keep_ratio must be in \(0, 1\]"),
        ("keep_ratio", 1.5, r"got 1.5"),
        ("rel_tol", -0.1, r"rel_tol must be in \[0, 1\)"),
        ("short_max_tokens", 0, "short_max_tokens must be an integer"),
        ("cot_max_tokens", 2.5, "cot_max_tokens must be an integer"),
        ("temperature", -1, "temperature must be in"),
        ("s2_exit", "yes", "s2_exit must be true or false"),
    ],
)
def test_each_field_is_validated(field, value, match):
    with pytest.raises(ConfigError, match=match) as err:
        MAIContext(**{field: value})
    assert err.value.parameter == field
    assert err.value.value == value


def test_min_tokens_cannot_exceed_budget():
    with pytest.raises(ConfigError, match="cot_min_tokens"):
        MAIContext(cot_max_tokens=10, cot_min_tokens=11)


def test_coerce():
    assert MAIContext.coerce(None) == MAIContext()
    ctx = MAIContext(policy="large")
    assert MAIContext.coerce(ctx) is ctx
    assert MAIContext.coerce({"keep_ratio": 0.5}).keep_ratio == 0.5
    with pytest.raises(ConfigError, match="unknown context settings"):
        MAIContext.coerce({"keep_ration": 0.5})
    with pytest.raises(ConfigError, match="must be a MAIContext or a dict"):
        MAIContext.coerce(["policy"])


def test_context_is_the_graph_schema():
    from mai_graph import ScriptedBackend, create_mai_graph

    g = create_mai_graph(ScriptedBackend("A"), ScriptedBackend("A")).compile()
    schema = g.get_context_jsonschema()
    assert schema["properties"]["policy"]["enum"] == [
        "mai",
        "small",
        "large",
        "small_cot",
        "large_cot",
    ]
    assert schema["properties"]["keep_ratio"]["default"] == 0.2


def test_every_field_is_described_with_bounds_in_the_published_schema():
    schema = MAIContext.model_json_schema()
    for name, prop in schema["properties"].items():
        assert prop.get("description"), f"{name} has no description"
    assert schema["properties"]["keep_ratio"]["exclusiveMinimum"] == 0
    assert schema["properties"]["keep_ratio"]["maximum"] == 1
    assert schema["properties"]["gate"]["enum"] == [
        "agree",
        "agree_confident",
        "agree_joint",
        "never",
    ]
    assert schema["additionalProperties"] is False


@pytest.mark.parametrize("typo", ["kep_ratio", "Keep_ratio", "policy "])
def test_a_typo_is_a_config_error_naming_the_key_in_process(typo):
    from mai_graph import ScriptedBackend, create_mai_graph

    g = create_mai_graph(ScriptedBackend("A"), ScriptedBackend("A")).compile()
    with pytest.raises(ConfigError, match="unknown context settings") as err:
        g.invoke({"question": "Which?"}, context={typo: 0.5})
    assert err.value.parameter == typo


def test_context_is_frozen_and_replace_validates():
    ctx = MAIContext()
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="frozen"):
        ctx.keep_ratio = 0.5  # type: ignore[misc]
    assert ctx.replace(keep_ratio=0.5).keep_ratio == 0.5
    with pytest.raises(ConfigError, match="keep_ratio"):
        ctx.replace(keep_ratio=2)


def test_json_strings_are_not_silently_coerced():
    with pytest.raises(ConfigError, match="keep_ratio"):
        MAIContext(keep_ratio="0.5")
    with pytest.raises(ConfigError, match="true or false"):
        MAIContext(s2_exit="false")


def test_the_graph_runs_under_a_parents_own_context_schema():
    from dataclasses import dataclass, field

    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    from mai_graph import ScriptedBackend, create_mai_graph
    from mai_graph.context import mai_settings

    @dataclass
    class App:
        user: str = "ann"
        mai: dict = field(default_factory=lambda: {"policy": "large"})

    class Parent(TypedDict, total=False):
        question: str
        answer: str
        route: str

    mai = create_mai_graph(
        ScriptedBackend({"short": "A"}, name="s"), ScriptedBackend({"short": "B"}, name="l")
    ).compile()
    parent = StateGraph(Parent, context_schema=App)
    parent.add_node("mai", mai)
    parent.add_edge(START, "mai")
    parent.add_edge("mai", END)
    out = parent.compile().invoke({"question": "Which?"}, context=App())
    assert out["route"] == "large" and out["answer"] == "B"
    # a parent context without MAI settings runs with the defaults
    assert mai_settings(object()) == MAIContext()
    with pytest.raises(ConfigError, match="unknown context settings"):
        mai_settings(App(mai={"kep_ratio": 1}))


def test_the_served_graphs_refuse_a_context_typo_the_server_would_drop():
    from types import SimpleNamespace

    from mai_graph.adapters import studio

    assert studio.serve_graph(SimpleNamespace(context=None)) is studio.graph
    assert studio.serve_chat_graph(SimpleNamespace(context={"keep_ratio": 0.5})) is not None
    with pytest.raises(ConfigError, match="kep_ratio"):
        studio.serve_graph(SimpleNamespace(context={"kep_ratio": 0.5}))
