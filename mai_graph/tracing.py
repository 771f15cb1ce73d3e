"""OpenTelemetry traces of MAI runs: a span per run, per graph node and per model call.

Off unless enabled, and then free: with tracing off every hook is one check of a module global
(mai-graph imports nothing of OpenTelemetry then). Turn it on in one of two ways:

- in code, :func:`enable` (with your ``TracerProvider``, or the global one your app set up);
- from the environment, ``MAI_GRAPH_OTEL=otlp`` (the CLI, ``mai-graph serve``, ``langgraph dev``
  and any process that calls :func:`configure_from_env`): an SDK provider exporting over
  OTLP/HTTP, configured by the standard ``OTEL_EXPORTER_OTLP_*`` / ``OTEL_SERVICE_NAME``
  variables (``MAI_GRAPH_OTEL=console`` prints spans instead).

Needs the ``otel`` extra (``pip install "mai-graph[otel]"``).

The spans follow the OpenTelemetry GenAI semantic conventions where they have a name for a
thing (``gen_ai.operation.name``, ``gen_ai.request.model``, ``gen_ai.usage.input_tokens``,
``gen_ai.usage.cache_read.input_tokens``, ``gen_ai.response.finish_reasons``, ...; the
``gen_ai_attributes`` module of ``opentelemetry-semantic-conventions``), and carry MAI's own
under ``mai.*``: the route, the gate's answer probabilities, the kept ratio, the engines'
stage timings. A run span opens in each door (:func:`~mai_graph.api.run`, the chat model, the
endpoint, ``eval``) as a child of the caller's current span, or of the endpoint request's
``traceparent``; node and call spans nest under it, or under the current span of an app that
invokes a compiled graph itself.

What spans never hold: prompts, answers, reasoning, image bytes or any setting's secret (the
GenAI conventions make message content opt-in; mai-graph never records it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mai_graph.backends.base import Generation, GenerationRequest
    from mai_graph.context import MAIContext

from mai_graph.backends.base import provider_of

__all__ = [
    "configure_from_env",
    "disable",
    "enable",
    "enabled",
    "extract_context",
]

log = logging.getLogger("mai_graph.tracing")

ENV = "MAI_GRAPH_OTEL"
"""``otlp`` (or ``1``): export spans over OTLP/HTTP; ``console``: print them; unset: off."""

_tracer: Any = None
"""The active tracer; None while tracing is off (every hook checks this first)."""
_owned: Any = None
"""A provider :func:`configure_from_env` built (flushed and shut down by :func:`disable`)."""
_owned_exporter: Any = None
"""Its exporter (shut down early when the collector does not answer in time)."""

FLUSH_TIMEOUT_S = 2.0
"""How long :func:`disable` (run at exit) waits for the last spans to reach the collector.

The OTLP exporter retries a collector that does not answer (connection refused, 5xx) with
backoff until its own timeout (``OTEL_EXPORTER_OTLP_TIMEOUT``, 10 s by default), and the SDK's
``BatchSpanProcessor.shutdown`` waits for it (its flush ignores a timeout: opentelemetry-python
issue 4568). A command would exit that much late with no collector running; past this wait the
exporter is shut down, which ends its retries, and the spans still queued are dropped."""

_NULL = contextlib.nullcontext()


def enable(tracer_provider: Any = None) -> None:
    """Trace MAI runs with ``tracer_provider`` (default: the global provider your app set).

    Raises:
        ImportError: (as :class:`~mai_graph.errors.ConfigError`) without the ``otel`` extra.
    """
    global _tracer
    trace = _require()
    provider = tracer_provider or trace.get_tracer_provider()
    from importlib.metadata import PackageNotFoundError, version

    try:
        release: str | None = version("mai-graph")
    except PackageNotFoundError:
        release = None
    _tracer = provider.get_tracer("mai_graph", release)


def disable() -> None:
    """Stop tracing (and flush and shut down a provider :func:`configure_from_env` built).

    The flush waits at most :data:`FLUSH_TIMEOUT_S` for the collector.
    """
    global _tracer, _owned, _owned_exporter
    _tracer = None
    owned, _owned = _owned, None
    exporter, _owned_exporter = _owned_exporter, None
    if owned is None:
        return
    closing = threading.Thread(target=owned.shutdown, name="mai-graph-otel-shutdown", daemon=True)
    closing.start()
    closing.join(FLUSH_TIMEOUT_S)
    if closing.is_alive() and exporter is not None:
        log.warning(
            "tracing: the collector took no spans within %.0f s; the spans not yet exported "
            "are dropped (is an OTLP collector listening at OTEL_EXPORTER_OTLP_ENDPOINT?)",
            FLUSH_TIMEOUT_S,
        )
        exporter.shutdown()  # ends the exporter's retries; the shutdown thread then finishes
        closing.join(0.5)


def enabled() -> bool:
    """Whether runs are traced."""
    return _tracer is not None


def configure_from_env(env: Mapping[str, str] | None = None) -> bool:
    """Enable tracing when ``MAI_GRAPH_OTEL`` asks for it; returns whether it is on.

    ``otlp`` (or ``1`` / ``true``) builds an SDK ``TracerProvider`` with a batching OTLP/HTTP
    exporter (endpoint, headers and timeout from the standard ``OTEL_EXPORTER_OTLP_*``
    variables; the resource from ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES``, with
    ``service.name`` ``mai-graph`` when they name none), unless the app already set a global
    SDK provider, which is then used. ``console`` prints each span. ``env`` (default
    ``os.environ``) is read for ``MAI_GRAPH_OTEL`` only: the exporter reads the process's
    environment.
    Calling it again does nothing once tracing is on.

    Raises:
        ConfigError: An unknown value, or the ``otel`` extra missing.
    """
    global _owned, _owned_exporter
    from mai_graph.errors import ConfigError

    value = (os.environ if env is None else env).get(ENV, "").strip().lower()
    if value in ("", "0", "off", "false", "no"):
        return enabled()
    if value not in ("1", "true", "yes", "otlp", "console"):
        raise ConfigError(
            f"{ENV}={value!r} is not a tracing mode",
            parameter=ENV,
            value=value,
            fix=f"set {ENV}=otlp (export over OTLP/HTTP), console, or unset it",
        )
    if enabled():
        return True
    trace = _require()
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):  # the app configured one: add nothing
        enable(current)
        return True
    # The standard variables name the service (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES);
    # mai-graph only when neither does.
    named = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    provider = TracerProvider(
        resource=Resource.create({} if named else {"service.name": "mai-graph"})
    )
    if value == "console":
        inner: Any = ConsoleSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        inner = OTLPSpanExporter()
    exporter = _exporter(inner)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    _owned, _owned_exporter = provider, exporter
    enable(provider)
    import atexit

    atexit.register(disable)  # flush what is batched when the process ends
    return True


def _exporter(inner: Any) -> Any:
    """``inner`` behind a span exporter whose ``shutdown`` may be called twice, quietly.

    :func:`disable` calls it to end the exporter's retries, and then the span processor does.
    """
    from opentelemetry.sdk.trace.export import SpanExporter

    class _Once(SpanExporter):
        def __init__(self) -> None:
            self._lock = threading.Lock()
            self._closed = False

        def export(self, spans: Any) -> Any:
            return inner.export(spans)

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return bool(inner.force_flush(timeout_millis))

        def shutdown(self) -> None:
            with self._lock:
                if self._closed:
                    return
                self._closed = True
            inner.shutdown()

    return _Once()


def _require() -> Any:
    try:
        from opentelemetry import trace
    except ImportError as exc:
        from mai_graph.errors import ConfigError

        raise ConfigError(
            "tracing needs OpenTelemetry",
            parameter=ENV,
            fix='pip install "mai-graph[otel]"',
        ) from exc
    return trace


def extract_context(headers: Mapping[str, str]) -> Any:
    """The trace context of incoming ``headers`` (W3C ``traceparent``), or None.

    None as well while tracing is off, so an untrusted header costs nothing then.
    """
    if _tracer is None or "traceparent" not in headers:
        return None
    from opentelemetry.propagate import extract

    return extract({"traceparent": headers["traceparent"]})


# -- spans ------------------------------------------------------------------------------------


def run_span(door: str, ctx: MAIContext | None = None, parent: Any = None) -> Any:
    """A context manager: the span of one run (yields it, or None while tracing is off).

    Args:
        door: Which door started the run (``python``, ``chat_model``, ``endpoint``, ``eval``).
        ctx: The run's settings (policy and answer kind are recorded).
        parent: A trace context to nest under (the endpoint's ``traceparent``); default the
            current span.
    """
    if _tracer is None:
        return _NULL
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "mai",
        "mai.door": door,
    }
    if ctx is not None:
        attributes["mai.policy"] = ctx.policy
        attributes["mai.answer_kind"] = ctx.answer_kind
    return _span("invoke_agent mai", attributes, parent=parent, kind="INTERNAL")


def finish_run(span: Any, out: Mapping[str, Any]) -> None:
    """Record a finished run on its span: route, gate probabilities, kept ratio, totals."""
    if span is None:
        return
    attrs: dict[str, Any] = {"mai.route": str(out.get("route"))}
    for key in ("small_prob", "large_prob"):
        value = out.get(key)
        if isinstance(value, int | float):
            attrs[f"mai.gate.{key}"] = float(value)
    if out.get("small_answer") is not None and out.get("route") in ("agree", "extract_agree"):
        attrs["mai.gate.agreed"] = True
    elif out.get("small_answer") is not None:
        attrs["mai.gate.agreed"] = False
    sparsification = out.get("sparsification") or {}
    if "kept_ratio" in sparsification:
        attrs["mai.sparsify.kept_ratio"] = float(sparsification["kept_ratio"])
    metrics = out.get("metrics") or []
    attrs["mai.calls"] = len(metrics)
    attrs["gen_ai.usage.input_tokens"] = sum(m.get("prompt_tokens") or 0 for m in metrics)
    attrs["gen_ai.usage.output_tokens"] = sum(m.get("generated_tokens") or 0 for m in metrics)
    attrs["gen_ai.usage.cache_read.input_tokens"] = sum(
        m.get("cached_tokens") or 0 for m in metrics
    )
    span.set_attributes(attrs)


def node_span(name: str) -> Any:
    """A context manager: the span of one graph node (None while tracing is off)."""
    if _tracer is None:
        return _NULL
    return _span(f"node {name}", {"mai.node": name})


def finish_node(span: Any, update: Mapping[str, Any] | None) -> None:
    """Record what a node decided: the route it set, the kept ratio, the stage."""
    if span is None or not update:
        return
    attrs: dict[str, Any] = {}
    route = update.get("route")
    if isinstance(route, str):
        attrs["mai.route"] = route
    stage = update.get("stage")
    if isinstance(stage, int) and not isinstance(stage, bool):
        attrs["mai.stage"] = stage
    sparsification = update.get("sparsification")
    if isinstance(sparsification, Mapping):
        for key in ("kept_ratio", "dropped_mass", "scoring_s"):
            if isinstance(sparsification.get(key), int | float):
                attrs[f"mai.sparsify.{key}"] = float(sparsification[key])
        for key in ("tokens_in", "tokens_out"):
            if isinstance(sparsification.get(key), int):
                attrs[f"mai.sparsify.{key}"] = sparsification[key]
    if attrs:
        span.set_attributes(attrs)


def call_span(backend: Any, request: GenerationRequest, node: str, role: str) -> Any:
    """A context manager: the span of one model call (None while tracing is off)."""
    if _tracer is None:
        return _NULL
    model = str(getattr(backend, "name", "model"))
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider_of(backend),
        "gen_ai.request.model": model,
        "gen_ai.request.max_tokens": request.max_tokens,
        "gen_ai.request.temperature": request.temperature,
        "mai.request_id": request.request_id,
        "mai.node": node,
        "mai.role": role,
        "mai.purpose": request.purpose,
    }
    if request.seed is not None:
        attrs["gen_ai.request.seed"] = request.seed
    if request.choices is not None:
        attrs["mai.choices"] = len(request.choices)
    return _span(f"chat {model}", attrs, kind="CLIENT")


def finish_call(span: Any, gen: Generation, answer_prob: float | None) -> None:
    """Record a finished call: tokens, finish reason, the engine's stages, the answer's odds."""
    if span is None:
        return
    attrs: dict[str, Any] = {
        "gen_ai.response.model": gen.model,
        "gen_ai.response.finish_reasons": [gen.finish_reason],
        "gen_ai.usage.input_tokens": gen.prompt_tokens,
        "gen_ai.usage.output_tokens": gen.generated_tokens,
        "mai.latency_s": gen.latency_s,
    }
    optional = {
        "gen_ai.usage.cache_read.input_tokens": gen.cached_tokens,
        "gen_ai.response.time_to_first_chunk": gen.ttft_s,
        "mai.queue_s": gen.queue_s,
        "mai.prefill_s": gen.prefill_s,
        "mai.decode_s": gen.decode_s,
        "mai.image_tokens": gen.image_tokens,
        "mai.answer_prob": answer_prob,
    }
    attrs.update({k: v for k, v in optional.items() if v is not None})
    span.set_attributes(attrs)


@contextlib.contextmanager
def _span(
    name: str, attributes: dict[str, Any], *, parent: Any = None, kind: str = "INTERNAL"
) -> Iterator[Any]:
    from opentelemetry.trace import SpanKind

    tracer = _tracer
    if tracer is None:  # disabled meanwhile
        yield None
        return
    with tracer.start_as_current_span(
        name,
        context=parent,
        kind=getattr(SpanKind, kind),
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as exc:
            mark_failed(span, exc)
            raise


def mark_failed(span: Any, exc: BaseException) -> None:
    """Mark ``span`` failed by ``exc``: its type, and the setting it names, never its text.

    Control flow is no failure: LangGraph's interrupts (a review pausing the run) and commands
    to a parent graph record nothing; cancellation (a client left, a timeout) records its type
    but no error status.
    """
    if span is None:
        return
    from langgraph.errors import GraphBubbleUp
    from opentelemetry.trace import Status, StatusCode

    if isinstance(exc, GraphBubbleUp):
        span.set_attribute("mai.interrupted", type(exc).__name__ == "GraphInterrupt")
        return
    error = type(exc).__name__
    span.set_attribute("error.type", error)
    if not isinstance(exc, GeneratorExit | KeyboardInterrupt | asyncio.CancelledError):
        span.set_status(Status(StatusCode.ERROR, _safe_message(exc)))


def _safe_message(exc: BaseException) -> str:
    """What a span says of an error: its type and the setting it names, never its text.

    Messages may quote what a caller sent (a question, a URL, an option), which spans never
    hold; the error itself still reaches the caller whole.
    """
    parameter = getattr(exc, "parameter", None)
    return type(exc).__name__ + (f" (parameter {parameter})" if parameter else "")
