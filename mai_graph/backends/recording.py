"""Record what a backend is asked and what it answers, for tests, benchmarks and debugging.

Wrap each backend of a run in :class:`RecordingBackend`, run the graph, then read the calls:
which purposes reached which model, with which prompts, and how many tokens were cached.
The wrapper is transparent: every capability of the inner backend (tokenizer, vocabulary
fingerprint, limits, start / stop) stays visible through it, so the graph takes the same
paths as without it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from mai_graph.backends.base import (
    Capabilities,
    Generation,
    GenerationRequest,
    Purpose,
    VLMBackend,
    capabilities_of,
)
from mai_graph.backends.wrapper import WrapperBackend

__all__ = ["ForcedBackend", "RecordingBackend"]


class RecordingBackend(WrapperBackend):
    """Wraps a backend and records every request it receives and every generation it returns.

    Attributes:
        requests: Every request that reached the backend, in order (failed ones included).
        calls: ``(request, generation)`` for every request that succeeded, in order.
    """

    def __init__(self, inner: VLMBackend) -> None:
        super().__init__(inner)
        self.requests: list[GenerationRequest] = []
        self.calls: list[tuple[GenerationRequest, Generation]] = []

    def before(self, request: GenerationRequest) -> GenerationRequest:
        """Record the request as it reaches the inner backend."""
        self.requests.append(request)
        return request

    def after(self, request: GenerationRequest, generation: Generation) -> Generation:
        """Record the call once it succeeded."""
        self.calls.append((request, generation))
        return generation

    def calls_for(self, purpose: Purpose) -> list[tuple[GenerationRequest, Generation]]:
        """The recorded calls made for ``purpose`` (``short``, ``cot``, ``s2``, ``answer``)."""
        return [(r, g) for r, g in self.calls if r.purpose == purpose]

    def call(self, purpose: Purpose) -> tuple[GenerationRequest, Generation]:
        """The one recorded call made for ``purpose``; ``LookupError`` for none or several."""
        found = self.calls_for(purpose)
        if len(found) != 1:
            raise LookupError(
                f"{self.name}: {len(found)} calls for purpose {purpose!r}, expected exactly one "
                "(calls_for() reads several)"
            )
        return found[0]


class ForcedBackend(RecordingBackend):
    """Forces ``lengths[purpose]`` tokens and ``texts[purpose]`` as the text, per purpose.

    Lengths are forced on the engine (it decodes exactly that many tokens), and the answer text
    is replaced after the engine produced it, so a route can be chosen while every timing stays
    real (benchmarks, ``mai-graph doctor``). Every call is recorded. It does not stream: the
    forced text is only known at the end.
    """

    def __init__(
        self, inner: VLMBackend, texts: Mapping[str, str], lengths: Mapping[str, int]
    ) -> None:
        super().__init__(inner)
        self.texts, self.lengths = dict(texts), dict(lengths)

    @property
    def capabilities(self) -> Capabilities:
        """The inner backend's, without streaming."""
        return dataclasses.replace(capabilities_of(self.inner), stream=False)

    def before(self, request: GenerationRequest) -> GenerationRequest:
        """The request with its forced length, recorded."""
        n = self.lengths.get(request.purpose)
        if n:
            request = dataclasses.replace(request, min_tokens=n, max_tokens=n, choices=None)
        return super().before(request)

    def after(self, request: GenerationRequest, generation: Generation) -> Generation:
        """The generation with its forced text, recorded."""
        if request.purpose in self.texts:
            generation = dataclasses.replace(generation, text=self.texts[request.purpose])
        return super().after(request, generation)
