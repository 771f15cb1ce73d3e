"""S2 answer extraction: a second turn over the cached reasoning asks for the answer only.

Each draft answers over its own reasoning (concurrently), and the drafts are ranked
(``draft_rank``): the best draft's reasoning and S2 answer fill the run's keys. The S2 answer
ends the run for the CoT baselines, and as ``extract_agree`` when it meets the large model's
short answer under the gate (``s2_exit``).
"""

from __future__ import annotations

from typing import Any, cast

from mai_graph import flow
from mai_graph.calls import canonical, s2_request
from mai_graph.gate import agreement_exits
from mai_graph.lineup import Drafter, Lineup, rank_drafts
from mai_graph.state import Draft, MAIState, NodeMetrics

from ._common import MAIRuntime, Node, call, gather_all, tagged
from .drafts import REASONING_KEYS, reasoners


async def extract(
    state: MAIState, runtime: MAIRuntime, lineup: Lineup, stage: int = 1
) -> dict[str, Any]:
    """Append the extraction turn to each draft's CoT conversation (same prefix), read answers."""
    ctx = runtime.context
    q = state["asked"]
    drafters, role = reasoners(lineup, runtime, stage)
    several = len(drafters) > 1
    drafts: list[Any] = list(state.get("drafts") or []) if several else [state]

    async def s2(d: Drafter, draft: Any) -> tuple[Any, NodeMetrics]:
        request = s2_request(
            q, ctx, draft.get("reasoning") or "", draft.get("reasoning_token_ids") or None
        )
        if not several:
            return await call(d.backend, request, "extract", role, runtime)
        gen, rec = await call(d.backend, request, "extract", role, tagged(runtime, drafter=d.index))
        return gen, {**rec, "drafter": d.index}

    results = await gather_all([s2(d, draft) for d, draft in zip(drafters, drafts)])
    answers = [
        {
            "s2_answer": gen.text,
            "s2_canonical": canonical(gen.text, q),
            "s2_prob": rec["answer_prob"],
        }
        for gen, rec in results
    ]
    update: dict[str, Any] = {"metrics": [rec for _, rec in results]}
    if several:
        merged: list[Draft] = [cast(Draft, {**d, **a}) for d, a in zip(drafts, answers)]
        order = rank_drafts(merged, ctx)
        for place, i in enumerate(order):
            merged[i] = {**merged[i], "rank": place}
        best: Any = merged[order[0]]
        update.update(drafts=merged, **{k: best.get(k) for k in REASONING_KEYS})
    else:
        best = answers[0]
    update.update({k: best[k] for k in ("s2_answer", "s2_canonical", "s2_prob")})
    text, canon, prob = best["s2_answer"], best["s2_canonical"], best["s2_prob"]
    agrees = (
        ctx.policy == "mai"
        and ctx.s2_exit
        and agreement_exits(
            canon, state.get("large_canonical") or "", prob, state.get("large_prob"), ctx
        )
    )
    route = flow.after_extract(ctx.policy, ctx.s2_exit, agrees)
    if route is not None:
        update.update(answer=text, canonical=canon, route=route)
    return update


def make_extract(lineup: Lineup, stage: int = 1) -> Node:
    """The ``extract`` node of ``stage``."""
    return Node("extract", lambda state, runtime: extract(state, runtime, lineup, stage))
