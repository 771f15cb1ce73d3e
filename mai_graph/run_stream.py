"""One streamed graph run on a task of its own: its events, its cancellation, its span.

The endpoint and the chat model stream a run's ``custom`` and ``values`` events to a consumer
that may leave at any time. Run inline, the consumer's cancellation (a server's cancel scope
cancels again and again) can interrupt the run's clean-up and leave model calls running, and a
span held open across the consumer's ``yield``s becomes the consumer's current span. On a task
of its own the run is cancelled once, like any asyncio task, and aborts its model calls; its
run span (:mod:`mai_graph.tracing`, when on) opens and closes on that task.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from mai_graph import tracing
from mai_graph.context import MAIContext

__all__ = ["run_events"]


async def run_events(
    graph: Any,
    inputs: Any,
    context: MAIContext,
    *,
    door: str,
    config: Any = None,
    trace: Any = None,
) -> AsyncIterator[tuple[str, Any]]:
    """The run's ``(mode, item)`` stream events (``custom`` and ``values``).

    Args:
        graph: A compiled MAI graph.
        inputs: Its input.
        context: The run's context.
        door: Which door streams it (the run span's ``mai.door``).
        config: The run's config (callbacks of a parent run), if any.
        trace: A trace context to nest the run span under (an endpoint's ``traceparent``).

    Raises:
        Whatever the run raises, after the events it produced.
    """
    events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    async def pump() -> None:
        with tracing.run_span(door, context, parent=trace) as span:
            final: Any = None
            try:
                async for event in graph.astream(
                    inputs, config, context=context, stream_mode=["custom", "values"]
                ):
                    if event[0] == "values":
                        final = event[1]
                    events.put_nowait(event)
            except Exception as exc:
                tracing.mark_failed(span, exc)
                events.put_nowait(("error", exc))
            else:
                tracing.finish_run(span, final or {})
                events.put_nowait(("end", None))

    task = asyncio.create_task(pump())
    try:
        while True:
            mode, item = await events.get()
            if mode == "end":
                return
            if mode == "error":
                raise item
            yield mode, item
    finally:
        task.cancel()
