"""From an OpenAI request to a MAI run, and from the run's output to OpenAI's response.

:func:`prepare` reads a :class:`~mai_graph.adapters.endpoint.schema.ChatCompletionRequest`
into a :class:`Run` (the question, its checked images, the options and the run's
:class:`~mai_graph.context.MAIContext`), refusing what MAI does not do with a 400 before any
model is called; :func:`graph_input` is the graph's input of a run. On the way back
:func:`completion` and :func:`chunk` build the ``openai`` package's own
:class:`~openai.types.chat.ChatCompletion` / :class:`~openai.types.chat.ChatCompletionChunk`,
with :func:`usage` over every model call and the ``mai`` field (:func:`extension`) naming
models as served (:func:`served_metrics`, :func:`private_names`).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from openai.types import CompletionUsage
from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_chunk import Choice as ChunkChoice
from openai.types.chat.chat_completion_chunk import ChoiceDelta
from openai.types.completion_usage import CompletionTokensDetails, PromptTokensDetails
from pydantic import ValidationError

from mai_graph.adapters.endpoint.schema import (
    PART,
    ChatCompletionRequest,
    EndpointError,
    ImagePart,
    TextPart,
    as_endpoint_error,
    refuse,
)
from mai_graph.answers import normalize_options
from mai_graph.context import MAIContext
from mai_graph.errors import ConfigError
from mai_graph.inputs.sources import ImagePolicy, resolve_images
from mai_graph.lineup import Lineup
from mai_graph.result import reasoning_tokens, totals
from mai_graph.state import InputState

__all__ = [
    "CLIENT_SETTINGS",
    "Run",
    "chunk",
    "completion",
    "completion_id",
    "extension",
    "graph_input",
    "prepare",
    "private_names",
    "served_metrics",
    "usage",
    "usage_chunk",
    "wire",
]


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

_TOP_LEVEL = {"temperature": "temperature", "seed": "seed", "short_max_tokens": "max_tokens"}
"""MAI settings that OpenAI fields set: setting -> request field."""


# -- from a request to a run -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Run:
    """One request's run: what the graph is asked, with what settings."""

    question: str
    images: list[Any]
    options: Any
    context: MAIContext
    trace: Any = None
    """The caller's trace context (its ``traceparent``), when tracing is on."""


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
            parts.append(PART.validate_python(raw))
        except ValidationError:
            raise EndpointError(
                f"content part {i} of the last user message is not text or image_url: "
                f"type {raw.get('type')!r}",
                parameter=f"messages.{len(body.messages) - 1}.content.{i}",
                fix="send the question as text parts and each image as an image_url part",
                code="unsupported_value",
            ) from None
    texts = [p.text.strip() for p in parts if isinstance(p, TextPart) and p.text.strip()]
    images = [p.source for p in parts if isinstance(p, ImagePart)]
    return " ".join(texts), images


def _check_supported(body: ChatCompletionRequest) -> None:
    if body.n not in (None, 1):
        raise refuse(f"n must be 1, got {body.n}", "n", "ask for one answer per request")
    if body.stop:
        raise refuse("stop sequences are not supported", "stop", "drop stop; MAI answers short")
    if body.tools or body.functions or body.tool_choice not in (None, "none"):
        raise refuse(
            "tool calling is not supported",
            "tools",
            "give tools to another model; MAI answers questions",
        )
    if body.logprobs:
        raise refuse(
            "logprobs are not returned", "logprobs", "read mai.metrics[].answer_prob instead"
        )
    fmt = (body.response_format or {}).get("type", "text")
    if fmt != "text":
        raise refuse(
            f"response_format {fmt!r} is not supported",
            "response_format",
            "ask a multiple-choice or yes/no question (mai.options / mai.answer_kind)",
        )


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


async def prepare(
    body: ChatCompletionRequest,
    *,
    model_name: str,
    base: MAIContext,
    allowed: Collection[str] | None,
    lineup: Lineup,
    policy: ImagePolicy,
    names: Mapping[str, str],
) -> Run:
    """The run ``body`` asks for, or the 400 (404: another model) it is refused with.

    Everything is checked before a stream could start: the model, OpenAI's unsupported
    fields, the settings (``allowed``; ``base`` is the server's), the options, the run's
    budgets against the ``lineup``, the question, and the images against ``policy`` (read,
    decoded and stored here, off the event loop).
    """
    if body.model != model_name:
        raise EndpointError(
            f"the model {body.model!r} does not exist here; this server serves {model_name!r}",
            status=404,
            parameter="model",
            code="model_not_found",
            fix=f"send model={model_name!r} (GET /v1/models lists it)",
        )
    _check_supported(body)
    ctx, options = _context(body, base, allowed)
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
    from mai_graph.nodes.prepare import check_run_budgets

    try:  # a 400 before a stream starts, not an error event after it
        check_run_budgets(ctx, lineup)
    except ConfigError as exc:
        raise EndpointError(
            str(as_endpoint_error(exc, names)),
            parameter=f"mai.{exc.parameter}",
            code="invalid_value",
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
    images = await asyncio.to_thread(resolve_images, sources, policy)
    return Run(question, images, options, ctx)


def graph_input(run: Run) -> InputState:
    """The graph's input of ``run``."""
    # Every input key is written, None included: nothing is inherited from elsewhere.
    first = run.images[0] if run.images else None
    rest = run.images[1:] or None
    return InputState(question=run.question, image=first, images=rest, options=run.options)


# -- from a run's output to a response -------------------------------------------------------


def completion_id() -> str:
    """A new response id (``chatcmpl-...``), shared by a stream's chunks."""
    return f"chatcmpl-{uuid.uuid4().hex}"


def usage(metrics: Sequence[Mapping[str, Any]]) -> CompletionUsage:
    """OpenAI's ``usage`` from MAI's metrics: every call's prompt and generated tokens.

    >>> usage([{"prompt_tokens": 90, "cached_tokens": 64, "generated_tokens": 2,
    ...         "latency_s": 0.1}]).to_dict()["prompt_tokens_details"]
    {'cached_tokens': 64}
    """
    t = totals(metrics)
    prompt, completion = int(t["prompt_tokens"]), int(t["generated_tokens"])
    return CompletionUsage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=int(t["cached_tokens"])),
        completion_tokens_details=CompletionTokensDetails(
            reasoning_tokens=reasoning_tokens(metrics)
        ),
    )


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
        **({"stage": out["stage"]} if out.get("stage") else {}),  # chains: the deciding stage
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


def completion(rid: str, model: str, out: Mapping[str, Any], mai: dict[str, Any]) -> ChatCompletion:
    """The response of a run that ended with ``out``; ``mai`` its :func:`extension`."""
    return ChatCompletion(
        id=rid,
        object="chat.completion",
        created=int(time.time()),
        model=model,
        choices=[
            Choice(
                index=0,
                message=ChatCompletionMessage(role="assistant", content=out["answer"]),
                finish_reason="stop",
                logprobs=None,
            )
        ],
        usage=usage(out.get("metrics") or []),
        mai=mai,  # type: ignore[call-arg]  # an extra field: OpenAI's types keep them
    )


def chunk(
    rid: str,
    model: str,
    delta: ChoiceDelta,
    finish: Literal["stop"] | None = None,
    mai: dict[str, Any] | None = None,
) -> ChatCompletionChunk:
    """One chunk of a stream: ``delta``, and on the last one ``finish`` and the ``mai`` field."""
    extra: dict[str, Any] = {} if mai is None else {"mai": mai}  # an extra field, kept
    return ChatCompletionChunk(
        id=rid,
        object="chat.completion.chunk",
        created=int(time.time()),
        model=model,
        choices=[ChunkChoice(index=0, delta=delta, finish_reason=finish, logprobs=None)],
        **extra,
    )


def usage_chunk(rid: str, model: str, metrics: Sequence[Mapping[str, Any]]) -> ChatCompletionChunk:
    """The stream's usage chunk (``stream_options.include_usage``): no choices, the usage."""
    return ChatCompletionChunk(
        id=rid,
        object="chat.completion.chunk",
        created=int(time.time()),
        model=model,
        choices=[],
        usage=usage(metrics),
    )


def wire(response: ChatCompletion | ChatCompletionChunk) -> dict[str, Any]:
    """``response`` as the JSON object clients get: the fields set, ``mai`` included."""
    return response.to_dict()
