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

Needs the ``serve`` extra (Starlette, uvicorn and prometheus-client).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import json
import logging
import math
import re
import time
import uuid
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, TypeAdapter, ValidationError

from mai_graph import tracing
from mai_graph.adapters.endpoint.metrics import ServeMetrics
from mai_graph.answers import normalize_options
from mai_graph.backends.base import VLMBackend
from mai_graph.context import MAIContext
from mai_graph.errors import BackendError, ConfigError, ImageError, MAIError
from mai_graph.graph import create_mai_graph
from mai_graph.inputs.sources import ImagePolicy, resolve_images
from mai_graph.lineup import Lineup
from mai_graph.result import reasoning_tokens, totals
from mai_graph.run_stream import run_events
from mai_graph.state import InputState
from mai_graph.text import without_reprs

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

__all__ = [
    "ChatCompletionRequest",
    "EndpointError",
    "create_app",
    "serve",
]

log = logging.getLogger(__name__)

LOOPBACK = ("127.0.0.1", "::1", "localhost")


# -- the request body ------------------------------------------------------------------------


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")


class TextPart(_Loose):
    """A text content part."""

    type: Literal["text"]
    text: str


class ImageURL(_Loose):
    """The image of an ``image_url`` part: a data URL, base64, or a URL / path the policy allows."""

    url: str
    detail: str | None = None


class ImagePart(_Loose):
    """An image content part."""

    type: Literal["image_url"]
    image_url: ImageURL | str


Part = Annotated[TextPart | ImagePart, Field(discriminator="type")]
_PART: TypeAdapter[TextPart | ImagePart] = TypeAdapter(Part)


class ChatMessage(_Loose):
    """One message of the conversation.

    Only the last user message is read, so only its content parts must be text or
    ``image_url``.
    """

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None


class StreamOptions(_Loose):
    """``stream_options``: ``include_usage`` adds a last chunk with the run's usage."""

    include_usage: StrictBool = False


class ChatCompletionRequest(_Loose):
    """The body of ``POST /v1/chat/completions`` (OpenAI's fields MAI reads, and ``mai``)."""

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    seed: int | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    n: int | None = None
    stop: str | list[str] | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    functions: list[Any] | None = None
    response_format: dict[str, Any] | None = None
    logprobs: StrictBool | None = None
    mai: dict[str, Any] | None = None
    """MAI settings (``MAIContext`` fields) and ``options`` (multiple choice)."""


class EndpointError(MAIError):
    """A request the endpoint refuses or could not serve, with its HTTP status.

    Attributes:
        status: The HTTP status code.
        kind: OpenAI's error ``type`` (``invalid_request_error``, ``authentication_error``,
            ``server_error``, ...).
        code: OpenAI's error ``code`` (``model_not_found``, ``invalid_api_key``, ...).
    """

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        kind: str = "invalid_request_error",
        code: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        self.status = status
        self.kind = kind
        self.code = code

    def body(self) -> dict[str, Any]:
        """OpenAI's error body: ``{"error": {"message", "type", "param", "code"}}``."""
        return {
            "error": {
                "message": str(self),
                "type": self.kind,
                "param": self.parameter,
                "code": self.code,
            }
        }


def _refuse(message: str, param: str, fix: str) -> EndpointError:
    return EndpointError(message, parameter=param, fix=fix, code="unsupported_parameter")


def as_endpoint_error(exc: BaseException, names: Mapping[str, str] | None = None) -> EndpointError:
    """The HTTP error of an exception raised while serving a request.

    Bad input (settings, images, questions) is a 400 naming the field; a backend failure a 503
    when it may pass (overload, a replica down) and a 502 otherwise; anything else a 500 that
    says no more than that (details go to the server's log). Messages name models by
    ``names`` (backend name -> served name: local checkpoint paths stay on the server) and
    carry no Python object reprs.

    >>> as_endpoint_error(ConfigError("/srv/models/8b: too long"), {"/srv/models/8b": "mai/large"})
    EndpointError('mai/large: too long')
    """
    if isinstance(exc, EndpointError):
        return exc
    text = without_reprs(str(exc))
    for private, public in sorted((names or {}).items(), key=lambda kv: -len(kv[0])):
        # whole names only: "/srv/models/8b" in a message, not "large" in "too large"
        text = re.sub(rf"(?<![\w./-]){re.escape(private)}(?![\w-]|\.\w)", public, text)
    if isinstance(exc, ImageError):
        return EndpointError(text, parameter="messages", code="invalid_image")
    if isinstance(exc, ConfigError):
        param = exc.parameter
        return EndpointError(text, parameter=param, code="invalid_value")
    if isinstance(exc, BackendError):
        return EndpointError(
            text,
            status=503 if exc.transient else 502,
            kind="server_error",
            code="backend_unavailable" if exc.transient else "backend_error",
        )
    return EndpointError(
        "internal error while answering; see the server's log",
        status=500,
        kind="server_error",
        code="internal_error",
    )


# -- from a request to a run -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Run:
    question: str
    images: list[Any]
    options: Any
    context: MAIContext
    trace: Any = None
    """The caller's trace context (its ``traceparent``), when tracing is on."""


def _image_url(part: ImagePart) -> str:
    return part.image_url if isinstance(part.image_url, str) else part.image_url.url


def _question(body: ChatCompletionRequest) -> tuple[str, list[str]]:
    """The last user message's text and its image sources, in order."""
    user = next((m for m in reversed(body.messages) if m.role == "user"), None)
    if user is None or user.content is None:
        raise EndpointError(
            "no user message to answer",
            parameter="messages",
            fix="end the messages with a user message holding the question (and image)",
        )
    if isinstance(user.content, str):
        return user.content.strip(), []
    parts: list[TextPart | ImagePart] = []
    for i, raw in enumerate(user.content):
        try:
            parts.append(_PART.validate_python(raw))
        except ValidationError:
            raise EndpointError(
                f"content part {i} of the last user message is not text or image_url: "
                f"type {raw.get('type')!r}",
                parameter=f"messages.{len(body.messages) - 1}.content.{i}",
                fix="send the question as text parts and each image as an image_url part",
                code="unsupported_value",
            ) from None
    texts = [p.text.strip() for p in parts if isinstance(p, TextPart) and p.text.strip()]
    images = [_image_url(p) for p in parts if isinstance(p, ImagePart)]
    return " ".join(texts), images


def _check_supported(body: ChatCompletionRequest) -> None:
    if body.n not in (None, 1):
        raise _refuse(f"n must be 1, got {body.n}", "n", "ask for one answer per request")
    if body.stop:
        raise _refuse("stop sequences are not supported", "stop", "drop stop; MAI answers short")
    if body.tools or body.functions or body.tool_choice not in (None, "none"):
        raise _refuse(
            "tool calling is not supported",
            "tools",
            "give tools to another model; MAI answers questions",
        )
    if body.logprobs:
        raise _refuse(
            "logprobs are not returned", "logprobs", "read mai.metrics[].answer_prob instead"
        )
    fmt = (body.response_format or {}).get("type", "text")
    if fmt != "text":
        raise _refuse(
            f"response_format {fmt!r} is not supported",
            "response_format",
            "ask a multiple-choice or yes/no question (mai.options / mai.answer_kind)",
        )


_TOP_LEVEL = {"temperature": "temperature", "seed": "seed", "short_max_tokens": "max_tokens"}
"""MAI settings that OpenAI fields set: setting -> request field."""


MAX_BODY_BYTES = 64 * 1024 * 1024
"""Largest request body read (64 MiB: a question with several large base64 images); a larger
one is refused with 413 before it is read whole (``create_app(max_body_bytes=...)``)."""

BODY_READ_TIMEOUT_S = 30.0
"""Longest a request's body may take to arrive; a slower one is a 408 (slow uploads would
otherwise hold the admission slots)."""

MAX_PREPARING = 2
"""Requests whose bodies are read and images decoded at once, by default (the rest wait)."""


CLIENT_SETTINGS: frozenset[str] = frozenset({
    "answer_kind", "policy", "gate", "gate_min_prob", "large_confident_exit", "s2_exit",
    "keep_ratio", "keep_mass", "sparsify", "whole_words", "force_keep", "transfer_mask_answer",
    "constrain_choices", "rel_tol", "temperature", "seed", "short_max_tokens",
})  # fmt: skip
"""The MAI settings endpoint clients may change by default: how a run decides and reads its
answer. Budgets and work (``cot_max_tokens``, ``cot_min_tokens``, ``s2_max_tokens``,
``max_transfer_tokens``, drafts, speculative reasoning, video sampling), prompt overrides and
``review`` stay the server's unless it opens them (``--allow-setting FIELD``, or ``all``);
a client's ``short_max_tokens`` (OpenAI's ``max_tokens``) can only lower the server's. See
``docs/security.md``."""


def _context(
    body: ChatCompletionRequest, base: MAIContext, allowed: Collection[str] | None
) -> tuple[MAIContext, Any]:
    """The run's settings (server defaults, then the request's) and its options."""
    settings = dict(body.mai or {})
    options = settings.pop("options", None)
    mapped: dict[str, Any] = {}
    if body.temperature is not None:
        mapped["temperature"] = float(body.temperature)
    if body.seed is not None:
        mapped["seed"] = body.seed
    budget = body.max_completion_tokens or body.max_tokens
    if budget is not None:  # an upper bound, as OpenAI's: never above the server's own
        mapped["short_max_tokens"] = min(int(budget), base.short_max_tokens)

    def param(field: str) -> str:
        return _TOP_LEVEL[field] if field in mapped and field not in settings else f"mai.{field}"

    if allowed is not None:
        known = MAIContext.model_fields
        locked = sorted(k for k in {**settings, **mapped} if k not in allowed and k in known)
        if locked:
            raise EndpointError(
                f"this server does not let requests change {locked}",
                parameter=param(locked[0]),
                fix=f"change only {sorted(allowed)}",
                code="setting_not_allowed",
            )
    try:
        ctx = MAIContext(**{**base.model_dump(exclude_defaults=True), **settings, **mapped})
    except ConfigError as exc:
        where = param(exc.parameter) if exc.parameter else "mai"
        raise EndpointError(str(exc), parameter=where, code="invalid_value") from None
    return ctx, options


# -- responses -------------------------------------------------------------------------------


def usage(metrics: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """OpenAI's ``usage`` from MAI's metrics: every call's prompt and generated tokens.

    >>> usage([{"prompt_tokens": 90, "cached_tokens": 64, "generated_tokens": 2,
    ...         "latency_s": 0.1}])["prompt_tokens_details"]
    {'cached_tokens': 64}
    """
    t = totals(metrics)
    prompt, completion = int(t["prompt_tokens"]), int(t["generated_tokens"])
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": int(t["cached_tokens"])},
        "completion_tokens_details": {"reasoning_tokens": reasoning_tokens(metrics)},
    }


def private_names(lineup: Lineup, served: str) -> dict[str, str]:
    """Each backend's own name (often a local checkpoint path) -> its served name.

    The names are those of :func:`served_metrics`: ``mai/small``, ``mai/large``,
    ``mai/drafter-2``, ``mai/stage-2/large``.
    """
    names: dict[str, str] = {}
    many = len(lineup.drafters) > 1
    for i, backend in enumerate(lineup.drafters):
        names[str(backend.name)] = f"{served}/drafter-{i + 1}" if many else f"{served}/small"
    for i, backend in enumerate(lineup.chain):
        names.setdefault(str(backend.name), f"{served}/large" if i == 0
                         else f"{served}/stage-{i + 1}/large")  # fmt: skip
    # Names that are paths or hub ids are the server's to keep; plain names ("small") are not
    # private, and replacing them would rewrite words of the messages.
    return {k: v for k, v in names.items() if "/" in k or "\\" in k}


def served_metrics(metrics: Sequence[Mapping[str, Any]], served: str) -> list[dict[str, Any]]:
    """Per-call records as a remote client may see them.

    The backend's own name (often a local checkpoint path) becomes the served name and the
    call's role (``mai/small``, ``mai/large``; ``mai/drafter-2``, ``mai/stage-2/large``), and
    the call's text stays on the server (the answer is in the response).

    >>> served_metrics([{"model": "/srv/models/8b", "role": "large", "text": "B"}], "mai")
    [{'model': 'mai/large', 'role': 'large'}]
    """
    out = []
    for m in metrics:
        name = m["role"]
        if m.get("drafter") is not None:
            name = f"drafter-{int(m['drafter']) + 1}"
        if m.get("stage") is not None and int(m["stage"]) > 1:
            name = f"stage-{int(m['stage'])}/{name}"
        out.append({**{k: v for k, v in m.items() if k != "text"}, "model": f"{served}/{name}"})
    return out


def extension(out: Mapping[str, Any], wall_s: float, served: str = "mai") -> dict[str, Any]:
    """The response's ``mai`` field: how the run went (model names as served)."""
    metrics = served_metrics(out.get("metrics") or [], served)
    return {
        "route": out.get("route"),
        "canonical": out.get("canonical"),
        "small_answer": out.get("small_answer"),
        "large_answer": out.get("large_answer"),
        "s2_answer": out.get("s2_answer"),
        "small_prob": out.get("small_prob"),
        "large_prob": out.get("large_prob"),
        "sparsification": out.get("sparsification"),
        "metrics": metrics,
        "totals": totals(metrics),
        "wall_s": wall_s,
    }


def _sse(data: Mapping[str, Any] | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


# -- the app ---------------------------------------------------------------------------------


class _Endpoint:
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

    async def prepare(self, body: ChatCompletionRequest) -> _Run:
        if body.model != self.model_name:
            raise EndpointError(
                f"the model {body.model!r} does not exist here; this server serves "
                f"{self.model_name!r}",
                status=404,
                parameter="model",
                code="model_not_found",
                fix=f"send model={self.model_name!r} (GET /v1/models lists it)",
            )
        _check_supported(body)
        ctx, options = _context(body, self.context, self.allowed)
        if ctx.review:  # up front, before a stream starts: nothing here could resume the run
            raise EndpointError(
                "mai.review pauses a run for a human decision, and a paused run needs a "
                "checkpointer and a thread to be resumed; this endpoint has neither",
                parameter="mai.review",
                code="setting_not_supported",
                fix="leave review off here; use Studio (langgraph dev) or a graph compiled with "
                "a checkpointer for human review",
            )
        try:
            options = normalize_options(options)
        except ConfigError as exc:
            raise EndpointError(str(exc), parameter="mai.options", code="invalid_value") from None
        from mai_graph.nodes.verify import check_run_budgets

        try:  # a 400 before a stream starts, not an error event after it
            check_run_budgets(ctx, self.lineup)
        except ConfigError as exc:
            raise EndpointError(
                str(self.error(exc)), parameter=f"mai.{exc.parameter}", code="invalid_value"
            ) from None
        question, sources = _question(body)
        if not question:
            raise EndpointError(
                "the user message has no question text (the question must be a non-empty string)",
                parameter="messages",
                fix="add a text part with the question",
            )
        # Blocking: decoding, hashing, the image store. The count is checked before any image
        # is read and each image's pixels against the total before it is decoded.
        images = await asyncio.to_thread(resolve_images, sources, self.policy)
        return _Run(question, images, options, ctx)

    def inputs(self, run: _Run) -> InputState:
        # Every input key is written, None included: nothing is inherited from elsewhere.
        first = run.images[0] if run.images else None
        rest = run.images[1:] or None
        return InputState(question=run.question, image=first, images=rest, options=run.options)

    def completion(self, out: Mapping[str, Any], wall_s: float, rid: str) -> dict[str, Any]:
        return {
            "id": rid,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": out["answer"]},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": usage(out.get("metrics") or []),
            "mai": extension(out, wall_s, self.model_name),
        }

    def chunk(self, rid: str, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }

    async def answer(self, run: _Run) -> dict[str, Any]:
        rid = f"chatcmpl-{uuid.uuid4().hex}"
        async with self.slots, self.prometheus.running():
            start = time.perf_counter()
            with tracing.run_span("endpoint", run.context, parent=run.trace) as span:
                out = await self.graph.ainvoke(self.inputs(run), context=run.context)
                tracing.finish_run(span, out)
            done = self.completion(out, time.perf_counter() - start, rid)
            self.prometheus.finished(done["mai"])
            return done

    async def stream(self, run: _Run, include_usage: bool) -> AsyncIterator[bytes]:
        """SSE chunks: the role, the answer's deltas, the finish with ``mai``, usage, [DONE].

        On the transfer route the answer node's tokens stream as they are written; on the
        routes that end earlier the answer is known when the run ends and comes as one delta.
        A failure after the stream started is sent as an ``error`` event (OpenAI's clients
        raise it).
        """
        rid = f"chatcmpl-{uuid.uuid4().hex}"
        yield _sse(self.chunk(rid, {"role": "assistant", "content": ""}))
        async with self.slots, self.prometheus.running():
            start = time.perf_counter()
            final: dict[str, Any] = {}
            streamed = ""
            try:
                async for mode, item in run_events(
                    self.graph, self.inputs(run), run.context, door="endpoint", trace=run.trace
                ):
                    if mode == "values":
                        final = item
                    elif item.get("event") == "token" and item.get("node") == "answer":
                        streamed += item["text"]
                        yield _sse(self.chunk(rid, {"content": item["text"]}))
            except Exception as exc:  # the status line is gone: report in the stream
                error = self.error(exc)
                if error.status >= 500:
                    log.warning("run %s failed: %s", rid, exc, exc_info=error.status == 500)
                self.prometheus.request("failed", error.status)
                yield _sse(error.body())
                return
            wall = time.perf_counter() - start
        answer = str(final.get("answer", ""))
        rest = answer[len(streamed) :] if answer.startswith(streamed) else answer
        if rest:
            yield _sse(self.chunk(rid, {"content": rest}))
        last = self.chunk(rid, {}, "stop")
        last["mai"] = extension(final, wall, self.model_name)
        self.prometheus.finished(last["mai"])
        yield _sse(last)
        if include_usage:
            yield _sse(
                {**self.chunk(rid, {}), "choices": [], "usage": usage(final.get("metrics") or [])}
            )
        yield _sse("[DONE]")


def _allowed_from_flags(flags: Sequence[str] | None) -> Collection[str] | Literal["all"]:
    """The settings ``--allow-setting`` lets clients change.

    None given: the safe default list; ``all``: every field; names: added to the default list.

    >>> sorted(_allowed_from_flags(["cot_max_tokens"]) - CLIENT_SETTINGS)
    ['cot_max_tokens']
    >>> _allowed_from_flags(["all"])
    'all'
    """
    if not flags:
        return CLIENT_SETTINGS
    if "all" in flags:
        return "all"
    return CLIENT_SETTINGS | set(flags)


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
            :data:`CLIENT_SETTINGS`; ``"all"`` or None: every field, for trusted callers).
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
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(
                f"{name} must be an int >= 1, got {value!r}", parameter=name, value=value
            )
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
    endpoint = _Endpoint(
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
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": endpoint.model_name,
                        "object": "model",
                        "created": endpoint.created,
                        "owned_by": "mai-graph",
                    }
                ],
            }
        )

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
            return _EventStream(
                endpoint.stream(run, include),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
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


def _event_stream_class() -> Any:
    from starlette.responses import StreamingResponse

    class EventStream(StreamingResponse):
        """Server-sent events that stop as soon as the client goes away.

        Watching for the disconnect (not only failing on the next write) cancels the run at
        once, even while it waits for a model: the backends then abort their requests.
        """

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            import anyio

            async with anyio.create_task_group() as group:

                async def stream() -> None:
                    with contextlib.suppress(OSError):
                        await self.stream_response(send)
                    group.cancel_scope.cancel()

                group.start_soon(stream)
                await self.listen_for_disconnect(receive)
                group.cancel_scope.cancel()

    return EventStream


def _EventStream(chunks: AsyncIterator[bytes], **kwargs: Any) -> Response:  # noqa: N802
    return _event_stream_class()(chunks, **kwargs)  # type: ignore[no-any-return]


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
    data = await _read_body(request, limit)
    try:
        raw = json.loads(data)
    except RecursionError:
        raise EndpointError(
            "the request body nests too deep to read", parameter="body", code="invalid_json",
            fix="send the request as OpenAI's chat format (a few levels deep)",
        ) from None  # fmt: skip
    except ValueError:
        raise EndpointError(
            "the request body is not JSON", parameter="body", code="invalid_json"
        ) from None
    try:
        return ChatCompletionRequest.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or "body"
        raise EndpointError(
            f"{param}: {first['msg']}", parameter=param, code="invalid_request"
        ) from None


SHUTDOWN_TIMEOUT_S = 10.0
"""How long a stopping server (SIGTERM, Ctrl-C) waits for runs in flight before cancelling
them; the engines then abort their requests and shut down."""


def memory_bound(
    *,
    max_preparing: int = MAX_PREPARING,
    max_body_bytes: int = MAX_BODY_BYTES,
    policy: ImagePolicy | None = None,
) -> int:
    """Most bytes the endpoint's request handling holds beyond its resting process.

    Requests being prepared (at most ``max_preparing``) each hold their body, its parsed
    JSON, one encoded image and its decoding (Pillow's image in its own mode and the copies
    converting it to RGB make: :data:`DECODE_BYTES_PER_PIXEL`, up to ``policy.max_pixels``);
    each image's pixels are checked
    against the question's total before it is decoded, and the body against its cap before it
    is read whole. Decoded pixels kept between loads are the pixel cache's
    (``$MAI_GRAPH_PIXEL_CACHE_MB``). Requests waiting for admission hold nothing: their
    bodies stay unread. Not counted: the engines' own memory, and on in-process engines the
    pixels of the images that running model calls send (docs/reliability.md).

    >>> round(memory_bound() / 1e6)
    2164
    """
    from mai_graph.inputs.images import pixel_cache_limit
    from mai_graph.inputs.sources import DEFAULT_MAX_BYTES

    policy = ImagePolicy.from_env() if policy is None else policy
    encoded = policy.max_bytes or DEFAULT_MAX_BYTES
    per_request = 2 * max_body_bytes + encoded + DECODE_BYTES_PER_PIXEL * policy.max_pixels
    return pixel_cache_limit() + max_preparing * per_request


DECODE_BYTES_PER_PIXEL = 20
"""Peak bytes a pixel costs while an image is decoded and converted to RGB: measured with
``resolve_images`` on 8000x5000 PNGs (palette with transparency 21, RGBA 20, 16-bit grey 11,
RGB 4 bytes a pixel beyond the file), less what the RGB copy shares."""


def _check_shutdown_timeout(value: Any) -> None:
    if isinstance(value, bool) or not (
        isinstance(value, int | float) and math.isfinite(value) and value >= 0
    ):
        raise ConfigError(
            f"the shutdown timeout must be a number of seconds >= 0, got {value!r}",
            parameter="--shutdown-timeout",
            value=value,
            fix="give the seconds a stop waits for running requests, e.g. 10",
        )


def server_config(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    log_level: str = "warning",
    shutdown_timeout_s: float = SHUTDOWN_TIMEOUT_S,
) -> Any:
    """The uvicorn configuration :func:`serve` runs ``app`` with.

    A stop waits at most ``shutdown_timeout_s`` for requests in flight (an abandoned one
    included), then cancels them and runs the app's shutdown (engines stopped).
    """
    import uvicorn

    _check_shutdown_timeout(shutdown_timeout_s)
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        # typed int, but uvicorn waits with asyncio.wait_for, which takes any seconds
        timeout_graceful_shutdown=shutdown_timeout_s,  # type: ignore[arg-type]
    )


def serve(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    log_level: str = "warning",
    shutdown_timeout_s: float = SHUTDOWN_TIMEOUT_S,
) -> None:
    """Serve ``app`` with uvicorn until stopped (one process; engines shared by requests).

    SIGTERM or Ctrl-C stops accepting requests, waits at most ``shutdown_timeout_s`` for those
    in flight, cancels the rest and shuts the engines down.
    """
    import uvicorn

    config = server_config(
        app, host=host, port=port, log_level=log_level, shutdown_timeout_s=shutdown_timeout_s
    )
    uvicorn.Server(config).run()


def api_keys_from(env: Mapping[str, str], key_file: str | None = None) -> list[str]:
    """The endpoint's keys: ``key_file`` (one a line) or ``MAI_GRAPH_SERVE_API_KEY`` (commas).

    >>> api_keys_from({"MAI_GRAPH_SERVE_API_KEY": "k1, k2"})
    ['k1', 'k2']
    """
    if key_file:
        try:
            with open(key_file, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError as exc:
            raise ConfigError(
                f"cannot read the API key file {key_file}: {exc.strerror}",
                parameter="--api-key-file",
                value=key_file,
                fix="give a readable file with one key a line",
            ) from None
        keys = [line.strip() for line in lines if line.strip()]
        if not keys:
            raise ConfigError(
                f"the API key file {key_file} holds no key",
                parameter="--api-key-file",
                value=key_file,
            )
        return keys
    return [k.strip() for k in env.get("MAI_GRAPH_SERVE_API_KEY", "").split(",") if k.strip()]


def _names(side: Any) -> str:
    """A side of the lineup by name: one backend, or drafters / a chain joined with commas."""
    items = side if isinstance(side, list | tuple) else [side]
    return ", ".join(str(getattr(b, "name", b)) for b in items)


def run_server(args: Any, context: MAIContext, backends: tuple[Any, Any]) -> int:
    """``mai-graph serve``: the app over ``backends`` with uvicorn, engines started first."""
    import os
    import sys

    _check_shutdown_timeout(args.shutdown_timeout)
    keys = api_keys_from(os.environ, args.api_key_file)
    if not keys and args.host not in LOOPBACK:
        raise ConfigError(
            f"refusing to serve on {args.host} without an API key",
            parameter="--host",
            value=args.host,
            fix="set MAI_GRAPH_SERVE_API_KEY (or --api-key-file), or listen on 127.0.0.1",
        )
    small, large = backends
    app = create_app(
        small,
        large,
        model_name=args.model_name,
        api_keys=keys,
        context=context,
        allowed_settings=_allowed_from_flags(args.allow_setting),
        max_concurrency=args.max_concurrency,
        max_preparing=args.max_preparing,
        manage_backends=True,
    )
    auth = f"{len(keys)} API key(s)" if keys else "no API key (loopback only)"
    bound = memory_bound(max_preparing=args.max_preparing) / 1e6
    print(
        f"mai-graph: serving {args.model_name!r} at http://{args.host}:{args.port}/v1 "
        f"({_names(small)} + {_names(large)}; {auth}; requests hold at most {bound:,.0f} MB "
        "beyond the engines)",
        file=sys.stderr,
        flush=True,
    )
    serve(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        shutdown_timeout_s=args.shutdown_timeout,
    )
    return 0
