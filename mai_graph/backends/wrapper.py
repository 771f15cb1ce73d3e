"""One delegating base for backends over a backend: recording, steering, forcing.

:class:`WrapperBackend` passes every call to the backend it wraps (``inner``) and shows its
name, capabilities, provider and every other member (tokenizer, vocabulary fingerprint,
attention, start / stop) as its own, so the graph takes the same paths as without it. A
subclass changes a call in two hooks: :meth:`~WrapperBackend.before` (the request the inner
backend gets) and :meth:`~WrapperBackend.after` (the generation the caller gets), on the
streamed path and the plain one alike.
"""

from __future__ import annotations

from typing import Any, cast

from mai_graph.backends.base import (
    Capabilities,
    Generation,
    GenerationRequest,
    StreamingBackend,
    TextCallback,
    VLMBackend,
    capabilities_of,
    provider_of,
)

__all__ = ["WrapperBackend"]


class WrapperBackend:
    """A backend that serves through ``inner``; subclasses override :meth:`before` / :meth:`after`.

    Example:
        >>> import asyncio, dataclasses
        >>> from mai_graph.backends.fake import ScriptedBackend
        >>> class Shouting(WrapperBackend):
        ...     def after(self, request, generation):
        ...         return dataclasses.replace(generation, text=generation.text.upper())
        >>> loud = Shouting(ScriptedBackend("yes", name="m"))
        >>> hi = {"role": "user", "content": [{"type": "text", "text": "Hi"}]}
        >>> ask = GenerationRequest([hi], max_tokens=4)
        >>> asyncio.run(loud.generate(ask)).text, loud.name
        ('YES', 'm')
    """

    def __init__(self, inner: VLMBackend) -> None:
        self.inner = inner
        self.name = inner.name

    @property
    def capabilities(self) -> Capabilities:
        """The inner backend's capabilities."""
        return capabilities_of(self.inner)

    @property
    def provider(self) -> str:
        """What serves the calls: the inner backend's provider."""
        return provider_of(self.inner)

    def before(self, request: GenerationRequest) -> GenerationRequest:
        """The request the inner backend gets (as it came, unless a subclass changes it)."""
        return request

    def after(self, request: GenerationRequest, generation: Generation) -> Generation:
        """The generation the caller gets for ``request`` (the inner one's, by default)."""
        return generation

    async def generate(self, request: GenerationRequest) -> Generation:
        """Serve ``request`` on the inner backend, through the hooks."""
        return await self.serve(request, None)

    async def generate_stream(
        self, request: GenerationRequest, on_text: TextCallback
    ) -> Generation:
        """Streaming :meth:`generate`, when this wrapper's capabilities say it streams."""
        return await self.serve(request, on_text if self.capabilities.stream else None)

    async def serve(self, request: GenerationRequest, on_text: TextCallback | None) -> Generation:
        """The one path of both calls: the hooks around the inner backend's call.

        Streamed when ``on_text`` is given. A subclass that wraps the whole call overrides it.
        """
        request = self.before(request)
        if on_text is None:
            generation = await self.inner.generate(request)
        else:
            generation = await cast(StreamingBackend, self.inner).generate_stream(request, on_text)
        return self.after(request, generation)

    def __getattr__(self, name: str) -> Any:
        # Only reached for what the wrapper does not define: the inner backend's members.
        if name == "inner":  # not set yet (copy / unpickle): never recurse
            raise AttributeError(name)
        return getattr(self.inner, name)
