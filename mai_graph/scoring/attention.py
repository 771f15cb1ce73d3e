"""Attention: how much the small model's answer-extraction turn attends to each reasoning token.

This is the paper's strategy: the S2 turn reads the reasoning anyway, so its attention onto each
reasoning token (averaged over heads and a set of layers, summed over the extraction positions)
says which tokens the model itself used to answer. vLLM exposes no attention weights, so this
scorer runs the small model in transformers; on a vLLM deployment it loads its own copy of the
small checkpoint next to the engine.
"""

from __future__ import annotations

from collections.abc import Sequence

from mai_graph.backends.base import AttentionBackend, GenerationRequest, capabilities_of
from mai_graph.errors import ConfigError
from mai_graph.scoring.base import ReasoningInput

__all__ = ["AttentionScorer"]


class AttentionScorer:
    """Scores reasoning tokens by the S2 turn's attention onto them.

    Args:
        model: A backend of the small model that exposes attention
            (:class:`~mai_graph.backends.base.AttentionBackend`, e.g. a
            ``TransformersBackend``: reused, caches included), or a checkpoint path to load
            a ``TransformersBackend`` from.
        layers: Layer indices to average over (default: the last third).
        full: Score with one full eager pass instead of the cached cheap path (for checking).
    """

    name = "attention"

    def __init__(
        self,
        model: AttentionBackend | str,
        *,
        layers: Sequence[int] | None = None,
        full: bool = False,
    ) -> None:
        if isinstance(model, str):
            from mai_graph.backends.transformers import TransformersBackend

            model = TransformersBackend(model, name=f"attention:{model}")
        if not capabilities_of(model).attention:
            raise ConfigError(
                "the attention scorer needs a backend that exposes attention (e.g. "
                f"TransformersBackend), got {type(model).__name__}",
                parameter="model",
                fix="pass TransformersBackend(small_checkpoint) or the checkpoint path",
            )
        self.model: AttentionBackend = model
        self.layers = list(layers) if layers is not None else None
        self.full = full

    async def score(self, reasoning: ReasoningInput) -> list[float]:
        """One score per reasoning token (the reasoning must carry its token ids)."""
        if not reasoning.token_ids:
            raise ConfigError(
                "the attention strategy needs the reasoning's token ids",
                parameter="sparsify",
                value="attention",
                fix="use a backend that reports generated token ids, or another strategy",
            )
        request = GenerationRequest(reasoning.s2_messages, max_tokens=1, purpose="attention")
        scores = await self.model.attention(request, layers=self.layers, full=self.full)
        if len(scores) != len(reasoning.tokens):
            raise ConfigError(
                f"attention covered {len(scores)} tokens but the reasoning has "
                f"{len(reasoning.tokens)}",
                parameter="model",
                fix="score with the same checkpoint (and tokenizer) that wrote the reasoning",
            )
        return scores
