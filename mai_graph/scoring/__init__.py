"""Token-importance scorers for the sparsify node."""

from mai_graph.scoring.base import Selection, TokenScorer, must_keep, select_tokens
from mai_graph.scoring.relevance import RelevanceScorer

__all__ = ["RelevanceScorer", "Selection", "TokenScorer", "must_keep", "select_tokens"]
