"""Loading a checkpoint's model and processor, with errors that say what to pass instead.

Blocking file I/O: the backend calls these from a worker thread, never on the event loop. One
checkpoint loads at a time in the process: transformers resolves its classes lazily on first
import, which is not thread-safe (two backends loading at once, as a graph's first verification
step does, failed with ``cannot import name``), and two loads only compete for disk and memory.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from mai_graph.errors import BackendError, ConfigError

__all__ = ["eos_token_ids", "load_model", "load_processor"]

_LOADING = threading.Lock()


def _looks_local(source: str) -> bool:
    """Whether ``source`` is a folder path rather than a hub id.

    >>> _looks_local("./ckpt"), _looks_local("/models/x"), _looks_local("Qwen/Qwen3-VL-2B")
    (True, True, False)
    """
    return source.startswith((".", "~")) or os.path.isabs(source) or source.count("/") > 1


def load_model(source: str, dtype: str, **model_kwargs: Any) -> Any:
    """An image-text-to-text model from a checkpoint folder or hub id, in eval mode.

    Args:
        source: Checkpoint folder or hub id.
        dtype: Torch dtype name (``float32``, ``bfloat16``, ...).
        **model_kwargs: Passed to ``from_pretrained`` (e.g. ``attn_implementation``).
    """
    with _LOADING:
        return _load_model(source, dtype, model_kwargs)


def _load_model(source: str, dtype: str, model_kwargs: dict[str, Any]) -> Any:
    import torch
    from transformers import AutoModelForImageTextToText

    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ConfigError(
            f"dtype must name a torch dtype, got {dtype!r}",
            parameter="dtype",
            value=dtype,
            fix="use e.g. float32 (fastest on CPU), bfloat16 or float16",
        )
    if _looks_local(source) and not os.path.isdir(source):
        raise BackendError(
            f"model folder not found: {source}",
            parameter="model",
            value=source,
            fix="pass an existing checkpoint folder, or build the tiny test pair "
            "with `mai-graph build-tiny DIR`",
        )
    try:
        model = AutoModelForImageTextToText.from_pretrained(
            source, dtype=torch_dtype, **model_kwargs
        )
    except (OSError, ValueError) as exc:
        raise BackendError(
            f"cannot load model {source!r}: {exc}",
            parameter="model",
            value=source,
            fix="pass a local checkpoint folder (or a hub id on a machine with access)",
        ) from exc
    return model.eval()


def load_processor(source: str, name: str) -> Any:
    """The checkpoint's processor; refuses one without an image processor.

    Args:
        source: Checkpoint folder or hub id.
        name: The backend's name, for the error message.
    """
    with _LOADING:
        from transformers import AutoProcessor

        processor = AutoProcessor.from_pretrained(source)
    if not hasattr(processor, "image_processor"):
        raise ConfigError(
            f"{name}: the processor has no image processor ({type(processor).__name__})",
            parameter="processor",
            fix="use a vision-language checkpoint with a processor config",
        )
    return processor


def eos_token_ids(model: Any, tokenizer: Any) -> set[int]:
    """End-of-turn ids named by the model's generation config and by the tokenizer."""
    ids: set[int] = set()
    for source in (model.generation_config, tokenizer):
        eos = getattr(source, "eos_token_id", None)
        if isinstance(eos, int):
            ids.add(eos)
        elif isinstance(eos, list | tuple):
            ids.update(eos)
    return ids
