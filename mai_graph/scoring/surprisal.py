"""Surprisal: a token's self-information under the small model, from its generation logprobs."""

from __future__ import annotations

from mai_graph.errors import ConfigError
from mai_graph.scoring.base import ReasoningInput

__all__ = ["SurprisalScorer"]


class SurprisalScorer:
    """Scores each reasoning token by its surprisal, ``-logprob``.

    In the spirit of Selective Context and LLMLingua: predictable tokens carry little
    information, surprising ones carry the content.

    Uses the logprobs the engine returned with the reasoning itself (the ``reason`` node always
    asks for them; they are free), so it adds no model call and works on every engine.
    """

    name = "surprisal"

    async def score(self, reasoning: ReasoningInput) -> list[float]:
        """One score per reasoning token."""
        if reasoning.logprobs is None or len(reasoning.logprobs) != len(reasoning.tokens):
            raise ConfigError(
                "the surprisal strategy needs the logprob of every reasoning token, and the "
                "small model's backend returned "
                + ("none" if reasoning.logprobs is None else f"{len(reasoning.logprobs)}")
                + f" for {len(reasoning.tokens)} tokens",
                parameter="sparsify",
                value="surprisal",
                fix="use a backend that returns logprobs (vLLM, transformers), or choose "
                "sparsify='relevance'",
            )
        return [max(0.0, -lp) if lp == lp else 0.0 for lp in reasoning.logprobs]
