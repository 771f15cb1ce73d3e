"""The backend contract: one async ``generate(request) -> Generation``."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, NotRequired, Protocol, runtime_checkable

from typing_extensions import TypedDict

from mai_graph.errors import ConfigError
from mai_graph.images import ImageRef

__all__ = [
    "Generation",
    "GenerationRequest",
    "ImagePart",
    "Message",
    "Part",
    "StreamingBackend",
    "TextCallback",
    "TextPart",
    "VLMBackend",
    "check_backend",
]


class TextPart(TypedDict):
    """A text content part."""

    type: Literal["text"]
    text: str
    token_ids: NotRequired[list[int]]
    """The text's exact token ids (e.g. the kept reasoning tokens), for backends that splice
    ids instead of tokenizing ``text`` again."""


class ImagePart(TypedDict):
    """An image content part (a validated reference, never pixels)."""

    type: Literal["image"]
    image: ImageRef


Part = TextPart | ImagePart


class Message(TypedDict):
    """A chat message; ``content`` parts keep their order (image before question)."""

    role: Literal["system", "user", "assistant"]
    content: list[Part]
    token_ids: NotRequired[list[int]]
    """For an assistant turn the backend generated: its exact output ids, so a backend that can
    reuse them (prefix cache, KV cache) continues from the identical token sequence."""


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
    purpose: str = "generate"
    """What the call is for: ``short``, ``cot``, ``s2`` or ``answer`` (fakes script by it)."""
    request_id: str = field(default_factory=lambda: f"mai-{next(_ids)}")

    def __post_init__(self) -> None:
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int):
            raise ConfigError(
                f"max_tokens must be an int, got {self.max_tokens!r}",
                parameter="max_tokens",
                value=self.max_tokens,
                fix="pass a positive token budget",
            )
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
        """The request's image (MAI prompts carry at most one)."""
        for message in self.messages:
            for part in message["content"]:
                if part["type"] == "image":
                    return part["image"]
        return None


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
