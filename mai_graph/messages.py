"""Chat messages as the graph builds them and every backend reads them.

Images travel as validated references (:class:`~mai_graph.images.ImageRef`), never pixels, and
content parts keep their order (image before question), which is what lets engines share a
prompt prefix across calls.
"""

from __future__ import annotations

from typing import Literal, NotRequired

from typing_extensions import TypedDict

from mai_graph.images import ImageRef

__all__ = ["ImagePart", "Message", "Part", "TextPart"]


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
