"""The MAI graph: ``create_mai_graph(small, large, *larger) -> StateGraph`` and its routing."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Literal, get_args

from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime, get_runtime
from langgraph.types import RetryPolicy

from mai_graph import flow
from mai_graph.backends.base import VLMBackend
from mai_graph.context import MAIContext, SparsifyStrategy, mai_settings
from mai_graph.errors import BackendError, ConfigError
from mai_graph.inputs.sources import ImagePolicy
from mai_graph.lineup import Lineup
from mai_graph.nodes._common import Node, staged
from mai_graph.nodes.answer import make_answer
from mai_graph.nodes.baseline import make_baseline
from mai_graph.nodes.drafts import reasoning_written
from mai_graph.nodes.escalate import make_escalate
from mai_graph.nodes.extract import make_extract
from mai_graph.nodes.prepare import make_prepare
from mai_graph.nodes.reason import make_reason
from mai_graph.nodes.review import make_review
from mai_graph.nodes.sparsify import make_sparsify
from mai_graph.nodes.verify import make_verify
from mai_graph.scoring import TokenScorer, default_scorers
from mai_graph.state import InputState, MAIState, OutputState

__all__ = [
    "NODES",
    "create_mai_graph",
    "mermaid",
    "node_name",
    "route_after_extract",
    "route_after_verify",
    "route_policy",
]

NODES = ("prepare", "verify", "baseline", "reason", "extract", "sparsify", "answer")
"""The nodes of the two-model graph (``review`` too when it pauses runs)."""
_MODEL_STEPS = ("verify", "baseline", "reason", "extract", "answer", "escalate")
_TIMED_STEPS = (*_MODEL_STEPS, "sparsify")


def node_name(step: str, stage: int = 1) -> str:
    """A step's node in the graph: ``reason`` at stage 1, ``reason_2`` at stage 2, ...

    >>> node_name("reason"), node_name("escalate", 3)
    ('reason', 'escalate_3')
    """
    return step if stage == 1 else f"{step}_{stage}"


def is_transient(exc: BaseException) -> bool:
    """Retry only what may succeed on a second try: transient backend errors and timeouts."""
    return (isinstance(exc, BackendError) and exc.transient) or isinstance(exc, ConnectionError)


DEFAULT_RETRY = RetryPolicy(max_attempts=3, initial_interval=0.5, retry_on=is_transient)
"""Three attempts for transient backend errors; everything else fails the node at once."""


class Router(Runnable[MAIState, str]):
    """A conditional edge's router, evaluated in place on the sync and the async path.

    Given a plain function, LangGraph runs a sync router in a thread of the default executor
    under ``ainvoke`` (a thread hop on every edge of every run) and cannot run an async one
    under ``invoke``. The routers here only read the state and the run's settings, so this
    runnable calls them inline on both paths (``fn(state)`` or ``fn(state, runtime)``; the
    runtime is LangGraph's, read from the edge's config with ``get_runtime``).
    """

    def __init__(self, fn: Callable[..., str]) -> None:
        self.fn = fn
        self.name = fn.__name__
        self._with_runtime = len(inspect.signature(fn).parameters) > 1

    def invoke(self, input: MAIState, config: RunnableConfig | None = None, **kwargs: Any) -> str:
        """The route: the router's verdict on this state."""
        if not self._with_runtime:
            return self.fn(input)
        token = var_child_runnable_config.set(config)
        try:
            return self.fn(input, get_runtime())
        finally:
            var_child_runnable_config.reset(token)

    async def ainvoke(
        self, input: MAIState, config: RunnableConfig | None = None, **kwargs: Any
    ) -> str:
        """The same verdict, without leaving the event loop."""
        return self.invoke(input, config)


def route_policy(state: MAIState, runtime: Runtime[Any]) -> Literal["mai", "short", "cot"]:
    """After ``prepare``: MAI verifies, the short baselines answer, the CoT baselines reason."""
    return flow.entry(mai_settings(runtime.context).policy)


def route_after_verify(state: MAIState) -> Literal["done", "disagree"]:
    """``done`` when the gate set a route (agreement, a sure large model), else on."""
    return "done" if state.get("route") else "disagree"


def _on_disagreement(stage: int) -> Any:
    """A router: ``done``, ``disagree`` (reason), or ``speculative`` (the CoT is written)."""

    def route(state: MAIState) -> Literal["done", "disagree", "speculative"]:
        if route_after_verify(state) == "done":
            return "done"
        return "speculative" if reasoning_written(state, stage) else "disagree"

    return route


def _after_verify(always_review: bool) -> Any:
    """Verify's router: to ``review`` when the graph or the run asks for it, else as decided."""
    decided = _on_disagreement(1)

    def route(
        state: MAIState, runtime: Runtime[Any]
    ) -> Literal["review", "done", "disagree", "speculative"]:
        if always_review or mai_settings(runtime.context).review:
            return "review"
        return decided(state)  # type: ignore[no-any-return]

    return route


def route_after_extract(state: MAIState) -> Literal["done", "transfer"]:
    """``done`` when extract set a route (S2 agreement or a CoT baseline), else sparsify."""
    return "done" if state.get("route") else "transfer"


def create_mai_graph(
    small: VLMBackend | Sequence[VLMBackend],
    large: VLMBackend | Sequence[VLMBackend],
    *larger: VLMBackend,
    retry_policy: RetryPolicy | None = DEFAULT_RETRY,
    timeouts: float | Mapping[str, float] | None = None,
    scorers: Mapping[str, TokenScorer] | None = None,
    review: bool = False,
    image_policy: ImagePolicy | None = None,
) -> StateGraph[MAIState, MAIContext, InputState, OutputState]:
    """Build the MAI graph over a small and a large backend (uncompiled; you compile it).

    Flow: ``prepare`` (inputs checked and consumed, the thread's last run cleared) → by the
    context's policy: MAI → ``verify`` (the drafts and the large model answer short, at once)
    → agree: end; else ``reason`` (the drafts' CoT; skipped when ``speculative_cot`` wrote it
    during verification) → ``extract`` (S2 turn) → agrees with the large short answer: end;
    else ``sparsify`` → ``answer`` (large reads the reasoning, answers short). The short
    baselines go to ``baseline`` (one short answer), the CoT baselines to ``reason`` →
    ``extract`` with that model. Per-run settings come from the context (:class:`MAIContext`).

    Shapes (see :mod:`mai_graph.lineup`), all drawn by :func:`mermaid`:

    - **Drafts:** ``small`` may be several backends, and a run may sample ``drafts`` > 1
      drafts per small model; the k drafts answer, reason and extract concurrently inside
      the same nodes (k = 1 is the ordinary run). ``draft_quorum`` decides which agreement
      ends a run, ``draft_rank`` which reasonings the large model reads (``transfer_drafts``).
    - **Chains:** ``create_mai_graph(m0, m1, m2, ...)``, smallest first. Each stage after the
      first is unrolled into nodes of its own (``escalate_2``, ``reason_2``, ..., ``answer_2``):
      when ``m[s]`` answers after a transfer and a larger model follows, ``escalate_{s+1}``
      verifies that answer against the next model's short answer, and only a disagreement
      escalates again. Outputs and metrics records carry ``stage``; the baselines compare the
      smallest (``small``) and the largest (``large``).

    Args:
        small: The small model's backend, or a sequence of drafter backends.
        large: The large model's backend (the next stage's, in a chain), or the whole chain
            as a list, smallest first.
        *larger: Further models of a chain, in increasing size.
        retry_policy: Retry policy of the model-calling nodes (default: transient backend
            errors, 3 attempts); ``None`` for no retries.
        timeouts: Seconds per node attempt: one number for every model node, or
            ``{step: seconds}`` (``escalate`` too, in chains; a step's timeout holds at
            every stage).
        scorers: Token scorers by strategy name, added to (or replacing) the defaults:
            ``surprisal`` and ``relevance``, plus ``attention`` when ``small`` is a
            ``TransformersBackend``. On vLLM, add ``{"attention": AttentionScorer(path)}``.
        review: Pause every run after ``verify`` (LangGraph ``interrupt``) for a human to
            accept the flow or give the answer; a run can also ask for it with the
            ``review`` setting of its context. Needs a checkpointer; resume with
            ``Command(resume="continue")`` or ``Command(resume={"answer": ...})``.
        image_policy: Which image sources runs may give
            (:class:`~mai_graph.inputs.sources.ImagePolicy`); ``None`` trusts the caller (any local
            path). Graphs serving others' input use ``ImagePolicy.untrusted(roots)`` or
            ``ImagePolicy.from_env()``.

    Returns:
        A ``StateGraph`` with ``context_schema=MAIContext``; compile it with your checkpointer.

    Example:
        >>> from mai_graph import ScriptedBackend, create_mai_graph
        >>> small = ScriptedBackend({"short": "yes"}, name="small")
        >>> large = ScriptedBackend({"short": "Yes."}, name="large")
        >>> graph = create_mai_graph(small, large).compile()
        >>> out = graph.invoke({"question": "Is the sky blue?"})
        >>> out["route"], out["canonical"]
        ('agree', 'yes')
    """
    lineup = Lineup.of(small, large, *larger).instrumented()
    if image_policy is not None and not isinstance(image_policy, ImagePolicy):
        raise ConfigError(
            f"image_policy must be an ImagePolicy or None, got {image_policy!r}",
            parameter="image_policy",
            value=image_policy,
            fix="pass ImagePolicy.untrusted(roots=[...]) or ImagePolicy.from_env()",
        )
    if retry_policy is not None and not isinstance(retry_policy, RetryPolicy):
        raise ConfigError(
            f"retry_policy must be a langgraph RetryPolicy or None, got {retry_policy!r}",
            parameter="retry_policy",
            value=retry_policy,
            fix="pass langgraph.types.RetryPolicy(...)",
        )
    per_step = _timeouts(timeouts)
    table = {**default_scorers(lineup.small), **_scorers(scorers)}
    chain = lineup.stages > 1

    builder = StateGraph(
        MAIState,
        context_schema=MAIContext,
        input_schema=InputState,
        output_schema=OutputState,
    )

    def add(node: Node, stage: int = 1) -> str:
        name = node_name(node.name, stage)
        model = node.name in _MODEL_STEPS
        builder.add_node(
            name,
            staged(node, stage, chain),
            retry_policy=retry_policy if model else None,
            timeout=per_step.get(node.name),
            metadata=_shown(node.name, stage, lineup),
        )
        return name

    add(make_prepare(lineup, image_policy, review))
    add(make_verify(lineup))
    add(make_baseline(lineup))
    builder.add_node("review", make_review())
    builder.add_edge(START, "prepare")
    builder.add_conditional_edges(
        "prepare", Router(route_policy), {"mai": "verify", "short": "baseline", "cot": "reason"}
    )
    builder.add_edge("baseline", END)
    builder.add_conditional_edges(
        "verify",
        Router(_after_verify(review)),
        {"review": "review", **_disagreement(1)},
    )
    builder.add_conditional_edges("review", Router(_on_disagreement(1)), _disagreement(1))
    for stage in range(1, lineup.stages + 1):
        if stage > 1:  # the previous stage's answer meets this stage's large model
            start = add(make_escalate(lineup, stage), stage)
            builder.add_edge(node_name("answer", stage - 1), start)
            builder.add_conditional_edges(
                start, Router(_on_disagreement(stage)), _disagreement(stage)
            )
        reason = add(make_reason(lineup, stage), stage)
        extract = add(make_extract(lineup, stage), stage)
        sparsify = add(make_sparsify(lineup, table, stage), stage)
        answer = add(make_answer(lineup, stage), stage)
        builder.add_edge(reason, extract)
        builder.add_conditional_edges(
            extract, Router(route_after_extract), {"done": END, "transfer": sparsify}
        )
        builder.add_edge(sparsify, answer)
    builder.add_edge(node_name("answer", lineup.stages), END)
    return builder


def _disagreement(stage: int) -> dict[Hashable, str]:
    """Where a stage goes after its gate: the end, its ``reason``, or past it to ``extract``."""
    return {
        "done": END,
        "disagree": node_name("reason", stage),
        "speculative": node_name("extract", stage),
    }


def _shown(step: str, stage: int, lineup: Lineup) -> dict[str, Any] | None:
    """What a node's box says in the diagram: which models it calls (k: the run's drafts)."""
    if step == "sparsify":
        return None
    if stage == 1:
        n = len(lineup.drafters)
        small = "small" if n == 1 else f"{n} drafters"
        calls = {
            "prepare": None,
            "verify": f"{small} x drafts + large, at once",
            "baseline": "small or large (the policy's)",
            "reason": f"{small} x drafts (large_cot: the largest)",
            "extract": f"{small} x drafts (large_cot: the largest)",
            "answer": "large",
        }[step]
    else:
        models = lineup.stages + 1  # the smallest, then the chain
        calls = {
            "escalate": f"model {stage + 1} of {models}",
            "reason": f"model {stage} of {models}",
            "extract": f"model {stage} of {models}",
            "answer": f"model {stage + 1} of {models}",
        }[step]
    return {"calls": calls} if calls else None


def _scorers(scorers: Mapping[str, TokenScorer] | None) -> dict[str, TokenScorer]:
    if scorers is None:
        return {}
    names = [s for s in get_args(SparsifyStrategy) if s != "none"]
    for name, scorer in scorers.items():
        if name not in names:
            raise ConfigError(
                f"unknown scorer name {name!r}; strategies are {names}",
                parameter="scorers",
                value=name,
                fix="key scorers by a sparsify strategy name",
            )
        if not isinstance(scorer, TokenScorer):
            raise ConfigError(
                f"scorers[{name!r}] must be a TokenScorer (async score(reasoning)), "
                f"got {type(scorer).__name__}",
                parameter="scorers",
                value=scorer,
            )
    return dict(scorers)


def _timeouts(timeouts: float | Mapping[str, float] | None) -> dict[str, float]:
    if timeouts is None:
        return {}
    if isinstance(timeouts, int | float) and not isinstance(timeouts, bool):
        table = dict.fromkeys(_MODEL_STEPS, float(timeouts))
    elif isinstance(timeouts, Mapping):
        unknown = sorted(set(timeouts) - set(_TIMED_STEPS))
        if unknown:
            raise ConfigError(
                f"unknown nodes in timeouts: {unknown}; nodes are {list(_TIMED_STEPS)}",
                parameter="timeouts",
                value=dict(timeouts),
                fix="key timeouts by node name",
            )
        table = {k: float(v) for k, v in timeouts.items()}
    else:
        raise ConfigError(
            f"timeouts must be seconds or a {{node: seconds}} mapping, got {timeouts!r}",
            parameter="timeouts",
            value=timeouts,
        )
    bad = {k: v for k, v in table.items() if not v > 0}
    if bad:
        raise ConfigError(
            f"timeouts must be > 0 seconds, got {bad}", parameter="timeouts", value=bad
        )
    return table


def mermaid(models: int = 2) -> str:
    """The graph's Mermaid diagram, as drawn by LangGraph from the compiled graph.

    ``mai-graph diagram`` prints it (docs/architecture.md embeds it); ``models`` > 2 draws a
    chain's graph, its later stages unrolled.
    """
    from mai_graph.backends.fake import ScriptedBackend

    backends = [ScriptedBackend() for _ in range(max(2, models))]
    graph = create_mai_graph(*backends).compile(name="mai")
    return str(graph.get_graph().draw_mermaid())
