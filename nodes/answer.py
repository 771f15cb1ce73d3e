"""Large-model answer: reads the transferred reasoning in prefill and answers short."""

from __future__ import annotations

from typing import Any

from mai_graph.answers import extract_answer
from mai_graph.backends.base import VLMBackend
from mai_graph.requests import Question, answer_request
from mai_graph.state import MAIState

from ._common import Node, RunScope, call


async def answer(state: MAIState, scope: RunScope, large: VLMBackend) -> dict[str, Any]:
    """The large model's final short answer; its prompt shares the verify call's prefix."""
    q = Question.from_state(state, scope.ctx)
    request = answer_request(
        q, scope.ctx, state.get("transfer") or "", state.get("transfer_token_ids")
    )
    gen, rec = await call(large, request, "answer", "large", scope.write)
    return {
        "answer": gen.text,
        "canonical": extract_answer(gen.text, q.kind, q.options),
        "route": "transfer",
        "metrics": [rec],
    }


def make_answer(large: VLMBackend) -> Node:
    """The ``answer`` node with its backend bound."""
    return Node("answer", lambda state, scope: answer(state, scope, large))
