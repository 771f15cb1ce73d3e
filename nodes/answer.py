"""Large-model answer: reads the transferred reasoning in prefill and answers short."""

from __future__ import annotations

from typing import Any

from mai_graph.answers import extract_answer
from mai_graph.backends.base import VLMBackend
from mai_graph.calls import Question, answer_request
from mai_graph.lineup import Lineup
from mai_graph.state import Draft, MAIState

from ._common import Node, RunScope, call, tag_metrics, tagged


def transferred_drafts(state: MAIState) -> list[Draft]:
    """The drafts whose sparsified reasonings the large model reads, best first.

    Only at stage 1 of a run with several drafts and ``transfer_drafts`` > 1; else none.
    """
    if (state.get("stage") or 1) > 1:
        return []
    chosen = [d for d in state.get("drafts") or () if "transfer" in d]
    return sorted(chosen, key=lambda d: d.get("rank", d["drafter"]))


async def answer(state: MAIState, scope: RunScope, large: VLMBackend) -> dict[str, Any]:
    """The large model's final short answer; its prompt shares the verify call's prefix."""
    q = Question.from_state(state, scope.ctx)
    pieces = transferred_drafts(state)
    if pieces:  # several drafts' reasonings, best first
        request = answer_request(
            q, scope.ctx, [(d["transfer"], d.get("transfer_token_ids")) for d in pieces], None
        )
    else:
        request = answer_request(
            q, scope.ctx, state.get("transfer") or "", state.get("transfer_token_ids")
        )
    gen, rec = await call(large, request, "answer", "large", scope)
    return {
        "answer": gen.text,
        "canonical": extract_answer(gen.text, q.kind, q.options),
        "route": "transfer",
        "metrics": [rec],
    }


def make_answer(lineup: Lineup) -> Node:
    """The ``answer`` node with its backend bound.

    In a chain, a stage before the last hands its answer to the next stage instead of ending the
    run: no ``route`` is set, and the graph goes on to ``escalate``.
    """
    large = lineup.chain[0]
    if lineup.stages == 1:
        return Node("answer", lambda state, scope: answer(state, scope, large))

    async def core(state: MAIState, scope: RunScope) -> dict[str, Any]:
        stage = state.get("stage") or 1
        update = await answer(state, tagged(scope, stage=stage), lineup.chain[stage - 1])
        update = tag_metrics(update, stage=stage)
        if stage < lineup.stages:  # its record's answer_prob travels with it (escalate)
            del update["route"]
        return update

    return Node("answer", core)
