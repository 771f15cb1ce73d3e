"""The first node of every run: its inputs validated and consumed, the thread's last run cleared.

Everything that can refuse a run before any model call happens here, once, whatever the policy:
human review without a checkpointer, token budgets a model's context cannot hold, the question
and its media (read, decoded and stored off the event loop), and media counts over what the
backends the run will call were started for. The policy then picks the next node (an edge of
the graph, :func:`~mai_graph.graph.route_policy`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from langgraph.types import Overwrite

from mai_graph import flow
from mai_graph.backends.base import VLMBackend, capabilities_of
from mai_graph.calls import Question, all_images, read_question
from mai_graph.context import MAIContext
from mai_graph.errors import ConfigError
from mai_graph.inputs.limits import check_backends
from mai_graph.inputs.sources import ImagePolicy
from mai_graph.lineup import Lineup
from mai_graph.state import MAIState, run_keys

from ._common import MAIRuntime, Node, node_config

_RUN_KEYS = run_keys()
_INPUT_KEYS = ("question", "image", "options")
_MEDIA_KEYS = ("images", "video")


async def validate_inputs(
    state: MAIState, runtime: MAIRuntime, policy: ImagePolicy | None = None
) -> Question:
    """Validate the run's inputs once; media are read, decoded and stored off the event loop."""
    if state.get("image") is None and state.get("images") is None and state.get("video") is None:
        return read_question(state, runtime.context)
    return await asyncio.to_thread(read_question, state, runtime.context, policy)


def consume_inputs(state: MAIState, q: Question) -> dict[str, Any]:
    """The run's reset: what a previous run on the thread left is cleared, the inputs consumed.

    The inputs become ``asked`` (the validated :class:`~mai_graph.state.Question`), and the
    metrics list starts anew (each later node appends its calls' records).
    """
    # Only keys a previous run on this thread left behind need clearing (fewer channel writes).
    update: dict[str, Any] = {k: None for k in _RUN_KEYS if state.get(k) is not None}
    # The inputs are consumed: a later run on this thread uses only what its own input gives.
    update.update(dict.fromkeys(_INPUT_KEYS), asked=q)
    update.update({k: None for k in _MEDIA_KEYS if state.get(k) is not None})
    update["metrics"] = Overwrite([])  # this run's calls replace any earlier run's
    return update


def check_review(runtime: MAIRuntime, always: bool = False) -> None:
    """Refuse a run that asks for human review where no checkpointer can hold it paused.

    ``review`` pauses the run after verification (LangGraph ``interrupt``); a paused run is
    resumed from its checkpoint, so without a checkpointer it would end with no answer.
    Checked before any model call, in every door (``run()``, the CLI, the endpoint, the chat
    model compile without one; Studio's server has one).
    """
    if not (always or runtime.context.review):
        return
    from langgraph.constants import CONFIG_KEY_CHECKPOINTER  # where Pregel puts the saver

    configurable = (node_config() or {}).get("configurable") or {}
    if configurable.get(CONFIG_KEY_CHECKPOINTER) is None:
        raise ConfigError(
            "review pauses the run after verification for a human decision, and a paused run "
            "needs a checkpointer to be resumed from; this run has none, so it would end "
            "without an answer",
            parameter="review",
            value=True,
            fix="compile the graph with a checkpointer (create_mai_graph(...).compile("
            "checkpointer=InMemorySaver())) and run it on a thread, or leave review off",
        )


def check_run_budgets(ctx: MAIContext, lineup: Lineup) -> None:
    """Refuse token budgets that cannot fit a model's context, before any model call.

    The models that reason under the run's policy (the drafters and a chain's middle models for
    ``mai``, the smallest for ``small_cot``, the largest for ``large_cot``) must hold
    ``cot_max_tokens`` plus the S2 turn; those that read a transfer, the transferred tokens
    (at most ``max_transfer_tokens`` and the reasoning) plus the answer
    (:func:`mai_graph.inputs.limits.check_budgets`).
    """
    from mai_graph.inputs.limits import check_budgets

    reasoners, readers = flow.budget_roles(ctx.policy, lineup.layout)
    if not (reasoners or readers):
        return
    check_budgets(
        lineup.backends(reasoners),
        lineup.backends(readers),
        cot=ctx.cot_max_tokens,
        s2=ctx.s2_max_tokens,
        # each transferred draft is sparsified on its own, up to max_transfer_tokens
        transfer=min(ctx.transfer_drafts, max(1, lineup.draft_count(ctx)))
        * min(ctx.max_transfer_tokens, ctx.cot_max_tokens),
        answer=ctx.short_max_tokens,
    )


def called_backends(lineup: Lineup, ctx: MAIContext) -> list[VLMBackend]:
    """The backends a run under ``ctx.policy`` may call (MAI: every drafter and the chain)."""
    return lineup.backends(flow.called(ctx.policy, lineup.layout))


def make_prepare(lineup: Lineup, image_policy: ImagePolicy | None, review: bool) -> Node:
    """The ``prepare`` node: checks, the inputs read under ``image_policy``, the run's reset.

    ``review``: the graph pauses every run for review (see :func:`check_review`).
    """

    async def prepare(state: MAIState, runtime: MAIRuntime) -> dict[str, Any]:
        check_review(runtime, review)
        check_run_budgets(runtime.context, lineup)
        q = await validate_inputs(state, runtime, image_policy)
        videos = q.get("videos") or []
        if videos or len(q.get("images") or []) > 1:
            backends = called_backends(lineup, runtime.context)
            limits = [(b.name, capabilities_of(b).limits()) for b in backends]
            check_backends(all_images(q), videos, limits)
        return consume_inputs(state, q)

    return Node("prepare", prepare)
