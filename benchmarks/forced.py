"""The benchmarks' backend wrapper: forced output lengths and answer texts, every call recorded.

Lengths are forced on the engine (it decodes exactly that many tokens), and the answer text is
replaced after the engine produced it, so a route can be chosen while every timing stays real.
The wrapper is a :class:`~mai_graph.backends.recording.RecordingBackend`: the inner backend's
capabilities stay visible, so runs take the same paths as without it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from mai_graph.backends.recording import RecordingBackend


class Forced(RecordingBackend):
    """Forces ``lengths[purpose]`` tokens and ``texts[purpose]`` as the text, per purpose."""

    def __init__(self, inner: Any, texts: Mapping[str, str], lengths: Mapping[str, int]) -> None:
        super().__init__(inner)
        self.texts, self.lengths = dict(texts), dict(lengths)

    async def generate(self, request: Any) -> Any:
        n = self.lengths.get(request.purpose)
        if n:
            request = dataclasses.replace(request, min_tokens=n, max_tokens=n, choices=None)
        self.requests.append(request)
        gen = await self.inner.generate(request)
        if request.purpose in self.texts:
            gen = dataclasses.replace(gen, text=self.texts[request.purpose])
        self.calls.append((request, gen))
        return gen

    async def generate_stream(self, request: Any, on_text: Any) -> Any:
        return await self.generate(request)  # the forced text is only known at the end
