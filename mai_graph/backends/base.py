"""The backend contract: one async ``generate(request) -> Generation``."""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypedDict, TypeGuard, runtime_checkable

from mai_graph.errors import ConfigError, check_int
from mai_graph.inputs.images import ImageRef
from mai_graph.inputs.video import VideoRef
from mai_graph.messages import Message

__all__ = [
    "AttentionBackend",
    "DistributionBackend",
    "Generation",
    "GenerationRequest",
    "LogprobsBackend",
    "ManagedBackend",
    "Purpose",
    "StageTimes",
    "StreamingBackend",
    "TextCallback",
    "VLMBackend",
    "VocabularyBackend",
    "check_backend",
    "serving_kind",
    "streams",
]

Purpose = Literal["short", "cot", "s2", "answer", "attention", "warmup", "generate"]
"""What a model call is for (fakes script by it, :class:`SteeredBackend` steers by it).

- ``short``: a short answer (mutual verification and the short baselines).
- ``cot``: a chain of thought.
- ``s2``: the answer-extraction turn over the cached reasoning.
- ``answer``: the large model's short answer after reading the transferred reasoning.
- ``attention``: an attention-scoring pass (no tokens generated).
- ``warmup``: an engine warm-up call.
- ``generate``: anything else (direct backend use).
"""


_ids = itertools.count()


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One model call. ``max_tokens`` is always explicit."""

    messages: tuple[Message, ...]
    max_tokens: int
    min_tokens: int = 0
    stop: tuple[str, ...] = ()
    temperature: float = 0.0
    seed: int | None = None
    logprobs: int | None = None
    """Return the logprob of each generated token (0 = the sampled token only)."""
    prompt_logprobs: int | None = None
    """Return the logprob of each prompt token (engines may then skip their prefix cache)."""
    choices: tuple[str, ...] | None = None
    """Constrain the output to exactly one of these strings (where the backend supports it)."""
    distribution: tuple[tuple[str, tuple[str, ...]], ...] | None = None
    """A bounded question's allowed answers, each with its surface forms
    (:func:`~mai_graph.answers.distribution.answer_forms`): a backend that can read the first
    answer token's log-probabilities (:class:`DistributionBackend`) answers in one decode step
    with the whole distribution over them; others generate as the rest of the request says."""
    purpose: Purpose = "generate"
    """What the call is for; see :data:`Purpose`."""
    affinity_key: str | None = None
    """The same for every call of one run: load balancers in front of model replicas route on
    it (consistent hashing), so a run's calls meet its prefix in one replica's cache."""
    request_id: str = field(default_factory=lambda: f"mai-{next(_ids)}")

    def __post_init__(self) -> None:
        check_int(self.max_tokens, "max_tokens", fix="pass a positive token budget")
        if self.max_tokens < 1 or not 0 <= self.min_tokens <= self.max_tokens:
            raise ConfigError(
                f"need 0 <= min_tokens <= max_tokens and max_tokens >= 1, got "
                f"min_tokens={self.min_tokens}, max_tokens={self.max_tokens}",
                parameter="max_tokens",
                value=(self.min_tokens, self.max_tokens),
                fix="raise max_tokens or lower min_tokens",
            )
        if not self.messages:
            raise ConfigError(
                "a request needs at least one message", parameter="messages", value=()
            )
        if self.choices is not None and not self.choices:
            raise ConfigError(
                "choices must not be empty",
                parameter="choices",
                value=self.choices,
                fix="pass None for unconstrained output",
            )

    @property
    def image(self) -> ImageRef | None:
        """The request's first image (None without images)."""
        for message in self.messages:
            for part in message["content"]:
                if part["type"] == "image":
                    return part["image"]
        return None

    @property
    def images(self) -> list[ImageRef]:
        """Every image of the request, in prompt order."""
        return [p["image"] for m in self.messages for p in m["content"] if p["type"] == "image"]

    @property
    def videos(self) -> list[VideoRef]:
        """Every video of the request, in prompt order."""
        return [p["video"] for m in self.messages for p in m["content"] if p["type"] == "video"]


class StageTimes(TypedDict):
    """An engine's own timings of one call, in seconds (None where it gives none)."""

    queue_s: float | None
    prefill_s: float | None
    decode_s: float | None


@dataclass(frozen=True, slots=True)
class Generation:
    """What a backend returns for one request."""

    text: str
    model: str
    prompt_tokens: int
    generated_tokens: int
    latency_s: float
    finish_reason: str = "stop"
    """``stop`` (end of turn or stop string), ``length`` (budget hit) or ``abort``."""
    cached_tokens: int | None = None
    ttft_s: float | None = None
    token_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] | None = None
    """Logprob of each generated token, when requested."""
    prompt_logprobs: tuple[float | None, ...] | None = None
    tokens: tuple[str, ...] | None = None
    """Text piece of each generated token, when the backend has a tokenizer."""
    queue_s: float | None = None
    """The engine's own stage timings, where the backend can give them (None where not):
    ``queue_s`` is the wait before the engine scheduled the request."""
    prefill_s: float | None = None
    """Scheduled to first token: the prefill (vision encoding included), net of queueing."""
    decode_s: float | None = None
    """First token to last token."""
    image_tokens: int | None = None
    """Prompt tokens that stand for images and video frames (the vision encoder's output)."""
    distribution: dict[str, float] | None = None
    """For requests with ``distribution``: each allowed answer's probability (they sum to 1),
    read from the first answer token; ``text`` is the answer taken from it."""
    distribution_fallback: str | None = None
    """Why a request that asked for a distribution got a constrained generation instead."""


@runtime_checkable
class VLMBackend(Protocol):
    """A vision-language model that serves :class:`GenerationRequest`.

    Implementations: :class:`~mai_graph.backends.vllm.VLLMBackend` (in-process AsyncLLM),
    :class:`~mai_graph.backends.openai.OpenAIBackend` (``vllm serve`` and other
    OpenAI-compatible servers), :class:`~mai_graph.backends.transformers.TransformersBackend`,
    and the fakes :class:`~mai_graph.backends.fake.ScriptedBackend` and
    :class:`~mai_graph.backends.fake.FunctionBackend`. Any object with these members works;
    no inheritance needed.
    """

    name: str
    """Model identifier used in metrics."""

    async def generate(self, request: GenerationRequest) -> Generation:
        """Serve one request. Cancelling the awaiting task must abort the request."""
        ...


TextCallback = Callable[[str], None]
"""Receives each new piece of generated text, in order, on the caller's event loop."""


@runtime_checkable
class StreamingBackend(VLMBackend, Protocol):
    """A backend that can also report text as it is generated (all shipped backends can)."""

    async def generate_stream(
        self, request: GenerationRequest, on_text: TextCallback
    ) -> Generation:
        """Serve one request, calling ``on_text`` with each text delta; returns the whole."""
        ...


@runtime_checkable
class VocabularyBackend(Protocol):
    """A backend that can name its tokenizer's vocabulary.

    Two backends with the same fingerprint tokenize identically, so the small model's reasoning
    token ids can be spliced into the large model's prompt as they are.
    """

    async def vocab_fingerprint(self) -> str:
        """A stable digest of the vocabulary; starts or loads the engine if it must."""
        ...


@runtime_checkable
class LogprobsBackend(Protocol):
    """A backend whose generations carry ``logprobs`` when a request asks for them.

    Each value is the log-probability of the generated token under the distribution it was
    drawn from, as vLLM reports it: a ``choices`` constraint is part of it (the odds are
    renormalized over the allowed continuations), temperature and the ``min_tokens`` ban are
    not. So ``exp(sum(logprobs))`` of a constrained short answer is the model's probability
    for that answer among the allowed ones (the confidence gate).
    """

    supports_logprobs: Literal[True]


@runtime_checkable
class DistributionBackend(Protocol):
    """A backend that answers requests with ``distribution`` in one decode step.

    It reads the log-probabilities of each allowed answer's first tokens at the first
    generated position (vLLM's ``logprob_token_ids``, the logits on transformers,
    ``top_logprobs`` over a server, the fakes' script) and returns the distribution, its
    ``text`` the answer taken from it. Where the first tokens cannot tell the answers apart
    (an answer of several tokens, two answers sharing a first token) it generates as
    ``choices`` asks and sets ``distribution_fallback`` to why.
    """

    supports_distribution: Literal[True]


@runtime_checkable
class AttentionBackend(Protocol):
    """A backend that exposes attention weights (the ``attention`` sparsification strategy)."""

    async def attention(
        self, request: GenerationRequest, *, layers: Sequence[int] | None = None, full: bool = False
    ) -> list[float]:
        """Attention from the prompt's last turn onto its spliced reasoning tokens, per token."""
        ...


@runtime_checkable
class ManagedBackend(Protocol):
    """A backend with an engine to start ahead of the first request and to shut down."""

    async def start(self) -> None:
        """Start (or load) the engine now instead of on the first request."""
        ...

    def shutdown(self) -> None:
        """Stop the engine and release its memory and processes; idempotent."""
        ...


_STREAMS: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def streams(backend: object) -> TypeGuard[StreamingBackend]:
    """Whether ``backend`` is a :class:`StreamingBackend`, checked once per backend object.

    A protocol ``isinstance`` costs tens of microseconds (Python 3.11 collects the protocol's
    members on every check): more than the rest of a node's own work, once per model call.
    """
    try:
        known = _STREAMS.get(backend)
        if known is None:
            known = _STREAMS[backend] = isinstance(backend, StreamingBackend)
        return known
    except TypeError:  # not weakly referenceable: ask every time
        return isinstance(backend, StreamingBackend)


_KINDS = {"VLLMBackend": "vllm", "OpenAIBackend": "openai", "TransformersBackend": "transformers"}


def serving_kind(backend: object) -> str:
    """What serves ``backend``'s calls (``vllm``, ``openai``, ``transformers``), under wrappers.

    Steering and recording wrappers hold the backend they wrap as ``inner``; anything else
    (the fakes, a user's own backend) is ``mai-graph``. An OpenAI-compatible server spoken to
    with vLLM's request options (``vllm_extras``, the default) is ``vllm``.

    >>> from mai_graph.backends.fake import ScriptedBackend
    >>> serving_kind(ScriptedBackend("A"))
    'mai-graph'
    """
    for _ in range(8):
        kind = _KINDS.get(type(backend).__name__)
        if kind == "openai" and getattr(backend, "vllm_extras", False):
            kind = "vllm"
        inner = vars(backend).get("inner") if hasattr(backend, "__dict__") else None
        if kind is not None or inner is None:
            return kind or "mai-graph"
        backend = inner
    return "mai-graph"


def check_backend(backend: object, parameter: str) -> VLMBackend:
    """Refuse objects that are not backends, naming the argument."""
    if not isinstance(backend, VLMBackend):
        raise ConfigError(
            f"{parameter} must be a VLMBackend (an object with .name and async .generate()), "
            f"got {type(backend).__name__}",
            parameter=parameter,
            value=backend,
            fix="pass e.g. VLLMBackend(...), ScriptedBackend(...) or FunctionBackend(fn)",
        )
    return backend
