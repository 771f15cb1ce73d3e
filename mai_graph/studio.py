"""The graph LangGraph Studio / ``langgraph dev`` serves (named in ``langgraph.json``).

Backends come from environment variables (:func:`~mai_graph.backends.select.backends_from_env`:
``MAI_GRAPH_BACKEND`` = ``fake`` (default), ``vllm`` or ``transformers``, and
``MAI_GRAPH_SMALL`` / ``MAI_GRAPH_LARGE``). Building the graph starts no engine (vLLM engines
start on the first real run, transformers models load on the first request), so the server can
read schemas without a GPU.

The context schema (:class:`~mai_graph.context.MAIContext`) is the assistant's config form.
"""

from __future__ import annotations

from mai_graph.backends.select import backends_from_env
from mai_graph.graph import create_mai_graph

__all__ = ["backends_from_env", "graph"]

graph = create_mai_graph(*backends_from_env()).compile(name="mai")
"""The compiled MAI graph (no checkpointer: the server brings its own)."""
