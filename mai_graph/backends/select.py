"""Backends chosen by name: for the CLI, LangGraph Studio, examples and scripts.

Nothing here starts an engine: vLLM engines start on the first request, transformers models
load on the first request.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from mai_graph.errors import ConfigError

__all__ = ["BACKENDS", "backends_for", "backends_from_env"]

BACKENDS = ("fake", "vllm", "transformers", "openai")
"""``fake``: canned offline answers (no model); ``vllm``: in-process vLLM engines;
``transformers``: Hugging Face models in-process; ``openai``: OpenAI-compatible servers
(``vllm serve``), the models being served model names."""

DEFAULT_URLS = ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8001/v1")


def backends_for(
    kind: str,
    small: str | None,
    large: str | None,
    *,
    where: str = "--small/--large",
    urls: tuple[str | None, str | None] = (None, None),
) -> tuple[Any, Any]:
    """The (small, large) backends of a kind; ``where`` names the settings in error messages.

    ``urls`` are the servers' base URLs for ``openai`` (default ports 8000 and 8001).
    """
    if kind not in BACKENDS:
        raise ConfigError(
            f"backend must be one of {list(BACKENDS)}, got {kind!r}",
            parameter="backend",
            value=kind,
            fix="use fake (offline), vllm or transformers",
        )
    if kind == "fake":
        from mai_graph.backends.fake import demo_backends

        return demo_backends()
    if not small or not large:
        raise ConfigError(
            f"backend {kind} needs both models ({where})",
            parameter=where,
            fix="give checkpoint paths or hub ids of one model family "
            "(`mai-graph build-tiny DIR` builds a local test pair)",
        )
    if kind == "vllm":
        from mai_graph.backends.vllm import VLLMBackend

        return VLLMBackend(small), VLLMBackend(large)
    if kind == "openai":
        from mai_graph.backends.openai import OpenAIBackend

        small_url, large_url = (u or d for u, d in zip(urls, DEFAULT_URLS))
        return OpenAIBackend.from_url(small_url, small), OpenAIBackend.from_url(large_url, large)
    from mai_graph.backends.transformers import TransformersBackend

    return TransformersBackend(small), TransformersBackend(large)


def backends_from_env(env: Mapping[str, str] | None = None) -> tuple[Any, Any]:
    """Backends named by environment variables.

    ``MAI_GRAPH_BACKEND`` (default ``fake``), ``MAI_GRAPH_SMALL`` / ``MAI_GRAPH_LARGE``, and
    for ``openai`` ``MAI_GRAPH_SMALL_URL`` / ``MAI_GRAPH_LARGE_URL``.
    """
    env = os.environ if env is None else env
    kind = env.get("MAI_GRAPH_BACKEND", "fake")
    try:
        return backends_for(
            kind,
            env.get("MAI_GRAPH_SMALL"),
            env.get("MAI_GRAPH_LARGE"),
            where="MAI_GRAPH_SMALL/MAI_GRAPH_LARGE",
            urls=(env.get("MAI_GRAPH_SMALL_URL"), env.get("MAI_GRAPH_LARGE_URL")),
        )
    except ConfigError as exc:
        raise ConfigError(
            f"MAI_GRAPH_BACKEND: {exc}", parameter=exc.parameter, value=exc.value
        ) from None
