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

BACKENDS = ("fake", "vllm", "transformers")
"""``fake``: canned offline answers (no model); ``vllm``: in-process vLLM engines;
``transformers``: Hugging Face models in-process."""


def backends_for(
    kind: str, small: str | None, large: str | None, *, where: str = "--small/--large"
) -> tuple[Any, Any]:
    """The (small, large) backends of a kind; ``where`` names the settings in error messages."""
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
    from mai_graph.backends.transformers import TransformersBackend

    return TransformersBackend(small), TransformersBackend(large)


def backends_from_env(env: Mapping[str, str] | None = None) -> tuple[Any, Any]:
    """Backends from ``MAI_GRAPH_BACKEND`` (default ``fake``), ``MAI_GRAPH_SMALL``, ``_LARGE``."""
    env = os.environ if env is None else env
    kind = env.get("MAI_GRAPH_BACKEND", "fake")
    try:
        return backends_for(
            kind,
            env.get("MAI_GRAPH_SMALL"),
            env.get("MAI_GRAPH_LARGE"),
            where="MAI_GRAPH_SMALL/MAI_GRAPH_LARGE",
        )
    except ConfigError as exc:
        raise ConfigError(
            f"MAI_GRAPH_BACKEND: {exc}", parameter=exc.parameter, value=exc.value
        ) from None
