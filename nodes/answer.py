"""Large-model answer: reads the transferred reasoning in prefill and answers short."""

from __future__ import annotations

from typing import Any

from mai_graph.answers import extract_answer
from mai_graph.backends.base import GenerationRequest, VLMBackend
from mai_graph.context import MAIContext
from mai_graph.prompts import transfer_messages
from mai_graph.state import MAIState

from ._common import Node, call, question_of


async def answer(state: MAIState, ctx: MAIContext, large: VLMBackend) -> dict[str, Any]:
    """The large model's final short answer; its prompt shares the verify call's prefix."""
    q = question_of(state, ctx)
    gen, rec = await call(
        large,
        GenerationRequest(
            messages=transfer_messages(
                ctx,
                q.image,
                q.text,
                q.options,
                q.kind,
                state.get("transfer") or "",
                state.get("transfer_token_ids"),
            ),
            max_tokens=ctx.short_max_tokens,
            choices=q.choices(ctx),
            temperature=ctx.temperature,
            seed=ctx.seed,
            purpose="answer",
        ),
        "answer",
        "large",
    )
    return {
        "answer": gen.text,
        "canonical": extract_answer(gen.text, q.kind, q.options),
        "route": "transfer",
        "metrics": [rec],
    }


def make_answer(large: VLMBackend) -> Node:
    """The ``answer`` node with its backend bound."""
    return Node("answer", lambda state, ctx: answer(state, ctx, large))
