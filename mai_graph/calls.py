"""The run's question as every node reads it, and one request builder per call purpose.

The first node validates the inputs once (:meth:`Question.from_input`) and records them,
normalized, as ``state["request"]``; later nodes rebuild the :class:`Question` from it without
validating again (:meth:`Question.from_state`). Each model call of the graph is built by
exactly one function here, so the prompts of the verify, reasoning, S2 and transfer calls share
their prefixes by construction.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mai_graph.answers import AnswerKind, normalize_options, resolve_kind
from mai_graph.answers.distribution import answer_forms
from mai_graph.backends.base import GenerationRequest, Purpose
from mai_graph.context import MAIContext
from mai_graph.errors import ImageError
from mai_graph.inputs.images import ImageRef
from mai_graph.inputs.limits import check_media, check_question, fit_image
from mai_graph.inputs.sources import ImagePolicy, resolve_images
from mai_graph.inputs.video import VideoRef, resolve_video
from mai_graph.messages import Message
from mai_graph.prompts import cot_messages, s2_messages, short_messages, transfer_messages
from mai_graph.state import Request

__all__ = [
    "Question",
    "affinity_key",
    "image_sources",
    "answer_request",
    "cot_request",
    "s2_request",
    "short_request",
]


@dataclass(frozen=True, slots=True)
class Question:
    """The validated inputs of a run."""

    text: str
    image: ImageRef | None
    """The first image (None without images)."""
    options: dict[str, str] | None
    """Option letter → option text, in display order."""
    kind: AnswerKind
    images: tuple[ImageRef, ...] = ()
    """Every image, in order (may be left empty when there is only ``image``)."""
    videos: tuple[VideoRef, ...] = ()
    """The video (at most one), its frames sampled."""

    @property
    def all_images(self) -> tuple[ImageRef, ...]:
        """Every image, in the order the models see them."""
        if self.images:
            return self.images
        return () if self.image is None else (self.image,)

    @classmethod
    def from_input(
        cls, state: Mapping[str, Any], ctx: MAIContext, policy: ImagePolicy | None = None
    ) -> Question:
        """Validate a run's raw inputs; turns paths / data URLs / bytes into references.

        ``image`` (one) and ``images`` (several, after it) are accepted under ``policy`` (None:
        a trusted caller's, any local path), as is ``video`` (its frames sampled by the
        context's ``video_fps`` and ``max_frames``); the question and every image are held to
        :mod:`mai_graph.inputs.limits` (images too small for the vision processors are scaled up,
        extreme aspect ratios refused), and the count and total pixels of the question's media
        to the policy's limits (:func:`~mai_graph.inputs.limits.check_media`).
        Blocking (file reads, image decoding, the image store): call it off the event loop.
        """
        text = check_question(state.get("question"))
        options = normalize_options(state.get("options"))
        sources = image_sources(state)
        # The count before any image is read, each image's pixels against what is left of the
        # total before it is decoded.
        images = tuple(fit_image(ref) for ref in resolve_images(sources, policy))
        raw_video = state.get("video")
        videos: tuple[VideoRef, ...] = ()
        if raw_video is not None:
            video = resolve_video(
                raw_video, policy, video_fps=ctx.video_fps, max_frames=ctx.max_frames
            )
            videos = (video,)
        if len(images) > 1 or videos:
            check_media(images, videos, policy)
        first = images[0] if images else None
        return cls(text, first, options, resolve_kind(ctx.answer_kind, options), images, videos)

    @classmethod
    def from_state(cls, state: Mapping[str, Any], ctx: MAIContext) -> Question:
        """The question as the first node normalized it (``state["request"]``; no I/O)."""
        request = state["request"]
        options = request["options"]
        return cls(
            request["question"],
            request["image"],
            options,
            resolve_kind(ctx.answer_kind, options),
            tuple(request.get("images") or ()),
            tuple(request.get("videos") or ()),
        )

    def as_request(self) -> Request:
        """The state's record of this run's inputs (``images`` / ``videos`` when it has any)."""
        request = Request(question=self.text, image=self.image, options=self.options)
        if self.image is not None:
            request["images"] = list(self.all_images)
        if self.videos:
            request["videos"] = list(self.videos)
        return request

    def choices(self, ctx: MAIContext) -> tuple[str, ...] | None:
        """Constrained outputs for short answers: the option letters (multiple choice)."""
        if self.kind == "choice" and self.options and ctx.constrain_choices:
            return tuple(self.options)
        return None


def image_sources(state: Mapping[str, Any]) -> list[Any]:
    """A run's raw image inputs in order: ``image``, then each of ``images``.

    >>> image_sources({"image": "a.png", "images": ["b.png", "c.png"]})
    ['a.png', 'b.png', 'c.png']

    Raises:
        ImageError: ``images`` is not a list.
    """
    first = state.get("image")
    more = state.get("images")
    if more is None:
        return [] if first is None else [first]
    if not isinstance(more, list | tuple):
        raise ImageError(
            f"images must be a list of images, got {type(more).__name__}",
            parameter="images",
            value=repr(more)[:80],
            fix="give images as a list (one image: use image)",
        )
    return ([] if first is None else [first]) + list(more)


def affinity_key(q: Question) -> str:
    """The run's routing key for load balancers: a digest of its image and question.

    Every call of a run carries it (their prompts share the image + question prefix), and so
    does a later run of the same question on the same image, whose prompts start the same.

    >>> affinity_key(Question("Which colour?", None, None, "text"))
    'mai-d3c2ba8a21fcfc0d279edf29'
    """
    digest = hashlib.sha256((q.image["sha256"] if q.image else "").encode())
    digest.update(b"\0" + q.text.encode())
    for letter, text in (q.options or {}).items():
        digest.update(f"\0{letter}\0{text}".encode())
    return "mai-" + digest.hexdigest()[:24]


def _request(
    q: Question, ctx: MAIContext, messages: tuple[Message, ...], purpose: Purpose, **limits: Any
) -> GenerationRequest:
    """A call of this run, with the settings every purpose shares.

    Those are the run's sampling settings, the generated tokens' logprobs and the routing key;
    ``limits`` are the purpose's own (``max_tokens``, ``min_tokens``, ``choices``).
    """
    return GenerationRequest(
        messages=messages,
        temperature=ctx.temperature,
        seed=ctx.seed,
        logprobs=0,
        purpose=purpose,
        affinity_key=affinity_key(q),
        **limits,
    )


def short_request(q: Question, ctx: MAIContext) -> GenerationRequest:
    """A short answer (verification and the short baselines); logprobs give its probability.

    For a bounded question (``choice``, ``yes_no``) it asks for the distribution over the
    allowed answers too (``verify_distribution``), which backends read off one decode step; so
    do the S2 turn and the large model's answer after the transfer.
    """
    messages = short_messages(ctx, q.all_images, q.text, q.options, q.kind, q.videos)
    return _answer(q, ctx, messages, "short", ctx.short_max_tokens)


def _answer(
    q: Question, ctx: MAIContext, messages: tuple[Message, ...], purpose: Purpose, budget: int
) -> GenerationRequest:
    """An answer call (short, S2, after the transfer), constrained to the option letters.

    For a bounded question it is read off one step with its distribution
    (``verify_distribution``).
    """
    forms = answer_forms(q.kind, q.options) if ctx.verify_distribution else None
    return _request(
        q, ctx, messages, purpose, max_tokens=budget, choices=q.choices(ctx), distribution=forms
    )


def cot_request(q: Question, ctx: MAIContext) -> GenerationRequest:
    """The chain of thought (its generated logprobs come free and feed the scorers)."""
    messages = cot_messages(ctx, q.all_images, q.text, q.options, q.videos)
    return _request(
        q, ctx, messages, "cot", max_tokens=ctx.cot_max_tokens, min_tokens=ctx.cot_min_tokens
    )


def s2_request(
    q: Question, ctx: MAIContext, reasoning: str, reasoning_token_ids: Sequence[int] | None
) -> GenerationRequest:
    """The S2 turn: the CoT conversation, the reasoning's exact ids, then "answer only".

    The sparsify node scores tokens over this same prompt (attention strategy).
    """
    cot = cot_messages(ctx, q.all_images, q.text, q.options, q.videos)
    messages = s2_messages(ctx, cot, reasoning, reasoning_token_ids, q.kind)
    return _answer(q, ctx, messages, "s2", ctx.s2_max_tokens)


def answer_request(
    q: Question,
    ctx: MAIContext,
    transfer: str | Sequence[tuple[str, Sequence[int] | None]],
    transfer_token_ids: Sequence[int] | None,
) -> GenerationRequest:
    """The large model's short answer after reading the transferred reasoning.

    ``transfer`` may also be several drafts' reasonings, as ``(text, token_ids)`` pieces, best
    first.
    """
    messages = transfer_messages(
        ctx, q.all_images, q.text, q.options, q.kind, transfer, transfer_token_ids, q.videos
    )
    return _answer(q, ctx, messages, "answer", ctx.short_max_tokens)
