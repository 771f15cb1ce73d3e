"""What every node shares: the prepared question, metrics records, the context."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.runtime import get_runtime

from mai_graph.answers import AnswerKind, resolve_kind
from mai_graph.backends.base import Generation, GenerationRequest, VLMBackend
from mai_graph.context import MAIContext
from mai_graph.errors import ConfigError
from mai_graph.images import ImageRef, image_ref
from mai_graph.loop import run_sync
from mai_graph.prompts import cot_messages, option_letters
from mai_graph.state import MAIState, NodeMetrics

MAX_OPTIONS = 26


@dataclass(frozen=True, slots=True)
class Question:
    """The validated inputs of a run, as every node reads them."""

    text: str
    image: ImageRef | None
    options: list[str] | None
    kind: AnswerKind

    def choices(self, ctx: MAIContext) -> tuple[str, ...] | None:
        """Constrained outputs for short answers: the option letters (multiple choice)."""
        if self.kind == "choice" and self.options and ctx.constrain_choices:
            return option_letters(self.options)
        return None


Update = dict[str, Any]


def cot_request(q: Question, ctx: MAIContext) -> GenerationRequest:
    """The chain-of-thought request (its generated logprobs come free and feed scorers)."""
    return GenerationRequest(
        messages=cot_messages(ctx, q.image, q.text, q.options),
        max_tokens=ctx.cot_max_tokens,
        min_tokens=ctx.cot_min_tokens,
        temperature=ctx.temperature,
        seed=ctx.seed,
        logprobs=0,
        purpose="cot",
    )


def current_context() -> MAIContext:
    """The running graph's validated context (defaults when none was given)."""
    return MAIContext.coerce(get_runtime().context)


class Node(Runnable[MAIState, Update]):
    """A graph node over an async core ``(state, ctx) -> update``.

    Awaited under ``ainvoke``; under sync ``invoke`` the core runs on mai-graph's background
    loop, so engines stay on one loop either way. A bare Runnable (no callback or signature
    machinery per call) keeps orchestration overhead low.
    """

    def __init__(
        self, name: str, core: Callable[[MAIState, MAIContext], Coroutine[Any, Any, Update]]
    ):
        self.name = name
        self.core = core

    def invoke(
        self, input: MAIState, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Update:
        """Run the core to completion from sync code."""
        return run_sync(self.core(input, current_context()))

    async def ainvoke(
        self, input: MAIState, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Update:
        """Await the core."""
        return await self.core(input, current_context())


def question_of(state: MAIState, ctx: MAIContext) -> Question:
    """Validate and normalize the run's inputs; turns a path / data URL into an ImageRef."""
    text = state.get("question")
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(
            f"question must be a non-empty string, got {text!r}",
            parameter="question",
            value=text,
            fix="pass the question text as input['question']",
        )
    options = state.get("options")
    if options is not None:
        if isinstance(options, str) or not all(isinstance(o, str) and o.strip() for o in options):
            raise ConfigError(
                f"options must be a list of non-empty strings, got {options!r}",
                parameter="options",
                value=options,
                fix='pass e.g. ["a cat", "a dog"] (letters are added in order)',
            )
        if not 2 <= len(options) <= MAX_OPTIONS:
            raise ConfigError(
                f"need 2 to {MAX_OPTIONS} options, got {len(options)}",
                parameter="options",
                value=options,
                fix="pass at least two options, or none for an open question",
            )
        options = list(options)
    raw = state.get("image")
    image = image_ref(raw) if raw is not None else None
    return Question(text, image, options or None, resolve_kind(ctx.answer_kind, options))


def _stream_writer() -> Callable[[Any], None]:
    """The running graph's custom stream writer; a no-op outside a graph (direct core calls)."""
    try:
        return get_runtime().stream_writer
    except RuntimeError:
        return _discard


def _discard(_: Any) -> None:
    return None


async def call(
    backend: VLMBackend, request: GenerationRequest, node: str, role: str
) -> tuple[Generation, NodeMetrics]:
    """One model call with its metrics record, both also streamed as custom events.

    Under ``stream_mode="custom"`` the graph emits ``{"event": "token", "node", "role",
    "text"}`` for each text delta (from backends that stream) and ``{"event": "metrics",
    **record}`` when the call ends; otherwise the events go nowhere.
    """
    writer = _stream_writer()
    stream = getattr(backend, "generate_stream", None)
    if stream is not None:
        gen = await stream(
            request,
            lambda text: writer({"event": "token", "node": node, "role": role, "text": text}),
        )
    else:
        gen = await backend.generate(request)
    rec = record(node, role, gen)
    writer({"event": "metrics", **rec})
    return gen, rec


def record(node: str, role: str, gen: Generation) -> NodeMetrics:
    """The metrics record of one model call."""
    return NodeMetrics(
        node=node,
        model=gen.model,
        role=role,  # type: ignore[typeddict-item]
        prompt_tokens=gen.prompt_tokens,
        cached_tokens=gen.cached_tokens,
        generated_tokens=gen.generated_tokens,
        latency_s=gen.latency_s,
        ttft_s=gen.ttft_s,
        finish_reason=gen.finish_reason,
    )
