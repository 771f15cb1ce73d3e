"""In-process vLLM engines (``AsyncLLM``): the production backend, GPU or CPU.

Each :class:`VLLMBackend` owns one engine. Engines start lazily (first request, or
``await backend.start()``), one after the other, on mai-graph's engine loop: a background event
loop shared by all engines, so sync callers, ``langgraph dev`` and any number of caller loops can
use the same engines. Prompts go in as token ids rendered with the model's chat template; the
image goes as multimodal data with its pixel hash as the multimodal uuid, so the engine's
processor and prefix caches key on content.

Two engines on one GPU: give each a share of memory, e.g. Qwen3-VL-2B with
``gpu_memory_utilization=0.25`` and -8B with ``0.6`` on an 80 GB card (the rest is headroom);
on CPU the KV cache size is ``kv_cache_gib`` per engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from typing import TYPE_CHECKING, Any

from mai_graph.backends.base import Generation, GenerationRequest, TextCallback
from mai_graph.backends.extras import require_extra
from mai_graph.backends.render import render, vocab_fingerprint
from mai_graph.errors import BackendError, ConfigError
from mai_graph.images import load_image
from mai_graph.loop import BackgroundLoop, on_caller_loop

if TYPE_CHECKING:
    from vllm import SamplingParams
    from vllm.v1.engine.async_llm import AsyncLLM

__all__ = ["ENGINE_LOOP", "VLLMBackend"]

require_extra("vllm", ("vllm", "torch", "transformers"), "vllm")

ENGINE_LOOP = BackgroundLoop("mai-graph-engines")
"""The loop every engine built by :class:`VLLMBackend` lives on."""

_START_LOCK = threading.Lock()  # engines start one after the other


async def _stop(engine: AsyncLLM) -> None:
    # Stop the output handler first, so it does not report the engine's exit as a failure.
    handler = getattr(engine, "output_handler", None)
    if handler is not None and not handler.done():
        handler.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await handler
    engine.shutdown()


def _on_cpu() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


class VLLMBackend:
    """A vision-language model served by an in-process vLLM ``AsyncLLM`` engine.

    Args:
        model: Checkpoint path or hub id (``Qwen/Qwen3-VL-2B-Instruct``).
        name: Name in metrics (default: ``model``).
        gpu_memory_utilization: Share of GPU memory for this engine (on CPU: share of RAM
            vLLM may plan with; default 0.05 on CPU, vLLM's default on GPU).
        kv_cache_gib: CPU only: KV cache size in GiB (``VLLM_CPU_KVCACHE_SPACE``), default 1.
        max_model_len: Context length to reserve for (default 4096).
        block_size: KV block size; prefix-cache hits are whole blocks (default: 32 on CPU).
        enforce_eager: Skip graph capture / compilation (default: True on CPU, where it cuts
            start-up by a minute).
        seed: Engine seed.
        **engine_kwargs: Passed through to ``vllm.AsyncEngineArgs``.

    Example:
        ``small = VLLMBackend("Qwen/Qwen3-VL-2B-Instruct", gpu_memory_utilization=0.25)``
    """

    supports_logprobs = True
    """Generations carry logprobs when asked (vLLM's raw logprobs, before choice masking)."""

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
        self._engine: AsyncLLM | None = None
        self._owns_engine = True
        self._tokenizer: Any = None
        self._template: Any = None
        self._fingerprint: str | None = None
        self._eos: set[int] = set()
        self._loop: BackgroundLoop | None = ENGINE_LOOP
        self._start_lock: asyncio.Lock | None = None

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

    # -- lifecycle ---------------------------------------------------------------------------

    def engine_args(self) -> Any:
        """The ``AsyncEngineArgs`` this backend starts its engine with."""
        from vllm import AsyncEngineArgs

        cpu = _on_cpu()
        o = self._options
        kwargs: dict[str, Any] = dict(
            model=self.model,
            max_model_len=o["max_model_len"],
            enforce_eager=cpu if o["enforce_eager"] is None else o["enforce_eager"],
            enable_prefix_caching=True,
            seed=o["seed"],
            limit_mm_per_prompt={"image": 1, "video": 0},
        )
        if o["gpu_memory_utilization"] is not None or cpu:
            kwargs["gpu_memory_utilization"] = o["gpu_memory_utilization"] or 0.05
        if o["block_size"] is not None or cpu:
            kwargs["block_size"] = o["block_size"] or 32
        kwargs.update(self._engine_kwargs)
        return AsyncEngineArgs(**kwargs)

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

        from mai_graph.images import image_ref

        ref = image_ref(Image.new("RGB", (64, 64), (127, 127, 127)))
        text = {"type": "text", "text": "Warm-up."}
        with_image: Any = ({"role": "user", "content": [{"type": "image", "image": ref}, text]},)
        plain: Any = ({"role": "user", "content": [text]},)
        await self.generate(
            GenerationRequest(with_image, max_tokens=2, choices=("A", "B"), purpose="warmup")
        )
        await self.generate(
            GenerationRequest(plain, max_tokens=8, min_tokens=8, logprobs=0, purpose="warmup")
        )

    async def _start(self) -> None:
        if self._engine is not None:
            return
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._engine is not None:
                return
            from vllm.v1.engine.async_llm import AsyncLLM

            if _on_cpu():
                gib = self._options["kv_cache_gib"]
                os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(max(1, round(gib or 1)))
            args = self.engine_args()
            with _START_LOCK:
                try:
                    self._engine = AsyncLLM.from_engine_args(args)
                except Exception as exc:
                    raise BackendError(
                        f"vLLM engine for {self.model!r} failed to start: {exc}",
                        parameter="model",
                        value=self.model,
                        fix="check the model path and the memory settings "
                        "(gpu_memory_utilization / kv_cache_gib / max_model_len)",
                    ) from exc
            self._bind_tokenizer()

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
        self._template = processor if getattr(processor, "chat_template", None) else None
        eos = getattr(self._tokenizer, "eos_token_id", None)
        self._eos = {eos} if isinstance(eos, int) else set()
        generation_eos = self._engine.model_config.try_get_generation_config().get("eos_token_id")
        if isinstance(generation_eos, int):
            self._eos.add(generation_eos)
        elif isinstance(generation_eos, list):
            self._eos.update(generation_eos)

    def shutdown(self) -> None:
        """Stop the engine and free its memory (a later request starts it again)."""
        engine, self._engine = self._engine, None
        if engine is None or not self._owns_engine:
            return
        if self._loop is not None and not self._loop._in_loop():
            self._loop.run(_stop(engine))
        else:
            engine.shutdown()

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
        return int(self._engine.output_processor.get_num_unfinished_requests())

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

    def sampling_params(self, request: GenerationRequest) -> SamplingParams:
        """The native ``SamplingParams`` for a request."""
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

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

    def _prompt(self, request: GenerationRequest) -> dict[str, Any]:
        rendered = render(self._tokenizer, request.messages, self._eos, template=self._template)
        prompt: dict[str, Any] = {"prompt_token_ids": rendered.token_ids}
        if rendered.images:
            prompt["multi_modal_data"] = {"image": [load_image(r) for r in rendered.images]}
            prompt["multi_modal_uuids"] = {"image": [r["sha256"] for r in rendered.images]}
        return prompt

    async def _generate(
        self, request: GenerationRequest, on_text: TextCallback | None
    ) -> Generation:
        await self._start()
        assert self._engine is not None
        params = self.sampling_params(request)
        prompt = self._prompt(request)
        start = time.perf_counter()
        ttft: float | None = None
        final = None
        try:
            stream = self._engine.generate(prompt, params, request.request_id)  # type: ignore[arg-type]
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
        except (ValueError, TypeError) as exc:
            raise BackendError(
                f"{self.name} refused request {request.request_id}: {exc}",
                parameter="request",
                fix="check the prompt length against max_model_len and the sampling options",
            ) from exc
        except Exception as exc:
            raise BackendError(
                f"{self.name} failed on request {request.request_id}: {exc}",
                transient=not getattr(self._engine, "errored", False),
            ) from exc
        latency = time.perf_counter() - start
        if final is None or not final.outputs:
            raise BackendError(f"{self.name} returned no output for {request.request_id}")
        completion = final.outputs[0]
        logprobs = None
        if request.logprobs is not None and completion.logprobs is not None:
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
        return Generation(
            text=completion.text,
            model=self.name,
            prompt_tokens=len(final.prompt_token_ids or ()),
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

    def __repr__(self) -> str:
        state = "running" if self.started else "not started"
        return f"VLLMBackend({self.model!r}, name={self.name!r}, {state})"
