"""Sparsification: cut the reasoning to its most important tokens, in original order."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from mai_graph.context import MAIContext
from mai_graph.scoring import RelevanceScorer, TokenScorer, select_tokens
from mai_graph.state import MAIState, Sparsification

from ._common import current_context, question_of

SCORERS: dict[str, TokenScorer] = {"relevance": RelevanceScorer()}


def sparsify(state: MAIState, ctx: MAIContext) -> dict[str, Any]:
    """Score the reasoning's words with the context's strategy and keep ``keep_ratio`` of them.

    Digits, option letters and negations are always kept; ``none`` keeps everything.
    """
    q = question_of(state, ctx)
    tokens = (state.get("reasoning") or "").split()
    start = time.perf_counter()
    if ctx.sparsify == "none" or not tokens:
        kept, dropped = list(range(len(tokens))), 0.0
    else:
        scores = SCORERS[ctx.sparsify].score(tokens, question=q.text, options=q.options)
        selection = select_tokens(tokens, scores, ctx.keep_ratio)
        kept, dropped = list(selection.kept), selection.dropped_mass
    info = Sparsification(
        strategy=ctx.sparsify,
        tokens_in=len(tokens),
        tokens_out=len(kept),
        kept_ratio=len(kept) / len(tokens) if tokens else 1.0,
        dropped_mass=dropped,
        scoring_s=time.perf_counter() - start,
    )
    return {"transfer": " ".join(tokens[i] for i in kept), "sparsification": info}


def make_sparsify() -> Callable[[MAIState], dict[str, Any]]:
    """The ``sparsify`` node (pure: scorers that need a model arrive bound to it)."""

    def sparsify_node(state: MAIState) -> dict[str, Any]:
        return sparsify(state, current_context())

    return sparsify_node
