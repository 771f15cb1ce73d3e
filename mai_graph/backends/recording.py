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
from typing import Any

from mai_graph.backends.base import (
    Generation,
    GenerationRequest,
    Purpose,
    TextCallback,
    VLMBackend,
    streams,
)

__all__ = ["ForcedBackend", "RecordingBackend"]


class RecordingBackend:
    """Wraps a backend and records every request it receives and every generation it returns.

    Attributes:
        requests: Every request that reached the backend, in order (failed ones included).
        calls: ``(request, generation)`` for every request that succeeded, in order.
    """

    def __init__(self, inner: VLMBackend) -> None:
        self.inner = inner
        self.name = inner.name
        self.requests: list[GenerationRequest] = []
        self.calls: list[tuple[GenerationRequest, Generation]] = []

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (copy / unpickle): never recurse
            raise AttributeError(name)
        return getattr(self.inner, name)

    async def generate(self, request: GenerationRequest) -> Generation:
        """Serve ``request`` on the inner backend and record it."""
        self.requests.append(request)
        generation = await self.inner.generate(request)
        self.calls.append((request, generation))
        return generation

    async def generate_stream(
        self, request: GenerationRequest, on_text: TextCallback
    ) -> Generation:
        """Streaming :meth:`generate` (when the inner backend streams)."""
        if not streams(self.inner):
            return await self.generate(request)
        self.requests.append(request)
        generation = await self.inner.generate_stream(request, on_text)
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
    real (benchmarks, ``mai-graph doctor``). Every call is recorded.
    """

    def __init__(
        self, inner: VLMBackend, texts: Mapping[str, str], lengths: Mapping[str, int]
    ) -> None:
        super().__init__(inner)
        self.texts, self.lengths = dict(texts), dict(lengths)

    async def generate(self, request: GenerationRequest) -> Generation:
        """Serve ``request`` with its forced length; replace the text where one is forced."""
        n = self.lengths.get(request.purpose)
        if n:
            request = dataclasses.replace(request, min_tokens=n, max_tokens=n, choices=None)
        self.requests.append(request)
        gen = await self.inner.generate(request)
        if request.purpose in self.texts:
            gen = dataclasses.replace(gen, text=self.texts[request.purpose])
        self.calls.append((request, gen))
        return gen

    async def generate_stream(
        self, request: GenerationRequest, on_text: TextCallback
    ) -> Generation:
        """:meth:`generate` (the forced text is only known at the end)."""
        return await self.generate(request)
