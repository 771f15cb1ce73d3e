"""A rendered prompt as model inputs: media placeholders expanded, vision tensors, m-RoPE positions.

The prompt arrives as token ids with one placeholder per image and per video (see
:mod:`mai_graph.backends.render`); the model wants each image placeholder repeated once per
merged image patch, each video placeholder expanded frame by frame (a ``<t seconds>``
timestamp, then the frame's tokens between vision start / end markers, as Qwen3-VL's processor
and vLLM lay it out), the processors' ``pixel_values`` / ``image_grid_thw`` and
``pixel_values_videos`` / ``video_grid_thw``, and 3-D positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mai_graph.backends.render import RenderedPrompt
from mai_graph.errors import ConfigError
from mai_graph.inputs.images import ImageRef, load_image
from mai_graph.inputs.video import VideoRef, load_video, processor_metadata

__all__ = ["VISION_KEYS", "image_end", "media_end", "prompt_inputs"]

VISION_KEYS = ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw")
"""The vision inputs of a forward pass (images, videos)."""


def prompt_inputs(model: Any, processor: Any, rendered: RenderedPrompt) -> dict[str, Any]:
    """``input_ids``, ``position_ids``, vision inputs and spliced ``spans`` of a rendered prompt.

    Args:
        model: A Qwen-VL style model (``config.image_token_id``, ``model.get_rope_index``).
        processor: Its processor (``image_processor`` with ``merge_size``).
        rendered: The prompt's ids (one placeholder per image), images and spliced spans.

    Returns:
        Tensors for the model's forward pass, plus ``spans``: the (start, end) positions of the
        spliced ids (e.g. the reasoning of an S2 prompt) in the expanded ``input_ids``, and
        ``media``: the hashes of the prompt's images and videos, in order (cache keys).
    """
    inputs = _expand(model, processor, rendered.token_ids, rendered.images, rendered.videos)
    extra = inputs["input_ids"].shape[1] - len(rendered.token_ids)
    media = {model.config.image_token_id, getattr(model.config, "video_token_id", None)}
    first_image = next((i for i, t in enumerate(rendered.token_ids) if t in media), None)
    inputs["spans"] = [
        (start + extra, end + extra) if first_image is not None and first_image < start else
        (start, end)
        for start, end in rendered.spans
    ]  # fmt: skip
    inputs["media"] = [r["sha256"] for r in rendered.images] + [
        v["sha256"] for v in rendered.videos
    ]
    return inputs


def image_end(ids: Sequence[int], image_token: int) -> int:
    """One past the last image token in ``ids`` (0 without images).

    >>> image_end([1, 9, 9, 2, 3], image_token=9)
    3
    >>> image_end([1, 2], image_token=9)
    0
    """
    for i in range(len(ids) - 1, -1, -1):
        if ids[i] == image_token:
            return i + 1
    return 0


def media_end(ids: Sequence[int], config: Any) -> int:
    """One past the last image or video token in ``ids`` (0 without media)."""
    end = image_end(ids, config.image_token_id)
    video_token = getattr(config, "video_token_id", None)
    return max(end, image_end(ids, video_token)) if video_token is not None else end


def _image_slots(processor: Any, images: list[ImageRef]) -> tuple[dict[str, Any], list[int]]:
    out = processor.image_processor(images=[load_image(r) for r in images], return_tensors="pt")
    grids = out["image_grid_thw"]
    merge = processor.image_processor.merge_size
    counts = [int(g.prod()) // (merge * merge) for g in grids]
    return {"pixel_values": out["pixel_values"], "image_grid_thw": grids}, counts


def _video_slots(
    model: Any, processor: Any, videos: list[VideoRef]
) -> tuple[dict[str, Any], list[list[int]]]:
    """Vision inputs of the videos and, per video, the ids that replace its placeholder."""
    import numpy as np

    video_processor = processor.video_processor
    metadata = [processor_metadata(v) for v in videos]
    out = video_processor(
        videos=[np.stack([np.asarray(f) for f in load_video(v)]) for v in videos],
        video_metadata=metadata,
        do_sample_frames=False,
        return_tensors="pt",
    )
    config = model.config
    merge = video_processor.merge_size
    tokenizer = processor.tokenizer
    expansions = []
    for grid, meta in zip(out["video_grid_thw"], metadata):
        per_frame = int(grid[1:].prod()) // (merge * merge)
        times = processor._calculate_timestamps(
            list(meta["frames_indices"]), meta["fps"], video_processor.temporal_patch_size
        )
        ids: list[int] = []
        for t in times[: int(grid[0])]:
            ids += tokenizer.encode(f"<{t:.1f} seconds>", add_special_tokens=False)
            ids += [config.vision_start_token_id, *[config.video_token_id] * per_frame]
            ids.append(config.vision_end_token_id)
        expansions.append(ids)
    vision = {"pixel_values_videos": out["pixel_values_videos"],
              "video_grid_thw": out["video_grid_thw"]}  # fmt: skip
    return vision, expansions


def _expand(
    model: Any,
    processor: Any,
    ids: list[int],
    images: list[ImageRef],
    videos: list[VideoRef] | None = None,
) -> dict[str, Any]:
    import torch

    config = model.config
    image_token = config.image_token_id
    video_token = getattr(config, "video_token_id", None)
    vision: dict[str, Any] = {}
    image_counts: list[int] = []
    video_ids: list[list[int]] = []
    if images:
        more, image_counts = _image_slots(processor, images)
        vision.update(more)
    if videos:
        more, video_ids = _video_slots(model, processor, videos)
        vision.update(more)
    slots, expansions = iter(image_counts), iter(video_ids)
    expanded: list[int] = []
    for tid in ids:
        if tid == image_token and images:
            n = next(slots, None)
            if n is None:
                raise ConfigError(
                    "the prompt has more image placeholders than images",
                    parameter="messages",
                    fix="give one image part per image placeholder",
                )
            expanded.extend([image_token] * n)
        elif tid == video_token and videos:
            # The placeholder's own vision start / end markers stay around the expansion.
            ids_of_video = next(expansions, None)
            if ids_of_video is None:
                raise ConfigError(
                    "the prompt has more video placeholders than videos",
                    parameter="messages",
                    fix="give one video part per video placeholder",
                )
            expanded.extend(ids_of_video)
        else:
            expanded.append(tid)
    input_ids = torch.tensor([expanded])
    mm_types = (input_ids == image_token).int()
    if video_token is not None:
        mm_types += 2 * (input_ids == video_token).int()
    positions, _ = model.model.get_rope_index(
        input_ids,
        mm_types,
        image_grid_thw=vision.get("image_grid_thw"),
        video_grid_thw=vision.get("video_grid_thw"),
    )
    return {"input_ids": input_ids, "position_ids": positions, **vision}
