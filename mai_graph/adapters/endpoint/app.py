"""The endpoint's Starlette app: routes, API keys, admission and concurrency, lifespan.

:func:`create_app` builds it over one pair (or lineup) of backends that every request
shares; :class:`Endpoint` is what the requests share. The request body is read here under
its size cap and time limit (413, 408), then :mod:`~mai_graph.adapters.endpoint.translate`
turns it into a run and the run's output into OpenAI's response;
:mod:`~mai_graph.adapters.endpoint.stream` answers ``"stream": true``. Serving it:
:mod:`~mai_graph.adapters.endpoint.server`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import logging
import time
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from openai.types import Model

from mai_graph import tracing
from mai_graph.adapters.endpoint.metrics import ServeMetrics
from mai_graph.adapters.endpoint.schema import (
    ChatCompletionRequest,
    EndpointError,
    as_endpoint_error,
    parse_body,
)
from mai_graph.adapters.endpoint.stream import stream_response
from mai_graph.adapters.endpoint.translate import (
    CLIENT_SETTINGS,
    Run,
    completion,
    completion_id,
    extension,
    graph_input,
    prepare,
    private_names,
    wire,
)
from mai_graph.backends.base import VLMBackend
from mai_graph.context import MAIContext
from mai_graph.errors import ConfigError, check_int
from mai_graph.graph import create_mai_graph
from mai_graph.inputs.sources import ImagePolicy
from mai_graph.lineup import Lineup

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

__all__ = [
    "BODY_READ_TIMEOUT_S",
    "MAX_BODY_BYTES",
    "MAX_PREPARING",
    "Endpoint",
    "create_app",
]

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024 * 1024
"""Largest request body read (64 MiB: a question with several large base64 images); a larger
one is refused with 413 before it is read whole (``create_app(max_body_bytes=...)``)."""

BODY_READ_TIMEOUT_S = 30.0
"""Longest a request's body may take to arrive; a slower one is a 408 (slow uploads would
otherwise hold the admission slots)."""

MAX_PREPARING = 2
"""Requests whose bodies are read and images decoded at once, by default (the rest wait)."""


class Endpoint:
    """What every request of one app shares: the graph, its backends and settings."""

    def __init__(
        self,
        small: VLMBackend | Sequence[VLMBackend],
        large: VLMBackend | Sequence[VLMBackend],
        *,
        model_name: str,
        api_keys: Sequence[str],
        image_policy: ImagePolicy,
        context: MAIContext,
        allowed_settings: Collection[str] | None,
        max_concurrency: int,
        max_preparing: int,
        graph_kwargs: Mapping[str, Any],
    ) -> None:
        self.small, self.large = small, large
        self.model_name = model_name
        self.keys = [k.encode() for k in api_keys]
        self.policy = image_policy
        self.context = context
        self.allowed = None if allowed_settings is None else frozenset(allowed_settings)
        # The endpoint applies the image policy itself (so a refusal is a 400 before any
        # stream starts) and hands the graph a checked reference: the graph trusts it.
        self.graph = create_mai_graph(small, large, **graph_kwargs).compile(name=model_name)
        self.max_concurrency = max_concurrency
        self.max_preparing = max_preparing
        self._slots: asyncio.Semaphore | None = None
        self._admission: asyncio.Semaphore | None = None
        self.created = int(time.time())
        self.lineup = Lineup.of(small, large)
        self.names = private_names(self.lineup, model_name)
        self.prometheus = ServeMetrics()  # GET /metrics

    def error(self, exc: BaseException) -> EndpointError:
        """``exc`` as the client may see it (served model names, no object reprs)."""
        return as_endpoint_error(exc, self.names)

    @property
    def slots(self) -> asyncio.Semaphore:
        """Held by each run (``max_concurrency``): more requests wait for one."""
        if self._slots is None:  # made on the server's loop
            self._slots = asyncio.Semaphore(self.max_concurrency)
        return self._slots

    @property
    def admission(self) -> asyncio.Semaphore:
        """Held while a request's body is read and its images decoded (``max_preparing``)."""
        if self._admission is None:
            self._admission = asyncio.Semaphore(self.max_preparing)
        return self._admission

    def authorize(self, header: str | None) -> None:
        """Refuse (401) an ``Authorization`` header without one of the keys, when there are keys."""
        if not self.keys:
            return
        scheme, _, given = (header or "").partition(" ")
        token = given.strip().encode() if scheme.lower() == "bearer" else b""
        ok = False
        for key in self.keys:  # every key compared, in constant time
            ok |= hmac.compare_digest(token, key)
        if not ok:
            raise EndpointError(
                "missing or wrong API key" if token else "missing API key",
                status=401,
                kind="authentication_error",
                code="invalid_api_key",
                fix="send Authorization: Bearer <key> (the openai client's api_key)",
            )

    async def prepare(self, body: ChatCompletionRequest) -> Run:
        """The run ``body`` asks for, checked (:func:`~.translate.prepare`)."""
        return await prepare(
            body,
            model_name=self.model_name,
            base=self.context,
            allowed=self.allowed,
            lineup=self.lineup,
            policy=self.policy,
            names=self.names,
        )

    async def answer(self, run: Run) -> dict[str, Any]:
        """The response of a non-streamed request: the run to its end."""
        rid = completion_id()
        async with self.slots, self.prometheus.running():
            start = time.perf_counter()
            with tracing.run_span("endpoint", run.context, parent=run.trace) as span:
                out = await self.graph.ainvoke(graph_input(run), context=run.context)
                tracing.finish_run(span, out)
            mai = extension(out, time.perf_counter() - start, self.model_name)
            done = wire(completion(rid, self.model_name, out, mai))
            self.prometheus.finished(mai)
            return done


def create_app(
    small: VLMBackend | Sequence[VLMBackend],
    large: VLMBackend | Sequence[VLMBackend],
    *,
    model_name: str = "mai",
    api_keys: Sequence[str] | None = None,
    image_policy: ImagePolicy | None = None,
    context: MAIContext | Mapping[str, Any] | None = None,
    allowed_settings: Collection[str] | Literal["all"] | None = CLIENT_SETTINGS,
    max_concurrency: int = 64,
    max_preparing: int = MAX_PREPARING,
    max_body_bytes: int = MAX_BODY_BYTES,
    body_timeout_s: float = BODY_READ_TIMEOUT_S,
    manage_backends: bool = False,
    **graph_kwargs: Any,
) -> Starlette:
    """The endpoint as an ASGI app (Starlette): serve it with uvicorn or any ASGI server.

    Args:
        small: The small model's backend (shared by every request), or several drafters.
        large: The large model's backend, or a chain of larger backends, smallest first.
        model_name: The model id clients send and ``/v1/models`` lists.
        api_keys: Accepted bearer keys; ``None`` or empty: no authentication (loopback only).
        image_policy: Which images requests may carry (default
            :meth:`ImagePolicy.from_env`, the untrusted policy).
        context: Default MAI settings of every run; requests override them in ``mai``.
        allowed_settings: The MAI settings requests may change (default
            :data:`~mai_graph.adapters.endpoint.translate.CLIENT_SETTINGS`; ``"all"`` or
            None: every field, for trusted callers).
        max_concurrency: Runs in flight at once; more requests wait for a slot.
        max_preparing: Requests whose body and images are read and decoded at once; more
            wait, unread. With the body cap and the image policy's pixel limits this bounds
            the endpoint's memory (docs/reliability.md).
        max_body_bytes: Largest request body read; a larger one is a 413.
        body_timeout_s: Longest a request's body may take to arrive; a slower one is a 408.
        manage_backends: Start the backends' engines when the app starts (one after the
            other) and shut them down when it stops.
        **graph_kwargs: Passed to :func:`~mai_graph.graph.create_mai_graph` (retry policy,
            timeouts, scorers).

    Returns:
        The app: ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /health``, and
        ``GET /metrics`` (Prometheus; :mod:`~mai_graph.adapters.endpoint.metrics`; key as
        the others).

    Example:
        >>> from mai_graph import ScriptedBackend
        >>> app = create_app(ScriptedBackend("yes"), ScriptedBackend("Yes."), api_keys=["k"])
        >>> [route.path for route in app.routes]
        ['/health', '/v1/models', '/v1/chat/completions', '/metrics']
    """
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    Lineup.of(small, large)  # every member a backend, before anything starts
    if not isinstance(model_name, str) or not model_name.strip():
        raise ConfigError(
            f"model_name must be a non-empty string, got {model_name!r}",
            parameter="model_name",
            value=model_name,
        )
    keys = [k for k in (api_keys or ()) if k]
    if any(not isinstance(k, str) for k in keys):
        raise ConfigError("api_keys must be strings", parameter="api_keys")
    for name, value in (("max_concurrency", max_concurrency), ("max_preparing", max_preparing)):
        check_int(value, name, minimum=1)
    allowed: Collection[str] | None = None  # None: every field
    if isinstance(allowed_settings, str) and allowed_settings != "all":
        raise ConfigError(
            f"allowed_settings must be a collection of MAIContext fields or 'all', got "
            f"{allowed_settings!r}",
            parameter="allowed_settings",
            value=allowed_settings,
            fix='pass e.g. ["keep_ratio", "gate"], or "all"',
        )
    if allowed_settings is not None and not isinstance(allowed_settings, str):
        allowed = frozenset(allowed_settings)
        unknown = sorted(allowed - set(MAIContext.model_fields))
        if unknown:
            raise ConfigError(
                f"allowed_settings names unknown settings {unknown}",
                parameter="allowed_settings",
                value=unknown,
                fix="name MAIContext fields",
            )
    endpoint = Endpoint(
        small,
        large,
        model_name=model_name,
        api_keys=keys,
        image_policy=image_policy or ImagePolicy.from_env(),
        context=MAIContext.coerce(context),
        allowed_settings=allowed,
        max_concurrency=max_concurrency,
        max_preparing=max_preparing,
        graph_kwargs=graph_kwargs,
    )

    def error_response(error: EndpointError) -> Response:
        headers = {"WWW-Authenticate": "Bearer"} if error.status == 401 else None
        return JSONResponse(error.body(), status_code=error.status, headers=headers)

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def models(request: Request) -> Response:
        try:
            endpoint.authorize(request.headers.get("authorization"))
        except EndpointError as error:
            return error_response(error)
        served = Model(
            id=endpoint.model_name,
            object="model",
            created=endpoint.created,
            owned_by="mai-graph",
        )
        return JSONResponse({"object": "list", "data": [served.to_dict()]})

    async def chat_completions(request: Request) -> Response:
        try:
            endpoint.authorize(request.headers.get("authorization"))
            async with endpoint.admission:  # bodies and images read and decoded at once
                try:  # a client that trickles its body must not hold an admission slot
                    async with asyncio.timeout(body_timeout_s):
                        body = await _body(request, max_body_bytes)
                except TimeoutError:
                    raise EndpointError(
                        f"the request body did not arrive within {body_timeout_s:g} s",
                        status=408,
                        parameter="body",
                        code="request_timeout",
                        fix="send the whole request at once (or smaller images)",
                    ) from None
                run = await endpoint.prepare(body)
            if tracing.enabled():  # the run's spans join the caller's trace
                trace = tracing.extract_context(request.headers)
                run = dataclasses.replace(run, trace=trace) if trace is not None else run
        except Exception as exc:
            refused = endpoint.error(exc)
            endpoint.prometheus.request("refused", refused.status)
            return error_response(refused)
        stream = body.stream
        include = bool(body.stream_options and body.stream_options.include_usage)
        del body  # its inline images are decoded and stored: not kept for the run
        if stream:
            return stream_response(endpoint, run, include)
        try:
            answered = await _unless_disconnected(request, endpoint.answer(run))
            if answered is None:  # the client left: its run was cancelled, nobody to answer
                return Response(status_code=499)
            return JSONResponse(answered)
        except Exception as exc:
            error = endpoint.error(exc)
            endpoint.prometheus.request("failed", error.status)
            if error.status >= 500:
                log.warning("request failed: %s", exc, exc_info=error.status == 500)
            return error_response(error)

    async def metrics(request: Request) -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST

        try:  # the endpoint's access rule: the key when it has keys
            endpoint.authorize(request.headers.get("authorization"))
        except EndpointError as error:
            return error_response(error)
        return Response(endpoint.prometheus.scrape(), media_type=CONTENT_TYPE_LATEST)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        from mai_graph.backends.lifecycle import shutdown_backends, start_backends

        if manage_backends:
            await start_backends(small, large)
        try:
            yield
        finally:
            if manage_backends:
                shutdown_backends(small, large)

    app = Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/metrics", metrics, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
    app.state.mai = endpoint
    return app


DISCONNECT_POLL_S = 0.25
"""How often a non-streaming request checks that its client is still there."""


async def _unless_disconnected(request: Any, work: Any) -> Any:
    """The result of ``work``, or None once the client has gone (``work`` is then cancelled).

    A non-streaming request whose client timed out (the ``openai`` client retries twice by
    default) would otherwise keep its run, its concurrency slot and its engine requests to
    the end; cancelling the run aborts its model calls in the engines.
    """
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if done:
                return task.result()
            if await request.is_disconnected():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                return None
    finally:
        if not task.done():
            task.cancel()


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it is known to exceed ``limit`` bytes."""
    declared = request.headers.get("content-length")
    too_large = EndpointError(
        f"the request body is over the limit of {limit:,} bytes",
        status=413,
        parameter="body",
        code="request_too_large",
        fix="send smaller or fewer images (or ask the operator for a larger limit)",
    )
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


async def _body(request: Request, limit: int = MAX_BODY_BYTES) -> ChatCompletionRequest:
    """The validated request body; the first problem named in a 400 (413 when too large)."""
    return parse_body(await _read_body(request, limit))
