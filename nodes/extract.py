"""S2 answer extraction: a second turn over the cached reasoning asks for the answer only."""

from __future__ import annotations

from typing import Any

from mai_graph.answers import extract_answer
from mai_graph.backends.base import VLMBackend
from mai_graph.calls import Question, s2_request
from mai_graph.gate import agreement_exits
from mai_graph.lineup import Lineup
from mai_graph.state import MAIState

from ._common import Node, RunScope, call, staged_node
from .reason import reasoner


async def extract(
    state: MAIState, scope: RunScope, small: VLMBackend, large: VLMBackend
) -> dict[str, Any]:
    """Append the extraction turn to the CoT conversation (identical prefix) and read the answer.

    Ends the run for CoT baselines, and as ``extract_agree`` when the S2 answer matches the
    large model's short answer under the gate and ``s2_exit`` allows it.
    """
    ctx = scope.ctx
    q = Question.from_state(state, ctx)
    role = reasoner(ctx)
    request = s2_request(
        q, ctx, state.get("reasoning") or "", state.get("reasoning_token_ids") or None
    )
    gen, rec = await call(large if role == "large" else small, request, "extract", role, scope)
    canonical = extract_answer(gen.text, q.kind, q.options)
    prob = rec["answer_prob"]
    update: dict[str, Any] = {
        "s2_answer": gen.text,
        "s2_canonical": canonical,
        "s2_prob": prob,
        "metrics": [rec],
    }
    if ctx.policy in ("small_cot", "large_cot"):
        update.update(answer=gen.text, canonical=canonical, route=ctx.policy)
    elif ctx.s2_exit and agreement_exits(
        canonical, state.get("large_canonical") or "", prob, state.get("large_prob"), ctx
    ):
        update.update(answer=gen.text, canonical=canonical, route="extract_agree")
    return update


def make_extract(lineup: Lineup) -> Node:
    """The ``extract`` node with its backends bound.

    Every draft answers (and the drafts are ranked) in runs with several; a chain's stage
    ``s`` asks its own small model.
    """
    from .drafts import extract_drafts

    return staged_node("extract", lineup, extract, extract_drafts)
