"""Reasoning: the small model (the large one for ``large_cot``) writes a chain of thought."""

from __future__ import annotations

from typing import Any

from mai_graph.backends.base import GenerationRequest, VLMBackend
from mai_graph.context import MAIContext
from mai_graph.prompts import cot_messages
from mai_graph.state import MAIState

from ._common import Node, call, question_of


def reasoner(ctx: MAIContext) -> str:
    """Which model reasons under this policy: ``large`` for ``large_cot``, else ``small``."""
    return "large" if ctx.policy == "large_cot" else "small"


async def reason(
    state: MAIState, ctx: MAIContext, small: VLMBackend, large: VLMBackend
) -> dict[str, Any]:
    """Generate the chain of thought under the context's token budget."""
    q = question_of(state, ctx)
    role = reasoner(ctx)
    backend = large if role == "large" else small
    gen, rec = await call(
        backend,
        GenerationRequest(
            messages=cot_messages(ctx, q.image, q.text, q.options),
            max_tokens=ctx.cot_max_tokens,
            min_tokens=ctx.cot_min_tokens,
            temperature=ctx.temperature,
            seed=ctx.seed,
            logprobs=0,
            purpose="cot",
        ),
        "reason",
        role,
    )
    return {
        "reasoning": gen.text,
        "reasoning_token_ids": list(gen.token_ids),
        "reasoning_tokens": list(gen.tokens) if gen.tokens is not None else None,
        "reasoning_logprobs": list(gen.logprobs) if gen.logprobs is not None else None,
        "metrics": [rec],
    }


def make_reason(small: VLMBackend, large: VLMBackend) -> Node:
    """The ``reason`` node with its backends bound."""
    return Node("reason", lambda state, ctx: reason(state, ctx, small, large))
