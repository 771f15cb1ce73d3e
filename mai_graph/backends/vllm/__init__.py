"""In-process vLLM engines: the production backend, GPU or CPU.

- :mod:`~mai_graph.backends.vllm.backend`: :class:`VLLMBackend` (one ``AsyncLLM`` engine:
  start, serve, restart after a death);
- :mod:`~mai_graph.backends.vllm.teardown`: stopping an engine and its processes cleanly;
- :mod:`~mai_graph.backends.vllm._compat`: every vLLM internal the two use, in one place.
"""

from mai_graph.backends.vllm.backend import (
    ENGINE_EXIT_GRACE_S,
    ENGINE_LOOP,
    RESTART_WINDOW_S,
    WORKER_EXIT_GRACE_S,
    VLLMBackend,
)

__all__ = [
    "ENGINE_EXIT_GRACE_S",
    "ENGINE_LOOP",
    "RESTART_WINDOW_S",
    "WORKER_EXIT_GRACE_S",
    "VLLMBackend",
]
