"""Large-model answer: reads the transferred reasoning in prefill and answers short.

A chain's stage before the last hands its answer on to the next stage's ``escalate`` instead
of ending the run: it sets no ``route``.
"""

from __future__ import annotations

from typing import Any

from mai_graph.calls import answer_request, canonical
from mai_graph.lineup import Lineup
from mai_graph.state import Draft, MAIState

from ._common import MAIRuntime, Node, call


def transferred_drafts(state: MAIState, stage: int = 1) -> list[Draft]:
    """The drafts whose sparsified reasonings the large model reads, best first.

    Only at stage 1 of a run with several drafts and ``transfer_drafts`` > 1; else none.
    """
    if stage > 1:
        return []
    chosen = [d for d in state.get("drafts") or () if "transfer" in d]
    return sorted(chosen, key=lambda d: d.get("rank", d["drafter"]))


async def answer(
    state: MAIState, runtime: MAIRuntime, lineup: Lineup, stage: int = 1
) -> dict[str, Any]:
    """The stage's large model answers short; its prompt shares the verify call's prefix."""
    q = state["asked"]
    pieces = transferred_drafts(state, stage)
    if pieces:  # several drafts' reasonings, best first
        request = answer_request(
            q, runtime.context, [(d["transfer"], d.get("transfer_token_ids")) for d in pieces], None
        )
    else:
        request = answer_request(
            q, runtime.context, state.get("transfer") or "", state.get("transfer_token_ids")
        )
    gen, rec = await call(lineup.chain[stage - 1], request, "answer", "large", runtime)
    update: dict[str, Any] = {
        "answer": gen.text,
        "canonical": canonical(gen.text, q),
        "metrics": [rec],
    }
    if stage == lineup.stages:  # else its record's answer_prob travels on (escalate)
        update["route"] = "transfer"
    return update


def make_answer(lineup: Lineup, stage: int = 1) -> Node:
    """The ``answer`` node of ``stage``."""
    return Node("answer", lambda state, runtime: answer(state, runtime, lineup, stage))
