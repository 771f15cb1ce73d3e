"""The flow module is the one truth: the graph, the latency model, the memory plan and replay
do what :mod:`mai_graph.flow` says, route by route, lineup by lineup."""

import pytest

from mai_graph import ScriptedBackend, create_mai_graph, flow
from mai_graph.errors import ConfigError

# Scripts that drive a two-model run onto each route (short answers agree or not, the S2
# answer meets the large short answer or not, the large model sure of itself or not).
ROUTES = {
    "agree": ({"short": "B", "cot": "so B", "s2": "B"}, {"short": "B", "answer": "B"}, {}, "mai"),
    "large_confident": (
        {"short": "A", "cot": "so A", "s2": "A"},
        {"short": "B", "answer": "B"},
        {"large_confident_exit": 0.5},
        "mai",
    ),
    "extract_agree": ({"short": "A", "cot": "so B", "s2": "B"}, {"short": "B"}, {}, "mai"),
    "transfer": (
        {"short": "A", "cot": "so A", "s2": "A"},
        {"short": "B", "answer": "C"},
        {},
        "mai",
    ),
    "small": ({"short": "A"}, {"short": "B"}, {}, "small"),
    "large": ({"short": "A"}, {"short": "B"}, {}, "large"),
    "small_cot": ({"cot": "so A", "s2": "A"}, {}, {}, "small_cot"),
    "large_cot": ({}, {"cot": "so B", "s2": "B"}, {}, "large_cot"),
}


def _run(route):
    small_script, large_script, settings, policy = ROUTES[route]
    small = ScriptedBackend(small_script, name="small")
    large = ScriptedBackend(large_script, name="large", probs={"short": 0.9})
    graph = create_mai_graph(small, large).compile()
    passed, out = [], None
    context = {"policy": policy, "s2_exit": True, **settings}
    inputs = {"question": "Which?", "options": ["red", "green", "blue"]}
    for mode, chunk in graph.stream(inputs, context=context, stream_mode=["updates", "values"]):
        if mode == "updates":
            passed += list(chunk)
        else:
            out = chunk
    return out, passed


@pytest.mark.parametrize("route", list(flow.ENDINGS))
def test_every_route_calls_and_passes_what_the_flow_says(route):
    out, passed = _run(route)
    assert out["route"] == route
    made = [(m["node"], m["role"]) for m in out["metrics"]]
    assert sorted(made[:2]) == sorted(flow.calls(route)[:2])  # verify's calls run at once
    assert made[2:] == list(flow.calls(route)[2:])
    assert passed == ["prepare", *flow.nodes(route)]


@pytest.mark.parametrize("route", list(flow.ENDINGS))
def test_the_latency_model_predicts_the_calls_the_flow_makes(route):
    from mai_graph.latency.model import MODEL_ROUTES, Workload

    assert MODEL_ROUTES == tuple(flow.ENDINGS)
    shapes = Workload().calls(route)
    assert [(c.node, c.role) for c in shapes] == list(flow.calls(route))


def test_chain_and_drafters_decide_roles_from_one_place():
    layout = flow.Layout(drafters=2, chain=3)
    reasoning, reading = flow.budget_roles("mai", layout)
    assert reasoning == (
        flow.Member("drafter", 0),
        flow.Member("drafter", 1),
        flow.Member("chain", 0),
        flow.Member("chain", 1),
    )
    assert reading == tuple(flow.Member("chain", i) for i in range(3))
    assert [flow.memory_role(m, layout) for m in layout.members()] == [
        "reasoner", "reasoner", "reasoner", "reasoner", "reader",
    ]  # fmt: skip
    assert flow.budget_roles("large_cot", layout) == ((flow.Member("chain", 2),), ())
    assert flow.called("small_cot", layout) == (flow.Member("drafter", 0),)


def test_the_memory_plan_takes_its_roles_from_the_flow():
    from mai_graph.deploy.plan import _roles
    from mai_graph.deploy.spec import LineupSpec

    spec = LineupSpec.model_validate(
        {
            "small": {"model": "s"},
            "drafters": [{"model": "d"}],
            "large": {"model": "l"},
            "larger": [{"model": "xl"}],
        }
    )
    assert _roles(spec) == {
        "small": "reasoner",
        "drafter 2": "reasoner",
        "large": "reasoner",
        "larger 1": "reader",
    }


@pytest.mark.parametrize(
    ("call", "args"),
    [
        (flow.entry, ("maybe",)),
        (flow.called, ("", flow.Layout())),
        (flow.calls, ("human",)),
        (flow.nodes, ("teleport",)),
    ],
)
def test_unknown_policies_and_routes_are_named(call, args):
    with pytest.raises(ConfigError, match="must be one of"):
        call(*args)


def test_a_layout_without_models_is_refused():
    with pytest.raises(ConfigError, match="at least one drafter"):
        flow.Layout(drafters=0)


def test_replay_refuses_drafter_and_chain_records_by_name():
    from mai_graph.eval.records import CallRecord, SampleRecord, SampleRun
    from mai_graph.eval.replay import Branches

    def call(node, role, **extra):
        return CallRecord(sample="q1", policy="mai", node=node, role=role, model="m",
                          prompt_tokens=1, generated_tokens=1, latency_s=0.1, **extra)  # fmt: skip

    calls = [call("verify", "small", drafter=1), call("verify", "large"),
             call("reason", "small", stage=2)]  # fmt: skip
    record = SampleRecord(sample="q1", policy="mai", branches=True, route="transfer",
                          answer="A", canonical="A", wall_s=1.0, gold="A", kind="choice",
                          digest="d")  # fmt: skip
    with pytest.raises(ConfigError, match=r"drafter 1, stage 2.*two-model graph with one draft"):
        Branches.of(SampleRun(record=record, calls=calls))


def test_the_plan_and_the_latency_model_read_one_token_accounting():
    from mai_graph import workload
    from mai_graph.deploy import plan
    from mai_graph.latency import model

    assert plan.Workload is model.Workload is workload.Workload
    assert model.CallTokens is workload.CallTokens


@pytest.mark.parametrize("ratio", [0.01, 0.1, 0.2, 0.25, 1 / 3, 0.4, 0.5, 0.99, 1.0])
@pytest.mark.parametrize("n", [1, 2, 7, 10, 33, 300, 512])
def test_the_transfer_the_workload_counts_is_what_the_selection_keeps(ratio, n):
    from mai_graph.scoring.base import select_tokens
    from mai_graph.workload import Workload

    # Lower-case words: no digit, option letter or negation, so nothing is forced in.
    tokens = [" q" + chr(97 + i % 26) + chr(97 + i // 26 % 26) for i in range(n)]
    scores = [((i * 37) % 11) / 11 for i in range(n)]
    kept = select_tokens(tokens, scores, ratio).kept
    assert Workload(cot_tokens=n, keep_ratio=ratio).transfer_tokens == len(kept)
    capped = Workload(cot_tokens=n, keep_ratio=ratio, max_transfer_tokens=3)
    assert capped.transfer_tokens == min(len(kept), 3)


@pytest.mark.parametrize("side", ["small", "large"])
def test_a_models_context_is_its_longest_call_on_any_route(side):
    from mai_graph import MAIContext
    from mai_graph.workload import S2_TURN_TOKENS, TEMPLATE_TOKENS, Workload

    ctx = MAIContext(cot_max_tokens=700, s2_max_tokens=20, short_max_tokens=9, keep_ratio=0.3)
    w = Workload.from_context(ctx, images=2, question_tokens=50).for_model(64)
    prompt = TEMPLATE_TOKENS + 2 * 64 + 50
    assert w.prompt_tokens == prompt
    reasoning = prompt + 700 + S2_TURN_TOKENS + 20  # the S2 turn after a whole CoT
    reading = prompt + 210 + 9  # the transfer: 30% of the CoT, then a short answer
    assert reasoning > reading
    # The large side reasons too (large_cot, a chain's middle stage): it holds as much.
    assert w.context_tokens(side) == reasoning
    longest = max(c.total for r in flow.ENDINGS for c in w.calls(r) if c.role == side)
    assert w.context_tokens(side) == longest
    answer = [c for c in w.calls("transfer") if c.node == "answer"][0]
    assert answer.total == reading


def test_an_unknown_route_names_the_routes():
    from mai_graph.workload import Workload

    with pytest.raises(ConfigError, match="route must be one of") as err:
        Workload().calls("human")
    assert "transfer" in str(err.value)
