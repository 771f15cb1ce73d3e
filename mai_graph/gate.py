"""The early-exit gate: when two answers end a run (verification, and the S2 turn).

The paper's rule is agreement of canonical answers. ``agree_confident`` also asks each model to
be sure of its own answer (its probability, from its answer distribution or the answer's token
logprobs, at least ``gate_min_prob``: the smaller of the two); ``agree_joint`` asks the product
of the two to reach it; ``never`` turns early exits off. Independently, on a disagreement,
``large_confident_exit`` ends a run with the large model's answer when the large model is sure,
and ``pooled_exit`` when the two models' distributions, averaged, put that much mass on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from mai_graph.answers import canonical_match
from mai_graph.context import MAIContext

__all__ = ["after_disagreement", "agreement_exits", "pooled_probability", "quorum_exits"]


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
    if ctx.gate == "agree_joint":
        return prob_a is not None and prob_b is not None and prob_a * prob_b >= ctx.gate_min_prob
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


def pooled_probability(
    small: Mapping[str, float] | None, large: Mapping[str, float] | None, answer: str
) -> float | None:
    """The two models' averaged probability of ``answer`` (None without both distributions).

    >>> pooled_probability({"A": 0.55, "B": 0.45}, {"A": 0.05, "B": 0.95}, "B")
    0.7
    """
    if not small or not large:
        return None
    return (small.get(answer, 0.0) + large.get(answer, 0.0)) / 2


def after_disagreement(
    large_prob: float | None, ctx: MAIContext, pooled: float | None = None
) -> Literal["large", "escalate"]:
    """On disagreement: ``large`` (end with the large answer) if it is sure enough, else escalate.

    ``pooled`` is :func:`pooled_probability` of the large model's answer, for ``pooled_exit``.

    >>> after_disagreement(0.95, MAIContext(large_confident_exit=0.9))
    'large'
    >>> after_disagreement(0.95, MAIContext())
    'escalate'
    >>> after_disagreement(0.6, MAIContext(pooled_exit=0.65), pooled=0.7)
    'large'
    """
    if ctx.gate == "never":
        return "escalate"
    threshold = ctx.large_confident_exit
    if threshold is not None and _sure(large_prob, threshold):
        return "large"
    if ctx.pooled_exit is not None and _sure(pooled, ctx.pooled_exit):
        return "large"
    return "escalate"
