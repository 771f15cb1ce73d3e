import asyncio
import json

import pytest

import mai_graph
from mai_graph import ConfigError, MAIResult, ScriptedBackend, arun, run


def backends():
    return (
        ScriptedBackend({"short": "A", "cot": "it is blue", "s2": "C"}, name="small"),
        ScriptedBackend({"short": "B", "answer": "D"}, name="large"),
    )


def test_run_returns_a_typed_result():
    small, large = backends()
    result = run("Which?", options=["w", "x", "y", "z"], small=small, large=large)
    assert isinstance(result, MAIResult)
    assert (result.route, result.canonical, result.answer) == ("transfer", "D", "D")
    assert (result.small_answer, result.large_answer, result.s2_answer) == ("A", "B", "C")
    assert result.totals["calls"] == 5 == len(result.metrics)
    assert result.totals["generated_tokens"] == sum(m["generated_tokens"] for m in result.metrics)
    assert result.wall_s > 0
    json.dumps(result.to_dict())


def test_settings_override_context():
    small, large = backends()
    result = run(
        "Which?", options=["w", "x"], small=small, large=large,
        context={"policy": "small"}, policy="large",
    )  # fmt: skip
    assert result.route == "large"
    with pytest.raises(ConfigError, match="unknown context settings"):
        run("Which?", small=small, large=large, keep_ration=0.3)


def test_arun_inside_a_running_loop():
    async def go():
        small, large = backends()
        results = await asyncio.gather(
            *(
                arun(f"q{i}?", options=["w", "x", "y", "z"], small=small, large=large)
                for i in range(8)
            )
        )
        return {r.route for r in results}

    assert asyncio.run(go()) == {"transfer"}


def test_run_refuses_non_backends():
    with pytest.raises(ConfigError, match="small must be a VLMBackend"):
        run("q", small="qwen", large=ScriptedBackend("A"))


def test_public_door_lists_everything_and_imports_no_engine():
    import subprocess
    import sys

    for name in mai_graph.__all__:
        assert hasattr(mai_graph, name), name
    code = (
        "import sys, mai_graph; heavy = [m for m in ('vllm', 'torch', 'transformers', 'openai')"
        " if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
