"""The response of a streamed run (``"stream": true``): server-sent events, by sse-starlette.

The events are OpenAI's: the role chunk, the answer's deltas, the last chunk with
``finish_reason`` and the ``mai`` field, the usage chunk when ``stream_options.include_usage``
asks for it, then ``data: [DONE]``. :class:`sse_starlette.EventSourceResponse` frames them,
watches for the client going away (its disconnect cancels the run at once, even while it waits
for a model: the backends then abort their requests) and keeps idle proxies from closing a
long run's connection with a comment line every :data:`PING_S` seconds (clients skip those).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from openai.types.chat.chat_completion_chunk import ChoiceDelta

from mai_graph.adapters.endpoint.translate import (
    Run,
    chunk,
    completion_id,
    extension,
    graph_input,
    usage_chunk,
    wire,
)
from mai_graph.run_stream import run_events

if TYPE_CHECKING:
    from starlette.responses import Response

    from mai_graph.adapters.endpoint.app import Endpoint

__all__ = ["PING_S", "stream_response"]

PING_S = 15.0
"""Seconds between keep-alive comments (``: ping - <time>``) on a stream with nothing to send
(a long reasoning call before the answer's first token)."""


def stream_response(endpoint: Endpoint, run: Run, include_usage: bool) -> Response:
    """The SSE response that runs ``run`` and streams its answer (see :func:`events`)."""
    from sse_starlette import EventSourceResponse

    return EventSourceResponse(
        events(endpoint, run, include_usage),
        headers={"Cache-Control": "no-cache"},
        sep="\n",
        ping=PING_S,
        # A stopping server lets streams run on as it does other requests: uvicorn's
        # graceful-shutdown timeout bounds them all, then cancels what is left.
        shutdown_grace_period=math.inf,
    )


def _data(event: Mapping[str, Any] | str) -> str:
    """One event's data: compact JSON (or ``[DONE]``); the response frames it."""
    return event if isinstance(event, str) else json.dumps(event, separators=(",", ":"))


async def events(endpoint: Endpoint, run: Run, include_usage: bool) -> AsyncIterator[str]:
    """SSE data: the role, the answer's deltas, the finish with ``mai``, usage, [DONE].

    On the transfer route the answer node's tokens stream as they are written; on the
    routes that end earlier the answer is known when the run ends and comes as one delta.
    A failure after the stream started is sent as an ``error`` event (OpenAI's clients
    raise it).
    """
    rid, model = completion_id(), endpoint.model_name
    yield _data(wire(chunk(rid, model, ChoiceDelta(role="assistant", content=""))))
    async with endpoint.slots, endpoint.prometheus.running():
        start = time.perf_counter()
        final: dict[str, Any] = {}
        streamed = ""
        try:
            async for mode, item in run_events(
                endpoint.graph, graph_input(run), run.context, door="endpoint", trace=run.trace
            ):
                if mode == "values":
                    final = item
                elif item.get("event") == "token" and item.get("node") == "answer":
                    streamed += item["text"]
                    yield _data(wire(chunk(rid, model, ChoiceDelta(content=item["text"]))))
        except Exception as exc:  # the status line is gone: report in the stream
            error = endpoint.failed(exc, f"streamed run {rid}")
            endpoint.prometheus.request("failed", error.status)
            yield _data(error.body())
            return
        wall = time.perf_counter() - start
    answer = str(final.get("answer", ""))
    rest = answer[len(streamed) :] if answer.startswith(streamed) else answer
    if rest:
        yield _data(wire(chunk(rid, model, ChoiceDelta(content=rest))))
    mai = extension(final, wall, model)
    endpoint.prometheus.finished(mai)
    yield _data(wire(chunk(rid, model, ChoiceDelta(), "stop", mai=mai)))
    if include_usage:
        yield _data(wire(usage_chunk(rid, model, final.get("metrics") or [])))
    yield _data("[DONE]")
