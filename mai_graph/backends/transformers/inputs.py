"""A rendered prompt as model inputs: image placeholders expanded, vision tensors, m-RoPE positions.

The prompt arrives as token ids with one placeholder per image (see
:mod:`mai_graph.backends.render`); the model wants each placeholder repeated once per merged
image patch, the image processor's ``pixel_values`` / ``image_grid_thw``, and 3-D positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mai_graph.backends.render import RenderedPrompt
from mai_graph.errors import ConfigError
from mai_graph.images import ImageRef, load_image

__all__ = ["image_end", "prompt_inputs"]


def prompt_inputs(model: Any, processor: Any, rendered: RenderedPrompt) -> dict[str, Any]:
    """``input_ids``, ``position_ids``, vision inputs and spliced ``spans`` of a rendered prompt.

    Args:
        model: A Qwen-VL style model (``config.image_token_id``, ``model.get_rope_index``).
        processor: Its processor (``image_processor`` with ``merge_size``).
        rendered: The prompt's ids (one placeholder per image), images and spliced spans.

    Returns:
        Tensors for the model's forward pass, plus ``spans``: the (start, end) positions of the
        spliced ids (e.g. the reasoning of an S2 prompt) in the expanded ``input_ids``.
    """
    inputs = _expand(model, processor, rendered.token_ids, rendered.images)
    extra = inputs["input_ids"].shape[1] - len(rendered.token_ids)
    image_token = model.config.image_token_id
    first_image = next((i for i, t in enumerate(rendered.token_ids) if t == image_token), None)
    inputs["spans"] = [
        (start + extra, end + extra) if first_image is not None and first_image < start else
        (start, end)
        for start, end in rendered.spans
    ]  # fmt: skip
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


def _expand(model: Any, processor: Any, ids: list[int], images: list[ImageRef]) -> dict[str, Any]:
    import torch

    image_token = model.config.image_token_id
    vision: dict[str, Any] = {}
    expanded: list[int] = []
    if images:
        out = processor.image_processor(images=[load_image(r) for r in images], return_tensors="pt")
        grids = out["image_grid_thw"]
        merge = processor.image_processor.merge_size
        counts = [int(g.prod()) // (merge * merge) for g in grids]
        vision = {"pixel_values": out["pixel_values"], "image_grid_thw": grids}
        slots = iter(counts)
        for tid in ids:
            if tid != image_token:
                expanded.append(tid)
                continue
            n = next(slots, None)
            if n is None:
                raise ConfigError(
                    "the prompt has more image placeholders than images",
                    parameter="messages",
                    fix="give one image part per image placeholder",
                )
            expanded.extend([image_token] * n)
    else:
        expanded = list(ids)
    input_ids = torch.tensor([expanded])
    mm_types = (input_ids == image_token).int()
    positions, _ = model.model.get_rope_index(
        input_ids, mm_types, image_grid_thw=vision.get("image_grid_thw")
    )
    return {"input_ids": input_ids, "position_ids": positions, **vision}
