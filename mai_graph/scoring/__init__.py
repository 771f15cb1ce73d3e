"""Token-importance scorers for the sparsify node, and token selection."""

from typing import cast

from mai_graph.backends.base import AttentionBackend, capabilities_of
from mai_graph.scoring.attention import AttentionScorer
from mai_graph.scoring.base import (
    ReasoningInput,
    Selection,
    TokenScorer,
    binding_partners,
    must_keep,
    select_tokens,
    split_pieces,
    word_groups,
)
from mai_graph.scoring.relevance import RelevanceScorer
from mai_graph.scoring.surprisal import SurprisalScorer

__all__ = [
    "AttentionScorer",
    "ReasoningInput",
    "RelevanceScorer",
    "Selection",
    "SurprisalScorer",
    "TokenScorer",
    "binding_partners",
    "default_scorers",
    "must_keep",
    "select_tokens",
    "split_pieces",
    "word_groups",
]


def default_scorers(small: object) -> dict[str, TokenScorer]:
    """Scorers a graph gets unless told otherwise.

    ``surprisal`` and ``relevance`` always; ``attention`` when the small model's backend
    exposes attention weights (``capabilities.attention``, e.g.
    transformers: its own backend is reused, caches included).
    """
    scorers: dict[str, TokenScorer] = {
        "surprisal": SurprisalScorer(),
        "relevance": RelevanceScorer(),
    }
    if capabilities_of(small).attention:
        scorers["attention"] = AttentionScorer(cast(AttentionBackend, small))
    return scorers
