"""In-process vLLM engines: the production backend, GPU or CPU.

- :mod:`~mai_graph.backends.vllm.backend`: :class:`VLLMBackend`, the backend: an engine handle
  and a translator, and the request loop between them;
- :mod:`~mai_graph.backends.vllm.engine`: :class:`EngineHandle`, one engine's life (start,
  death, restart, processes, teardown);
- :mod:`~mai_graph.backends.vllm.translate`: :class:`Translator`, a request to the engine's
  prompt and ``SamplingParams`` and its output to a ``Generation`` (usable over an
  ``AsyncLLM`` you run yourself);
- :mod:`~mai_graph.backends.vllm.startup`: what a start relies on that vLLM's CPU build hides
  (spawn, device order, one share per engine, a lineup's engines in order, restarts that wait);
- :mod:`~mai_graph.backends.vllm.teardown`: stopping an engine and its processes cleanly;
- :mod:`~mai_graph.backends.vllm.compat`: every vLLM internal these use, in one place.
"""

from mai_graph.backends.vllm.backend import (
    ENGINE_EXIT_GRACE_S,
    ENGINE_LOOP,
    RESTART_WINDOW_S,
    WORKER_EXIT_GRACE_S,
    VLLMBackend,
)
from mai_graph.backends.vllm.engine import EngineHandle
from mai_graph.backends.vllm.translate import Translator

__all__ = [
    "ENGINE_EXIT_GRACE_S",
    "ENGINE_LOOP",
    "RESTART_WINDOW_S",
    "WORKER_EXIT_GRACE_S",
    "EngineHandle",
    "Translator",
    "VLLMBackend",
]
