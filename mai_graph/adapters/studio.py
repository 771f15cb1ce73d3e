"""The graph LangGraph Studio / ``langgraph dev`` serves (named in ``langgraph.json``).

Backends come from environment variables (:func:`~mai_graph.deploy.select.backends_from_env`:
``MAI_GRAPH_BACKEND`` = ``fake`` (default), ``vllm`` or ``transformers``, and
``MAI_GRAPH_SMALL`` / ``MAI_GRAPH_LARGE``). Building the graph starts no engine (vLLM engines
start on the first real run, transformers models load on the first request), so the server can
read schemas without a GPU.

The server's callers are not the machine's owner, so images follow the untrusted policy
(:meth:`~mai_graph.inputs.sources.ImagePolicy.from_env`): data URLs or base64, files only under
``MAI_GRAPH_IMAGE_ROOTS``, http(s) URLs only with ``MAI_GRAPH_IMAGE_URLS=1``.

The context schema (:class:`~mai_graph.context.MAIContext`) is the assistant's config form.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langgraph.graph.state import CompiledStateGraph

from mai_graph import tracing
from mai_graph.adapters.langchain import create_mai_chat_graph
from mai_graph.context import mai_settings
from mai_graph.deploy.select import backends_from_env
from mai_graph.graph import create_mai_graph
from mai_graph.inputs.sources import ImagePolicy

if TYPE_CHECKING:  # the server resolves this annotation itself (it has langgraph_sdk)
    from langgraph_sdk.runtime import ServerRuntime

__all__ = [
    "backends_from_env",
    "chat_graph",
    "graph",
    "image_policy",
    "serve_chat_graph",
    "serve_graph",
]

image_policy = ImagePolicy.from_env()
tracing.configure_from_env()  # MAI_GRAPH_OTEL=otlp in the server's environment: node and call spans
"""The images this server accepts (read once, at start-up)."""

_small, _large = backends_from_env()

graph = create_mai_graph(_small, _large, image_policy=image_policy).compile(name="mai")
"""The compiled MAI graph (no checkpointer: the server brings its own)."""

chat_graph = create_mai_chat_graph(_small, _large, image_policy=image_policy).compile(
    name="mai_chat"
)
"""The same models as a ``MessagesState`` chat graph, for Studio's chat view: the last human
message (text and an image part) is the question; the reply's tokens stream in
``stream_mode="messages"``."""


def _checked(runtime: ServerRuntime | None) -> None:
    """Refuse a run whose context has settings MAI does not know (a typo such as kep_ratio).

    The server drops context keys its published schema does not list before the graph runs;
    only the graph factory still sees the caller's context, so the check happens here.
    """
    context: Any = getattr(runtime, "context", None)
    if context is not None:
        mai_settings(context)


def serve_graph(runtime: ServerRuntime) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The factory ``langgraph.json`` names for ``mai``.

    Checks the run's context, then serves :data:`graph` (built once; every run shares its
    engines).
    """
    _checked(runtime)
    return graph


def serve_chat_graph(runtime: ServerRuntime) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The factory ``langgraph.json`` names for ``mai_chat`` (see :func:`serve_graph`)."""
    _checked(runtime)
    return chat_graph
