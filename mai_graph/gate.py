"""The early-exit gate: when two answers end a run (verification, and the S2 turn).

The paper's rule is agreement of canonical answers. ``agree_confident`` also asks each model to
be sure of its own answer (its probability, from the answer's token logprobs, at least
``gate_min_prob``); ``never`` turns early exits off. Independently, ``large_confident_exit``
ends a run with the large model's answer when the answers differ but the large model is sure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from mai_graph.answers import canonical_match
from mai_graph.context import MAIContext

__all__ = ["after_disagreement", "agreement_exits", "quorum_exits"]


NON_COMMITTAL = frozenset({"unknown", "unanswerable", "not answerable"})
"""Canonical answers that are real text answers for scoring (datasets use them as gold) but
never end a run early: two models that both say "unknown" have not verified anything."""


def _sure(prob: float | None, threshold: float) -> bool:
    return prob is not None and prob >= threshold


def agreement_exits(
    a: str, b: str, prob_a: float | None, prob_b: float | None, ctx: MAIContext
) -> bool:
    """Whether two canonical answers end the run under the context's gate.

    >>> ctx = MAIContext(gate="agree_confident", gate_min_prob=0.6)
    >>> agreement_exits("B", "B", 0.9, 0.7, ctx), agreement_exits("B", "B", 0.9, 0.5, ctx)
    (True, False)
    >>> agreement_exits("B", "B", None, None, MAIContext())
    True
    >>> agreement_exits("unknown", "unknown", 1.0, 1.0, MAIContext())
    False
    """
    if ctx.gate == "never" or a in NON_COMMITTAL or b in NON_COMMITTAL:
        return False
    if not canonical_match(a, b, rel_tol=ctx.rel_tol):
        return False
    if ctx.gate == "agree_confident":
        return _sure(prob_a, ctx.gate_min_prob) and _sure(prob_b, ctx.gate_min_prob)
    return True


def quorum_exits(
    drafts: Sequence[tuple[str, float | None]],
    large: str,
    large_prob: float | None,
    ctx: MAIContext,
) -> bool:
    """Whether several drafts' short answers and the large model's end the run.

    Each ``(canonical, prob)`` draft agrees with the large answer as :func:`agreement_exits`
    judges a pair; ``draft_quorum`` says how many must: ``all`` of them, or a ``majority`` of
    all answers (the large model's own vote included) for the large model's answer.

    >>> drafts = [("B", None), ("B", None), ("C", None)]
    >>> quorum_exits(drafts, "B", None, MAIContext())
    False
    >>> quorum_exits(drafts, "B", None, MAIContext(draft_quorum="majority"))
    True
    """
    if ctx.gate == "never":
        return False
    agreeing = sum(agreement_exits(c, large, p, large_prob, ctx) for c, p in drafts)
    if ctx.draft_quorum == "all":
        return agreeing == len(drafts)
    return 2 * (agreeing + 1) > len(drafts) + 1


def after_disagreement(large_prob: float | None, ctx: MAIContext) -> Literal["large", "escalate"]:
    """On disagreement: ``large`` (end with the large answer) if it is sure enough, else escalate.

    >>> after_disagreement(0.95, MAIContext(large_confident_exit=0.9))
    'large'
    >>> after_disagreement(0.95, MAIContext())
    'escalate'
    """
    threshold = ctx.large_confident_exit
    if threshold is not None and ctx.gate != "never" and _sure(large_prob, threshold):
        return "large"
    return "escalate"
