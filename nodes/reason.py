"""Reasoning: the stage's small model writes its chain of thought (every draft, at stage 1).

Under ``small_cot`` the smallest model reasons and under ``large_cot`` the largest; a chain's
stage ``s`` has its own small model reason. The graph comes here only when no speculative
reasoning was written during verification.
"""

from __future__ import annotations

from typing import Any

from mai_graph.lineup import Lineup
from mai_graph.state import MAIState

from ._common import MAIRuntime, Node
from .drafts import reasoners, write_reasoning


async def reason(
    state: MAIState, runtime: MAIRuntime, lineup: Lineup, stage: int = 1
) -> dict[str, Any]:
    """Generate the chain of thought under the context's token budget (k drafts at once)."""
    drafters, role = reasoners(lineup, runtime, stage)
    drafts = (state.get("drafts") or []) if stage == 1 else []
    q = state["asked"]
    return await write_reasoning(q, runtime, drafters, role, drafts)


def make_reason(lineup: Lineup, stage: int = 1) -> Node:
    """The ``reason`` node of ``stage``."""
    return Node("reason", lambda state, runtime: reason(state, runtime, lineup, stage))
