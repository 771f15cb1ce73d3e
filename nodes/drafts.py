"""A step's drafts: the small side of a stage as k calls, with k = 1 the ordinary run.

A run drafts more than once when the graph has several drafter backends or the run asks for
``drafts > 1`` (samples of each small model at ``draft_temperature``). Each small-side step
(the short answer, the chain of thought, the S2 answer) makes its k calls concurrently (engines
batch them). With one draft, what a step writes goes to the run's keys (``small_answer``,
``reasoning``, ...) and the records carry no ``drafter``; with several, each draft's results
are kept in ``drafts`` and the best draft also fills the run's keys, so everything downstream
reads a run with drafts as it reads a run without.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from mai_graph import flow
from mai_graph.calls import Question, canonical, cot_request, short_request
from mai_graph.lineup import Drafter, Lineup
from mai_graph.state import Draft, NodeMetrics

from ._common import MAIRuntime, call, gather_all, tagged

REASONING_KEYS = ("reasoning", "reasoning_token_ids", "reasoning_tokens", "reasoning_logprobs")
"""What a chain of thought fills, in a draft and in the run's keys."""


def reasoners(lineup: Lineup, runtime: MAIRuntime, stage: int) -> tuple[list[Drafter], str]:
    """Who reasons at ``stage`` under the run's policy, and in which role.

    The reasoners are :func:`mai_graph.flow.reasoners`'; MAI's first stage takes each drafter
    ``drafts`` times, every other reasoner once.
    """
    ctx = runtime.context
    members, role = flow.reasoners(ctx.policy, stage, lineup.layout)
    if ctx.policy == "mai" and stage == 1:
        return lineup.drafts(ctx), role
    return [Drafter(0, b, False) for b in lineup.backends(members)], role


def _as_draft(rec: NodeMetrics, d: Drafter, several: bool) -> NodeMetrics:
    return {**rec, "drafter": d.index} if several else rec


def _runtime_of(runtime: MAIRuntime, d: Drafter, several: bool) -> MAIRuntime:
    return tagged(runtime, drafter=d.index) if several else runtime


async def short_answer(
    q: Question, runtime: MAIRuntime, d: Drafter, several: bool
) -> tuple[Draft, Any, NodeMetrics]:
    """One draft's short answer: the draft, its generation and its call's record."""
    request = d.request_for(short_request(q, runtime.context), runtime.context)
    gen, rec = await call(d.backend, request, "verify", "small", _runtime_of(runtime, d, several))
    draft = Draft(
        drafter=d.index,
        model=gen.model,
        answer=gen.text,
        canonical=canonical(gen.text, q),
        prob=rec["answer_prob"],
    )
    return draft, gen, _as_draft(rec, d, several)


async def _chain_of_thought(
    q: Question, runtime: MAIRuntime, d: Drafter, role: str, several: bool
) -> tuple[dict[str, Any], NodeMetrics]:
    request = d.request_for(cot_request(q, runtime.context), runtime.context)
    gen, rec = await call(d.backend, request, "reason", role, _runtime_of(runtime, d, several))
    fields = {
        "reasoning": gen.text,
        "reasoning_token_ids": list(gen.token_ids),
        "reasoning_tokens": list(gen.tokens) if gen.tokens is not None else None,
        "reasoning_logprobs": list(gen.logprobs) if gen.logprobs is not None else None,
    }
    return fields, _as_draft(rec, d, several)


async def write_reasoning(
    q: Question,
    runtime: MAIRuntime,
    drafters: Sequence[Drafter],
    role: str,
    drafts: Sequence[Draft] = (),
) -> dict[str, Any]:
    """Every draft's chain of thought, concurrently, and the update it makes.

    One draft: its reasoning fills the run's keys. Several: each joins its entry of ``drafts``
    (the run's keys are filled from the best draft after the S2 answers rank them).
    """
    several = len(drafters) > 1
    results = await gather_all([_chain_of_thought(q, runtime, d, role, several) for d in drafters])
    records = [rec for _, rec in results]
    if not several:
        return {**results[0][0], "metrics": records}
    if not drafts:  # speculative, before the short answers: the fields alone, in draft order
        return {"drafts": [fields for fields, _ in results], "metrics": records}
    merged = [cast(Draft, {**d, **fields}) for d, (fields, _) in zip(drafts, results)]
    return {"drafts": merged, "metrics": records}


def reasoning_written(state: Any, stage: int = 1) -> bool:
    """Whether this stage's reasoning is already there (a speculative CoT wrote it)."""
    if state.get("reasoning") is not None:
        return True
    drafts = (state.get("drafts") or ()) if stage == 1 else ()
    return bool(drafts) and all(d.get("reasoning") is not None for d in drafts)
