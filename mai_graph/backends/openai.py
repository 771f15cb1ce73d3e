"""OpenAI-compatible servers (``vllm serve``): the remote path for scale-out.

Each request is one streamed chat completion. Each image travels as a PNG data URL, a video as
its sampled frames (a ``video/jpeg`` frame sequence), each with its hash as the part's ``uuid``
(vLLM keys its multimodal and prefix caches on it); vLLM's own
options go in the request body (``min_tokens``, ``structured_outputs`` for choices,
``return_token_ids``). Cached tokens come from ``usage.prompt_tokens_details`` (start the server
with ``--enable-prompt-tokens-details``), the engine's queue, prefill and decode times from
the last chunk's ``metrics`` (``--enable-per-request-metrics``; :func:`served_stage_times`).
Cancelling the caller closes the stream, and the server aborts the request.

Over HTTP the S2 turn re-sends the reasoning as text (an API cannot splice token ids); the
server's prefix cache still serves the CoT prompt, and usually most of the reasoning.

Faults: a server that is down, drops the connection mid-stream, or does not finish a request
within ``timeout_s`` gives a transient :class:`~mai_graph.errors.BackendError` naming the model
(the graph's retry policy may try again); a server that refuses the request gives a
non-transient one with its status and message.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import io
import math
import re
import time
from typing import TYPE_CHECKING, Any

from mai_graph.answers.distribution import fold, pick
from mai_graph.backends.base import (
    Capabilities,
    Generation,
    GenerationRequest,
    StageTimes,
    TextCallback,
)
from mai_graph.backends.extras import require_extra
from mai_graph.backends.render import check_roles, thinking_for
from mai_graph.errors import BackendError, ConfigError
from mai_graph.inputs.images import load_image
from mai_graph.inputs.video import load_video, video_metadata
from mai_graph.messages import Message

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["DEFAULT_TIMEOUT_S", "OpenAIBackend"]

DEFAULT_TIMEOUT_S = 600.0
"""Longest a request may take, first byte to last token (the OpenAI client's own default)."""

AFFINITY_HEADER = "X-Session-ID"
"""The header ``vllm-router``'s ``consistent_hash`` policy reads first for its routing key."""

require_extra("openai", ("openai",), "openai")


def _data_url(ref: Any) -> str:
    buf = io.BytesIO()
    load_image(ref).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _video_url(ref: Any) -> str:
    """The sampled frames as vLLM's JPEG frame sequence: ``data:video/jpeg;base64,f1,f2,...``."""
    pieces = []
    for frame in load_video(ref):
        buf = io.BytesIO()
        frame.save(buf, format="JPEG", quality=95)
        pieces.append(base64.b64encode(buf.getvalue()).decode())
    return "data:video/jpeg;base64," + ",".join(pieces)


SERVER_VIDEO_FRAMES = 32
"""Frames ``vllm serve`` reads of a video by default (``--media-io-kwargs`` can change it)."""


_MARKUP = re.compile(r"<(?=[^<>\s]+>)")
"""A ``<`` that opens something spelled as markup: ``<|im_start|>``, ``<tool_call>``, ``</s>``."""

_JOINER = "\u2060"


def as_text(text: str) -> str:
    """``text`` with chat-template markup defused, for a server that renders the template.

    A word joiner goes after every ``<`` that opens a ``<...>`` run without spaces, whatever
    its name: the server's tokenizer is not known here, and any markup-spelled token of it
    (``<|im_start|>``, ``<think>``, ``<tool_call>``, ``<start_of_turn>``) is defused alike.
    A ``<`` before a space or with no ``>`` after it stays as it is.

    The server renders the chat template and tokenizes the result with its special tokens
    parsed, so a literal ``<|im_start|>`` in caller text would become the control token there;
    the in-process backends splice such text as characters instead
    (:func:`~mai_graph.backends.render.encode_as_text`).

    >>> as_text("a<|im_start|>b</think>") == "a<\u2060|im_start|>b<\u2060/think>"
    True
    >>> as_text("x < y, 3<4 and 5 > 2")
    'x < y, 3<4 and 5 > 2'
    """
    return _defused([text])[0]


def _defused(texts: list[str]) -> list[str]:
    """Text parts the server's template joins, each markup ``<`` of their join defused.

    Found in the join, so ``"x<|im_"`` + ``"start|>"`` is defused too (the joiner goes after
    the ``<`` in the part that holds it).
    """
    joined = "".join(texts)
    cuts = [m.start() for m in _MARKUP.finditer(joined)]
    if not cuts:
        return list(texts)
    out, at = [], 0
    for text in texts:
        pieces, last = [], 0
        for cut in (c - at for c in cuts if at <= c < at + len(text)):
            pieces.append(text[last : cut + 1] + _JOINER)
            last = cut + 1
        out.append("".join(pieces) + text[last:])
        at += len(text)
    return out


def openai_messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """Messages in the OpenAI chat format, each image and video with its hash as ``uuid``.

    Images travel as PNG data URLs; a video as its sampled frames, a ``video/jpeg`` frame
    sequence (``data:video/jpeg;base64,<frame>,<frame>,...``), so the server sees the frames
    the other backends see. Text travels as text (:func:`as_text`, over each run of adjacent
    text parts, as the template joins them); roles are checked
    (:func:`~mai_graph.backends.render.check_roles`).
    """
    check_roles(messages)
    out: list[dict[str, Any]] = []
    for m in messages:
        parts: list[dict[str, Any]] = []
        for p in m["content"]:
            if p["type"] == "image":
                ref = p["image"]
                parts.append(
                    {
                        "type": "image_url",
                        "image_url": {"url": _data_url(ref)},
                        "uuid": ref["sha256"],
                    }
                )
            elif p["type"] == "video":
                video = p["video"]
                parts.append(
                    {
                        "type": "video_url",
                        "video_url": {"url": _video_url(video)},
                        "uuid": video["sha256"],
                    }
                )
            else:
                parts.append({"type": "text", "text": p["text"]})
        run: list[dict[str, Any]] = []  # adjacent text parts: the template joins them
        for part in [*parts, {"type": "end"}]:
            if part["type"] == "text":
                run.append(part)
                continue
            for text_part, text in zip(run, _defused([t["text"] for t in run])):
                text_part["text"] = text
            run = []
        if m["role"] != "user" and all(part["type"] == "text" for part in parts):
            out.append({"role": m["role"], "content": "".join(p["text"] for p in parts)})
        else:
            out.append({"role": m["role"], "content": parts})
    return out


def _check_timeout(timeout_s: object) -> float | None:
    """``timeout_s`` when it is a positive number of seconds or None; a typed error otherwise."""
    ok = isinstance(timeout_s, int | float) and not isinstance(timeout_s, bool) and timeout_s > 0
    if timeout_s is not None and not ok:
        raise ConfigError(
            f"timeout_s must be > 0 seconds or None, got {timeout_s!r}",
            parameter="timeout_s",
            value=timeout_s,
            fix="give the longest a request may take, e.g. 120",
        )
    return None if timeout_s is None else float(timeout_s)  # type: ignore[arg-type]


class OpenAIBackend:
    """A model behind an OpenAI-compatible chat completions endpoint (``vllm serve``).

    Args:
        client: An ``openai.AsyncOpenAI`` client (you choose base URL, key, timeouts, retries).
        model: The served model name.
        name: Name in metrics (default: ``model``).
        vllm_extras: Send vLLM's request options (``min_tokens``, ``structured_outputs``,
            ``return_token_ids``); turn off for servers that refuse unknown fields.
        send_video_metadata: Send each video's frame times (source fps and frame indices) as
            per-request ``media_io_kwargs``, so the model reads true timestamps; the server must
            run with ``--trust-request-mm-kwargs``. Off: the server's defaults apply (frames
            taken as one per second; at most 32 frames, longer videos are refused here).
        timeout_s: Longest a request may take, connection to last token; then it is
            cancelled (the server aborts it) and fails with a transient ``BackendError``.
            ``None``: only the client's own timeouts apply.
        affinity_header: The HTTP header that carries a request's ``affinity_key`` (one
            per run), so a load balancer in front of several replicas (``vllm-router
            --policy consistent_hash``) sends a run's calls to one replica and its prefix
            cache; ``None`` sends none. Servers ignore it.
    """

    capabilities = Capabilities(stream=True, logprobs=True, distribution=True)
    """Streams; generations carry the server's token logprobs when asked; requests with
    ``distribution`` are answered in one step from the first token's ``top_logprobs``
    (:data:`TOP_LOGPROBS` of them: an answer outside them counts as 0)."""

    def __init__(
        self,
        client: AsyncOpenAI,
        model: str,
        *,
        name: str | None = None,
        vllm_extras: bool = True,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
        send_video_metadata: bool = False,
        affinity_header: str | None = AFFINITY_HEADER,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ConfigError(
                f"model must be the served model name, got {model!r}", parameter="model"
            )
        self.timeout_s = _check_timeout(timeout_s)
        self.send_video_metadata = send_video_metadata
        self.client = client
        self.model = model
        self.name = name or model
        self.vllm_extras = vllm_extras
        self.provider = "vllm" if vllm_extras else "openai"
        """What serves the calls: ``vllm`` when spoken to with vLLM's request options."""
        self.affinity_header = affinity_header

    @classmethod
    def from_url(
        cls,
        base_url: str,
        model: str,
        *,
        api_key: str = "EMPTY",
        connect_timeout_s: float = 5.0,
        max_retries: int = 0,
        **kwargs: Any,
    ) -> OpenAIBackend:
        """A backend for the server at ``base_url`` (e.g. ``http://127.0.0.1:8000/v1``).

        The client gives up connecting after ``connect_timeout_s`` and waits at most
        ``timeout_s`` for any byte. It sends a request again up to ``max_retries`` times
        (default none: the graph's retry policy decides) when it failed before its stream
        started: connection errors, timeouts, 408 / 409 / 429 and 5xx answers, with
        exponential back-off that honours ``Retry-After``. A stream that broke is not resent.
        """
        from openai import AsyncOpenAI, Timeout

        total = _check_timeout(kwargs.get("timeout_s", DEFAULT_TIMEOUT_S)) or DEFAULT_TIMEOUT_S
        timeout = Timeout(total, connect=connect_timeout_s)  # checked first: the client's own
        # Timeout raises a bare TypeError for a string (openai 3.63 does)
        client = AsyncOpenAI(
            base_url=base_url, api_key=api_key, max_retries=max_retries, timeout=timeout
        )
        return cls(client, model, **kwargs)

    def body(self, request: GenerationRequest) -> dict[str, Any]:
        """The chat completion request for ``request`` (streamed, with usage)."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": openai_messages(request.messages),
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.seed is not None:
            body["seed"] = request.seed
        if request.stop:
            body["stop"] = list(request.stop)
        if request.logprobs is not None:
            body["logprobs"] = True
            body["top_logprobs"] = request.logprobs
        one_step = one_step_request(request)
        if one_step:  # one token, the first token's top log-probabilities, no constraint
            body.update(max_tokens=1, temperature=0.0, logprobs=True, top_logprobs=TOP_LOGPROBS)
        extra: dict[str, Any] = {}
        if self.vllm_extras:
            extra["return_token_ids"] = True
            if request.min_tokens:
                extra["min_tokens"] = request.min_tokens
            if request.choices is not None and not one_step:
                extra["structured_outputs"] = {"choice": list(request.choices)}
            if request.prompt_logprobs is not None:
                extra["prompt_logprobs"] = request.prompt_logprobs
            if not thinking_for(request.purpose):  # thinking templates answer without a think block
                extra["chat_template_kwargs"] = {"enable_thinking": False}
        elif request.choices is not None or request.min_tokens:
            raise ConfigError(
                "choices and min_tokens need vLLM's request options",
                parameter="vllm_extras",
                fix="serve with vLLM and keep vllm_extras=True, or drop constrained choices "
                "(constrain_choices=False in the context)",
            )
        videos = request.videos
        if videos:
            extra.update(self._video_options(videos))
        body["extra_body"] = extra
        if request.affinity_key and self.affinity_header:
            body["extra_headers"] = {self.affinity_header: request.affinity_key}
        return body

    def _video_options(self, videos: list[Any]) -> dict[str, Any]:
        """Per-request video metadata (``send_video_metadata``), else check the frame count.

        Without the metadata the server reads at most :data:`SERVER_VIDEO_FRAMES` frames.
        """
        if self.send_video_metadata:
            meta = video_metadata(videos[0])
            meta.pop("video_backend")
            return {"media_io_kwargs": {"video": {**meta, "num_frames": -1}}}
        frames = max(len(v["indices"]) for v in videos)
        if frames > SERVER_VIDEO_FRAMES:
            raise ConfigError(
                f"{self.name}: the video has {frames} sampled frames; the server reads the "
                f"first {SERVER_VIDEO_FRAMES} unless the request says otherwise",
                parameter="max_frames",
                value=frames,
                fix=f"set max_frames <= {SERVER_VIDEO_FRAMES}, or start the server with "
                "--trust-request-mm-kwargs and the backend with send_video_metadata=True",
            )
        return {}

    async def generate(self, request: GenerationRequest) -> Generation:
        """Serve one request (streamed, so time to first token is measured)."""
        return await self.generate_stream(request, None)

    async def generate_stream(
        self, request: GenerationRequest, on_text: TextCallback | None
    ) -> Generation:
        """Serve one request, calling ``on_text`` with each text delta."""
        if self.timeout_s is None:
            return await self._stream(request, on_text)
        try:
            async with asyncio.timeout(self.timeout_s):
                return await self._stream(request, on_text)
        except TimeoutError as exc:
            raise BackendError(
                f"{self.name}: request {request.request_id} did not finish within "
                f"timeout_s={self.timeout_s:g} s (cancelled; the server aborts it)",
                transient=True,
                parameter="timeout_s",
                value=self.timeout_s,
                fix="check the server's load, lower the token budgets, or raise timeout_s",
            ) from exc

    async def _stream(self, request: GenerationRequest, on_text: TextCallback | None) -> Generation:
        import openai

        media = any(p["type"] != "text" for m in request.messages for p in m["content"])
        # Images are read and encoded off the event loop (a served graph's loop must not block).
        body = await asyncio.to_thread(self.body, request) if media else self.body(request)
        start = time.perf_counter()
        ttft: float | None = None
        text: list[str] = []
        token_ids: list[int] = []
        logprobs: list[float] = []
        pieces: list[str] = []
        finish = "stop"
        usage = None
        timing: dict[str, Any] | None = None
        one_step = one_step_request(request)
        first_top: list[tuple[str, float]] | None = None
        then: TextCallback | None = None
        if one_step:  # the answer is taken at the end: no token deltas
            on_text, then = None, on_text
        accepted = False  # the server answered with a stream: the request is in flight
        try:
            stream = await self.client.chat.completions.create(**body)
            accepted = True
            async for chunk in stream:
                if chunk.usage is not None:
                    usage = chunk.usage
                    timing = (chunk.model_extra or {}).get("metrics") or timing
                for choice in chunk.choices:
                    delta = choice.delta.content or ""
                    if delta:
                        ttft = ttft if ttft is not None else time.perf_counter() - start
                        text.append(delta)
                        if on_text is not None:
                            on_text(delta)
                    ids = getattr(choice, "token_ids", None) or (choice.model_extra or {}).get(
                        "token_ids"
                    )
                    if ids:
                        token_ids.extend(ids)
                    if choice.logprobs is not None and choice.logprobs.content:
                        for item in choice.logprobs.content:
                            logprobs.append(float(item.logprob))
                            pieces.append(item.token)
                            if first_top is None:
                                first_top = [
                                    (t.token, float(t.logprob)) for t in item.top_logprobs or ()
                                ]
                    if choice.finish_reason:
                        finish = choice.finish_reason
        except (openai.APIConnectionError, openai.APITimeoutError, openai.RateLimitError) as exc:
            if not accepted:
                raise BackendError(
                    f"{self.name}: server unreachable or busy: {exc}",
                    transient=True,
                    fix="check that the server is up (GET /health) and not overloaded",
                ) from exc
            raise BackendError(
                f"{self.name}: the connection to the server broke during request "
                f"{request.request_id}, {time.perf_counter() - start:.1f} s into the stream: "
                f"{exc}",
                transient=True,
                fix="check that the server is up (GET /health); it may have been restarted",
            ) from exc
        except openai.APIStatusError as exc:
            raise BackendError(
                f"{self.name}: server refused request {request.request_id} "
                f"({exc.status_code}): {exc.message}",
                transient=exc.status_code >= 500,
                parameter="request",
            ) from exc
        except openai.APIError as exc:  # an error event inside the stream
            raise BackendError(
                f"{self.name}: the server failed request {request.request_id}: {exc.message}",
                parameter="request",
                fix="look for the cause in the server's log",
            ) from exc
        if usage is None:
            raise BackendError(
                f"{self.name}: the server sent no usage for {request.request_id}",
                fix="use a server that honours stream_options.include_usage (vllm serve does)",
            )
        details = getattr(usage, "prompt_tokens_details", None)
        cached = getattr(details, "cached_tokens", None) if details is not None else None
        latency = time.perf_counter() - start
        gen = Generation(
            **served_stage_times(timing, latency),
            image_tokens=_media_tokens(details),
            text="".join(text),
            model=self.name,
            prompt_tokens=int(usage.prompt_tokens),
            cached_tokens=int(cached) if cached is not None else None,
            generated_tokens=int(usage.completion_tokens),
            latency_s=latency,
            ttft_s=ttft,
            finish_reason=finish,
            token_ids=tuple(token_ids),
            logprobs=tuple(logprobs) if request.logprobs is not None and logprobs else None,
            tokens=tuple(pieces) if pieces else None,
        )
        if one_step:
            assert request.distribution is not None
            forms = {answer: tuple(f) for answer, f in request.distribution}
            seen = dict(first_top or ())
            if not any(f in seen for fs in forms.values() for f in fs):
                # None of the answers is among the first token's top log-probabilities.
                gen = await self._stream(dataclasses.replace(request, distribution=None), then)
                return dataclasses.replace(
                    gen,
                    distribution_fallback=f"no allowed answer among the server's top "
                    f"{TOP_LOGPROBS} first tokens",
                )
            distribution = fold(seen, forms)
            answer = pick(distribution, request.temperature, request.seed)
            if then is not None:
                then(answer)
            p = distribution[answer]
            return dataclasses.replace(
                gen,
                text=answer,
                finish_reason="stop",
                token_ids=(),
                logprobs=None
                if request.logprobs is None
                else (math.log(p) if p > 0 else -math.inf,),
                tokens=(answer,),
                distribution=distribution,
            )
        return gen

    def __repr__(self) -> str:
        return f"OpenAIBackend({self.model!r}, base_url={str(self.client.base_url)!r})"


def served_stage_times(metrics: Any, latency_s: float | None = None) -> StageTimes:
    """Queue, prefill and decode seconds from the ``metrics`` a server sent, where it did.

    ``vllm serve --enable-per-request-metrics`` puts the engine's own timings on the last
    (usage) chunk: ``queue_time_ms``, ``time_to_first_token_ms`` (first token net of queueing:
    the prefill) and ``generation_time_ms`` (first to last token). Without the flag, or from
    other servers, they are None. A server is not trusted: anything but a finite number >= 0
    is None, and each stage is held to ``latency_s`` (what the client measured) when given.

    >>> served_stage_times({"queue_time_ms": 2.0, "time_to_first_token_ms": 30.0})
    {'queue_s': 0.002, 'prefill_s': 0.03, 'decode_s': None}
    >>> served_stage_times({"generation_time_ms": 9e9}, latency_s=0.5)["decode_s"]
    0.5
    >>> served_stage_times("nonsense")
    {'queue_s': None, 'prefill_s': None, 'decode_s': None}
    """
    got = metrics if isinstance(metrics, dict) else {}

    def seconds(key: str) -> float | None:
        value = got.get(key)
        if not isinstance(value, int | float) or isinstance(value, bool):
            return None
        try:
            ms = float(value)
        except OverflowError:  # an integer beyond any float
            return None
        if not math.isfinite(ms) or ms < 0:
            return None
        out = ms / 1000.0
        return min(out, latency_s) if latency_s is not None else out

    return {
        "queue_s": seconds("queue_time_ms"),
        "prefill_s": seconds("time_to_first_token_ms"),
        "decode_s": seconds("generation_time_ms"),
    }


def _media_tokens(details: Any) -> int | None:
    """Prompt tokens of images and videos, from ``usage.prompt_tokens_details``.

    vLLM (0.32) reports ``multimodal_tokens`` there (``{"image": n, "video": m}``) under
    ``--enable-prompt-tokens-details``; None where a server does not, or sends nonsense.
    """
    if details is None:
        return None
    found = getattr(details, "multimodal_tokens", None)
    if found is None:
        found = (getattr(details, "model_extra", None) or {}).get("multimodal_tokens")
    if not isinstance(found, dict):
        return None
    counts = [v for v in found.values() if isinstance(v, int) and not isinstance(v, bool)]
    if len(counts) != len(found) or any(v < 0 for v in counts):
        return None
    return sum(counts)


TOP_LOGPROBS = 20
"""The most ``top_logprobs`` the OpenAI API allows per token (its documented 0-20 range)."""


def one_step_request(request: GenerationRequest) -> bool:
    """Whether ``request`` is answered in one step with its answers' distribution."""
    return request.distribution is not None and request.min_tokens <= 1
