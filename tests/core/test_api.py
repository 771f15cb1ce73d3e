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


def test_backends_dropped_after_a_run_are_freed_with_their_graph():
    """run() is one-shot: a run keeps nothing alive once the caller drops its backends."""
    import gc
    import weakref

    from mai_graph import MAI, ScriptedBackend, run

    alive = []
    for i in range(20):
        small = ScriptedBackend({"short": "A"}, name=f"small{i}")
        large = ScriptedBackend({"short": "A"}, name=f"large{i}")
        drafters = [ScriptedBackend({"short": "A"}, name=f"d{i}-{j}") for j in range(2)]
        run("Which?", small=small, large=large, options=["a", "b"])
        run("Which?", small=drafters, large=large, options=["a", "b"])
        with MAI(small, large) as mai:
            mai.run("Which?", options=["a", "b"])
        alive += [weakref.ref(b) for b in (small, large, *drafters)]
        alive.append(weakref.ref(mai))
        del small, large, drafters, mai
    gc.collect()
    assert [r() for r in alive if r() is not None] == []


def test_an_owner_compiles_once_answers_many_and_refuses_after_close():
    import asyncio

    from mai_graph import MAI, ConfigError, ScriptedBackend

    small = ScriptedBackend({"short": "A"}, name="s")
    large = ScriptedBackend({"short": ["A", "B"]}, name="l")
    mai = MAI(small, large)
    graph = mai.graph
    assert mai.run("Which?", options=["a", "b"]).route == "agree"
    assert asyncio.run(mai.arun("Which?", options=["a", "b"], policy="large")).answer == "B"
    assert mai.graph is graph and mai.backends == (small, large)
    mai.close()
    mai.close()  # idempotent
    with pytest.raises(ConfigError, match="closed.*build a new MAI"):
        mai.run("Which?", options=["a", "b"])


def test_an_owner_takes_drafters_a_chain_and_graph_options():
    from langgraph.checkpoint.memory import InMemorySaver

    from mai_graph import MAI, ConfigError, ScriptedBackend

    d1, d2, m1, m2 = (ScriptedBackend({"short": "A"}, name=n) for n in ("d1", "d2", "m1", "m2"))
    saver = InMemorySaver()
    with MAI([d1, d2], m1, m2, checkpointer=saver, timeouts=30.0) as mai:
        assert "escalate_2" in mai.graph.get_graph().nodes
        thread = {"configurable": {"thread_id": "t"}}
        out = mai.run("Which?", options=["a", "b"], config=thread)
        assert (out.route, out.answer) == ("agree", "A")
        assert mai.graph.get_state(thread).values["route"] == "agree"  # kept by the saver
    with pytest.raises(ConfigError, match="larger\\[0\\]"):
        MAI(d1, m1, "not a backend")  # type: ignore[arg-type]
