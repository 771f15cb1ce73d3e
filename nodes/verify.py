"""Mutual verification: small and large answer short, concurrently; agreement ends the run."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from mai_graph.answers import canonical_match, extract_answer
from mai_graph.backends.base import GenerationRequest, VLMBackend
from mai_graph.context import MAIContext
from mai_graph.metrics import RESET_METRICS
from mai_graph.prompts import short_messages
from mai_graph.state import MAIState

from ._common import Node, call, question_of
from .reason import write_reasoning

# Keys a run fills; cleared at the start so a reused thread never routes on the previous run.
_RUN_KEYS = (
    "small_answer", "small_canonical", "large_answer", "large_canonical", "reasoning",
    "reasoning_token_ids", "reasoning_tokens", "reasoning_logprobs", "s2_answer",
    "s2_canonical", "transfer", "transfer_token_ids",
    "sparsification", "answer", "canonical", "route",
)  # fmt: skip


async def verify(
    state: MAIState, ctx: MAIContext, small: VLMBackend, large: VLMBackend
) -> dict[str, Any]:
    """Ask both models for a short answer at once; agreement (or a short baseline) ends the run.

    CoT baselines (``small_cot`` / ``large_cot``) make no call here: they only prepare inputs.
    """
    q = question_of(state, ctx)
    # Only keys a previous run on this thread left behind need clearing (fewer channel writes).
    update: dict[str, Any] = {k: None for k in _RUN_KEYS if state.get(k) is not None}
    update["metrics"] = [RESET_METRICS] if state.get("metrics") else []
    if q.image is not None and q.image is not state.get("image"):
        update["image"] = q.image
    if ctx.policy in ("small_cot", "large_cot"):
        return update

    def request() -> GenerationRequest:
        return GenerationRequest(
            messages=short_messages(ctx, q.image, q.text, q.options, q.kind),
            max_tokens=ctx.short_max_tokens,
            choices=q.choices(ctx),
            temperature=ctx.temperature,
            seed=ctx.seed,
            purpose="short",
        )

    if ctx.policy in ("small", "large"):
        backend = small if ctx.policy == "small" else large
        gen, rec = await call(backend, request(), "verify", ctx.policy)
        canonical = extract_answer(gen.text, q.kind, q.options)
        update.update(
            {f"{ctx.policy}_answer": gen.text, f"{ctx.policy}_canonical": canonical},
            answer=gen.text,
            canonical=canonical,
            route=ctx.policy,
        )
        update["metrics"].append(rec)
        return update

    speculative: asyncio.Future[dict[str, Any]] | None = None
    try:  # both in flight at once; one failing cancels the other
        async with asyncio.TaskGroup() as tg:
            small_task = tg.create_task(call(small, request(), "verify", "small"))
            large_task = tg.create_task(call(large, request(), "verify", "large"))
            if ctx.speculative_cot:  # queued after the short answers, outside the group
                speculative = asyncio.ensure_future(write_reasoning(q, ctx, small, "small"))
    except BaseExceptionGroup as group:
        await _cancel(speculative)
        raise group.exceptions[0] from None
    except BaseException:
        await _cancel(speculative)
        raise
    (gs, rs), (gl, rl) = small_task.result(), large_task.result()
    cs = extract_answer(gs.text, q.kind, q.options)
    cl = extract_answer(gl.text, q.kind, q.options)
    update.update(
        small_answer=gs.text, small_canonical=cs, large_answer=gl.text, large_canonical=cl
    )
    update["metrics"] += [rs, rl]
    if canonical_match(cs, cl, rel_tol=ctx.rel_tol):
        update.update(answer=gl.text, canonical=cl, route="agree")
        await _cancel(speculative)
    elif speculative is not None:
        try:
            reasoning = await speculative
        except BaseException:
            await _cancel(speculative)
            raise
        update["metrics"] += reasoning.pop("metrics")
        update.update(reasoning)
    return update


async def _cancel(task: asyncio.Future[Any] | None) -> None:
    """Cancel a speculative call and wait until the engine has dropped it."""
    if task is None:
        return
    if task.done():
        if not task.cancelled():
            task.exception()  # retrieved: the run has already failed or no longer needs it
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def make_verify(small: VLMBackend, large: VLMBackend) -> Node:
    """The ``verify`` node with its backends bound."""
    return Node("verify", lambda state, ctx: verify(state, ctx, small, large))
