"""Chat messages as the graph builds them and every backend reads them.

Images and videos travel as validated references (:class:`~mai_graph.inputs.images.ImageRef`,
:class:`~mai_graph.inputs.video.VideoRef`), never pixels, and content parts keep their order
(images,
then the video, before the question), which is what lets engines share a prompt prefix across
calls.
"""

from __future__ import annotations

from typing import Literal, NotRequired

from typing_extensions import TypedDict

from mai_graph.inputs.images import ImageRef
from mai_graph.inputs.video import VideoRef

__all__ = ["ImagePart", "Message", "Part", "TextPart", "VideoPart"]


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


class VideoPart(TypedDict):
    """A video content part (a validated reference to its sampled frames, never pixels)."""

    type: Literal["video"]
    video: VideoRef


Part = TextPart | ImagePart | VideoPart


class Message(TypedDict):
    """A chat message; ``content`` parts keep their order (images and video before question)."""

    role: Literal["system", "user", "assistant"]
    content: list[Part]
    token_ids: NotRequired[list[int]]
    """For an assistant turn the backend generated: its exact output ids, so a backend that can
    reuse them (prefix cache, KV cache) continues from the identical token sequence."""
