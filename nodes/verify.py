"""Mutual verification: small and large answer short, concurrently; agreement ends the run."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from langgraph.types import Overwrite

from mai_graph.answers import extract_answer
from mai_graph.backends.base import VLMBackend
from mai_graph.calls import Question, short_request
from mai_graph.context import MAIContext
from mai_graph.errors import ConfigError
from mai_graph.gate import after_disagreement, agreement_exits, pooled_probability
from mai_graph.inputs.limits import check_backends
from mai_graph.inputs.sources import ImagePolicy
from mai_graph.lineup import Lineup
from mai_graph.state import MAIState, run_keys

from ._common import Node, RunScope, call, tag_metrics, tagged
from .reason import write_reasoning

_RUN_KEYS = run_keys()
_INPUT_KEYS = ("question", "image", "options")
_MEDIA_KEYS = ("images", "video")


async def read_question(
    state: MAIState, scope: RunScope, policy: ImagePolicy | None = None
) -> Question:
    """Validate the run's inputs once; media are read, decoded and stored off the event loop."""
    if state.get("image") is None and state.get("images") is None and state.get("video") is None:
        return Question.from_input(state, scope.ctx)
    return await asyncio.to_thread(Question.from_input, state, scope.ctx, policy)


def consume_inputs(state: MAIState, q: Question) -> dict[str, Any]:
    """The first node's reset of the run's state.

    Clears what a previous run on the thread left, consumes the inputs into ``request``, and
    starts the metrics list anew (its records are appended by the caller).
    """
    # Only keys a previous run on this thread left behind need clearing (fewer channel writes).
    update: dict[str, Any] = {k: None for k in _RUN_KEYS if state.get(k) is not None}
    # The inputs are consumed: a later run on this thread uses only what its own input gives.
    update.update(dict.fromkeys(_INPUT_KEYS), request=q.as_request())
    update.update({k: None for k in _MEDIA_KEYS if state.get(k) is not None})
    update["metrics"] = Overwrite([])  # this run's calls replace any earlier run's
    return update


async def verify(
    state: MAIState,
    scope: RunScope,
    small: VLMBackend,
    large: VLMBackend,
    policy: ImagePolicy | None = None,
) -> dict[str, Any]:
    """Ask both models for a short answer at once; agreement (or a short baseline) ends the run.

    The first node of every run: it validates the inputs and consumes them into ``request``
    (normalized: image reference, options mapping), and clears what a previous run on the
    thread left.
    CoT baselines (``small_cot`` / ``large_cot``) make no call here: they only prepare inputs.
    """
    ctx = scope.ctx
    q = await read_question(state, scope, policy)
    if q.videos or len(q.images) > 1:
        check_backends(q.all_images, q.videos, (small, large))
    update = consume_inputs(state, q)
    records: list[Any] = update["metrics"].value
    if ctx.policy in ("small_cot", "large_cot"):
        return update

    if ctx.policy in ("small", "large"):
        backend = small if ctx.policy == "small" else large
        gen, rec = await call(backend, short_request(q, ctx), "verify", ctx.policy, scope)
        canonical = extract_answer(gen.text, q.kind, q.options)
        update.update(
            {
                f"{ctx.policy}_answer": gen.text,
                f"{ctx.policy}_canonical": canonical,
                f"{ctx.policy}_prob": rec["answer_prob"],
                f"{ctx.policy}_distribution": gen.distribution,
            },
            answer=gen.text,
            canonical=canonical,
            route=ctx.policy,
        )
        records.append(rec)
        return update

    speculative: asyncio.Future[dict[str, Any]] | None = None
    try:  # both in flight at once; one failing cancels the other
        async with asyncio.TaskGroup() as tg:
            small_task = tg.create_task(
                call(small, short_request(q, ctx), "verify", "small", scope)
            )
            large_task = tg.create_task(
                call(large, short_request(q, ctx), "verify", "large", scope)
            )
            if ctx.speculative_cot:  # queued after the short answers, outside the group
                speculative = asyncio.ensure_future(write_reasoning(q, scope, small, "small"))
    except BaseExceptionGroup as group:
        await cancel_quietly(speculative)
        raise group.exceptions[0] from None
    except BaseException:
        await cancel_quietly(speculative)
        raise
    (gs, rs), (gl, rl) = small_task.result(), large_task.result()
    cs = extract_answer(gs.text, q.kind, q.options)
    cl = extract_answer(gl.text, q.kind, q.options)
    ps, pl = rs["answer_prob"], rl["answer_prob"]
    update.update(
        small_answer=gs.text,
        small_canonical=cs,
        small_prob=ps,
        small_distribution=gs.distribution,
        large_answer=gl.text,
        large_canonical=cl,
        large_prob=pl,
        large_distribution=gl.distribution,
    )
    records += [rs, rl]
    pooled = pooled_probability(gs.distribution, gl.distribution, cl)
    await apply_gate(update, records, (cs, ps), (gl.text, cl, pl), ctx, speculative, pooled)
    return update


async def apply_gate(
    update: dict[str, Any],
    records: list[Any],
    small: tuple[str, float | None],
    large: tuple[str, str, float | None],
    ctx: MAIContext,
    speculative: asyncio.Future[dict[str, Any]] | None,
    pooled: float | None = None,
) -> None:
    """End the run if the gate lets it (the large answer stands), else go on to reasoning.

    ``small`` is (canonical, probability) and ``large`` (text, canonical, probability);
    ``pooled`` the two distributions' averaged probability of the large answer. On an
    exit a speculative chain of thought is cancelled; otherwise it is awaited and its
    reasoning and records join ``update`` and ``records`` (both changed in place).
    """
    small_canonical, small_prob = small
    text, canonical, prob = large
    if agreement_exits(small_canonical, canonical, small_prob, prob, ctx):
        update.update(answer=text, canonical=canonical, route="agree")
    elif after_disagreement(prob, ctx, pooled) == "large":
        update.update(answer=text, canonical=canonical, route="large_confident")
    if update.get("route") is not None:
        await cancel_quietly(speculative)
    elif speculative is not None:
        try:
            reasoning = await speculative
        except BaseException:
            await cancel_quietly(speculative)
            raise
        records += reasoning.pop("metrics")
        update.update(reasoning)


async def cancel_quietly(task: asyncio.Future[Any] | None) -> None:
    """Cancel a speculative call and wait until the engine has dropped it."""
    if task is None:
        return
    if task.done():
        if not task.cancelled():
            task.exception()  # retrieved: the run has already failed or no longer needs it
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def check_review(scope: RunScope, always: bool = False) -> None:
    """Refuse a run that asks for human review where no checkpointer can hold it paused.

    ``review`` pauses the run after verification (LangGraph ``interrupt``); a paused run is
    resumed from its checkpoint, so without a checkpointer it would end with no answer.
    Checked before any model call, in every door (``run()``, the CLI, the endpoint, the chat
    model compile without one; Studio's server has one).
    """
    if not (always or scope.ctx.review):
        return
    from langgraph.constants import CONFIG_KEY_CHECKPOINTER  # where Pregel puts the saver

    configurable = (scope.config or {}).get("configurable") or {}
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

    if ctx.policy == "mai":
        reasoners, readers = [*lineup.drafters, *lineup.chain[:-1]], list(lineup.chain)
    elif ctx.policy == "small_cot":
        reasoners, readers = [lineup.drafters[0]], []
    elif ctx.policy == "large_cot":
        reasoners, readers = [lineup.chain[-1]], []
    else:
        return
    check_budgets(
        reasoners,
        readers,
        cot=ctx.cot_max_tokens,
        s2=ctx.s2_max_tokens,
        # each transferred draft is sparsified on its own, up to max_transfer_tokens
        transfer=min(ctx.transfer_drafts, max(1, lineup.draft_count(ctx)))
        * min(ctx.max_transfer_tokens, ctx.cot_max_tokens),
        answer=ctx.short_max_tokens,
    )


def make_verify(
    lineup: Lineup, image_policy: ImagePolicy | None = None, review: bool = False
) -> Node:
    """The ``verify`` node with its backends (and the image policy of its inputs) bound.

    Runs with several drafts verify them all (:func:`~mai_graph.nodes.drafts.verify_drafts`);
    in a chain, this is stage 1 and its records carry ``stage``. ``review``: the graph pauses
    every run for review (see :func:`check_review`).
    """
    from .drafts import verify_drafts

    small, large = lineup.pair(1)

    if lineup.classic:

        async def classic(state: MAIState, scope: RunScope) -> dict[str, Any]:
            check_review(scope, review)
            check_run_budgets(scope.ctx, lineup)
            if scope.ctx.drafts > 1 and scope.ctx.policy == "mai":
                return await verify_drafts(state, scope, lineup, image_policy)
            return await verify(state, scope, small, large, image_policy)

        return Node("verify", classic)

    chain = lineup.stages > 1

    async def core(state: MAIState, scope: RunScope) -> dict[str, Any]:
        check_review(scope, review)
        check_run_budgets(scope.ctx, lineup)
        ctx = scope.ctx
        scope = tagged(scope, stage=1) if chain else scope
        if ctx.policy != "mai":
            update = await verify(state, scope, *lineup.baseline_pair(), image_policy)
        elif lineup.draft_count(ctx) > 1:
            update = await verify_drafts(state, scope, lineup, image_policy)
        else:
            update = await verify(state, scope, small, large, image_policy)
        return {**tag_metrics(update, stage=1), "stage": 1} if chain else update

    return Node("verify", core)
