"""The run's question as the first node reads it, and one request builder per call purpose.

The first node validates the inputs once (:func:`read_question`) and records the
:class:`~mai_graph.state.Question` as ``state["asked"]``; later nodes build their calls from
that record as it is. Each model call of the graph is built by exactly one function here, so the
prompts of the verify, reasoning, S2 and transfer calls share their prefixes by construction.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from mai_graph.answers import extract_answer, normalize_options, resolve_kind
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
from mai_graph.state import Question

__all__ = [
    "Question",
    "affinity_key",
    "all_images",
    "answer_request",
    "canonical",
    "choices",
    "cot_request",
    "image_sources",
    "read_question",
    "s2_request",
    "short_request",
]


def read_question(
    state: Mapping[str, Any], ctx: MAIContext, policy: ImagePolicy | None = None
) -> Question:
    """Validate a run's raw inputs into its :class:`~mai_graph.state.Question`.

    Turns paths / data URLs / bytes into references: ``image`` (one) and ``images`` (several,
    after it) are accepted under ``policy`` (None: a trusted caller's, any local path), as is
    ``video`` (its frames sampled by the context's ``video_fps`` and ``max_frames``); the question
    and every image are held to :mod:`mai_graph.inputs.limits` (images too small for the vision
    processors are scaled up, extreme aspect ratios refused), and the count and total pixels of
    the question's media to the policy's limits (:func:`~mai_graph.inputs.limits.check_media`).
    Blocking (file reads, image decoding, the image store): call it off the event loop.
    """
    text = check_question(state.get("question"))
    options = normalize_options(state.get("options"))
    sources = image_sources(state)
    # The count before any image is read, each image's pixels against what is left of the
    # total before it is decoded.
    images = [fit_image(ref) for ref in resolve_images(sources, policy)]
    raw_video = state.get("video")
    videos: list[VideoRef] = []
    if raw_video is not None:
        videos.append(
            resolve_video(raw_video, policy, video_fps=ctx.video_fps, max_frames=ctx.max_frames)
        )
    if len(images) > 1 or videos:
        check_media(images, videos, policy)
    q = Question(
        question=text,
        image=images[0] if images else None,
        options=options,
        kind=resolve_kind(ctx.answer_kind, options),
    )
    if images:
        q["images"] = images
    if videos:
        q["videos"] = videos
    return q


def all_images(q: Question) -> tuple[ImageRef, ...]:
    """Every image of the question, in the order the models see them."""
    images = q.get("images")
    if images:
        return tuple(images)
    return () if q["image"] is None else (q["image"],)


def choices(q: Question, ctx: MAIContext) -> tuple[str, ...] | None:
    """Constrained outputs for short answers: the option letters (multiple choice)."""
    options = q["options"]
    if q["kind"] == "choice" and options and ctx.constrain_choices:
        return tuple(options)
    return None


def canonical(text: str, q: Question) -> str:
    """An answer's canonical form for this question (what agreement and scoring compare)."""
    return extract_answer(text, q["kind"], q["options"])


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

    >>> affinity_key(Question(question="Which colour?", image=None, options=None, kind="text"))
    'mai-d3c2ba8a21fcfc0d279edf29'
    """
    image = q["image"]
    digest = hashlib.sha256((image["sha256"] if image else "").encode())
    digest.update(b"\0" + q["question"].encode())
    for letter, text in (q["options"] or {}).items():
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
    messages = short_messages(
        ctx, all_images(q), q["question"], q["options"], q["kind"], _videos(q)
    )
    return _answer(q, ctx, messages, "short", ctx.short_max_tokens)


def _answer(
    q: Question, ctx: MAIContext, messages: tuple[Message, ...], purpose: Purpose, budget: int
) -> GenerationRequest:
    """An answer call (short, S2, after the transfer), constrained to the option letters.

    For a bounded question it is read off one step with its distribution
    (``verify_distribution``).
    """
    forms = answer_forms(q["kind"], q["options"]) if ctx.verify_distribution else None
    return _request(
        q, ctx, messages, purpose, max_tokens=budget, choices=choices(q, ctx), distribution=forms
    )


def cot_request(q: Question, ctx: MAIContext) -> GenerationRequest:
    """The chain of thought (its generated logprobs come free and feed the scorers)."""
    messages = cot_messages(ctx, all_images(q), q["question"], q["options"], _videos(q))
    return _request(
        q, ctx, messages, "cot", max_tokens=ctx.cot_max_tokens, min_tokens=ctx.cot_min_tokens
    )


def s2_request(
    q: Question, ctx: MAIContext, reasoning: str, reasoning_token_ids: Sequence[int] | None
) -> GenerationRequest:
    """The S2 turn: the CoT conversation, the reasoning's exact ids, then "answer only".

    The sparsify node scores tokens over this same prompt (attention strategy).
    """
    cot = cot_messages(ctx, all_images(q), q["question"], q["options"], _videos(q))
    messages = s2_messages(ctx, cot, reasoning, reasoning_token_ids, q["kind"])
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
        ctx,
        all_images(q),
        q["question"],
        q["options"],
        q["kind"],
        transfer,
        transfer_token_ids,
        _videos(q),
    )
    return _answer(q, ctx, messages, "answer", ctx.short_max_tokens)


def _videos(q: Question) -> tuple[VideoRef, ...]:
    return tuple(q.get("videos") or ())
