"""In-process vLLM engines (``AsyncLLM``): the production backend, GPU or CPU.

Each :class:`VLLMBackend` owns one engine. Engines start lazily (first request, or
``await backend.start()``), one after the other, on mai-graph's engine loop: a background event
loop shared by all engines, so sync callers, ``langgraph dev`` and any number of caller loops can
use the same engines. Prompts go in as token ids rendered with the model's chat template; the
image goes as multimodal data with its pixel hash as the multimodal uuid, so the engine's
processor and prefix caches key on content.

Two engines on one GPU: build them together (:func:`~mai_graph.engines.build_lineup`,
``backends_for``): the memory plan gives each a share and a KV pool, and they start in order
before the first request (:mod:`~mai_graph.backends.vllm.startup` says why). Engines built one
by one need a ``gpu_memory_utilization`` each; a second engine without one is refused. On CPU
the KV cache size is ``kv_cache_gib`` per engine.

Faults: a prompt that does not fit the context (text plus image tokens) is refused before it is
submitted. An engine whose core process dies fails its requests at once with a
:class:`~mai_graph.errors.BackendError` naming the model; the next request starts a new engine,
up to ``max_restarts`` times in :data:`RESTART_WINDOW_S`, after which requests fail fast with
the same error until :meth:`VLLMBackend.shutdown`. Shutting down stops the engine core and its
worker and waits up to :data:`ENGINE_EXIT_GRACE_S` for them to exit by themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mai_graph.answers.distribution import first_token_ids, fold, pick
from mai_graph.backends.base import Generation, GenerationRequest, StageTimes, TextCallback
from mai_graph.backends.extras import require_extra
from mai_graph.backends.render import media_ids, render, thinking_for, vocab_fingerprint
from mai_graph.backends.vllm import _compat
from mai_graph.backends.vllm.teardown import (
    ENGINE_EXIT_GRACE_S,
    REAP_GRACE_S,
    close_client,
    core_pids,
    processes_of,
    reap,
    stop_engine,
)
from mai_graph.errors import BackendError, ConfigError, ImageError, check_int
from mai_graph.inputs.images import ImageRef, load_image
from mai_graph.inputs.limits import check_media_counts, check_mm_limits, check_prompt_length
from mai_graph.inputs.video import VideoRef, video_input
from mai_graph.loop import BackgroundLoop, on_caller_loop, shared_loop

if TYPE_CHECKING:
    from vllm import SamplingParams
    from vllm.v1.engine.async_llm import AsyncLLM

    from mai_graph.backends.vllm.startup import EngineGroup

__all__ = [
    "ENGINE_EXIT_GRACE_S",
    "ENGINE_LOOP",
    "RESTART_WINDOW_S",
    "WORKER_EXIT_GRACE_S",
    "VLLMBackend",
]

log = logging.getLogger(__name__)

require_extra("vllm", ("vllm", "torch", "transformers"), "vllm")

ENGINE_LOOP = shared_loop()
"""The loop every engine built by :class:`VLLMBackend` lives on: mai-graph's one background
loop, the one sync callers (``run()``, ``graph.invoke``) run the graph on, so a sync run's
model calls never change loops; async callers on a loop of their own hop to it once a call."""

WORKER_EXIT_GRACE_S = 20
"""Seconds an engine core waits for its worker to exit by itself (vLLM's default: 5)."""

RESTART_WINDOW_S = 600.0
"""Engine deaths are counted over this many seconds against ``max_restarts``."""

_START_LOCK = threading.Lock()  # engines start one after the other

CPU_BLOCK_SIZE = 32
"""KV block size on vLLM's CPU build (its attention backend needs a multiple of 32)."""

GPU_BLOCK_SIZE = 16
"""KV block size on a GPU, set explicitly: prefix-cache hits are whole blocks, and vLLM 0.34's
default of 64 (0.32: 16) would coarsen them fourfold."""


def _forget(backend: VLLMBackend) -> None:
    from mai_graph.backends.vllm.startup import forget

    forget(backend)


def _on_cpu() -> bool:
    return _compat.on_cpu()


def _counter_kwargs(mm: Any) -> dict[str, Any]:
    """The engine's processor kwargs as the media token counter reads them.

    vLLM folds ``min_pixels`` / ``max_pixels`` and ``size`` (``shortest_edge`` /
    ``longest_edge``) into one pixel range, for images and videos alike; transformers'
    counter reads only ``min_pixels`` / ``max_pixels``.
    """
    kwargs = dict(mm or {})
    size = kwargs.pop("size", None)
    if isinstance(size, Mapping):
        if "longest_edge" in size:
            kwargs.setdefault("max_pixels", size["longest_edge"])
        if "shortest_edge" in size:
            kwargs.setdefault("min_pixels", size["shortest_edge"])
    return kwargs


MAX_LOGPROB_TOKEN_IDS = 128
"""The most token ids one request's ``logprob_token_ids`` may list (vLLM 0.32's
``MAX_LOGPROB_TOKEN_IDS``, ``vllm/sampling_params.py``)."""


class VLLMBackend:
    """A vision-language model served by an in-process vLLM ``AsyncLLM`` engine.

    Args:
        model: Checkpoint path or hub id (``Qwen/Qwen3-VL-2B-Instruct``).
        name: Name in metrics (default: ``model``).
        gpu_memory_utilization: Share of GPU memory for this engine (on CPU: share of RAM
            vLLM may plan with). Default 0.05 on CPU; on a GPU 0.9 when the engine runs alone,
            and a second engine without a share is refused (build engines together with
            :func:`~mai_graph.engines.build_lineup` and the memory plan gives each its share).
        kv_cache_gib: KV cache size in GiB (vLLM's ``kv_cache_memory_bytes``), on CPU and GPU;
            on the CPU default ``VLLM_CPU_KVCACHE_SPACE`` or 1.
        max_model_len: Context length to reserve for (default 4096).
        block_size: KV block size; prefix-cache hits are whole blocks (default: 32 on CPU, 16 on
            a GPU, set explicitly whatever vLLM's default).
        enforce_eager: Skip graph capture / compilation (default: True on CPU, where it cuts
            start-up by a minute).
        seed: Engine seed.
        max_restarts: How many times a dead engine is started again within
            :data:`RESTART_WINDOW_S` (by the next request); beyond that, requests fail fast
            until :meth:`shutdown`. 0: never restart.
        limit_mm_per_prompt: Most images and videos one prompt may carry (vLLM plans memory
            for them at start-up), default :data:`~mai_graph.inputs.limits.DEFAULT_MM_LIMITS`; e.g.
            ``{"image": 1, "video": 0}`` when questions carry one image. Requests over it are
            refused before they reach the engine.
        **engine_kwargs: Passed through to ``vllm.AsyncEngineArgs``.

    Example:
        ``small = VLLMBackend("Qwen/Qwen3-VL-2B-Instruct", gpu_memory_utilization=0.25)``
    """

    supports_logprobs = True
    """Generations carry logprobs when asked (vLLM's default ``raw_logprobs``: after a choice
    constraint's mask, before temperature and other logits processors)."""
    supports_distribution = True
    """Requests with ``distribution`` are answered in one step (``logprob_token_ids``)."""

    def __init__(
        self,
        model: str,
        *,
        name: str | None = None,
        gpu_memory_utilization: float | None = None,
        kv_cache_gib: float | None = None,
        max_model_len: int = 4096,
        block_size: int | None = None,
        enforce_eager: bool | None = None,
        seed: int = 0,
        max_restarts: int = 2,
        limit_mm_per_prompt: Mapping[str, int] | None = None,
        **engine_kwargs: Any,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ConfigError(
                f"model must be a checkpoint path or hub id, got {model!r}", parameter="model"
            )
        if gpu_memory_utilization is not None and not 0 < gpu_memory_utilization <= 1:
            raise ConfigError(
                f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}",
                parameter="gpu_memory_utilization",
                value=gpu_memory_utilization,
                fix="give each engine a share, e.g. 0.25 for the small and 0.6 for the large",
            )
        check_int(
            max_restarts,
            "max_restarts",
            minimum=0,
            fix="pass 0 to fail fast after an engine dies, or a small number such as 2",
        )
        self.media_limits = check_mm_limits(limit_mm_per_prompt)
        """Most items per prompt by modality (``image``, ``video``): ``limit_mm_per_prompt``."""
        self.model = model
        self.name = name or model
        self._options = dict(
            gpu_memory_utilization=gpu_memory_utilization,
            kv_cache_gib=kv_cache_gib,
            max_model_len=max_model_len,
            block_size=block_size,
            enforce_eager=enforce_eager,
            seed=seed,
        )
        self._engine_kwargs = engine_kwargs
        # The engine's processor settings (e.g. max_pixels) count media tokens here as well, so
        # the length check before submitting agrees with what the engine computes.
        self._mm_kwargs = _counter_kwargs(engine_kwargs.get("mm_processor_kwargs"))
        self._engine: AsyncLLM | None = None
        self._owns_engine = True
        self._tokenizer: Any = None
        self._first_ids: dict[Any, dict[str, tuple[int, ...]] | str] = {}
        self._template: Any = None
        self._fingerprint: str | None = None
        self._eos: set[int] = set()
        self._loop: BackgroundLoop | None = ENGINE_LOOP
        self._start_lock: asyncio.Lock | None = None
        self._processor: Any = None
        self._procs: list[Any] = []  # psutil.Process of the engine's core and workers
        self.max_restarts = max_restarts
        self.restarts = 0
        """How many times a dead engine was started again."""
        self._deaths: list[float] = []
        self._death: str | None = None
        self._retired: weakref.WeakSet[AsyncLLM] = weakref.WeakSet()
        self._dead_procs: list[Any] = []  # a dead engine's processes, until a restart saw them go
        self._group: EngineGroup | None = None
        """The lineup this engine starts with (see :class:`~mai_graph.backends.vllm.startup.
        EngineGroup`); None: it starts on its own."""
        self._unplanned_share = False
        self._share: float | None = None  # the share the running engine started with
        if kv_cache_gib is not None and "kv_cache_memory_bytes" in engine_kwargs:
            raise ConfigError(
                f"{self.name}: kv_cache_gib and kv_cache_memory_bytes both set the KV pool",
                parameter="kv_cache_gib",
                value=kv_cache_gib,
                fix="give one of them (kv_cache_gib is in GiB)",
            )

    @classmethod
    def from_engine(cls, engine: AsyncLLM, *, name: str | None = None) -> VLLMBackend:
        """Wrap an ``AsyncLLM`` you built; requests then run on the loop you call from."""
        model = engine.model_config.model
        backend = cls(model, name=name)
        backend._engine = engine
        backend._owns_engine = False
        backend._loop = None
        backend._bind_tokenizer()
        return backend

    @property
    def max_model_len(self) -> int | None:
        """The context length of requests: the engine's, else the option (None: not chosen)."""
        if self._engine is not None:
            return int(self._engine.model_config.max_model_len)
        value = self._options.get("max_model_len")
        return None if value is None else int(value)

    # -- lifecycle ---------------------------------------------------------------------------

    def engine_args(self, share: float | None = None) -> Any:
        """The ``AsyncEngineArgs`` this backend starts its engine with.

        Every memory setting is explicit, so no vLLM default decides it (vLLM 0.34 moved the
        share's default to 1.0 and the block size's to 64): the share (``share``, else the
        option, else 0.05 on the CPU and :data:`~mai_graph.backends.vllm.startup.
        SOLE_ENGINE_SHARE` on a GPU), the block size, and the KV pool when one is given
        (``kv_cache_gib`` -> vLLM's ``kv_cache_memory_bytes``, on both platforms).

        Raises:
            ConfigError: ``skip_mm_profiling`` on a GPU without a fixed KV pool (vLLM would
                hand the vision encoder's unmeasured peak to the KV cache).
        """
        from vllm import AsyncEngineArgs

        from mai_graph.backends.vllm.startup import SOLE_ENGINE_SHARE

        cpu = _on_cpu()
        o = self._options
        if share is None:
            share = o["gpu_memory_utilization"] or (0.05 if cpu else SOLE_ENGINE_SHARE)
        kwargs: dict[str, Any] = dict(
            model=self.model,
            max_model_len=o["max_model_len"],
            enforce_eager=cpu if o["enforce_eager"] is None else o["enforce_eager"],
            enable_prefix_caching=True,
            seed=o["seed"],
            limit_mm_per_prompt=dict(self.media_limits),
            gpu_memory_utilization=share,
            block_size=o["block_size"] or (CPU_BLOCK_SIZE if cpu else GPU_BLOCK_SIZE),
        )
        kv_bytes = self.kv_cache_bytes(cpu)
        if kv_bytes is not None:
            kwargs["kv_cache_memory_bytes"] = kv_bytes
        if os.environ.get("MAI_GRAPH_QUIET"):  # the CLI's quiet mode: no loading progress bars
            kwargs["use_tqdm_on_load"] = False
        kwargs.update(self._engine_kwargs)
        if not cpu and kwargs.get("skip_mm_profiling") and not kwargs.get("kv_cache_memory_bytes"):
            # vllm/v1/worker/gpu_worker.py:determine_available_memory sizes the KV cache from
            # the profiled peak; without the vision encoder in it, that peak goes to the cache.
            raise ConfigError(
                f"{self.name}: skip_mm_profiling=True on a GPU leaves the vision encoder's "
                "memory peak unmeasured, and vLLM would give that memory to the KV cache",
                parameter="skip_mm_profiling",
                value=True,
                fix="drop skip_mm_profiling on a GPU (it is a CPU test setting), or fix the KV "
                "pool yourself with kv_cache_gib (the memory plan does)",
            )
        return AsyncEngineArgs(**kwargs)

    def kv_cache_bytes(self, cpu: bool | None = None) -> int | None:
        """The fixed KV pool this engine asks vLLM for (``kv_cache_memory_bytes``), if any.

        ``kv_cache_gib`` on either platform; on the CPU, without it, the user's
        ``VLLM_CPU_KVCACHE_SPACE`` (GiB) or 1 GiB. ``None`` on a GPU without ``kv_cache_gib``
        (vLLM sizes the pool from the share).
        """
        cpu = _on_cpu() if cpu is None else cpu
        if self._engine_kwargs.get("kv_cache_memory_bytes") is not None:
            return int(self._engine_kwargs["kv_cache_memory_bytes"])
        gib = self._options["kv_cache_gib"]
        if gib is None and cpu:
            env = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "").strip()
            gib = float(env) if env.replace(".", "", 1).isdigit() and float(env) > 0 else 1
        return None if gib is None else int(float(gib) * (1 << 30))

    @property
    def started(self) -> bool:
        """Whether the engine is running."""
        return self._engine is not None

    async def start(self, *, warmup: bool = True) -> None:
        """Start the engine now (otherwise the first request starts it).

        Args:
            warmup: Also serve two tiny requests (one with an image and constrained choices,
                one free-running with logprobs), so first-use costs are paid here rather than
                by the first real request.
        """
        if self._loop is not None:
            await self._loop.arun(self._start())
        if warmup:
            await self.warmup()

    async def warmup(self) -> None:
        """Serve two tiny requests that exercise the image, choice and logprob paths."""
        from PIL import Image

        from mai_graph.inputs.sources import image_ref

        ref = await asyncio.to_thread(image_ref, Image.new("RGB", (64, 64), (127, 127, 127)))
        text = {"type": "text", "text": "Warm-up."}
        with_image: Any = ({"role": "user", "content": [{"type": "image", "image": ref}, text]},)
        plain: Any = ({"role": "user", "content": [text]},)
        await self.generate(
            GenerationRequest(with_image, max_tokens=2, choices=("A", "B"), purpose="warmup")
        )
        await self.generate(
            GenerationRequest(plain, max_tokens=8, min_tokens=8, logprobs=0, purpose="warmup")
        )

    def _alive(self) -> bool:
        engine = self._engine
        return engine is not None and not getattr(engine, "errored", False)

    def _build_engine(self) -> None:
        """Build the engine into ``_engine`` (blocking; engines start one after the other).

        It stores the engine rather than returning it: an idle worker thread keeps its last
        result alive, which would keep a shut-down engine until the interpreter exits. The
        process environment is read and written under the start lock only, so two engines
        starting at once never see each other's settings.
        """
        from vllm.v1.engine.async_llm import AsyncLLM

        from mai_graph.backends.vllm import startup

        cpu = _on_cpu()
        with _START_LOCK:
            startup.prepare_process()
            # The engine core waits this long for its worker to exit before signalling it (the
            # engine core reads it at shutdown); within ENGINE_EXIT_GRACE_S, with room to spare.
            os.environ.setdefault("VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS", str(WORKER_EXIT_GRACE_S))
            share = startup.check_share(self, self._options["gpu_memory_utilization"], cpu)
            try:
                args = self.engine_args(share=share)
                self._share = float(args.gpu_memory_utilization)
                # vllm/platforms/cpu.py:check_and_update_config lets VLLM_CPU_KVCACHE_SPACE
                # override kv_cache_memory_bytes: the engine's own pool decides (the spawned
                # core inherits the environment as it is now).
                saved = os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None) if cpu else None
                try:
                    self._engine = AsyncLLM.from_engine_args(args)
                finally:
                    if saved is not None:
                        os.environ["VLLM_CPU_KVCACHE_SPACE"] = saved
            except BaseException:
                startup.forget(self)
                raise

    def _devices(self) -> list[int]:
        """The CUDA devices this engine uses (``device_ids``, else the first TP-size ones)."""
        ids = self._engine_kwargs.get("device_ids")
        if ids:
            return [int(i) for i in ids]
        return list(range(int(self._engine_kwargs.get("tensor_parallel_size") or 1)))

    async def _after_death(self) -> None:
        """Before a restart: the dead engine's processes gone and, on a GPU, its memory free.

        vLLM's start check (``request_memory``) reads free memory once; a dead engine's CUDA
        memory is released only when its processes have exited.
        """
        from mai_graph.backends.vllm import startup

        procs, self._dead_procs = self._dead_procs, []
        if procs:
            left = await asyncio.to_thread(
                startup.wait_for_exit, procs, ENGINE_EXIT_GRACE_S + 2 * REAP_GRACE_S
            )
            if left:
                log.warning("%s: %d process(es) of the dead engine still run", self.name,
                            len(left))  # fmt: skip
        if not _on_cpu():
            share = self._options["gpu_memory_utilization"] or startup.SOLE_ENGINE_SHARE
            await asyncio.to_thread(startup.wait_for_memory, self._devices(), float(share))

    async def _start(self) -> None:
        if self._alive():
            return
        group = self._group
        if group is not None and group.in_order(_on_cpu()):
            # A lineup on a GPU: every engine starts, in order, before any serves.
            await group.start_all(lambda member: member._start_own())
            return
        await self._start_own()

    async def _start_own(self) -> None:
        if self._alive():
            return
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._alive():
                return
            if self._engine is not None:  # died between requests
                self._discard(self._engine, "while idle")
            if self._death is not None:
                self._check_restart()
                await self._after_death()
            try:  # off the event loop: starting an engine imports, reads files, waits on processes
                await asyncio.to_thread(self._build_engine)
            except Exception as exc:
                if self._death is not None:  # a failed restart counts as another death
                    self._deaths.append(time.monotonic())
                raise BackendError(
                    f"vLLM engine for {self.model!r} failed to start: {exc}",
                    parameter="model",
                    value=self.model,
                    fix="check the model path and the memory settings "
                    "(gpu_memory_utilization / kv_cache_gib / max_model_len)",
                ) from exc
            assert self._engine is not None
            self._procs = await asyncio.to_thread(processes_of, core_pids(self._engine))
            if self._death is not None:
                self.restarts += 1
                log.warning("%s: started a new vLLM engine after it died (%s)", self.name,
                            self._death)  # fmt: skip
            await asyncio.to_thread(self._bind_tokenizer)  # reads the processor's files

    def _check_restart(self) -> None:
        """Raise the engine's death, if it died more than ``max_restarts`` times lately."""
        now = time.monotonic()
        self._deaths = [t for t in self._deaths if now - t < RESTART_WINDOW_S]
        if not self._owns_engine:
            raise BackendError(
                f"{self.name}: the vLLM engine you passed to from_engine() died ({self._death})",
                parameter="engine",
                fix="build a new AsyncLLM and wrap it with VLLMBackend.from_engine()",
            )
        if len(self._deaths) > self.max_restarts:
            raise BackendError(
                f"{self.name}: the vLLM engine of {self.model!r} died ({self._death}) and is not "
                f"started again: {len(self._deaths)} deaths in the last "
                f"{RESTART_WINDOW_S:.0f} s, max_restarts={self.max_restarts}",
                parameter="model",
                value=self.model,
                fix="find the cause in the engine's log (out of memory?), then call "
                "backend.shutdown() and start it again",
            )

    def _discard(self, engine: AsyncLLM, when: str) -> None:
        """Forget a dead engine: release its client, reap its processes, count the death."""
        if self._engine is not engine:
            return  # already discarded (another request saw the same death)
        self._engine = None
        self._death = f"engine core exited {when}"
        self._deaths.append(time.monotonic())
        log.error("%s: the vLLM engine of %r died %s", self.name, self.model, when)
        procs, self._procs = self._procs, []
        self._dead_procs = list(procs)
        _forget(self)
        with contextlib.suppress(Exception):
            engine.shutdown(timeout=0)
        close_client(engine)
        if procs:
            reaper = functools.partial(reap, procs, REAP_GRACE_S, "a dead vLLM engine")
            threading.Thread(target=reaper, daemon=True).start()

    def _dead_error(self, engine: AsyncLLM, request: GenerationRequest) -> BackendError:
        self._discard(engine, f"during request {request.request_id}")
        if not self._owns_engine:
            restart = "wrap a new AsyncLLM with VLLMBackend.from_engine()"
        elif len(self._deaths) <= self.max_restarts:
            restart = "the next request starts a new engine"
        else:
            restart = "it is not started again (max_restarts reached); call backend.shutdown()"
        return BackendError(
            f"{self.name}: the vLLM engine of {self.model!r} died (its engine core process "
            f"exited) during request {request.request_id}",
            parameter="model",
            value=self.model,
            fix=f"{restart}; look for the cause in the engine's log (out of memory? killed?)",
        )

    def _bind_tokenizer(self) -> None:
        from transformers import AutoProcessor

        assert self._engine is not None
        self._tokenizer = self._engine.get_tokenizer()
        # Vision checkpoints keep their chat template with the processor.
        model_config = self._engine.model_config
        try:
            processor = AutoProcessor.from_pretrained(
                model_config.model,
                revision=model_config.revision,
                trust_remote_code=model_config.trust_remote_code,
            )
        except (OSError, ValueError):
            processor = None
        self._processor = processor
        self._template = processor if getattr(processor, "chat_template", None) else None
        eos = getattr(self._tokenizer, "eos_token_id", None)
        self._eos = {eos} if isinstance(eos, int) else set()
        generation_eos = _compat.generation_eos(self._engine.model_config)
        if isinstance(generation_eos, int):
            self._eos.add(generation_eos)
        elif isinstance(generation_eos, list):
            self._eos.update(generation_eos)

    def shutdown(self) -> None:
        """Stop the engine and free its memory and processes (a later request starts it again).

        Requests still running fail with a ``BackendError`` saying so. The output handler
        stops first (so the engine's exit is not reported as a failure), then the engine core
        and its worker get :data:`ENGINE_EXIT_GRACE_S` to exit by themselves (the core is
        nudged until it sees vLLM's SIGTERM, see :mod:`mai_graph.backends.vllm.teardown`);
        this thread waits until they are gone, the engine loop keeps serving other engines.
        Also clears the record of engine deaths (``max_restarts`` counts afresh).
        """
        engine, self._engine = self._engine, None
        procs = self._procs
        self._deaths, self._death, self._procs = [], None, []
        _forget(self)
        if engine is None or not self._owns_engine:
            return
        self._retired.add(engine)
        stop_engine(engine, self._loop, procs, f"the vLLM engine of {self.model!r}")

    def memory_report(self) -> dict[str, Any]:
        """What this engine asked vLLM for, and what vLLM reported once it started.

        ``platform``, ``memory_mode`` (``kv_bytes``: a fixed pool; ``share``: vLLM sizes it;
        ``kv_cache_gib`` on the CPU), ``gpu_memory_utilization``, ``kv_cache_bytes`` asked,
        ``kv_blocks`` x ``block_size`` = ``kv_tokens`` vLLM allocated (None before the start),
        and the worker ``start_method``.
        """
        cpu = _on_cpu()
        asked = self.kv_cache_bytes(cpu)
        blocks, size = _compat.kv_cache_blocks(self._engine) if self._engine else (None, None)
        return {
            "platform": "cpu" if cpu else "cuda",
            "memory_mode": "kv_cache_gib" if cpu else ("kv_bytes" if asked else "share"),
            "gpu_memory_utilization": self._share,
            "kv_cache_bytes": asked,
            "kv_blocks": blocks,
            "block_size": size,
            "kv_tokens": blocks * size if blocks and size else None,
            "start_method": os.environ.get("VLLM_WORKER_MULTIPROC_METHOD") or "fork (vLLM's)",
        }

    def engine_processes(self) -> list[int]:
        """Process ids of the running engine's core process and its workers (empty if none)."""
        return [p.pid for p in self._procs] if self._engine is not None else []

    @property
    def tokenizer(self) -> Any:
        """The engine's tokenizer (available once the engine started)."""
        if self._tokenizer is None:
            raise BackendError(
                f"{self.name}: the engine has not started yet", fix="await backend.start() first"
            )
        return self._tokenizer

    async def vocab_fingerprint(self) -> str:
        """Hash of the tokenizer's vocabulary: equal for backends whose token ids mean the same.

        Starts the engine if it has not started (the tokenizer comes with it).
        """
        if self._fingerprint is None:
            if self._tokenizer is None:
                await self.start(warmup=False)
            self._fingerprint = vocab_fingerprint(self.tokenizer)
        return self._fingerprint

    async def reset_prefix_cache(self) -> None:
        """Drop the engine's prefix cache (benchmarks measure cold prefixes this way)."""

        async def reset() -> None:
            if self._engine is not None:
                await self._engine.reset_prefix_cache()

        if self._loop is None:
            await reset()
        else:
            await self._loop.arun(reset())

    def running_requests(self) -> int:
        """Requests the engine is still working on (0 after a cancelled run)."""
        if self._engine is None:
            return 0
        return _compat.unfinished_requests(self._engine)

    async def engine_idle(self) -> bool:
        """Whether the engine core itself holds no request (asks the core process).

        :meth:`running_requests` counts the front end's requests; this asks the scheduler, so
        a request the front end forgot but the core still runs is caught too.
        """

        async def ask() -> bool:
            if not self._alive():
                return True
            assert self._engine is not None
            return not await _compat.core_has_work(self._engine)

        if self._loop is None:
            return await ask()
        return await self._loop.arun(ask())

    # -- serving ---------------------------------------------------------------------------

    async def generate(self, request: GenerationRequest) -> Generation:
        """Serve one request; cancelling the caller aborts it in the engine."""
        if self._loop is None:
            return await self._generate(request, None)
        return await self._loop.arun(self._generate(request, None))

    async def generate_stream(
        self, request: GenerationRequest, on_text: TextCallback
    ) -> Generation:
        """Like :meth:`generate`, calling ``on_text`` with each text delta on the caller's loop."""
        deliver = on_caller_loop(on_text)
        if self._loop is None:
            return await self._generate(request, deliver)
        return await self._loop.arun(self._generate(request, deliver))

    def distribution_ids(
        self, request: GenerationRequest
    ) -> dict[str, tuple[int, ...]] | str | None:
        """Per allowed answer, its first-token ids (or why there are none); None: not asked.

        Needs the tokenizer (the engine started). A request that must generate more than one
        token (``min_tokens`` > 1) is not answered in one step.
        """
        if request.distribution is None:
            return None
        if request.min_tokens > 1:
            return "min_tokens > 1 asks for a longer answer than one decode step"
        key = request.distribution
        if key not in self._first_ids:
            found = first_token_ids(self._tokenizer, key)
            if isinstance(found, dict) and sum(map(len, found.values())) > MAX_LOGPROB_TOKEN_IDS:
                found = f"more than {MAX_LOGPROB_TOKEN_IDS} first tokens"
            self._first_ids[key] = found
        return self._first_ids[key]

    def sampling_params(
        self, request: GenerationRequest, first_ids: Mapping[str, Sequence[int]] | None = None
    ) -> SamplingParams:
        """The native ``SamplingParams`` for a request.

        With ``first_ids`` (a distribution request): one token, the listed ids' log-probabilities
        at that position (``logprob_token_ids``), no structured output.
        """
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        if first_ids is not None:
            return SamplingParams(
                max_tokens=1,
                temperature=0.0,
                seed=request.seed,
                logprob_token_ids=sorted({t for ids in first_ids.values() for t in ids}),
            )
        structured = None
        if request.choices is not None:
            structured = StructuredOutputsParams(choice=list(request.choices))
        return SamplingParams(
            max_tokens=request.max_tokens,
            min_tokens=request.min_tokens,
            temperature=request.temperature,
            seed=request.seed,
            stop=list(request.stop) or None,
            logprobs=request.logprobs,
            prompt_logprobs=request.prompt_logprobs,
            structured_outputs=structured,
        )

    def _image_tokens(self, image: ImageRef) -> int:
        """Tokens the model's processor turns ``image`` into (0 if it cannot say).

        Raises:
            ImageError: The processor refuses the image's size (e.g. its aspect ratio).
        """
        counter = _compat.media_token_counter(self._processor)
        if counter is None:
            return 0
        try:
            counts = counter(image_sizes=[(image["height"], image["width"])], **self._mm_kwargs)
        except ValueError as exc:
            raise ImageError(
                f"{self.name}'s image processor refuses a {image['width']}x{image['height']} "
                f"image: {exc}",
                parameter="image",
                value=f"{image['width']}x{image['height']}",
                fix="crop or pad the image to a moderate aspect ratio, or resize it",
            ) from exc
        except Exception:  # noqa: BLE001 - a processor without token counting: the engine checks
            return 0
        tokens = getattr(counts, "num_image_tokens", None)
        return int(tokens[0]) if tokens else 0

    def _video_tokens(self, video: VideoRef) -> int:
        """Tokens the model's processor turns ``video``'s sampled frames into (0: unknown)."""
        counter = _compat.media_token_counter(self._processor)
        if counter is None:
            return 0
        try:
            size = (len(video["indices"]), video["height"], video["width"])
            tokens = getattr(
                counter(video_sizes=[size], **self._mm_kwargs), "num_video_tokens", None
            )
        except Exception:  # noqa: BLE001 - the engine checks what cannot be counted here
            return 0
        if not tokens:
            return 0
        return int(tokens[0]) + self._frame_stamp_tokens(video)

    def _frame_stamp_tokens(self, video: VideoRef) -> int:
        """Qwen3-VL's text around each frame group: ``<t seconds>`` and its own start / end.

        Its processor writes, per temporal group of frames, the group's time as text and wraps
        the group's tokens in vision start / end tokens (measured: 32 tokens for 8 frames that
        the media token counter alone misses). 0 for processors without frame timestamps.
        """
        stamps = _compat.frame_timestamps(self._processor, video["indices"], float(video["fps"]))
        if not stamps:
            return 0
        return sum(
            len(self._tokenizer.encode(f"<{t:.1f} seconds>", add_special_tokens=False)) + 2
            for t in stamps
        )

    def _prompt(self, request: GenerationRequest) -> dict[str, Any]:
        rendered = render(
            self._tokenizer,
            request.messages,
            self._eos,
            template=self._template,
            thinking=thinking_for(request.purpose),
        )
        assert self._engine is not None
        # Each image is one placeholder token in the rendered ids; the engine expands it.
        length = len(rendered.token_ids) + sum(self._image_tokens(r) - 1 for r in rendered.images)
        length += sum(self._video_tokens(v) - 1 for v in rendered.videos)
        max_len = int(self._engine.model_config.max_model_len)
        check_prompt_length(self.name, length, max_len, purpose=request.purpose)
        prompt: dict[str, Any] = {"prompt_token_ids": rendered.token_ids}
        if rendered.videos and self._mm_kwargs:
            # Measured with vLLM 0.32 on Qwen3-VL: the processor kwargs reach the video
            # processor unfiltered, which refuses them (the request would fail in the engine).
            raise ConfigError(
                f"{self.name}: this engine was started with mm_processor_kwargs "
                f"{sorted(self._mm_kwargs)}, and vLLM 0.32 passes them to Qwen3-VL's video "
                "processor, which refuses them: a video cannot be served here",
                parameter="mm_processor_kwargs",
                value=sorted(self._mm_kwargs),
                fix="serve videos from an engine without mm_processor_kwargs (cap image sizes "
                "before sending them instead), or send frames as images",
            )
        if rendered.images or rendered.videos:
            check_media_counts(self.name, self.media_limits, rendered.images, rendered.videos)
            data: dict[str, Any] = {}
            uuids: dict[str, Any] = {}
            if rendered.images:  # one uuid per item: the engine's caches key on content
                data["image"] = [load_image(r) for r in rendered.images]
                uuids["image"] = [r["sha256"] for r in rendered.images]
            if rendered.videos:  # sampled frames + metadata (timestamps), as Qwen3-VL wants
                data["video"] = [video_input(v) for v in rendered.videos]
                uuids["video"] = [v["sha256"] for v in rendered.videos]
            prompt["multi_modal_data"] = data
            prompt["multi_modal_uuids"] = uuids
        return prompt

    async def _generate(
        self, request: GenerationRequest, on_text: TextCallback | None
    ) -> Generation:
        await self._start()
        engine = self._engine
        assert engine is not None
        found = self.distribution_ids(request)
        first_ids = found if isinstance(found, dict) else None
        params = self.sampling_params(request, first_ids)
        if first_ids is not None:  # the answer is known at the end: no token deltas
            on_text, then = None, on_text
        else:
            then = None
        # Off the event loop: rendering tokenizes, and images may be read and decoded.
        prompt = await asyncio.to_thread(self._prompt, request)
        start = time.perf_counter()
        ttft: float | None = None
        final = None
        try:
            stream = engine.generate(prompt, params, request.request_id)  # type: ignore[arg-type]
            sent = 0
            async for out in stream:
                if ttft is None and out.outputs and out.outputs[0].token_ids:
                    ttft = time.perf_counter() - start
                final = out
                if on_text is not None and out.outputs and len(out.outputs[0].text) > sent:
                    text = out.outputs[0].text
                    on_text(text[sent:])
                    sent = len(text)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if engine in self._retired:
                raise BackendError(
                    f"{self.name}: the engine was shut down during request {request.request_id}",
                    parameter="model",
                    value=self.model,
                    fix="a new request starts the engine again (unless the service is stopping)",
                ) from exc
            if getattr(engine, "errored", False):
                raise self._dead_error(engine, request) from exc
            if isinstance(exc, ValueError | TypeError):
                raise BackendError(
                    f"{self.name} refused request {request.request_id}: {exc}",
                    parameter="request",
                    fix="check the prompt length against max_model_len and the sampling options",
                ) from exc
            raise BackendError(
                f"{self.name} failed on request {request.request_id}: {exc}", transient=True
            ) from exc
        latency = time.perf_counter() - start
        if final is None or not final.outputs:
            raise BackendError(f"{self.name} returned no output for {request.request_id}")
        completion = final.outputs[0]
        logprobs = None
        if first_ids is None and request.logprobs is not None and completion.logprobs is not None:
            logprobs = tuple(
                float(step[tid].logprob) if step is not None else float("nan")
                for tid, step in zip(completion.token_ids, completion.logprobs)
            )
        prompt_logprobs = None
        if request.prompt_logprobs is not None and final.prompt_logprobs is not None:
            prompt_logprobs = tuple(
                None if step is None else float(step[tid].logprob)
                for tid, step in zip(final.prompt_token_ids or (), final.prompt_logprobs)
            )
        token_ids = tuple(completion.token_ids)
        prompt_ids = final.prompt_token_ids or ()
        media = media_ids(self._tokenizer)
        gen = Generation(
            **stage_times(final.metrics),
            image_tokens=sum(1 for t in prompt_ids if t in media) if media else None,
            distribution_fallback=found if isinstance(found, str) else None,
            text=completion.text,
            model=self.name,
            prompt_tokens=len(prompt_ids),
            cached_tokens=final.num_cached_tokens,
            generated_tokens=len(token_ids),
            latency_s=latency,
            ttft_s=ttft,
            finish_reason=completion.finish_reason or "stop",
            token_ids=token_ids,
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs,
            tokens=tuple(
                self._tokenizer.batch_decode([[t] for t in token_ids], skip_special_tokens=True)
            ),
        )
        if first_ids is None:
            return gen
        gen = _one_step(request, gen, completion, first_ids)
        if then is not None and gen.text:
            then(gen.text)
        return gen

    def __repr__(self) -> str:
        state = "running" if self.started else "not started"
        return f"VLLMBackend({self.model!r}, name={self.name!r}, {state})"


def _one_step(
    request: GenerationRequest,
    gen: Generation,
    completion: Any,
    first_ids: Mapping[str, Sequence[int]],
) -> Generation:
    """A one-step distribution request's generation: the answer taken from the first step."""
    step = completion.logprobs[0] if completion.logprobs else {}
    logprobs = {int(t): float(lp.logprob) for t, lp in step.items()}
    distribution = fold(logprobs, first_ids)
    answer = pick(distribution, request.temperature, request.seed)
    p = distribution[answer]
    return dataclasses.replace(
        gen,
        text=answer,
        generated_tokens=1,
        finish_reason="stop",
        token_ids=(first_ids[answer][0],),
        logprobs=None if request.logprobs is None else (math.log(p) if p > 0 else -math.inf,),
        tokens=(answer,),
        distribution=distribution,
    )


def stage_times(stats: Any) -> StageTimes:
    """Queue, prefill and decode seconds from vLLM's per-request statistics.

    ``RequestOutput.metrics`` is a ``RequestStateStats`` whose ``queued_ts``, ``scheduled_ts``,
    ``first_token_ts`` and ``last_token_ts`` are the engine core's monotonic timestamps; it is
    set while the engine logs statistics (vLLM's default; ``disable_log_stats=True`` turns it
    off, and then these are None). The intervals are the ones ``vllm serve
    --enable-per-request-metrics`` reports (``vllm/entrypoints/generate/base/serving.py``,
    ``build_per_request_timing_metrics``): queue = scheduled - queued, prefill (time to first
    token net of queueing) = first token - scheduled, decode = last token - first token.

    >>> class S: queued_ts, scheduled_ts, first_token_ts, last_token_ts = 1.0, 1.5, 2.0, 3.0
    >>> stage_times(S())
    {'queue_s': 0.5, 'prefill_s': 0.5, 'decode_s': 1.0}
    >>> stage_times(None)
    {'queue_s': None, 'prefill_s': None, 'decode_s': None}
    """
    queued = getattr(stats, "queued_ts", 0.0) or 0.0
    scheduled = getattr(stats, "scheduled_ts", 0.0) or 0.0
    first = getattr(stats, "first_token_ts", 0.0) or 0.0
    last = getattr(stats, "last_token_ts", 0.0) or 0.0

    def span(a: float, b: float) -> float | None:
        return max(b - a, 0.0) if a > 0 and b > 0 else None

    return {
        "queue_s": span(queued, scheduled),
        "prefill_s": span(scheduled, first),
        "decode_s": span(first, last),
    }
