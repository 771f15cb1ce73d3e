"""Mutual verification: the drafts and the large model answer short, concurrently.

Agreement under the gate ends the run (``agree``), as does a large model sure enough on its own
(``large_confident``); otherwise the drafts reason next. With ``speculative_cot`` the drafts'
reasoning starts with the short answers and is cancelled on an exit. A chain's later stages
decide the same way (:mod:`.escalate`), with the answer handed on as the small side.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

from mai_graph import flow
from mai_graph.calls import canonical, short_request
from mai_graph.gate import after_disagreement, pooled_probability, quorum_exits
from mai_graph.lineup import Lineup
from mai_graph.state import Draft, MAIState, Route

from ._common import MAIRuntime, Node, call, cancel_quietly
from .drafts import short_answer, write_reasoning


def pooled(drafts: Sequence[Draft], small: Sequence[Any], large: Any, answer: str) -> float | None:
    """The drafts' and the large model's averaged probability of ``answer``, or None.

    The drafts' distributions are averaged first (one draft: its own), then pooled with the
    large model's (:func:`~mai_graph.gate.pooled_probability`).
    """
    dists = [g.distribution for g in small]
    if not dists or any(d is None for d in dists):
        return None
    keys = {k for d in dists for k in d}
    mean = {k: sum(d.get(k, 0.0) for d in dists) / len(dists) for k in keys}
    return pooled_probability(mean, large, answer)


def decide(
    small: Sequence[tuple[str, float | None]],
    large: tuple[str, float | None],
    ctx: Any,
    pooled_prob: float | None = None,
) -> Route | None:
    """The gate's verdict: ``agree``, ``large_confident``, or None (reason on)."""
    canon, prob = large
    agree = quorum_exits(small, canon, prob, ctx)
    # The large model's own confidence is read only on a disagreement.
    large_sure = not agree and after_disagreement(prob, ctx, pooled_prob) == "large"
    return flow.after_verify(agree, large_sure)


async def settle(
    update: dict[str, Any],
    route: Route | None,
    answer: tuple[str, str],
    speculative: asyncio.Future[dict[str, Any]] | None,
) -> dict[str, Any]:
    """A new update: ``update`` ended on ``route``, or joined by the speculative reasoning.

    On a route the large ``answer`` (text, canonical) stands and the speculative call is
    cancelled; otherwise its reasoning joins the update, its records after ``update``'s.
    """
    if route is not None:
        await cancel_quietly(speculative)
        return {**update, "answer": answer[0], "canonical": answer[1], "route": route}
    if speculative is None:
        return update
    try:
        reasoning = await speculative
    except BaseException:
        await cancel_quietly(speculative)
        raise
    return {**update, **reasoning, "metrics": [*update["metrics"], *reasoning["metrics"]]}


async def concurrently(
    calls: Sequence[Awaitable[Any]], speculative: Awaitable[dict[str, Any]] | None
) -> tuple[list[Any], asyncio.Future[dict[str, Any]] | None]:
    """Run ``calls`` at once (one failing cancels the others), a speculative call after them.

    Returns the calls' results, in order, and the speculative call, still running.
    """
    spec: asyncio.Future[dict[str, Any]] | None = None
    tasks: list[asyncio.Task[Any]] = []
    try:
        async with asyncio.TaskGroup() as tg:
            tasks += [tg.create_task(c) for c in calls]  # type: ignore[arg-type]
            if speculative is not None:  # queued after the short answers, outside the group
                spec = asyncio.ensure_future(speculative)
    except BaseExceptionGroup as group:
        await cancel_quietly(spec)
        raise group.exceptions[0] from None
    except BaseException:
        await cancel_quietly(spec)
        if speculative is not None and spec is None:
            speculative.close()  # type: ignore[attr-defined]
        raise
    return [t.result() for t in tasks], spec


async def verify(state: MAIState, runtime: MAIRuntime, lineup: Lineup) -> dict[str, Any]:
    """The drafts' short answers and the large model's, at once; the gate decides.

    The first draft's answer fills ``small_answer`` (and its ``_canonical`` / ``_prob`` /
    ``_distribution``); with several drafts, each is kept in ``drafts``.
    """
    ctx = runtime.context
    q = state["asked"]
    drafters = lineup.drafts(ctx)
    several = len(drafters) > 1
    shorts = [short_answer(q, runtime, d, several) for d in drafters]
    large_call = call(lineup.chain[0], short_request(q, ctx), "verify", "large", runtime)
    speculative = write_reasoning(q, runtime, drafters, "small") if ctx.speculative_cot else None
    results, spec = await concurrently([*shorts, large_call], speculative)
    *answers, (gl, rl) = results
    drafts: list[Draft] = [draft for draft, _, _ in answers]
    first, first_gen = drafts[0], answers[0][1]
    cl, pl = canonical(gl.text, q), rl["answer_prob"]
    update: dict[str, Any] = {
        "small_answer": first["answer"],
        "small_canonical": first["canonical"],
        "small_prob": first["prob"],
        "small_distribution": first_gen.distribution,
        "large_answer": gl.text,
        "large_canonical": cl,
        "large_prob": pl,
        "large_distribution": gl.distribution,
        "metrics": [*(rec for _, _, rec in answers), rl],
    }
    if several:
        update["drafts"] = drafts
    p = pooled(drafts, [g for _, g, _ in answers], gl.distribution, cl)
    route = decide([(d["canonical"], d["prob"]) for d in drafts], (cl, pl), ctx, p)
    if route is None and spec is not None and several:
        spec = _into_drafts(spec, drafts)
    return await settle(update, route, (gl.text, cl), spec)


def _into_drafts(
    spec: asyncio.Future[dict[str, Any]], drafts: Sequence[Mapping[str, Any]]
) -> asyncio.Future[dict[str, Any]]:
    """The speculative reasoning of several drafts, merged into this verification's drafts."""

    async def merged() -> dict[str, Any]:
        out = await spec
        return {**out, "drafts": [{**d, **r} for d, r in zip(drafts, out["drafts"])]}

    return asyncio.ensure_future(merged())


def make_verify(lineup: Lineup) -> Node:
    """The ``verify`` node: stage 1's drafts and large model (``drafts`` > 1 or drafters: k)."""
    return Node("verify", lambda state, runtime: verify(state, runtime, lineup))
