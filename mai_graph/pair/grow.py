"""Continue a trained model at a greater depth: its layers spread out, the new ones start as no-ops.

A pair's large model can be continued deeper than it was trained (``train-pair --init-from``
with a spec of more layers): layer ``i`` of the trained model becomes layer ``i * k`` of the
deeper one (``k = new / old``), and the ``k - 1`` layers after it start as copies of it whose
two output projections (attention ``o_proj``, MLP ``down_proj``) are zero. A pre-norm decoder
layer adds its attention and MLP outputs to the residual stream, so a layer with both
projections at zero passes its input through unchanged: the deeper model computes exactly what
the trained one did, and training starts where the trained model stopped. Layer 0 stays first,
so features injected after it (Qwen3-VL's deepstack visual features, added after the first
layers) meet the same layer as before.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["deepen_state", "layer_count"]

_LAYER = re.compile(r"^(?P<head>.*\.language_model\.layers\.)(?P<i>\d+)\.(?P<tail>.+)$")
_OUTPUTS = ("self_attn.o_proj.weight", "mlp.down_proj.weight")
"""The projections that write a layer's result into the residual stream."""


def layer_count(state: Mapping[str, Any]) -> int:
    """Decoder layers of the language model in a state dict.

    >>> layer_count({"model.language_model.layers.0.x": 0, "model.language_model.layers.3.x": 0})
    4
    """
    found = [int(m["i"]) for m in map(_LAYER.match, state) if m]
    return max(found) + 1 if found else 0


def deepen_state(state: Mapping[str, Any], layers: int) -> dict[str, Any]:
    """``state`` with its language model's layers spread over ``layers`` (see the module).

    ``layers`` must be a multiple of the state's depth; the same depth returns a copy. The
    inserted layers' tensors are clones, their output projections zeros.

    >>> import torch
    >>> s = {"model.language_model.layers.0.mlp.down_proj.weight": torch.ones(1),
    ...      "model.language_model.layers.0.mlp.up_proj.weight": torch.ones(1),
    ...      "lm_head.weight": torch.ones(1)}
    >>> [(k.removeprefix("model.language_model."), v.item())
    ...  for k, v in sorted(deepen_state(s, 2).items())]  # doctest: +NORMALIZE_WHITESPACE
    [('lm_head.weight', 1.0), ('layers.0.mlp.down_proj.weight', 1.0),
     ('layers.0.mlp.up_proj.weight', 1.0), ('layers.1.mlp.down_proj.weight', 0.0),
     ('layers.1.mlp.up_proj.weight', 1.0)]
    """
    old = layer_count(state)
    if old == 0 or layers < old or layers % old:
        raise ValueError(
            f"cannot spread {old} decoder layers over {layers}: the new depth must be a "
            f"multiple of the trained one ({old}, {2 * old}, ...)"
        )
    k = layers // old
    out: dict[str, Any] = {}
    for name, tensor in state.items():
        m = _LAYER.match(name)
        if m is None:
            out[name] = tensor
            continue
        base = int(m["i"]) * k
        out[f"{m['head']}{base}.{m['tail']}"] = tensor
        for j in range(1, k):
            copy = tensor.detach().clone()
            if m["tail"] in _OUTPUTS:
                copy.zero_()
            out[f"{m['head']}{base + j}.{m['tail']}"] = copy
    return out
