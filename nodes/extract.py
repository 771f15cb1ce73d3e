"""S2 answer extraction: a second turn over the cached reasoning asks for the answer only."""

from __future__ import annotations

from typing import Any

from mai_graph.answers import canonical_match, extract_answer
from mai_graph.backends.base import GenerationRequest, VLMBackend
from mai_graph.context import MAIContext
from mai_graph.prompts import cot_messages, s2_messages
from mai_graph.state import MAIState

from ._common import Node, call, question_of
from .reason import reasoner


async def extract(
    state: MAIState, ctx: MAIContext, small: VLMBackend, large: VLMBackend
) -> dict[str, Any]:
    """Append the extraction turn to the CoT conversation (identical prefix) and read the answer.

    Ends the run for CoT baselines, and as ``extract_agree`` when the S2 answer matches the
    large model's short answer and ``ctx.s2_exit`` allows it.
    """
    q = question_of(state, ctx)
    role = reasoner(ctx)
    backend = large if role == "large" else small
    messages = s2_messages(
        ctx,
        cot_messages(ctx, q.image, q.text, q.options),
        state.get("reasoning") or "",
        state.get("reasoning_token_ids"),
        q.kind,
    )
    gen, rec = await call(
        backend,
        GenerationRequest(
            messages=messages,
            max_tokens=ctx.s2_max_tokens,
            choices=q.choices(ctx),
            temperature=ctx.temperature,
            seed=ctx.seed,
            purpose="s2",
        ),
        "extract",
        role,
    )
    canonical = extract_answer(gen.text, q.kind, q.options)
    update: dict[str, Any] = {
        "s2_answer": gen.text,
        "s2_canonical": canonical,
        "metrics": [rec],
    }
    if ctx.policy in ("small_cot", "large_cot"):
        update.update(answer=gen.text, canonical=canonical, route=ctx.policy)
    elif ctx.s2_exit and canonical_match(
        canonical, state.get("large_canonical") or "", rel_tol=ctx.rel_tol
    ):
        update.update(answer=gen.text, canonical=canonical, route="extract_agree")
    return update


def make_extract(small: VLMBackend, large: VLMBackend) -> Node:
    """The ``extract`` node with its backends bound."""
    return Node("extract", lambda state, ctx: extract(state, ctx, small, large))
