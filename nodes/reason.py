"""Reasoning: the stage's small model writes its chain of thought (every draft, at stage 1).

Under ``small_cot`` the smallest model reasons and under ``large_cot`` the largest; a chain's
stage ``s`` has its own small model reason. The graph comes here only when no speculative
reasoning was written during verification.
"""

from __future__ import annotations

from typing import Any

from mai_graph.calls import Question
from mai_graph.lineup import Lineup
from mai_graph.state import MAIState

from ._common import Node, RunScope
from .drafts import reasoners, write_reasoning


async def reason(
    state: MAIState, scope: RunScope, lineup: Lineup, stage: int = 1
) -> dict[str, Any]:
    """Generate the chain of thought under the context's token budget (k drafts at once)."""
    drafters, role = reasoners(lineup, scope, stage)
    drafts = (state.get("drafts") or []) if stage == 1 else []
    q = Question.from_state(state, scope.ctx)
    return await write_reasoning(q, scope, drafters, role, drafts)


def make_reason(lineup: Lineup, stage: int = 1) -> Node:
    """The ``reason`` node of ``stage``."""
    return Node("reason", lambda state, scope: reason(state, scope, lineup, stage))
