"""The next stage of a chain: the answer so far meets the next, larger model's short answer.

In a graph over a chain of models (``create_mai_graph(small, large, larger, ...)``), the
``answer`` node of a stage that is not the last hands its answer here instead of ending the
run. This node verifies it against the next model exactly as ``verify`` verifies the first pair:
agreement under the gate ends the run (``agree``, at this stage), as does a sure large model
(``large_confident``); otherwise the stage's small model (the previous stage's large one)
reasons, and the usual ``reason`` → ``extract`` → ``sparsify`` → ``answer`` steps run for the
new pair.
"""

from __future__ import annotations

import asyncio
from typing import Any

from mai_graph.answers import extract_answer
from mai_graph.backends.base import VLMBackend
from mai_graph.calls import Question, short_request
from mai_graph.lineup import Lineup
from mai_graph.state import MAIState

from ._common import Node, RunScope, call, tag_metrics, tagged
from .reason import write_reasoning
from .verify import apply_gate, cancel_quietly

STAGE_KEYS = (
    "reasoning",
    "reasoning_token_ids",
    "reasoning_tokens",
    "reasoning_logprobs",
    "s2_answer",
    "s2_canonical",
    "s2_prob",
    "transfer",
    "transfer_token_ids",
    "sparsification",
)
"""What one stage's escalation filled; cleared for the next stage."""


def handed_on_probability(state: MAIState) -> float | None:
    """The probability of the answer the previous stage hands on (its last answer call's)."""
    for rec in reversed(state.get("metrics") or []):
        if rec["node"] == "answer":
            return rec["answer_prob"]
    return None


async def escalate(
    state: MAIState, scope: RunScope, small: VLMBackend, large: VLMBackend, stage: int
) -> dict[str, Any]:
    """Start ``stage``: the previous stage's answer is this pair's small answer; ask the large.

    ``scope`` tags its events with the stage; the caller tags the metrics records.
    """
    ctx = scope.ctx
    q = Question.from_state(state, ctx)
    update: dict[str, Any] = {k: None for k in STAGE_KEYS if state.get(k) is not None}
    small_canonical = state.get("canonical") or ""
    small_prob = handed_on_probability(state)
    update.update(
        stage=stage,
        small_answer=state.get("answer") or "",
        small_canonical=small_canonical,
        small_prob=small_prob,
    )
    speculative = None
    if ctx.speculative_cot:
        speculative = asyncio.ensure_future(write_reasoning(q, scope, small, "small"))
    try:
        gen, rec = await call(large, short_request(q, ctx), "escalate", "large", scope)
    except BaseException:
        await cancel_quietly(speculative)
        raise
    canonical = extract_answer(gen.text, q.kind, q.options)
    prob = rec["answer_prob"]
    records = [rec]
    update.update(large_answer=gen.text, large_canonical=canonical, large_prob=prob)
    await apply_gate(
        update,
        records,
        (small_canonical, small_prob),
        (gen.text, canonical, prob),
        ctx,
        speculative,
    )
    update["metrics"] = records
    return update


def make_escalate(lineup: Lineup) -> Node:
    """The ``escalate`` node of a chain graph, with the chain bound."""

    async def core(state: MAIState, scope: RunScope) -> dict[str, Any]:
        stage = (state.get("stage") or 1) + 1
        small, large = lineup.pair(stage)
        update = await escalate(state, tagged(scope, stage=stage), small, large, stage)
        return tag_metrics(update, stage=stage)

    return Node("escalate", core)
