"""Steer a real backend's outputs with constrained choices, to force routes in demos and tests.

The engine still does all the work (prefill, decode, caching); only the set of strings it may
produce for a purpose is narrowed. With random-weight models this is how a demo shows every
route: e.g. force the two short answers apart to take the reasoning path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from mai_graph.backends.base import (
    Generation,
    GenerationRequest,
    Purpose,
    TextCallback,
    VLMBackend,
    streams,
)
from mai_graph.errors import ConfigError

__all__ = ["SteeredBackend"]

_PURPOSES: tuple[Purpose, ...] = ("short", "cot", "s2", "answer")


class SteeredBackend:
    """Wraps a backend and constrains outputs per request purpose.

    Args:
        inner: The backend that serves the requests.
        choices: ``{purpose: allowed outputs}``; purposes are ``short``, ``cot``, ``s2``,
            ``answer``. Unlisted purposes pass through unchanged.
    """

    def __init__(self, inner: VLMBackend, choices: Mapping[str, Sequence[str]]) -> None:
        unknown = sorted(set(choices) - set(_PURPOSES))
        if unknown:
            raise ConfigError(
                f"unknown purposes {unknown}; use {list(_PURPOSES)}",
                parameter="choices",
                value=unknown,
            )
        self.inner = inner
        self.name = inner.name
        self.choices = {k: tuple(v) for k, v in choices.items()}

    def __getattr__(self, name: str) -> Any:
        # Transparent for everything else (tokenizer, vocab fingerprint, attention, start, ...).
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def _steer(self, request: GenerationRequest) -> GenerationRequest:
        """The request narrowed to the steered outputs, and generated.

        Never read off one step: a distribution would range over every allowed answer, not
        over the steered ones.
        """
        forced = self.choices.get(request.purpose)
        if forced is None:
            return request
        return dataclasses.replace(request, choices=forced, distribution=None)

    async def generate(self, request: GenerationRequest) -> Generation:
        """Serve ``request`` on the inner backend, narrowed to the steered choices."""
        return await self.inner.generate(self._steer(request))

    async def generate_stream(
        self, request: GenerationRequest, on_text: TextCallback
    ) -> Generation:
        """Streaming :meth:`generate` (when the inner backend streams)."""
        if not streams(self.inner):
            return await self.generate(request)
        return await self.inner.generate_stream(self._steer(request), on_text)
