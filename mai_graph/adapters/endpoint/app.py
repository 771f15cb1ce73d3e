"""The endpoint's Starlette app: routes, API keys, admission and concurrency, lifespan.

:func:`create_app` builds it over one pair (or lineup) of backends that every request
shares; :class:`Endpoint` is what the requests share. The request body is read here under
its size cap, minimum rate and time limit (413, 408), then
:mod:`~mai_graph.adapters.endpoint.translate` turns it into a run and the run's output into
OpenAI's response; :mod:`~mai_graph.adapters.endpoint.stream` answers ``"stream": true``.
The server's own settings (the image store, the pixel cache) are checked as the app is made,
and every 5xx it answers is logged. Serving it: :mod:`~mai_graph.adapters.endpoint.server`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import json
import logging
import math
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
    operator_side,
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
from mai_graph.errors import ConfigError, MAIError, check_int
from mai_graph.graph import create_mai_graph
from mai_graph.inputs.sources import ImagePolicy
from mai_graph.lineup import Lineup

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.types import Message, Receive, Scope, Send

__all__ = [
    "BODY_GRACE_S",
    "BODY_MIN_RATE",
    "BODY_READ_TIMEOUT_S",
    "MAX_BODY_BYTES",
    "MAX_PREPARING",
    "Endpoint",
    "StopGuard",
    "create_app",
]

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024 * 1024
"""Largest request body read (64 MiB: a question with several large base64 images); a larger
one is refused with 413 before it is read whole (``create_app(max_body_bytes=...)``)."""

BODY_READ_TIMEOUT_S = 30.0
"""Longest a request's body may take to arrive; a slower one is a 408 (slow uploads would
otherwise hold the admission slots)."""

BODY_MIN_RATE = 64 * 1024
"""Slowest a body may arrive once it is being read, in bytes a second (512 kbit/s), after
:data:`BODY_GRACE_S`: by ``t`` seconds it must have sent ``BODY_MIN_RATE * (t - grace)``
bytes, else a 408 (Apache's ``mod_reqtimeout`` rule). A client trickling its body holds an
admission slot for about the grace, not the whole :data:`BODY_READ_TIMEOUT_S`."""

BODY_GRACE_S = 2.0
"""Seconds a body being read may send nothing before :data:`BODY_MIN_RATE` applies."""

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

    def failed(self, exc: BaseException, doing: str) -> EndpointError:
        """``exc`` as the client sees it (:meth:`error`), logged when it is a 5xx.

        A 500 and a failure of the server's own settings go to the log at error level with
        their traceback (the client's message points there); a backend's 502 / 503 as a
        warning.
        """
        error = self.error(exc)
        if error.status >= 500:
            mine = error.status == 500 or (
                isinstance(exc, MAIError) and operator_side(exc.parameter)
            )
            if mine:
                log.error("%s failed (%d): %s", doing, error.status, exc, exc_info=exc)
            else:
                log.warning("%s failed (%d): %s", doing, error.status, exc)
        return error

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
    body_min_rate: float = BODY_MIN_RATE,
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
        body_min_rate: Slowest a body may arrive, in bytes a second, after
            :data:`BODY_GRACE_S` (:data:`BODY_MIN_RATE`; 0: no floor); a slower one is a 408.
        manage_backends: Start the backends' engines when the app starts (one after the
            other) and shut them down when it stops.
        **graph_kwargs: Passed to :func:`~mai_graph.graph.create_mai_graph` (retry policy,
            timeouts, scorers).

    Returns:
        The app: ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /health``, and
        ``GET /metrics`` (Prometheus; :mod:`~mai_graph.adapters.endpoint.metrics`; key as
        the others).

    Raises:
        ConfigError: An argument is invalid, or a server setting the requests would use is:
            the image store (``$MAI_GRAPH_IMAGE_DIR``, ``$MAI_GRAPH_IMAGE_STORE_MB``) and
            the pixel cache (``$MAI_GRAPH_PIXEL_CACHE_MB``) are checked here, once, not per
            request.

    Example:
        >>> from mai_graph import ScriptedBackend
        >>> app = create_app(ScriptedBackend("yes"), ScriptedBackend("Yes."), api_keys=["k"])
        >>> [route.path for route in app.routes]
        ['/health', '/v1/models', '/v1/chat/completions', '/metrics']
    """
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
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
    check_int(max_body_bytes, "max_body_bytes", minimum=1)
    _check_number(body_timeout_s, "body_timeout_s", positive=True)
    _check_number(body_min_rate, "body_min_rate", positive=False)
    _check_server_settings()
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

    def error_response(error: EndpointError, *, close: bool = False) -> Response:
        headers = {"WWW-Authenticate": "Bearer"} if error.status == 401 else {}
        if close:  # the body is not read: the connection goes, and what is left of it with it
            headers["Connection"] = "close"
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
        read = False
        try:
            endpoint.authorize(request.headers.get("authorization"))
            async with endpoint.admission:  # bodies and images read and decoded at once
                data = await _read_body(request, max_body_bytes, body_timeout_s, body_min_rate)
                read = True
                body = parse_body(data)
                del data
                run = await endpoint.prepare(body)
            if tracing.enabled():  # the run's spans join the caller's trace
                trace = tracing.extract_context(request.headers)
                run = dataclasses.replace(run, trace=trace) if trace is not None else run
        except Exception as exc:
            refused = endpoint.failed(exc, "preparing a request")
            endpoint.prometheus.request("refused", refused.status)
            return error_response(refused, close=not read)
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
            error = endpoint.failed(exc, "a run")
            endpoint.prometheus.request("failed", error.status)
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

    async def internal_error(request: Request, exc: Exception) -> Response:
        # Starlette's ServerErrorMiddleware answers with this, then re-raises: the ASGI
        # server logs the traceback (uvicorn at error level)
        return error_response(as_endpoint_error(exc), close=True)

    app = Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/metrics", metrics, methods=["GET"]),
        ],
        middleware=[Middleware(StopGuard)],
        exception_handlers={Exception: internal_error},
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


async def _read_body(
    request: Request,
    limit: int = MAX_BODY_BYTES,
    timeout_s: float = BODY_READ_TIMEOUT_S,
    min_rate: float = BODY_MIN_RATE,
) -> bytes:
    """The body, refused with 413 or 408 as soon as it is too large or too slow.

    413: over ``limit`` bytes (declared, or as it arrives). 408: slower than ``min_rate``
    bytes a second after :data:`BODY_GRACE_S`, or not all within ``timeout_s``.
    """
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
    from starlette.requests import ClientDisconnect

    loop = asyncio.get_running_loop()
    start = loop.time()
    chunks, size = [], 0
    stream = aiter(request.stream())
    while True:
        # by t seconds the body has sent min_rate * (t - grace) bytes, and all by timeout_s
        due = start + timeout_s
        if min_rate > 0:
            due = min(due, start + BODY_GRACE_S + size / min_rate)
        try:
            async with asyncio.timeout_at(due):
                chunk = await anext(stream)
        except StopAsyncIteration:
            break
        except ClientDisconnect:  # nobody is left to answer: not the server's failure
            raise EndpointError(
                f"the connection closed after {size:,} bytes of the body",
                parameter="body",
                code="incomplete_body",
                fix="send the whole body before closing the connection",
            ) from None
        except TimeoutError:
            took = loop.time() - start
            slow = took < timeout_s - 1e-3
            raise EndpointError(
                f"the request body arrived slower than {min_rate / 1024:g} KiB/s ({size:,} "
                f"bytes in {took:.1f} s)"
                if slow
                else f"the request body did not arrive within {timeout_s:g} s",
                status=408,
                parameter="body",
                code="request_timeout",
                fix="send the whole request at once (or smaller images)",
            ) from None
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def _check_number(value: Any, parameter: str, *, positive: bool) -> None:
    if (
        isinstance(value, bool)
        or not (isinstance(value, int | float) and math.isfinite(value) and value >= 0)
        or (positive and value == 0)
    ):
        raise ConfigError(
            f"{parameter} must be a number {'> 0' if positive else '>= 0'}, got {value!r}",
            parameter=parameter,
            value=value,
        )


def _check_server_settings() -> None:
    """Check, once, the server settings every request would use (blocking: a file is written).

    The image store (``$MAI_GRAPH_IMAGE_DIR`` a private folder this user can write,
    ``$MAI_GRAPH_IMAGE_STORE_MB``) and the pixel cache's bound (``$MAI_GRAPH_PIXEL_CACHE_MB``).

    Raises:
        ConfigError: One is not usable, naming the variable, its value and the fix.
    """
    from mai_graph.inputs.images import check_store, pixel_cache_limit

    pixel_cache_limit()
    check_store()


class StopGuard:
    """ASGI middleware: a request cut off by the server's stop is a 503, not a bare 500.

    A request cancelled before its response started is answered 503 ``server_stopping``
    (uvicorn would send a plain-text 500), and the cancellation goes on. uvicorn cancels the
    requests still running after its graceful-shutdown timeout (``uvicorn.Server.shutdown``)
    and logs each; nothing else of it cancels a request's task.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app; answer 503 if it is cancelled before its response started."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except asyncio.CancelledError:
            if started:  # a stream: its status line is gone
                raise
            error = EndpointError(
                "the server stopped before answering this request",
                status=503,
                kind="server_error",
                code="server_stopping",
                fix="send the request again (to another replica, or once the server is back)",
            )
            body = json.dumps(error.body()).encode()
            headers = [(b"content-type", b"application/json"), (b"connection", b"close"),
                       (b"content-length", str(len(body)).encode())]  # fmt: skip
            await send({"type": "http.response.start", "status": 503, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            raise
