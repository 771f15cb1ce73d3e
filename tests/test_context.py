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
