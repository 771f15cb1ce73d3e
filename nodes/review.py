"""Human review after verification (optional): pause, show both answers, accept or override."""

from __future__ import annotations

from typing import Any

from langgraph.types import interrupt

from mai_graph.calls import canonical
from mai_graph.state import MAIState

from ._common import MAIRuntime, Node

ALLOWED = ("continue", "answer")
"""What a reviewer may do: ``continue`` (go on as routed) or ``answer`` (end with a text)."""


def _decision(value: Any) -> tuple[str, str | None] | None:
    """Read a resume value: ``"continue"``, ``{"answer": "B"}`` or ``{"type": ..., ...}``."""
    if value is None or value == "continue":
        return "continue", None
    if isinstance(value, dict):
        kind = value.get("type", "answer" if "answer" in value else None)
        if kind == "continue":
            return "continue", None
        text = value.get("answer", value.get("args"))
        if kind == "answer" and isinstance(text, str) and text.strip():
            return "answer", text
    return None


async def review(state: MAIState, runtime: MAIRuntime) -> dict[str, Any]:
    """Pause the run with the verification result; resume with a decision.

    The interrupt's payload shows ``question``, both short answers, whether they ``agree``,
    the ``route`` verification chose, and ``allowed`` responses. Resume with
    ``Command(resume="continue")`` (or ``{"type": "continue"}``) to go on as routed, or with
    ``Command(resume={"answer": "..."})`` (or ``{"type": "answer", "args": "..."}``) to end
    the run with that answer (route ``human``). A value of any other shape asks again, saying
    what was wrong, so a mistyped resume never locks the thread.
    """
    payload: dict[str, Any] = {
        "question": state["asked"]["question"],
        "small_answer": state.get("small_answer"),
        "large_answer": state.get("large_answer"),
        "agree": state.get("route") == "agree",
        "route": state.get("route"),
        "allowed": list(ALLOWED),
        "description": 'Resume with "continue", or {"answer": "<the answer>"}.',
    }
    decision = _decision(interrupt(payload))
    while decision is None:  # each further interrupt() in this node asks again
        payload = {**payload, "error": "unrecognized resume value; see allowed"}
        decision = _decision(interrupt(payload))
    if decision[0] == "continue":
        return {}
    text = decision[1] or ""
    q = state["asked"]
    return {"answer": text, "canonical": canonical(text, q), "route": "human"}


def make_review() -> Node:
    """The ``review`` node."""
    return Node("review", review)
