"""``mai-graph serve``: OpenAI's chat-completions API over the MAI graph (the ``serve`` extra).

:func:`create_app` builds the Starlette app, :func:`serve` runs it under uvicorn;
:func:`memory_bound` is what requests may hold beyond the engines. ``GET /metrics`` is
:mod:`~mai_graph.adapters.endpoint.metrics`.
"""

from mai_graph.adapters.endpoint.app import (
    ChatCompletionRequest,
    EndpointError,
    create_app,
    memory_bound,
    serve,
)

__all__ = ["ChatCompletionRequest", "EndpointError", "create_app", "memory_bound", "serve"]
