"""What every node shares: the node runnable over LangGraph's runtime, and model calls."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar, cast

from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.runtime import Runtime, get_runtime
from langgraph.types import Overwrite

from mai_graph import tracing
from mai_graph.backends.base import (
    Generation,
    GenerationRequest,
    StreamingBackend,
    VLMBackend,
    capabilities_of,
)
from mai_graph.context import MAIContext, mai_settings
from mai_graph.instrumented import answer_probability, labelled, node_config
from mai_graph.loop import run_sync
from mai_graph.state import MAIState, NodeMetrics

__all__ = [
    "Core",
    "MAIRuntime",
    "Node",
    "Update",
    "answer_probability",
    "call",
    "cancel_quietly",
    "gather_all",
    "node_config",
    "offline",
    "record",
    "mai_runtime",
    "staged",
    "tag_metrics",
    "tagged",
]

Update = dict[str, Any]
T = TypeVar("T")
MAIRuntime = Runtime[MAIContext]
"""LangGraph's runtime of a node, its context settled to the run's :class:`MAIContext`."""

Core = Callable[[MAIState, MAIRuntime], Coroutine[Any, Any, Update]]


def mai_runtime(runtime: Runtime[Any]) -> MAIRuntime:
    """``runtime`` with its context as the run's :class:`MAIContext`.

    The graph's own runs carry a ``MAIContext`` already (the runtime is returned as is); a
    parent app's context contributes its ``mai`` field, a dict its fields
    (:func:`~mai_graph.context.mai_settings`).
    """
    if type(runtime.context) is MAIContext:
        return runtime
    return runtime.override(context=mai_settings(runtime.context))


def offline(ctx: MAIContext | None = None) -> MAIRuntime:
    """A runtime for calling a node core directly, outside a graph (events go nowhere)."""
    return Runtime(context=ctx or MAIContext())


class Node(Runnable[MAIState, Update]):
    """A graph node over an async core ``(state, runtime) -> update``.

    LangGraph hands every node the run's ``Runtime``; this runnable settles its context to the
    run's :class:`MAIContext` and passes it to the core. Awaited under ``ainvoke``; under sync
    ``invoke`` the core runs on mai-graph's background loop, so engines stay on one loop either
    way. A bare Runnable (no callback or signature machinery per call) keeps orchestration
    overhead low.
    """

    def __init__(self, name: str, core: Core) -> None:
        self.name = name
        self.core = core

    def invoke(
        self, input: MAIState, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Update:
        """Run the core to completion from sync code."""
        return run_sync(self._run(input, mai_runtime(get_runtime())))

    async def ainvoke(
        self, input: MAIState, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Update:
        """Await the core."""
        return await self._run(input, mai_runtime(get_runtime()))

    def _run(self, state: MAIState, runtime: MAIRuntime) -> Coroutine[Any, Any, Update]:
        if not tracing.enabled():
            return self.core(state, runtime)
        return self._traced(state, runtime)

    async def _traced(self, state: MAIState, runtime: MAIRuntime) -> Update:
        """The core in a span of its own (tracing on)."""
        with tracing.node_span(self.name or "node") as span:
            update = await self.core(state, runtime)
            tracing.finish_node(span, update)
            return update


def tagged(runtime: MAIRuntime, **tags: int) -> MAIRuntime:
    """``runtime`` whose streamed events carry ``tags`` (e.g. ``stage``, ``drafter``)."""
    write = runtime.stream_writer
    return runtime.override(stream_writer=lambda event: write({**event, **tags}))


def tag_metrics(update: Update, **tags: int) -> Update:
    """``update`` with ``tags`` added to each of its metrics records (new records, new list)."""
    metrics = update.get("metrics")
    if isinstance(metrics, Overwrite):
        return {**update, "metrics": Overwrite([{**r, **tags} for r in metrics.value])}
    if metrics:
        return {**update, "metrics": [{**r, **tags} for r in metrics]}
    return update


def staged(node: Node, stage: int, chain: bool) -> Node:
    """``node`` as stage ``stage`` of a chain runs it: events, records and state carry ``stage``.

    The two-model graph and drafter graphs (one stage) run the node as it is.
    """
    if not chain:
        return node
    core = node.core

    async def tagged_core(state: MAIState, runtime: MAIRuntime) -> Update:
        update = await core(state, tagged(runtime, stage=stage))
        return {**tag_metrics(update, stage=stage), "stage": stage}

    return Node(str(node.name), tagged_core)


async def gather_all(calls: Sequence[Awaitable[T]]) -> list[T]:
    """Await calls concurrently, results in order; the first failure cancels the rest."""
    tasks: list[asyncio.Task[T]] = []
    try:
        async with asyncio.TaskGroup() as tg:
            tasks += [tg.create_task(c) for c in calls]  # type: ignore[arg-type]
    except BaseExceptionGroup as group:
        raise group.exceptions[0] from None
    return [t.result() for t in tasks]


async def cancel_quietly(task: asyncio.Future[Any] | None) -> None:
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


async def call(
    backend: VLMBackend,
    request: GenerationRequest,
    node: str,
    role: str,
    runtime: MAIRuntime,
) -> tuple[Generation, NodeMetrics]:
    """One model call with its metrics record, both also streamed as custom events.

    Under ``stream_mode="custom"`` the graph emits ``{"event": "token", "node", "role",
    "text"}`` for each text delta (from backends that stream) and ``{"event": "metrics",
    **record}`` when the call ends (through the runtime's ``stream_writer``); otherwise the
    events go nowhere. The graph's backends report the call as a span and a chat-model run
    (:class:`~mai_graph.instrumented.InstrumentedBackend`), under the name given here.
    """
    write = runtime.stream_writer
    with labelled(node, role):
        if capabilities_of(backend).stream:
            gen = await cast(StreamingBackend, backend).generate_stream(
                request,
                lambda text: write({"event": "token", "node": node, "role": role, "text": text}),
            )
        else:
            gen = await backend.generate(request)
    prob = answer_probability(gen) if request.purpose != "cot" else None
    rec = record(node, role, gen, prob)
    write({"event": "metrics", **rec})
    return gen, rec


def record(node: str, role: str, gen: Generation, answer_prob: float | None) -> NodeMetrics:
    """The metrics record of one model call."""
    return NodeMetrics(
        node=node,
        model=gen.model,
        role=role,  # type: ignore[typeddict-item]
        prompt_tokens=gen.prompt_tokens,
        cached_tokens=gen.cached_tokens,
        generated_tokens=gen.generated_tokens,
        latency_s=gen.latency_s,
        ttft_s=gen.ttft_s,
        queue_s=gen.queue_s,
        prefill_s=gen.prefill_s,
        decode_s=gen.decode_s,
        image_tokens=gen.image_tokens,
        finish_reason=gen.finish_reason,
        answer_prob=answer_prob,
        text=gen.text,
        distribution=gen.distribution,
        distribution_fallback=gen.distribution_fallback,
    )
