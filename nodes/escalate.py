"""The next stage of a chain: the answer so far meets the next, larger model's short answer.

In a graph over a chain of models (``create_mai_graph(small, large, larger, ...)``), the
``answer`` node of a stage that is not the last hands its answer here instead of ending the
run. This node verifies it against the next model exactly as ``verify`` verifies the first pair
(:func:`~.verify.decide`): agreement under the gate ends the run (``agree``, at this stage), as
does a sure large model (``large_confident``); otherwise the stage's small model (the previous
stage's large one) reasons, and the stage's ``reason`` → ``extract`` → ``sparsify`` →
``answer`` nodes run for the new pair.
"""

from __future__ import annotations

from typing import Any

from mai_graph.calls import canonical, short_request
from mai_graph.lineup import Drafter, Lineup
from mai_graph.state import MAIState

from ._common import MAIRuntime, Node, call
from .drafts import write_reasoning
from .verify import concurrently, decide, settle

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
    state: MAIState, runtime: MAIRuntime, lineup: Lineup, stage: int
) -> dict[str, Any]:
    """Start ``stage``: the previous stage's answer is this pair's small answer; ask the large."""
    ctx = runtime.context
    q = state["asked"]
    small, large = lineup.pair(stage)
    small_canonical = state.get("canonical") or ""
    small_prob = handed_on_probability(state)
    speculative = None
    if ctx.speculative_cot:
        speculative = write_reasoning(q, runtime, [Drafter(0, small, False)], "small")
    [(gen, rec)], spec = await concurrently(
        [call(large, short_request(q, ctx), "escalate", "large", runtime)], speculative
    )
    canon = canonical(gen.text, q)
    prob = rec["answer_prob"]
    update: dict[str, Any] = {
        **{k: None for k in STAGE_KEYS if state.get(k) is not None},
        "small_answer": state.get("answer") or "",
        "small_canonical": small_canonical,
        "small_prob": small_prob,
        "large_answer": gen.text,
        "large_canonical": canon,
        "large_prob": prob,
        "metrics": [rec],
    }
    route = decide([(small_canonical, small_prob)], (canon, prob), ctx)
    return await settle(update, route, (gen.text, canon), spec)


def make_escalate(lineup: Lineup, stage: int) -> Node:
    """The ``escalate`` node that starts ``stage`` (2 and up) of a chain."""
    return Node("escalate", lambda state, runtime: escalate(state, runtime, lineup, stage))
