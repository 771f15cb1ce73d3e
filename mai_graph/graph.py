"""The MAI graph: ``create_mai_graph(small, large, *larger) -> StateGraph`` and its routing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import RetryPolicy

from mai_graph.backends.base import VLMBackend
from mai_graph.context import MAIContext, SparsifyStrategy, mai_settings
from mai_graph.errors import BackendError, ConfigError
from mai_graph.inputs.sources import ImagePolicy
from mai_graph.lineup import Lineup
from mai_graph.nodes.answer import make_answer
from mai_graph.nodes.escalate import make_escalate
from mai_graph.nodes.extract import make_extract
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
    "route_after_answer",
    "route_after_extract",
    "route_after_verify",
]

NODES = ("verify", "reason", "extract", "sparsify", "answer")
_MODEL_NODES = ("verify", "reason", "extract", "answer", "escalate")
_TIMED_NODES = (*NODES, "escalate")


def is_transient(exc: BaseException) -> bool:
    """Retry only what may succeed on a second try: transient backend errors and timeouts."""
    return (isinstance(exc, BackendError) and exc.transient) or isinstance(exc, ConnectionError)


DEFAULT_RETRY = RetryPolicy(max_attempts=3, initial_interval=0.5, retry_on=is_transient)
"""Three attempts for transient backend errors; everything else fails the node at once."""


def route_after_verify(state: MAIState) -> Literal["done", "disagree"]:
    """``done`` when verify set a route (agreement or a short baseline), else reason."""
    return "done" if state.get("route") else "disagree"


def _route_with_review(always: bool) -> Any:
    """Verify's router: to ``review`` when the graph or the run asks for it, else as routed."""

    def route(state: MAIState, runtime: Runtime[Any]) -> Literal["review", "done", "disagree"]:
        if always or mai_settings(runtime.context).review:
            return "review"
        return route_after_verify(state)

    return route


def route_after_extract(state: MAIState) -> Literal["done", "transfer"]:
    """``done`` when extract set a route (S2 agreement or a CoT baseline), else sparsify."""
    return "done" if state.get("route") else "transfer"


def route_after_answer(state: MAIState) -> Literal["done", "escalate"]:
    """Chains: ``done`` when the last stage answered, else on to the next stage."""
    return "done" if state.get("route") else "escalate"


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

    Flow: ``verify`` (both short, concurrently) → agree: end; else ``reason`` (small CoT) →
    ``extract`` (S2 turn) → agrees with the large short answer: end; else ``sparsify`` →
    ``answer`` (large reads the reasoning, answers short). Per-run settings come from the
    context (:class:`MAIContext`), including the baseline policies.

    Two more shapes use the same nodes (see :mod:`mai_graph.lineup`):

    - **Drafters:** ``small`` may be several backends; each drafts the answer (and, on
      escalation, its reasoning), concurrently. A run may also sample ``drafts`` > 1 drafts
      per small model. ``draft_quorum`` decides which agreement ends a run, ``draft_rank``
      which reasonings the large model reads (``transfer_drafts`` of them).
    - **Chains:** ``create_mai_graph(m0, m1, m2, ...)``, smallest first. Stage ``s`` runs MAI
      for the pair (``m[s-1]``, ``m[s]``); when ``m[s]`` answers after a transfer and a larger
      model follows, the ``escalate`` node verifies that answer against the next model's short
      answer, and only a disagreement escalates again. Outputs and metrics records carry
      ``stage``; the baselines compare the smallest (``small``) and the largest (``large``).

    Args:
        small: The small model's backend, or a sequence of drafter backends.
        large: The large model's backend (the next stage's, in a chain), or the whole chain
            as a list, smallest first.
        *larger: Further models of a chain, in increasing size.
        retry_policy: Retry policy of the model-calling nodes (default: transient backend
            errors, 3 attempts); ``None`` for no retries.
        timeouts: Seconds per node attempt: one number for every model node, or
            ``{node: seconds}`` (``escalate`` too, in chains).
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
    lineup = Lineup.of(small, large, *larger)
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
    per_node = _timeouts(timeouts)
    table = {**default_scorers(lineup.small), **_scorers(scorers)}

    builder = StateGraph(
        MAIState,
        context_schema=MAIContext,
        input_schema=InputState,
        output_schema=OutputState,
    )
    makers = {
        "verify": make_verify(lineup, image_policy, review),
        "reason": make_reason(lineup),
        "extract": make_extract(lineup),
        "sparsify": make_sparsify(lineup, table),
        "answer": make_answer(lineup),
    }
    chain = lineup.stages > 1
    if chain:
        makers["escalate"] = make_escalate(lineup)
    for name in makers:
        model_node = name in _MODEL_NODES
        builder.add_node(
            name,
            makers[name],
            retry_policy=retry_policy if model_node else None,
            timeout=per_node.get(name),
        )
    builder.add_node("review", make_review())
    builder.add_edge(START, "verify")
    builder.add_conditional_edges(
        "verify",
        _route_with_review(review),
        {"review": "review", "done": END, "disagree": "reason"},
    )
    builder.add_conditional_edges("review", route_after_verify, {"done": END, "disagree": "reason"})
    builder.add_edge("reason", "extract")
    builder.add_conditional_edges(
        "extract", route_after_extract, {"done": END, "transfer": "sparsify"}
    )
    builder.add_edge("sparsify", "answer")
    if chain:
        builder.add_conditional_edges(
            "answer", route_after_answer, {"done": END, "escalate": "escalate"}
        )
        builder.add_conditional_edges(
            "escalate", route_after_verify, {"done": END, "disagree": "reason"}
        )
    else:
        builder.add_edge("answer", END)
    return builder


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
        table = dict.fromkeys(_MODEL_NODES, float(timeouts))
    elif isinstance(timeouts, Mapping):
        unknown = sorted(set(timeouts) - set(_TIMED_NODES))
        if unknown:
            raise ConfigError(
                f"unknown nodes in timeouts: {unknown}; nodes are {list(_TIMED_NODES)}",
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
    chain's graph (its ``escalate`` loop).
    """
    from mai_graph.backends.fake import ScriptedBackend

    backends = [ScriptedBackend() for _ in range(max(2, models))]
    graph = create_mai_graph(*backends).compile(name="mai")
    return str(graph.get_graph().draw_mermaid())
