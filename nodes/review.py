"""Human review after verification (optional): pause, show both answers, accept or override."""

from __future__ import annotations

from typing import Any

from langgraph.types import interrupt

from mai_graph.answers import extract_answer
from mai_graph.errors import ConfigError
from mai_graph.state import MAIState

from ._common import current_context, question_of


def review_node(state: MAIState) -> dict[str, Any]:
    """Pause the run with the verification result; resume with a decision.

    The interrupt's payload has ``question``, ``small_answer``, ``large_answer`` and ``agree``.
    Resume with ``Command(resume="continue")`` to go on as routed, or with
    ``Command(resume={"answer": "..."})`` to end the run with that answer (route ``human``).
    """
    decision = interrupt(
        {
            "question": state.get("question"),
            "small_answer": state.get("small_answer"),
            "large_answer": state.get("large_answer"),
            "agree": state.get("route") == "agree",
        }
    )
    if decision in (None, "continue"):
        return {}
    if isinstance(decision, dict) and isinstance(decision.get("answer"), str):
        ctx = current_context()
        q = question_of(state, ctx)
        text = decision["answer"]
        return {
            "answer": text,
            "canonical": extract_answer(text, q.kind, q.options),
            "route": "human",
        }
    raise ConfigError(
        f"review decision must be 'continue' or {{'answer': str}}, got {decision!r}",
        parameter="resume",
        value=decision,
        fix='resume with Command(resume={"answer": "B"}) or Command(resume="continue")',
    )
