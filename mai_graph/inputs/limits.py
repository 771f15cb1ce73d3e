"""Input limits checked before any engine: question size, image shape, prompt length.

Vision processors have limits of their own, and an engine that meets them reports an opaque
error (Qwen-VL refuses an aspect ratio over 200:1 with an empty message, and mistakes the
channels of a 1x1 image). mai-graph checks every run's input against the limits below when
the first node validates it, so a bad input fails with an error naming the problem and the fix,
on every backend, and never reaches an engine:

- a question longer than :data:`MAX_QUESTION_CHARS` characters is refused
  (:class:`~mai_graph.errors.ConfigError`);
- an image whose long side is more than :data:`MAX_ASPECT_RATIO` times its short side is
  refused (:class:`~mai_graph.errors.ImageError`): padding it would leave the model a strip of
  a few pixels to look at, so the caller is asked to crop or pad it;
- an image whose short side is under :data:`MIN_IMAGE_SIDE` pixels is converted: scaled up
  (bicubic, keeping its aspect ratio) until the short side is :data:`MIN_IMAGE_SIDE`, and
  answered; the run's ``asked`` holds the reference to the scaled copy.

Engines check the rendered prompt (text plus image tokens) against their context length before
a request is submitted (:func:`check_prompt_length`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from mai_graph.errors import ConfigError, ImageError
from mai_graph.inputs.images import DEFAULT_MAX_PIXELS, ImageRef, load_image, make_ref
from mai_graph.inputs.sources import ImagePolicy, check_image_count
from mai_graph.text import check_text

if TYPE_CHECKING:
    from mai_graph.inputs.video import VideoRef

__all__ = [
    "DEFAULT_MM_LIMITS",
    "check_backends",
    "check_media",
    "check_media_counts",
    "check_mm_limits",
    "MAX_ASPECT_RATIO",
    "MAX_QUESTION_CHARS",
    "MIN_IMAGE_SIDE",
    "check_budgets",
    "check_prompt_length",
    "check_question",
    "fit_image",
]

log = logging.getLogger(__name__)

MAX_QUESTION_CHARS = 100_000
"""Longest question accepted, in characters (about 25k tokens; a guard against huge inputs).
Each engine also checks the rendered prompt against its own context length."""

MAX_ASPECT_RATIO = 200.0
"""Images whose long side exceeds this many times the short side are refused (Qwen-VL's
processor limit; other processors accept at least this)."""

MIN_IMAGE_SIDE = 32
"""Images with a shorter side are scaled up to this many pixels (one Qwen3-VL merged patch,
16 px x 2; Qwen2-VL's is 28)."""


def check_question(text: object) -> str:
    """``text`` if it is a usable question: a string with a non-space character, not too long.

    >>> check_question("How many apples?")
    'How many apples?'

    Raises:
        ConfigError: Not a string, empty or only whitespace, or over :data:`MAX_QUESTION_CHARS`.
    """
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(
            f"question must be a non-empty string, got {text!r:.80}",
            parameter="question",
            value=text if not isinstance(text, str) else text[:80],
            fix="pass the question text as input['question']",
        )
    return check_text(text, "question", MAX_QUESTION_CHARS)


def aspect_ratio(width: int, height: int) -> float:
    """Long side over short side.

    >>> aspect_ratio(8000, 4), aspect_ratio(300, 600)
    (2000.0, 2.0)
    """
    return max(width, height) / min(width, height)


def fit_image(ref: ImageRef) -> ImageRef:
    """``ref`` if its shape suits every vision processor, else a scaled copy (blocking).

    Args:
        ref: A validated image (from :func:`~mai_graph.inputs.sources.resolve_image`).

    Returns:
        ``ref`` itself, or, for an image whose short side is under :data:`MIN_IMAGE_SIDE`, the
        reference of a copy scaled up (bicubic, same aspect ratio) so the short side is
        :data:`MIN_IMAGE_SIDE`.

    Raises:
        ImageError: The aspect ratio is over :data:`MAX_ASPECT_RATIO`.
    """
    width, height = ref["width"], ref["height"]
    ratio = aspect_ratio(width, height)
    if ratio > MAX_ASPECT_RATIO:
        raise ImageError(
            f"image is {width}x{height} pixels: its aspect ratio {ratio:.0f}:1 is over the "
            f"limit of {MAX_ASPECT_RATIO:.0f}:1 that vision models accept",
            parameter="image",
            value=f"{width}x{height}",
            fix=f"crop the image, or pad its short side to at least "
            f"{math.ceil(max(width, height) / MAX_ASPECT_RATIO)} px",
        )
    short = min(width, height)
    if short >= MIN_IMAGE_SIDE:
        return ref
    from PIL import Image

    scale = MIN_IMAGE_SIDE / short
    size = (max(MIN_IMAGE_SIDE, round(width * scale)), max(MIN_IMAGE_SIDE, round(height * scale)))
    scaled = load_image(ref).resize(size, Image.Resampling.BICUBIC)
    fitted = make_ref(scaled, f"<{width}x{height} image scaled up>", max_pixels=DEFAULT_MAX_PIXELS)
    log.info("image %s... is %dx%d: scaled up to %dx%d", ref["sha256"][:12], width, height, *size)
    return fitted


def check_prompt_length(
    model: str, prompt_tokens: int, max_model_len: int, *, purpose: str = "generate"
) -> None:
    """Refuse a prompt that leaves no room in the model's context for even one new token.

    Args:
        model: The model's name (for the message).
        prompt_tokens: Text plus image tokens of the rendered prompt.
        max_model_len: The engine's context length.
        purpose: The request's purpose; after the reasoning (``s2``, ``answer``) the fix is a
            shorter reasoning budget rather than a shorter question.

    Raises:
        ConfigError: ``prompt_tokens >= max_model_len``.

    >>> check_prompt_length("m", 100, 4096)
    """
    if prompt_tokens < max_model_len:
        return
    if purpose in ("s2", "answer", "attention"):
        parameter, fix = "cot_max_tokens", "lower cot_max_tokens (or keep_ratio), or "
    else:
        parameter, fix = "question", "shorten the question or use a smaller image, or "
    raise ConfigError(
        f"{model}: the {purpose} prompt has {prompt_tokens:,} tokens (text and image), which "
        f"does not fit the model's context of max_model_len={max_model_len:,} tokens",
        parameter=parameter,
        value=prompt_tokens,
        fix=fix + "start the engine with a larger max_model_len",
    )


def context_length(backend: object) -> int | None:
    """A backend's context length (``max_model_len``) when it declares one, else None."""
    value = getattr(backend, "max_model_len", None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def check_budgets(
    reasoners: Sequence[object], readers: Sequence[object], *, cot: int, s2: int, transfer: int,
    answer: int,
) -> None:  # fmt: skip
    """Refuse token budgets no prompt could fit, before the run's first model call.

    A model that reasons must hold its reasoning budget and the S2 turn after it
    (``cot + s2``); a model that reads a transfer must hold the transferred tokens and its
    answer (``transfer + answer``), whatever the prompt. The prompt itself is checked per call
    (:func:`check_prompt_length`); this check stops a budget that cannot fit from reasoning
    for seconds before the S2 turn is refused.

    >>> class Engine:
    ...     name, max_model_len = "small", 4096
    >>> check_budgets([Engine()], [], cot=512, s2=16, transfer=0, answer=16)

    Raises:
        ConfigError: Naming the budget, the model and its context.
    """
    for backend in reasoners:
        limit = context_length(backend)
        if limit is not None and cot + s2 >= limit:
            raise ConfigError(
                f"{getattr(backend, 'name', backend)}: a reasoning budget of {cot:,} tokens plus "
                f"the S2 turn's {s2:,} cannot fit the model's context of max_model_len="
                f"{limit:,} tokens, whatever the prompt",
                parameter="cot_max_tokens",
                value=cot,
                fix=f"lower cot_max_tokens below {max(1, limit - s2 - 1):,} (well below: the "
                "prompt needs room too), or start the engine with a larger max_model_len",
            )
    for backend in readers:
        limit = context_length(backend)
        if limit is not None and transfer + answer >= limit:
            raise ConfigError(
                f"{getattr(backend, 'name', backend)}: a transfer of up to {transfer:,} tokens "
                f"plus a {answer:,}-token answer cannot fit the model's context of "
                f"max_model_len={limit:,} tokens",
                parameter="max_transfer_tokens",
                value=transfer,
                fix="lower max_transfer_tokens (or cot_max_tokens), or start the engine with a "
                "larger max_model_len",
            )


# -- media per question and per engine ---------------------------------------------------------

DEFAULT_MM_LIMITS: Mapping[str, int] = {"image": 4, "video": 1}
"""Media items one prompt may carry, by kind, unless a backend is told otherwise (in-process
engines plan memory for them at start-up)."""


def check_media(
    images: Sequence[ImageRef], videos: Sequence[VideoRef], policy: ImagePolicy | None
) -> None:
    """Hold one question's images and videos to the policy's count and total-pixel limits.

    Raises:
        ImageError: More images than ``policy.max_images``, more than one video, or more pixels
            in all images and sampled frames together than ``policy.max_total_pixels``.
    """
    policy = ImagePolicy.trusted() if policy is None else policy
    check_image_count(len(images), policy)
    if len(videos) > 1:
        raise ImageError(
            f"a question may carry one video, got {len(videos)}",
            parameter="video",
            value=len(videos),
            fix="send one video (or its frames)",
        )
    total = sum(r["width"] * r["height"] for r in images)
    total += sum(v["width"] * v["height"] * len(v["indices"]) for v in videos)
    if total > policy.max_total_pixels:
        raise ImageError(
            f"the question's images and video frames have {total:,} pixels together, over the "
            f"limit of {policy.max_total_pixels:,}",
            parameter="images",
            value=total,
            fix="send fewer or smaller images, or sample fewer frames (max_frames, video_fps)",
        )


def check_mm_limits(limits: Mapping[str, int] | None) -> dict[str, int]:
    """Validate a backend's ``limit_mm_per_prompt`` (None: :data:`DEFAULT_MM_LIMITS`).

    >>> check_mm_limits({"image": 8})
    {'image': 8, 'video': 1}

    Raises:
        ConfigError: An unknown kind, or a count that is not an int >= 0.
    """
    if limits is None:
        return dict(DEFAULT_MM_LIMITS)
    if not isinstance(limits, Mapping):
        raise ConfigError(
            f"limit_mm_per_prompt must be a mapping like {{'image': 4, 'video': 1}}, got "
            f"{limits!r}",
            parameter="limit_mm_per_prompt",
            value=limits,
        )
    unknown = sorted(set(limits) - set(DEFAULT_MM_LIMITS))
    bad = {k: v for k, v in limits.items()
           if isinstance(v, bool) or not isinstance(v, int) or v < 0}  # fmt: skip
    if unknown or bad:
        raise ConfigError(
            f"limit_mm_per_prompt takes counts >= 0 for {sorted(DEFAULT_MM_LIMITS)}, got "
            f"{dict(limits)}",
            parameter="limit_mm_per_prompt",
            value=dict(limits),
            fix="e.g. {'image': 4, 'video': 1}",
        )
    return {**DEFAULT_MM_LIMITS, **limits}


def check_media_counts(
    model: str,
    limits: Mapping[str, int],
    images: Sequence[ImageRef],
    videos: Sequence[VideoRef],
) -> None:
    """Refuse a prompt with more images or videos than a backend was started for.

    Raises:
        ConfigError: Over ``limits`` (the fix names the backend option).
    """
    for kind, count in (("image", len(images)), ("video", len(videos))):
        if count > limits.get(kind, 0):
            raise ConfigError(
                f"{model}: the prompt has {count} {kind}(s), over this engine's limit of "
                f"{limits.get(kind, 0)} per prompt",
                parameter="limit_mm_per_prompt",
                value=dict(limits),
                fix=f"send fewer {kind}s, or start the backend with "
                f"limit_mm_per_prompt={{'{kind}': {count}, ...}}",
            )


def check_backends(
    images: Sequence[ImageRef],
    videos: Sequence[VideoRef],
    limits: Sequence[tuple[str, Mapping[str, int] | None]],
) -> None:
    """Check a question's media against each backend's ``(name, media limits)``.

    The limits are the backends' declared ones (``capabilities.media_limits``; None: no
    limits). A run then fails before its first model call rather than halfway.

    Raises:
        ConfigError: A backend cannot take this many images or videos.
    """
    for name, per_prompt in limits:
        if per_prompt is not None:
            check_media_counts(name, per_prompt, images, videos)
