"""An OpenAI-compatible chat completions endpoint that answers with MAI (``mai-graph serve``).

Any OpenAI client (the ``openai`` package, LangChain's ``ChatOpenAI``, curl) sends its
question, with the image as an ``image_url`` content part, to ``POST /v1/chat/completions``;
MAI answers it with the small and large model. What differs from a plain model:

- The last user message is the question (its text parts joined, its image parts the images,
  in order);
  earlier turns and system messages are not read (MAI has its own prompts).
- ``usage`` counts every model call of the run (prompt, cached and generated tokens); the
  ``mai`` field of the response (streamed: of the last chunk with ``finish_reason``) holds the
  route, the canonical answer, each model's short answer and one metrics record per call.
- MAI settings travel in the request's ``mai`` field (``extra_body={"mai": {...}}`` in the
  ``openai`` client): any :class:`~mai_graph.context.MAIContext` field, plus ``options`` for a
  multiple-choice question. Unknown settings are refused with 400 naming the key.
  ``temperature`` and ``seed`` set the context's; ``max_tokens`` (or
  ``max_completion_tokens``) bounds the answer (``short_max_tokens``).
- Refused with 400: ``n`` > 1, ``stop``, ``tools``, ``logprobs``, ``response_format`` other
  than text, more images than the image policy's ``max_images``. Other OpenAI fields are
  accepted and ignored.

Images come from others, so they pass :class:`~mai_graph.inputs.sources.ImagePolicy` (default
:meth:`~mai_graph.inputs.sources.ImagePolicy.from_env`: data URLs and base64; files only under
``MAI_GRAPH_IMAGE_ROOTS``; http(s) only with ``MAI_GRAPH_IMAGE_URLS=1``) before a run starts,
so a refused image is a 400 in streaming mode too. Requests carry ``Authorization: Bearer KEY``
when the app has keys (compared in constant time). Every run shares the app's backends, so
concurrent requests are batched by the engines; ``max_concurrency`` bounds the runs in flight
(the rest wait their turn). ``GET /metrics`` serves route counts, latencies and tokens in
Prometheus' text format (:mod:`mai_graph.adapters.endpoint.metrics`), under the same key.

Needs the ``serve`` extra (Starlette, sse-starlette, uvicorn, prometheus-client and openai).

The modules: :mod:`~mai_graph.adapters.endpoint.schema` (the request body, the errors),
:mod:`~mai_graph.adapters.endpoint.translate` (request -> run, run -> OpenAI response),
:mod:`~mai_graph.adapters.endpoint.stream` (a streamed run's server-sent events),
:mod:`~mai_graph.adapters.endpoint.app` (:func:`create_app`: routes, keys, concurrency),
:mod:`~mai_graph.adapters.endpoint.server` (:func:`serve` under uvicorn, :func:`memory_bound`),
:mod:`~mai_graph.adapters.endpoint.transport` (the connection cap and a request head's size
and deadline, before any key is checked) and :mod:`~mai_graph.adapters.endpoint.metrics`
(``GET /metrics``).
"""

from mai_graph.adapters.endpoint.app import create_app
from mai_graph.adapters.endpoint.schema import ChatCompletionRequest, EndpointError
from mai_graph.adapters.endpoint.server import memory_bound, serve

__all__ = ["ChatCompletionRequest", "EndpointError", "create_app", "memory_bound", "serve"]
