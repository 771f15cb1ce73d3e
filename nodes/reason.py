"""Reasoning: the small model (the large one for ``large_cot``) writes a chain of thought."""

from __future__ import annotations

from typing import Any

from mai_graph.backends.base import VLMBackend
from mai_graph.calls import Question, cot_request
from mai_graph.context import MAIContext
from mai_graph.lineup import Lineup
from mai_graph.state import MAIState

from ._common import Node, RunScope, call, staged_node


def reasoner(ctx: MAIContext) -> str:
    """Which model reasons under this policy: ``large`` for ``large_cot``, else ``small``."""
    return "large" if ctx.policy == "large_cot" else "small"


async def write_reasoning(
    q: Question, scope: RunScope, backend: VLMBackend, role: str
) -> dict[str, Any]:
    """One chain-of-thought call and the state it fills (also used by a speculative verify)."""
    gen, rec = await call(backend, cot_request(q, scope.ctx), "reason", role, scope)
    return {
        "reasoning": gen.text,
        "reasoning_token_ids": list(gen.token_ids),
        "reasoning_tokens": list(gen.tokens) if gen.tokens is not None else None,
        "reasoning_logprobs": list(gen.logprobs) if gen.logprobs is not None else None,
        "metrics": [rec],
    }


async def reason(
    state: MAIState, scope: RunScope, small: VLMBackend, large: VLMBackend
) -> dict[str, Any]:
    """Generate the chain of thought under the context's token budget.

    Makes no call when ``verify`` already wrote this run's reasoning (``speculative_cot``).
    """
    if state.get("reasoning") is not None:
        return {}
    role = reasoner(scope.ctx)
    return await write_reasoning(
        Question.from_state(state, scope.ctx), scope, large if role == "large" else small, role
    )


def make_reason(lineup: Lineup) -> Node:
    """The ``reason`` node with its backends bound.

    Every draft reasons in runs with several, and a chain's stage ``s`` has its own small model
    reason.
    """
    from .drafts import reason_drafts

    return staged_node("reason", lineup, reason, reason_drafts)
