"""What a checkpoint weighs and what its KV cache costs, read from its files without loading it.

:func:`read_shape` reads a model's ``config.json`` (and ``preprocessor_config.json``, and the
safetensors index or headers where present) from a local folder or the Hugging Face cache; it
never downloads. The numbers feed the memory plan (:mod:`mai_graph.deploy.plan`):

- weight bytes: the safetensors index's ``total_size``, else the sum over the safetensors
  headers, else a parameter count from the config (exact for Qwen3-VL and Qwen3 text models,
  checked against transformers in the tests) times the dtype's size;
- KV bytes per token: layers x KV heads x head size x 2 (K and V) x the KV dtype's size, as
  vLLM's full-attention KV spec computes it (checked against vLLM's own code in the tests);
- image tokens at the processor's pixel cap: ``max_pixels / (patch x merge)^2``.
"""

from __future__ import annotations

import math
import os
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mai_graph.errors import ConfigError, check_int, check_number, shown
from mai_graph.files import open_regular, read_text
from mai_graph.jsonin import parse_json

__all__ = [
    "DTYPE_BYTES",
    "ModelShape",
    "dtype_bytes",
    "fetch_config",
    "find_model_dir",
    "read_shape",
    "safetensors_header",
    "shape_from_config",
]

DTYPE_BYTES: Mapping[str, float] = {
    "float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "fp8": 1, "fp8_e4m3": 1,
    "fp8_e5m2": 1, "fp8_inc": 1, "int8": 1, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1,
    "F8_E5M2": 1, "I8": 1, "U8": 1, "I32": 4, "I64": 8, "BOOL": 1, "F64": 8, "I16": 2,
    "U16": 2, "U32": 4, "U64": 8, "F8_E8M0": 1,
    "fp8_per_token_head": 1, "int8_per_token_head": 1, "int4_per_token_head": 0.5,
    "nvfp4": 0.5, "nvfp4_4over6": 0.5,
}  # fmt: skip
"""Bytes per element by dtype name (torch names, vLLM ``dtype`` / ``kv_cache_dtype`` values,
safetensors header codes). The per-token-head and 4-bit KV dtypes are vLLM 0.32's
``CacheDType`` values (``vllm/config/cache.py``); their scales are not counted."""

# Bytes per weight parameter under a quantization method (linear layers; embeddings and norms
# stay in the model dtype). Approximate for the 4-bit methods (group scales add ~3%).
_QUANT_BYTES: Mapping[str, float] = {
    "fp8": 1.0, "fbgemm_fp8": 1.0, "modelopt": 1.0, "ptpc_fp8": 1.0, "compressed-tensors": 1.0,
    "awq": 0.53, "awq_marlin": 0.53, "gptq": 0.53, "gptq_marlin": 0.53, "bitsandbytes": 0.53,
    "gguf": 0.6, "experts_int8": 1.0, "mxfp4": 0.53, "modelopt_fp4": 0.53,
    "fp8_per_tensor": 1.0, "fp8_per_block": 1.0, "fp8_per_channel": 1.0, "mxfp8": 1.0,
    "modelopt_mxfp8": 1.0, "int8_per_channel_weight_only": 1.0, "nvfp4_per_token": 0.53,
}  # fmt: skip

# Qwen-VL image processors, when a folder has no preprocessor_config.json. Qwen3-VL: patch 16,
# merge 2, size {"shortest_edge": 65536, "longest_edge": 16777216}; Qwen2-VL / Qwen2.5-VL: patch
# 14, merge 2, min_pixels 3136, max_pixels 12845056 (their published preprocessor_config.json
# files on the Hugging Face hub).
_PROCESSOR_DEFAULTS: Mapping[str, tuple[int, int, int, int]] = {
    "qwen3_vl": (16, 2, 65536, 16777216),
    "qwen2_vl": (14, 2, 3136, 12845056),
    "qwen2_5_vl": (14, 2, 3136, 12845056),
}


def dtype_bytes(name: str | None, default: float = 2) -> float:
    """Bytes per element of a dtype name (``auto`` / ``None``: ``default``).

    >>> dtype_bytes("bfloat16"), dtype_bytes("fp8"), dtype_bytes("auto", 4)
    (2, 1, 4)
    """
    if name is None or name == "auto":
        return default
    name = str(name).removeprefix("torch.")
    if name not in DTYPE_BYTES:
        raise ConfigError(
            f"unknown dtype {name!r}",
            parameter="dtype",
            value=name,
            fix=f"use one of {sorted(k for k in DTYPE_BYTES if k.islower())}",
        )
    return DTYPE_BYTES[name]


@dataclass(frozen=True)
class ModelShape:
    """The numbers of one checkpoint that decide its memory (see the module docstring)."""

    model_type: str
    layers: int
    hidden_size: int
    intermediate_size: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool
    dtype: str
    """The checkpoint's own dtype (``config.json``'s ``dtype`` / ``torch_dtype``)."""
    parameters: int
    """All parameters (text model + vision encoder)."""
    vision_parameters: int
    weight_bytes: int | None
    """From the safetensors files when present (``None``: count x dtype size)."""
    weight_source: str
    """Where :attr:`weight_bytes` comes from: ``safetensors index``, ``safetensors headers``
    or ``config`` (counted)."""
    vision_hidden: int = 0
    vision_intermediate: int = 0
    vision_depth: int = 0
    patch_size: int = 0
    merge_size: int = 1
    temporal_patch_size: int = 1
    min_pixels: int = 0
    max_pixels: int = 0

    @property
    def is_vision(self) -> bool:
        """Whether the checkpoint has a vision encoder."""
        return self.vision_depth > 0

    def weights(self, dtype: str | None = None, quantization: str | None = None) -> int:
        """Weight bytes as an engine loads them (``dtype`` / ``quantization`` as given to vLLM).

        The safetensors size is used as it is when neither is given; otherwise the count is
        priced at the engine's dtype, and at the method's bytes per parameter for the text
        model's linear layers when quantized (approximate for 4-bit methods).
        """
        if quantization is None and (dtype is None or dtype == "auto"):
            if self.weight_bytes is not None:
                return self.weight_bytes
        size = dtype_bytes(dtype, dtype_bytes(self.dtype))
        if quantization is None:
            return int(self.parameters * size)
        if quantization not in _QUANT_BYTES:
            raise ConfigError(
                f"the memory plan does not know quantization {quantization!r}",
                parameter="quantization",
                value=quantization,
                fix=f"use one of {sorted(_QUANT_BYTES)}, or set gpu_memory_utilization yourself",
            )
        linear = self.layers * self._linear_per_layer()
        rest = self.parameters - linear
        return int(linear * _QUANT_BYTES[quantization] + rest * size)

    def _linear_per_layer(self) -> int:
        h, i, d = self.hidden_size, self.intermediate_size, self.head_dim
        return h * self.heads * d * 2 + h * self.kv_heads * d * 2 + 3 * h * i

    def kv_bytes_per_token(self, kv_dtype: str | None = None, tensor_parallel: int = 1) -> int:
        """KV cache bytes one token takes on one device (K and V, every layer).

        ``kv_dtype`` is vLLM's ``kv_cache_dtype`` (``auto``: the model's dtype). Under tensor
        parallelism each device holds ``max(1, kv_heads // tp)`` heads, as vLLM splits them.
        """
        size = dtype_bytes(kv_dtype, dtype_bytes(self.dtype))
        heads = max(1, self.kv_heads // max(1, tensor_parallel))
        return int(self.layers * heads * self.head_dim * 2 * size)

    def image_tokens(self, max_pixels: int | None = None) -> int:
        """LM tokens of one image at ``max_pixels`` (default: the processor's cap), 0 if none.

        Qwen-VL processors resize an image to at most ``max_pixels`` in multiples of
        ``patch x merge``; each ``(patch x merge)^2`` pixels become one token, plus the
        vision start / end tokens.
        """
        if not self.is_vision:
            return 0
        pixels = max_pixels or self.max_pixels
        unit = (self.patch_size * self.merge_size) ** 2
        return pixels // unit + 2

    def vision_peak_bytes(self, max_pixels: int | None = None, dtype: str | None = None) -> int:
        """Estimated peak activation of the vision encoder on one image at ``max_pixels``.

        Per patch one block holds its input, the fused QKV projection, the attention output and
        the MLP's hidden layer (flash / memory-efficient attention: no patch x patch matrix),
        with 1.5x for the allocator. An estimate, not a measurement: vLLM measures the real peak
        when it profiles at start-up.
        """
        if not self.is_vision:
            return 0
        pixels = max_pixels or self.max_pixels
        patches = pixels // (self.patch_size**2)
        size = dtype_bytes(dtype, dtype_bytes(self.dtype))
        per_patch = (6 * self.vision_hidden + self.vision_intermediate) * size
        return int(1.5 * patches * per_patch)

    def text_peak_bytes(self, batched_tokens: int, max_seqs: int, dtype: str | None = None) -> int:
        """Estimated peak activation of one forward pass over ``batched_tokens`` tokens.

        Per token the MLP's gate, up and activated layers and a few hidden-size tensors; plus
        float32 logits for ``max_seqs`` sampled positions. An estimate (vLLM measures it).
        """
        size = dtype_bytes(dtype, dtype_bytes(self.dtype))
        per_token = (3 * self.intermediate_size + 4 * self.hidden_size) * size
        return int(batched_tokens * per_token + max_seqs * self.vocab_size * 4)


BUNDLED = Path(__file__).parent / "configs"
"""Config files (no weights) of the published models the docs name, shipped so that a plan for
them works on a fresh machine offline; sources in ``configs/qwen3_vl/SOURCES.md``."""

_BUNDLED_ID = re.compile(r"^Qwen/Qwen3-VL-(2B|4B|8B|32B)-(Instruct|Thinking)$")


def bundled_config(model: str) -> Path | None:
    """The shipped config folder of a published hub id (``Qwen/Qwen3-VL-8B-Instruct``), if any.

    Instruct and Thinking checkpoints of one size share their architecture.

    >>> bundled_config("Qwen/Qwen3-VL-8B-Instruct").name, bundled_config("Qwen/Other")
    ('8B', None)
    """
    match = _BUNDLED_ID.match(model)
    if match is None:
        return None
    folder = BUNDLED / "qwen3_vl" / match.group(1)
    return folder if (folder / "config.json").is_file() else None


def find_model_dir(model: str, *, bundled: bool = True) -> Path | None:
    """The local folder holding ``model``'s ``config.json``.

    The path itself, or the Hugging Face cache's snapshot of a hub id, else (``bundled``) the
    config shipped for a published hub id (:func:`bundled_config`); ``None`` when none is on
    this machine (nothing is downloaded).
    """
    found = _local_model_dir(model)
    if found is None and bundled:
        found = bundled_config(model)
    return found


def _local_model_dir(model: str) -> Path | None:
    path = Path(model).expanduser()
    if (path / "config.json").exists():  # a pipe or device there is refused when it is read
        return path
    if path.exists() or model.startswith((".", "/", "~")) or model.count("/") != 1:
        return None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    import os

    try:  # the cache folder as the environment says now (huggingface_hub reads it at import)
        found = try_to_load_from_cache(
            model, "config.json", cache_dir=os.environ.get("HF_HUB_CACHE") or None
        )
    except Exception:  # noqa: BLE001 - an odd id is simply not in the cache
        return None
    return Path(found).parent if isinstance(found, str) else None


CONFIG_FILES = ("config.json", "preprocessor_config.json", "model.safetensors.index.json")
"""The small files the plan reads (weights are never fetched)."""


def fetch_config(model: str) -> Path | None:
    """Fetch a hub model's config files into the Hugging Face cache (a few KB; no weights).

    Used only when engines are about to start (and would download the checkpoint anyway);
    ``mai-graph plan`` never fetches. ``None`` when the hub cannot be reached, the id is not a
    hub id, or ``HF_HUB_OFFLINE`` is set.
    """
    import os

    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return None
    if Path(model).expanduser().exists() or model.count("/") != 1 or model.startswith((".", "/")):
        return None
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        return None
    cache = os.environ.get("HF_HUB_CACHE") or None
    try:
        folder = Path(hf_hub_download(model, "config.json", cache_dir=cache)).parent
    except Exception:  # noqa: BLE001 - offline, unknown or gated: the caller says what to do
        return None
    for name in CONFIG_FILES[1:]:
        try:
            hf_hub_download(model, name, cache_dir=cache)
        except Exception:  # noqa: BLE001 - optional files
            pass
    return folder


def _read_json(path: Path) -> dict[str, Any]:
    """A model folder's JSON file (``config.json``, ...), through the bounded reader.

    ``NaN`` and ``Infinity`` (which transformers writes for some float fields) are read; the
    fields the plan uses are range-checked by :func:`shape_from_config`.
    """
    fix = "point the model at a checkpoint folder with a valid config.json"
    where = f"{path.name} of {path.parent}"
    text = read_text(path, flag="model", what=path.name)
    try:
        data = parse_json(text, parameter="model", what=where, fix=fix, constants=True)
    except ConfigError as exc:
        raise ConfigError(f"cannot read {exc.message}", parameter="model",
                          value=str(path.parent), fix=exc.fix) from None  # fmt: skip
    if not isinstance(data, dict):
        raise ConfigError(f"{path} is not a JSON object", parameter="model", value=str(path.parent))
    return data


MAX_SAFETENSORS_HEADER_BYTES = 100_000_000
"""Largest safetensors header read (the format's own limit, as the ``safetensors`` library
enforces it); a header is also never longer than its file."""

_MAX_DIMENSION = 1 << 40
"""Largest size, count or dimension accepted from a checkpoint's files."""


def _header_error(file: Path, problem: str) -> ConfigError:
    return ConfigError(
        f"{file.name} of {file.parent} is not a readable safetensors file: {problem}",
        parameter="model",
        value=str(file),
        fix="point the model at a checkpoint folder whose *.safetensors files are whole "
        "(re-download them)",
    )


def safetensors_header(file: Path) -> dict[str, Any]:
    """The JSON header of a safetensors file (tensor names, dtypes, shapes), without its data.

    The file is opened through :func:`~mai_graph.files.open_regular` (a pipe or device named
    ``*.safetensors`` is refused unread); the header's 8-byte length is bounded by
    :data:`MAX_SAFETENSORS_HEADER_BYTES` and by the file's size before it is read.

    Raises:
        ConfigError: Not a regular file, a length past the file or the cap, or a header that
            is not a JSON object within :mod:`mai_graph.jsonin`'s limits.
    """
    with open_regular(file, flag="model", what=f"safetensors file {file.name}") as f:
        size = os.fstat(f.fileno()).st_size
        raw = f.read(8)
        if len(raw) < 8:
            raise _header_error(file, f"{size} bytes, shorter than the 8-byte header length")
        (length,) = struct.unpack("<Q", raw)
        if length > min(MAX_SAFETENSORS_HEADER_BYTES, size - 8):
            raise _header_error(
                file, f"its header length {length:,} is past the file's {size:,} bytes or the "
                f"{MAX_SAFETENSORS_HEADER_BYTES:,}-byte cap",
            )  # fmt: skip
        data = f.read(length)
    try:
        header = parse_json(data, parameter="model", what="its header")
    except ConfigError as exc:
        raise _header_error(file, exc.message) from None
    if not isinstance(header, dict):
        raise _header_error(file, "its header is not a JSON object")
    return header


def _tensor_bytes(file: Path, name: str, tensor: Any) -> int:
    shape = tensor.get("shape") if isinstance(tensor, dict) else None
    dtype = tensor.get("dtype", "BF16") if isinstance(tensor, dict) else None
    if (
        not isinstance(shape, list)
        or not isinstance(dtype, str)
        or not all(
            isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= _MAX_DIMENSION
            for d in shape
        )  # fmt: skip
    ):
        raise _header_error(
            file, f"tensor {name[:80]!r} has no dtype and shape of whole sizes "
            f"(0 to {_MAX_DIMENSION:,}): {shown(tensor)}",
        )  # fmt: skip
    return int(math.prod(shape) * DTYPE_BYTES.get(dtype, 2))


def _safetensors_bytes(folder: Path) -> tuple[int | None, str]:
    index = folder / "model.safetensors.index.json"
    if index.exists():
        metadata = _read_json(index).get("metadata")
        total = metadata.get("total_size") if isinstance(metadata, dict) else None
        if isinstance(total, int) and not isinstance(total, bool) and 0 < total <= _MAX_DIMENSION:
            return total, "safetensors index"
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None, "config"
    total = 0
    for file in files:
        header = safetensors_header(file)
        weights = sum(_tensor_bytes(file, key, tensor) for key, tensor in header.items()
                      if key != "__metadata__")  # fmt: skip
        if weights > file.stat().st_size:
            raise _header_error(
                file, f"its header declares {weights:,} bytes of tensors, more than the "
                f"file's {file.stat().st_size:,}",
            )  # fmt: skip
        total += weights
    return total, "safetensors headers"


def _text_parameters(t: Mapping[str, Any], tied: bool) -> int:
    h, i, v = t["hidden_size"], t["intermediate_size"], t["vocab_size"]
    heads, kv = t["num_attention_heads"], t.get("num_key_value_heads", t["num_attention_heads"])
    d = t.get("head_dim") or h // heads
    bias = bool(t.get("attention_bias", False))
    per_layer = (
        h * heads * d
        + h * kv * d * 2
        + heads * d * h  # q, k, v, o
        + (heads * d + 2 * kv * d + h if bias else 0)
        + 3 * h * i  # gate, up, down
        + 2 * h  # the two RMSNorms
    )
    if t.get("model_type", "").startswith("qwen3"):
        per_layer += 2 * d  # q_norm, k_norm
    return v * h * (1 if tied else 2) + t["num_hidden_layers"] * per_layer + h


def _vision_width(vc: Mapping[str, Any], model_type: str) -> int:
    """The vision tower's width.

    Qwen3-VL's and Qwen2.5-VL's ``hidden_size``; Qwen2-VL's ``embed_dim`` (its ``hidden_size``
    is the language model's).
    """
    width = (
        vc["hidden_size"] if model_type == "qwen3_vl" else vc.get("embed_dim", vc["hidden_size"])
    )
    return int(width)


def _vision_parameters(vc: Mapping[str, Any], model_type: str) -> int:
    h = _vision_width(vc, model_type)
    i = int(vc.get("intermediate_size") or h * vc.get("mlp_ratio", 4))
    depth, p = vc["depth"], vc["patch_size"]
    t, m = vc.get("temporal_patch_size", 2), vc.get("spatial_merge_size", 2)
    out = int(vc.get("out_hidden_size") or vc["hidden_size"])
    in_ch = vc.get("in_channels", vc.get("in_chans", 3))
    hm = h * m * m
    patch = in_ch * t * p * p * h + (h if model_type == "qwen3_vl" else 0)
    if model_type == "qwen3_vl":
        block = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * i + i) + (i * h + h)
        merger = 2 * h + (hm * hm + hm) + (hm * out + out)
        deep = len(vc.get("deepstack_visual_indexes", ())) * (
            2 * hm + hm * hm + hm + hm * out + out
        )
        pos = vc.get("num_position_embeddings", 0) * h
        return patch + pos + depth * block + merger + deep
    # Qwen2-VL (GELU MLP, LayerNorm) / Qwen2.5-VL (gated MLP, RMSNorm): close, not exact.
    gated = model_type == "qwen2_5_vl"
    mlp = 3 * h * i if gated else 2 * h * i + i + h
    block = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + mlp
    merger = 2 * h + (hm * hm + hm) + (hm * out + out)
    return patch + depth * block + merger


_TEXT_SIZES = (
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "num_hidden_layers",
    "max_position_embeddings",
)
_VISION_SIZES = (
    "hidden_size",
    "embed_dim",
    "intermediate_size",
    "depth",
    "patch_size",
    "temporal_patch_size",
    "spatial_merge_size",
    "out_hidden_size",
    "in_channels",
    "in_chans",
)
_PROCESSOR_SIZES = ("max_pixels", "min_pixels", "patch_size", "merge_size", "longest_edge",
                    "shortest_edge")  # fmt: skip


def _check_sizes(config: Mapping[str, Any], preprocessor: Mapping[str, Any] | None) -> None:
    """Refuse a size the plan reads that is not a whole number from 1 to 2^40.

    Zero heads would divide by zero, NaN, ``Infinity`` and 1e300 would make the plan's
    arithmetic fail or lie. Fields the plan does not read are not checked.
    """
    fix = "check the checkpoint's config files (re-download them)"
    text = config.get("text_config") or config
    vision = config.get("vision_config") or {}
    sections: list[tuple[str, Any, tuple[str, ...]]] = [
        ("text_config" if text is not config else "config.json", text, _TEXT_SIZES),
        ("vision_config", vision, _VISION_SIZES),
    ]
    if preprocessor:
        sections += [
            ("preprocessor", preprocessor, _PROCESSOR_SIZES),
            ("preprocessor size", preprocessor.get("size") or {}, _PROCESSOR_SIZES),
        ]
    for where, section, keys in sections:
        if not isinstance(section, Mapping):
            raise ConfigError(f"{where} must be an object, got {shown(section)}",
                              parameter=where, fix=fix)  # fmt: skip
        for key in keys:
            if section.get(key) is not None:
                check_int(section[key], key, minimum=1, maximum=_MAX_DIMENSION, where=where,
                          fix=fix)  # fmt: skip
    if vision.get("num_position_embeddings") is not None:
        check_int(vision["num_position_embeddings"], "num_position_embeddings", minimum=0,
                  maximum=_MAX_DIMENSION, where="vision_config", fix=fix)  # fmt: skip
    if vision.get("mlp_ratio") is not None:
        check_number(vision["mlp_ratio"], "mlp_ratio", above=0, maximum=1024,
                     where="vision_config", fix=fix)  # fmt: skip


def shape_from_config(
    config: Mapping[str, Any],
    preprocessor: Mapping[str, Any] | None = None,
    *,
    weight_bytes: int | None = None,
    weight_source: str = "config",
) -> ModelShape:
    """A :class:`ModelShape` from a parsed ``config.json`` (and ``preprocessor_config.json``).

    Handles vision-language configs with a ``text_config`` (Qwen3-VL, Qwen2.5-VL) and flat
    ones (Qwen2-VL, text models).
    """
    _check_sizes(config, preprocessor)
    model_type = str(config.get("model_type", ""))
    text = config.get("text_config") or config
    try:
        h, heads = int(text["hidden_size"]), int(text["num_attention_heads"])
        tied = bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False)))
        text_params = _text_parameters(text, tied)
        vc = config.get("vision_config") or None
        vision_params = _vision_parameters(vc, model_type) if vc else 0
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(
            f"config.json lacks a field the memory plan needs: {exc}",
            parameter="model",
            fix="check that the folder holds a transformer checkpoint's config.json",
        ) from None
    dtype = str(config.get("dtype") or config.get("torch_dtype") or text.get("dtype")
                or text.get("torch_dtype") or "bfloat16")  # fmt: skip
    fields: dict[str, Any] = {}
    if vc:
        patch, merge, min_px, max_px = _PROCESSOR_DEFAULTS.get(
            model_type, (vc.get("patch_size", 14), vc.get("spatial_merge_size", 2), 3136, 12845056)
        )
        if preprocessor:
            size = preprocessor.get("size") or {}
            max_px = int(preprocessor.get("max_pixels") or size.get("max_pixels")
                         or size.get("longest_edge") or max_px)  # fmt: skip
            min_px = int(preprocessor.get("min_pixels") or size.get("min_pixels")
                         or size.get("shortest_edge") or min_px)  # fmt: skip
            patch = int(preprocessor.get("patch_size") or patch)
            merge = int(preprocessor.get("merge_size") or merge)
        vh = _vision_width(vc, model_type)
        fields = dict(
            vision_hidden=vh,
            vision_intermediate=int(vc.get("intermediate_size") or vh * vc.get("mlp_ratio", 4)),
            vision_depth=int(vc["depth"]),
            patch_size=patch,
            merge_size=merge,
            temporal_patch_size=int(vc.get("temporal_patch_size", 2)),
            min_pixels=min_px,
            max_pixels=max_px,
        )
    return ModelShape(
        model_type=model_type,
        layers=int(text["num_hidden_layers"]),
        hidden_size=h,
        intermediate_size=int(text["intermediate_size"]),
        heads=heads,
        kv_heads=int(text.get("num_key_value_heads", heads)),
        head_dim=int(text.get("head_dim") or h // heads),
        vocab_size=int(text["vocab_size"]),
        max_position_embeddings=int(text.get("max_position_embeddings", 32768)),
        tie_word_embeddings=tied,
        dtype=dtype,
        parameters=text_params + vision_params,
        vision_parameters=vision_params,
        weight_bytes=weight_bytes,
        weight_source=weight_source,
        **fields,
    )


def read_shape(model: str, *, fetch: bool = False) -> ModelShape:
    """The :class:`ModelShape` of a local checkpoint folder or a hub id in the local cache.

    Args:
        model: A checkpoint folder or hub id.
        fetch: Fetch a hub id's config files when they are not cached (:func:`fetch_config`).

    Raises:
        ConfigError: Its ``config.json`` is not on this machine, or cannot be read.
    """
    # Engines about to start prefer the hub's own files (fetched) to the shipped copy.
    folder = find_model_dir(model, bundled=not fetch)
    if folder is None and fetch:
        folder = fetch_config(model) or bundled_config(model)
    if folder is None:
        where = (
            "on this machine, and it could not be fetched"
            if fetch
            else ("on this machine (the memory plan reads it; nothing is downloaded)")
        )
        raise ConfigError(
            f"no config.json for {model!r} {where}",
            parameter="model",
            value=model,
            fix=f"download the checkpoint first (`hf download {model}`), point at its folder, "
            "or set gpu_memory_utilization and max_model_len for each model yourself",
        )
    config = _read_json(folder / "config.json")
    preprocessor = None
    if (folder / "preprocessor_config.json").exists():
        preprocessor = _read_json(folder / "preprocessor_config.json")
    elif (folder / "processor_config.json").exists():  # transformers 5 saves it nested
        nested = _read_json(folder / "processor_config.json").get("image_processor")
        preprocessor = nested if isinstance(nested, dict) else None
    weight_bytes, source = _safetensors_bytes(folder)
    try:
        return shape_from_config(config, preprocessor, weight_bytes=weight_bytes,
                                 weight_source=source)  # fmt: skip
    except ConfigError as exc:  # name the folder
        raise ConfigError(f"{folder}: {exc.message}", parameter=exc.parameter,
                          value=exc.value, fix=exc.fix) from None  # fmt: skip
