"""The attention scoring pass: how much a prompt's last turn attends to its spliced reasoning.

Attention weights need transformers' eager attention (the fast kernels return none). The cheap
path runs everything before the query rows with the model's own kernel (or reuses a cached
prefix), then only the query rows in eager mode: the same rows of the same softmax at a fraction
of a full eager pass.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from mai_graph.backends.transformers.inputs import VISION_KEYS, media_end
from mai_graph.backends.transformers.kv_cache import KVCacheStore, cache_key, empty_cache
from mai_graph.errors import ConfigError

__all__ = ["attention_implementations", "eager_attention", "reasoning_attention", "score_layers"]


def attention_implementations(config: Any) -> dict[str, str | None]:
    """The attention implementation of a model config and of each of its sub-configs.

    Keys as ``set_attn_implementation`` takes them: ``""`` for the model itself, then the
    sub-config names (``text_config``, ``vision_config``, ...).
    """
    chosen: dict[str, str | None] = {"": config._attn_implementation}
    for key in getattr(config, "sub_configs", {}) or {}:
        sub = getattr(config, key, None)
        if sub is not None:
            chosen[key] = sub._attn_implementation
    return chosen


@contextmanager
def eager_attention(model: Any) -> Iterator[None]:
    """Run ``model`` with eager attention inside the block, then restore what it had before."""
    before = attention_implementations(model.config)
    if set(before.values()) == {"eager"}:
        yield
        return
    model.set_attn_implementation("eager")
    try:
        yield
    finally:
        model.set_attn_implementation(before)


def score_layers(n_layers: int, layers: Sequence[int] | None) -> list[int]:
    """The layers to average over: ``layers`` checked, or by default the last third.

    >>> score_layers(4, None)
    [2, 3]
    >>> score_layers(5, None)
    [3, 4]
    >>> score_layers(4, [0])
    [0]
    """
    last_third = range(n_layers - (n_layers + 2) // 3, n_layers)
    chosen = list(layers) if layers is not None else list(last_third)
    if not chosen or any(not 0 <= i < n_layers for i in chosen):
        raise ConfigError(
            f"layers must be within 0..{n_layers - 1}, got {chosen}",
            parameter="layers",
            value=chosen,
            fix="pass layer indices of the scoring model, or None for the last third",
        )
    return chosen


def reasoning_attention(
    model: Any,
    inputs: dict[str, Any],
    caches: KVCacheStore,
    *,
    layers: Sequence[int] | None = None,
    full: bool = False,
) -> list[float]:
    """Attention from the rows after the last spliced span onto each of that span's tokens.

    Weights are averaged over heads and ``layers`` and summed over the query rows.

    Args:
        model: The model (any attention implementation; eager is switched on only for the
            pass that returns weights, and the previous one restored).
        inputs: :func:`~mai_graph.backends.transformers.inputs.prompt_inputs` of the prompt.
        caches: Where the prefix before the query rows is looked up and stored (cheap path).
        layers: Layer indices (default: the last third).
        full: One eager pass over the whole prompt instead (for checking; much slower).

    Returns:
        One score per token of the last spliced span.
    """
    import torch

    spans = inputs["spans"]
    if not spans:
        raise ConfigError(
            "attention scoring needs a prompt whose reasoning carries its token ids",
            parameter="request",
            fix="pass the S2 request built from the reasoning's generated ids",
        )
    start, end = spans[-1]
    ids, positions = inputs["input_ids"], inputs["position_ids"]
    if end >= ids.shape[1]:
        raise ConfigError(
            "no query rows follow the reasoning",
            parameter="request",
            fix="end the prompt with the turn whose attention is wanted",
        )
    chosen = score_layers(model.config.text_config.num_hidden_layers, layers)
    vision: dict[str, Any] = {k: inputs[k] for k in VISION_KEYS if k in inputs}
    with torch.inference_mode():
        if full:
            with eager_attention(model):
                out = model(input_ids=ids, position_ids=positions, output_attentions=True, **vision)
            rows = [a[0, :, end:, :] for a in out.attentions]
        else:
            prefix = cache_key(ids[0, :end].tolist(), model.config, inputs.get("media", ()))
            images_end = media_end(ids[0, :end].tolist(), model.config) if vision else 0
            cached, cache = caches.lookup(prefix, min_prefix=images_end)
            if cache is None:
                cache = empty_cache(model)
            if cached < end:
                prefill: dict[str, Any] = {
                    "input_ids": ids[:, cached:end],
                    "position_ids": positions[:, :, cached:end],
                    "past_key_values": cache,
                    "use_cache": True,
                }
                if cached == 0:
                    prefill.update(vision)
                model(**prefill)
                caches.store(prefix, cache)  # the next scoring of this prompt reuses it
            with eager_attention(model):
                out = model(
                    input_ids=ids[:, end:],
                    position_ids=positions[:, :, end:],
                    past_key_values=cache,
                    use_cache=True,
                    output_attentions=True,
                )
            rows = [a[0] for a in out.attentions]
    picked = torch.stack([rows[i].float() for i in chosen])  # layers, heads, queries, keys
    per_key = picked.mean(dim=(0, 1)).sum(dim=0)
    return [float(v) for v in per_key[start:end]]
