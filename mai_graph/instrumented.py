"""Instrumentation as a backend wrapper: each model call is a span and a chat-model run.

:func:`~mai_graph.graph.create_mai_graph` wraps every backend of its lineup in
:class:`InstrumentedBackend`. A node names each call it makes (:func:`labelled`: its node and
role), and the wrapper reports it: an OpenTelemetry span (:mod:`mai_graph.tracing`, when
tracing is on) and a LangChain chat-model run for the callbacks of the node's config
(:mod:`mai_graph.llm_runs`, when it has any). Without either, a call costs two checks.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from contextvars import ContextVar

from langchain_core.runnables import RunnableConfig
from langgraph.config import get_config

from mai_graph import llm_runs, tracing
from mai_graph.backends.base import (
    Capabilities,
    Generation,
    GenerationRequest,
    TextCallback,
    VLMBackend,
    capabilities_of,
)
from mai_graph.backends.wrapper import WrapperBackend

__all__ = ["InstrumentedBackend", "answer_probability", "instrumented", "labelled", "node_config"]

_CALL: ContextVar[tuple[str, str]] = ContextVar("mai_graph_call", default=("generate", "model"))
"""The node and role of the model call being made (set by :func:`labelled`)."""


@contextlib.contextmanager
def labelled(node: str, role: str) -> Iterator[None]:
    """Calls made inside are reported as ``node``'s, for ``role``.

    A context variable: each task of concurrent calls carries its own.
    """
    token = _CALL.set((node, role))
    try:
        yield
    finally:
        _CALL.reset(token)


def node_config() -> RunnableConfig | None:
    """The running node's config (callbacks, ``configurable``), or ``None`` outside a graph.

    LangGraph sets it for the node's task; tasks the node starts, and a sync run's hop to the
    shared loop, carry it on (both copy the caller's context variables).
    """
    try:
        return get_config()
    except RuntimeError:
        return None


def answer_probability(gen: Generation) -> float | None:
    """The model's probability for the text it generated: ``exp(sum(logprobs))``.

    >>> answer_probability(Generation("B", "m", 3, 1, 0.1, logprobs=(-0.5,)))
    0.6065306597126334
    """
    if gen.distribution is not None and gen.text in gen.distribution:
        return gen.distribution[gen.text]
    if gen.logprobs is None or not gen.logprobs:
        return None
    total = math.fsum(gen.logprobs)
    return min(1.0, math.exp(total)) if math.isfinite(total) else 0.0


class InstrumentedBackend(WrapperBackend):
    """Reports every call to the inner backend as a span and a chat-model run.

    Its capabilities are the inner backend's as the graph was built (read once: every call
    of a run asks whether to stream).
    """

    def __init__(self, inner: VLMBackend) -> None:
        super().__init__(inner)
        self._capabilities = capabilities_of(inner)

    @property
    def capabilities(self) -> Capabilities:
        """The inner backend's capabilities, read when the graph was built."""
        return self._capabilities

    async def serve(self, request: GenerationRequest, on_text: TextCallback | None) -> Generation:
        """Serve ``request`` (streamed when ``on_text`` is given), reported."""
        node, role = _CALL.get()
        run = await llm_runs.start_call(node_config(), self.inner, request, node, role)
        with tracing.call_span(self.inner, request, node, role) as span:
            try:
                gen = await super().serve(request, on_text)
            except BaseException as exc:
                await llm_runs.fail_call(run, exc)
                raise
            if span is not None:  # tracing is on
                prob = answer_probability(gen) if request.purpose != "cot" else None
                tracing.finish_call(span, gen, prob)
        await llm_runs.end_call(run, gen, request.purpose)
        return gen


def instrumented(backend: VLMBackend) -> VLMBackend:
    """``backend`` wrapped in :class:`InstrumentedBackend` (once: a wrapped one is kept)."""
    return backend if isinstance(backend, InstrumentedBackend) else InstrumentedBackend(backend)
