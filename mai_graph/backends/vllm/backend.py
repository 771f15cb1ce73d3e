"""In-process vLLM engines (``AsyncLLM``): the production backend, GPU or CPU.

Each :class:`VLLMBackend` owns one engine. Engines start lazily (first request, or
``await backend.start()``), one after the other, on mai-graph's engine loop: a background event
loop shared by all engines, so sync callers, ``langgraph dev`` and any number of caller loops can
use the same engines. Prompts go in as token ids rendered with the model's chat template; the
image goes as multimodal data with its pixel hash as the multimodal uuid, so the engine's
processor and prefix caches key on content.

Two engines on one GPU: build them together (:func:`~mai_graph.deploy.build_lineup`,
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
import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mai_graph.backends.base import Capabilities, Generation, GenerationRequest, TextCallback
from mai_graph.backends.extras import require_extra
from mai_graph.backends.render import vocab_fingerprint
from mai_graph.backends.vllm import compat
from mai_graph.backends.vllm.engine import CPU_BLOCK_SIZE as CPU_BLOCK_SIZE
from mai_graph.backends.vllm.engine import GPU_BLOCK_SIZE as GPU_BLOCK_SIZE
from mai_graph.backends.vllm.engine import RESTART_WINDOW_S as RESTART_WINDOW_S
from mai_graph.backends.vllm.engine import WORKER_EXIT_GRACE_S as WORKER_EXIT_GRACE_S
from mai_graph.backends.vllm.engine import EngineHandle
from mai_graph.backends.vllm.teardown import (
    ENGINE_EXIT_GRACE_S,
)
from mai_graph.backends.vllm.translate import MAX_LOGPROB_TOKEN_IDS as MAX_LOGPROB_TOKEN_IDS
from mai_graph.backends.vllm.translate import Translator
from mai_graph.backends.vllm.translate import stage_times as stage_times
from mai_graph.errors import BackendError, ConfigError, check_int, check_number
from mai_graph.inputs.limits import check_mm_limits
from mai_graph.jsonin import MAX_BYTES
from mai_graph.loop import BackgroundLoop, on_caller_loop, shared_loop

if TYPE_CHECKING:
    from vllm import SamplingParams
    from vllm.v1.engine.async_llm import AsyncLLM


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


class VLLMBackend:
    """A vision-language model served by an in-process vLLM ``AsyncLLM`` engine.

    Args:
        model: Checkpoint path or hub id (``Qwen/Qwen3-VL-2B-Instruct``).
        name: Name in metrics (default: ``model``).
        gpu_memory_utilization: Share of GPU memory for this engine (on CPU: share of RAM
            vLLM may plan with). Default 0.05 on CPU; on a GPU 0.9 when the engine runs alone,
            and a second engine without a share is refused (build engines together with
            :func:`~mai_graph.deploy.build_lineup` and the memory plan gives each its share).
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

    provider = "vllm"
    """What serves the calls (span and run attributes)."""
    capabilities: Capabilities = Capabilities(
        stream=True,
        # vLLM's default ``raw_logprobs``: after a choice constraint's mask, before
        # temperature and other logits processors.
        logprobs=True,
        distribution=True,  # one step, from ``logprob_token_ids``
        vocabulary=True,
        managed=True,
    )
    """What an engine can do beyond ``generate`` (an instance adds its media limits)."""

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
        if kv_cache_gib is not None:
            check_number(kv_cache_gib, "kv_cache_gib", unit="GiB", above=0,
                         maximum=MAX_BYTES >> 30, fix="e.g. kv_cache_gib=2")  # fmt: skip
        check_int(
            max_restarts,
            "max_restarts",
            minimum=0,
            fix="pass 0 to fail fast after an engine dies, or a small number such as 2",
        )
        self.media_limits = check_mm_limits(limit_mm_per_prompt)
        """Most items per prompt by modality (``image``, ``video``): ``limit_mm_per_prompt``."""
        self.capabilities = dataclasses.replace(
            VLLMBackend.capabilities, media_limits=tuple(sorted(self.media_limits.items()))
        )
        """What this engine can do beyond ``generate``."""
        self.model = model
        self._name = name or model
        options = dict(
            gpu_memory_utilization=gpu_memory_utilization,
            kv_cache_gib=kv_cache_gib,
            max_model_len=max_model_len,
            block_size=block_size,
            enforce_eager=enforce_eager,
            seed=seed,
        )
        if kv_cache_gib is not None and "kv_cache_memory_bytes" in engine_kwargs:
            raise ConfigError(
                f"{self.name}: kv_cache_gib and kv_cache_memory_bytes both set the KV pool",
                parameter="kv_cache_gib",
                value=kv_cache_gib,
                fix="give one of them (kv_cache_gib is in GiB)",
            )
        self._options = options
        self._engine_kwargs = engine_kwargs
        self._translator: Translator | None = None
        self._fingerprint: str | None = None
        self._loop: BackgroundLoop | None = ENGINE_LOOP
        self.handle = EngineHandle(
            model, self.name, options, engine_kwargs, self.media_limits, max_restarts,
            ENGINE_LOOP, self._bind_translator,
        )  # fmt: skip
        """The engine's life (start, restart, death, teardown); requests are translated by
        :attr:`translator`."""

    @classmethod
    def from_engine(cls, engine: AsyncLLM, *, name: str | None = None) -> VLLMBackend:
        """Wrap an ``AsyncLLM`` you built; requests then run on the loop you call from."""
        model = engine.model_config.model
        backend = cls(model, name=name)
        backend.handle.adopt(engine)
        backend._loop = None
        backend._bind_translator()
        return backend

    @property
    def max_model_len(self) -> int | None:
        """The context length of requests: the engine's, else the option (None: not chosen)."""
        engine = self.handle.engine
        if engine is not None:
            return int(engine.model_config.max_model_len)
        value = self._options.get("max_model_len")
        return None if value is None else int(value)

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The model's name in metrics and messages (may be changed before or after start)."""
        return self._name

    @name.setter
    def name(self, value: str) -> None:
        self._name = value
        if getattr(self, "handle", None) is not None:
            self.handle.name = value
        translator = getattr(self, "_translator", None)
        if translator is not None:
            translator.name = value

    @property
    def started(self) -> bool:
        """Whether the engine is running."""
        return self.handle.started

    @property
    def restarts(self) -> int:
        """How many times a dead engine was started again."""
        return self.handle.restarts

    @property
    def max_restarts(self) -> int:
        """Restarts allowed within :data:`RESTART_WINDOW_S` (then requests fail fast)."""
        return self.handle.max_restarts

    def engine_args(self, share: float | None = None) -> Any:
        """:meth:`EngineHandle.engine_args`: the ``AsyncEngineArgs`` the engine starts with."""
        return self.handle.engine_args(share)

    def kv_cache_bytes(self, cpu: bool | None = None) -> int | None:
        """:meth:`EngineHandle.kv_cache_bytes`: the fixed KV pool asked of vLLM, if any."""
        return self.handle.kv_cache_bytes(cpu)

    def memory_report(self) -> dict[str, Any]:
        """:meth:`EngineHandle.memory_report`: asked of vLLM against what it allocated."""
        return self.handle.memory_report()

    def engine_processes(self) -> list[int]:
        """Process ids of the running engine's core process and its workers (empty if none)."""
        return self.handle.engine_processes()

    def shutdown(self) -> None:
        """Stop the engine and free its memory and processes (a later request starts it again).

        Requests still running fail with a ``BackendError`` saying so; this thread waits until
        the engine's processes are gone (:meth:`EngineHandle.shutdown`). Also clears the
        record of engine deaths (``max_restarts`` counts afresh).
        """
        self.handle.shutdown()

    async def _start(self) -> None:
        await self.handle.start()

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

    def _bind_translator(self) -> None:
        engine = self.handle.engine
        assert engine is not None
        self._translator = Translator.for_engine(
            engine,
            name=self.name,
            media_limits=self.media_limits,
            mm_processor_kwargs=self._engine_kwargs.get("mm_processor_kwargs"),
        )

    @property
    def translator(self) -> Translator:
        """What turns requests into engine prompts and outputs into generations (once started)."""
        if self._translator is None:
            raise BackendError(
                f"{self.name}: the engine has not started yet", fix="await backend.start() first"
            )
        return self._translator

    @property
    def tokenizer(self) -> Any:
        """The engine's tokenizer (available once the engine started)."""
        return self.translator.tokenizer

    async def vocab_fingerprint(self) -> str:
        """Hash of the tokenizer's vocabulary: equal for backends whose token ids mean the same.

        Starts the engine if it has not started (the tokenizer comes with it).
        """
        if self._fingerprint is None:
            if self._translator is None:
                await self.start(warmup=False)
            self._fingerprint = vocab_fingerprint(self.tokenizer)
        return self._fingerprint

    async def reset_prefix_cache(self) -> None:
        """Drop the engine's prefix cache (benchmarks measure cold prefixes this way)."""

        async def reset() -> None:
            engine = self.handle.engine
            if engine is not None:
                await engine.reset_prefix_cache()

        if self._loop is None:
            await reset()
        else:
            await self._loop.arun(reset())

    def running_requests(self) -> int:
        """Requests the engine is still working on (0 after a cancelled run)."""
        engine = self.handle.engine
        if engine is None:
            return 0
        return compat.unfinished_requests(engine)

    async def engine_idle(self) -> bool:
        """Whether the engine core itself holds no request (asks the core process).

        :meth:`running_requests` counts the front end's requests; this asks the scheduler, so
        a request the front end forgot but the core still runs is caught too.
        """

        async def ask() -> bool:
            engine = self.handle.engine
            if engine is None or getattr(engine, "errored", False):
                return True
            return not await compat.core_has_work(engine)

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

    async def _generate(
        self, request: GenerationRequest, on_text: TextCallback | None
    ) -> Generation:
        await self._start()
        engine = self.handle.engine
        assert engine is not None
        translator = self.translator
        found = translator.distribution_ids(request)
        first_ids = found if isinstance(found, dict) else None
        params = translator.sampling_params(request, first_ids)
        if first_ids is not None:  # the answer is known at the end: no token deltas
            on_text, then = None, on_text
        else:
            then = None
        # Off the event loop: rendering tokenizes, and images may be read and decoded.
        prompt = await asyncio.to_thread(translator.prompt, request)
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
            if self.handle.retired(engine):
                raise BackendError(
                    f"{self.name}: the engine was shut down during request {request.request_id}",
                    parameter="model",
                    value=self.model,
                    fix="a new request starts the engine again (unless the service is stopping)",
                ) from exc
            if getattr(engine, "errored", False):
                raise self.handle.dead_error(engine, request.request_id) from exc
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
        gen = translator.generation(final, request, latency_s=latency, ttft_s=ttft, found=found)
        if then is not None and gen.text:
            then(gen.text)
        return gen

    def distribution_ids(
        self, request: GenerationRequest
    ) -> dict[str, tuple[int, ...]] | str | None:
        """:meth:`Translator.distribution_ids` (the engine started)."""
        return self.translator.distribution_ids(request)

    def sampling_params(
        self, request: GenerationRequest, first_ids: Mapping[str, Sequence[int]] | None = None
    ) -> SamplingParams:
        """:meth:`Translator.sampling_params` (needs no engine)."""
        return Translator.sampling_params(request, first_ids)

    def __repr__(self) -> str:
        state = "running" if self.started else "not started"
        return f"VLLMBackend({self.model!r}, name={self.name!r}, {state})"
