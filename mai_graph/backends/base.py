"""The backend contract: one async ``generate(request) -> Generation``."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypedDict, runtime_checkable

from mai_graph.errors import ConfigError, check_int
from mai_graph.inputs.images import ImageRef
from mai_graph.inputs.video import VideoRef
from mai_graph.messages import Message

__all__ = [
    "Side",
    "AttentionBackend",
    "Capabilities",
    "Generation",
    "GenerationRequest",
    "ManagedBackend",
    "Purpose",
    "StageTimes",
    "StreamingBackend",
    "TextCallback",
    "VLMBackend",
    "VocabularyBackend",
    "capabilities_of",
    "check_backend",
    "provider_of",
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

Side = VLMBackend | list[VLMBackend]
"""One side of a lineup as the factories build it: a backend, or a list when the side has
several models (drafters, a chain); what :func:`~mai_graph.graph.create_mai_graph` takes."""


class StreamingBackend(VLMBackend, Protocol):
    """A backend that reports text as it is generated (``capabilities.stream``)."""

    async def generate_stream(
        self, request: GenerationRequest, on_text: TextCallback
    ) -> Generation:
        """Serve one request, calling ``on_text`` with each text delta; returns the whole."""
        ...


class VocabularyBackend(Protocol):
    """A backend that can name its tokenizer's vocabulary (``capabilities.vocabulary``).

    Two backends with the same fingerprint tokenize identically, so the small model's reasoning
    token ids can be spliced into the large model's prompt as they are.
    """

    async def vocab_fingerprint(self) -> str:
        """A stable digest of the vocabulary; starts or loads the engine if it must."""
        ...


class AttentionBackend(Protocol):
    """A backend that exposes attention weights (``capabilities.attention``).

    The ``attention`` sparsification strategy reads them.
    """

    async def attention(
        self, request: GenerationRequest, *, layers: Sequence[int] | None = None, full: bool = False
    ) -> list[float]:
        """Attention from the prompt's last turn onto its spliced reasoning tokens, per token."""
        ...


class ManagedBackend(Protocol):
    """A backend with an engine to start and shut down (``capabilities.managed``)."""

    async def start(self) -> None:
        """Start (or load) the engine now instead of on the first request."""
        ...

    def shutdown(self) -> None:
        """Stop the engine and release its memory and processes; idempotent."""
        ...


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend can do beyond ``generate``, declared once as its ``capabilities``.

    The graph reads it where it chooses a path (stream a call or not, splice token ids or
    re-encode text, score by attention, start and stop engines, check media counts). A backend
    that declares none has its capabilities read off its members (:func:`capabilities_of`).
    """

    stream: bool = False
    """``generate_stream(request, on_text)`` reports text as it is generated."""
    logprobs: bool = False
    """Generations carry ``logprobs`` when a request asks for them: each the log-probability
    of the generated token under the distribution it was drawn from, as vLLM reports it (a
    ``choices`` constraint is part of it, temperature and the ``min_tokens`` ban are not), so
    ``exp(sum(logprobs))`` of a constrained short answer is the model's probability for it
    among the allowed ones (the confidence gate)."""
    distribution: bool = False
    """Requests with ``distribution`` are answered in one decode step: the log-probabilities
    of each allowed answer's first tokens at the first generated position (vLLM's
    ``logprob_token_ids``, the logits on transformers, ``top_logprobs`` over a server, the
    fakes' script); where the first tokens cannot tell the answers apart it generates as
    ``choices`` asks and sets ``distribution_fallback`` to why."""
    vocabulary: bool = False
    """``vocab_fingerprint()`` names the tokenizer (:class:`VocabularyBackend`)."""
    attention: bool = False
    """``attention(request)`` returns attention weights (:class:`AttentionBackend`)."""
    managed: bool = False
    """An engine with ``start()`` and ``shutdown()`` (:class:`ManagedBackend`)."""
    media_limits: tuple[tuple[str, int], ...] | None = None
    """Most items per prompt by modality (``limit_mm_per_prompt``), when the engine has them."""

    def limits(self) -> dict[str, int] | None:
        """:attr:`media_limits` as a mapping (None: no limits declared)."""
        return None if self.media_limits is None else dict(self.media_limits)


def capabilities_of(backend: object) -> Capabilities:
    """A backend's :class:`Capabilities`: those it declares, else read off its members.

    Every shipped backend and wrapper declares them (an attribute read); a backend of your own
    needs only ``name`` and ``generate``, and gets the capabilities its methods offer.

    >>> from mai_graph.backends.fake import ScriptedBackend
    >>> capabilities_of(ScriptedBackend("A")).stream
    True
    >>> class Mine:
    ...     name = "mine"
    ...     async def generate(self, request): ...
    >>> capabilities_of(Mine())
    Capabilities(stream=False, logprobs=False, distribution=False, vocabulary=False, \
attention=False, managed=False, media_limits=None)
    """
    declared = getattr(backend, "capabilities", None)
    if isinstance(declared, Capabilities):
        return declared

    def has(*names: str) -> bool:
        return all(callable(getattr(backend, n, None)) for n in names)

    limits = getattr(backend, "media_limits", None)
    return Capabilities(
        stream=has("generate_stream"),
        vocabulary=has("vocab_fingerprint"),
        attention=has("attention"),
        managed=has("start", "shutdown"),
        media_limits=tuple(sorted(limits.items())) if isinstance(limits, Mapping) else None,
    )


def provider_of(backend: object) -> str:
    """What serves ``backend``'s calls: its ``provider``, else ``mai-graph``.

    Shipped providers are ``vllm``, ``openai`` and ``transformers``; wrappers report the
    backend they wrap.

    >>> from mai_graph.backends.fake import ScriptedBackend
    >>> provider_of(ScriptedBackend("A")), provider_of(object())
    ('mai-graph', 'mai-graph')
    """
    provider = getattr(backend, "provider", None)
    return provider if isinstance(provider, str) and provider else "mai-graph"


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
