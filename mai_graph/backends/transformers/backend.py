"""The transformers backend's adapter: loading, serving requests in worker threads, cancellation.

Model work (loading included) never runs on the event loop: every call hands it to a worker
thread and one request runs at a time. The decode loop, the KV-cache store, the prompt inputs,
loading and the attention pass live in their own modules of this package.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from mai_graph.answers.distribution import first_token_ids, fold, pick
from mai_graph.backends.base import Capabilities, Generation, GenerationRequest, TextCallback
from mai_graph.backends.render import render, thinking_for
from mai_graph.backends.render import vocab_fingerprint as fingerprint_of
from mai_graph.backends.transformers.attention import reasoning_attention
from mai_graph.backends.transformers.decode import decode, final_text
from mai_graph.backends.transformers.inputs import VISION_KEYS, media_end, prompt_inputs
from mai_graph.backends.transformers.kv_cache import KVCacheStore, cache_key, empty_cache
from mai_graph.backends.transformers.loading import eos_token_ids, load_model, load_processor
from mai_graph.errors import BackendError, ConfigError, check_int
from mai_graph.inputs.limits import check_prompt_length
from mai_graph.loop import on_caller_loop

__all__ = ["DEFAULT_MAX_MODEL_LEN", "TransformersBackend"]

DEFAULT_MAX_MODEL_LEN = 32_768
"""The longest context a transformers backend serves unless told otherwise (a model's native
context, e.g. Qwen3-VL's 262,144 tokens, would let one prompt take the machine's memory)."""

THREADS_PER_CPU = 4
"""``threads`` may be at most this many per CPU of the machine (more only oversubscribe it;
a million would exhaust the process's threads)."""


def max_threads() -> int:
    """The most torch threads a backend may ask for here (:data:`THREADS_PER_CPU` per CPU)."""
    return THREADS_PER_CPU * (os.cpu_count() or 1)


class TransformersBackend:
    """A vision-language model run in-process with transformers.

    Declares every capability of :mod:`mai_graph.backends.base`: streaming, its vocabulary
    fingerprint, logprobs under the model's own distribution, attention weights, and
    :meth:`start` / :meth:`shutdown`. The model loads on :meth:`start` or on the first request,
    in a worker thread either way.

    Args:
        model: Checkpoint path / hub id, or a loaded model (then pass ``processor`` or let it
            load from the model's ``name_or_path``).
        processor: The model's processor (loaded from ``model`` when omitted).
        name: Name in metrics (default: the checkpoint path).
        dtype: Torch dtype name for loading (default ``float32``, fastest on CPU).
        cache_entries: How many KV caches to keep for prefix reuse (0: none).
        threads: Torch intra-op threads (default: leave torch's setting).
        max_model_len: Longest prompt plus generated tokens; a longer prompt is refused before
            its prefill (as vLLM does) and generation stops there. Default: the model's
            ``max_position_embeddings``, at most :data:`DEFAULT_MAX_MODEL_LEN` (a prefill's
            memory grows with its length: this backend holds no memory plan).
        **model_kwargs: Passed to ``from_pretrained`` (e.g. ``attn_implementation="eager"``).
    """

    provider = "transformers"
    """What serves the calls (span and run attributes)."""
    capabilities = Capabilities(
        stream=True,
        logprobs=True,  # the model's own, when asked
        distribution=True,  # from the prefill's logits (one step)
        vocabulary=True,
        attention=True,
        managed=True,
    )
    """What this backend can do beyond ``generate``."""

    def __init__(
        self,
        model: Any,
        processor: Any = None,
        *,
        name: str | None = None,
        dtype: str = "float32",
        cache_entries: int = 8,
        threads: int | None = None,
        max_model_len: int | None = None,
        **model_kwargs: Any,
    ) -> None:
        if max_model_len is not None:
            check_int(
                max_model_len,
                "max_model_len",
                minimum=2,
                fix="give the context length in tokens, e.g. max_model_len=8192",
            )
        if threads is not None:
            check_int(threads, "threads", minimum=1, maximum=max_threads(),
                      fix=f"give at most {THREADS_PER_CPU} per CPU (this machine has "
                      f"{os.cpu_count() or 1}), or leave torch's default")  # fmt: skip
        self._max_model_len = max_model_len
        self._caches = KVCacheStore(cache_entries)
        self._source = model
        self._owns_model = isinstance(model, str)
        self._owns_processor = processor is None
        self._model: Any = None if isinstance(model, str) else model
        self._processor = processor
        self._dtype = dtype
        self._threads = threads
        self._model_kwargs = model_kwargs
        self.name = name or (model if isinstance(model, str) else type(model).__name__)
        self._lock = threading.Lock()  # one request at a time
        self._load_lock = threading.Lock()
        self._fingerprint: str | None = None
        self._active: set[threading.Event] = set()

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Load model and processor in a worker thread (no-op once loaded)."""
        await asyncio.to_thread(self.load)

    def load(self) -> None:
        """Load model and processor now, blocking (from async code, ``await start()``)."""
        if self._threads:
            import torch

            torch.set_num_threads(self._threads)
        self._load_model()
        self._load_processor()

    def shutdown(self) -> None:
        """Cancel running requests, drop the KV caches and release what this backend loaded.

        Waits for the running request to stop (at its next token). A model or processor passed
        in by the caller stays theirs; a loaded one is dropped and loads again on the next
        request. Idempotent.
        """
        for cancel in tuple(self._active):
            cancel.set()
        with self._lock, self._load_lock:
            self._caches.clear()
            if self._owns_model:
                self._model = None
            if self._owns_processor:
                self._processor = None

    def _load_model(self) -> Any:
        with self._load_lock:
            if self._model is None:
                self._model = load_model(self._source, self._dtype, **self._model_kwargs)
            return self._model

    def _load_processor(self) -> Any:
        with self._load_lock:
            if self._processor is None:
                source = self._source if isinstance(self._source, str) else None
                if source is None:
                    source = self._source.name_or_path
                self._processor = load_processor(source, self.name)
            return self._processor

    @property
    def model(self) -> Any:
        """The model (loaded on first use; blocking)."""
        if self._model is None or self._processor is None:
            self.load()
        return self._model

    @property
    def processor(self) -> Any:
        """The processor (loaded on first use; blocking)."""
        if self._processor is None:
            return self._load_processor()
        return self._processor

    @property
    def tokenizer(self) -> Any:
        """The processor's tokenizer."""
        return self.processor.tokenizer

    async def vocab_fingerprint(self) -> str:
        """Hash of the tokenizer's vocabulary (loads the processor in a worker thread if needed).

        Equal for backends whose token ids mean the same text.
        """
        if self._fingerprint is None:
            self._fingerprint = await asyncio.to_thread(lambda: fingerprint_of(self.tokenizer))
        return self._fingerprint

    @property
    def busy(self) -> bool:
        """Whether a request is being served right now."""
        return self._lock.locked()

    def clear_cache(self) -> None:
        """Drop every stored KV cache (waits for a running request)."""
        with self._lock:
            self._caches.clear()

    async def reset_prefix_cache(self) -> None:
        """Drop every stored KV cache (the same call as on the vLLM backend)."""
        await asyncio.to_thread(self.clear_cache)

    # -- serving --------------------------------------------------------------------------------

    def prepare(self, request: GenerationRequest) -> dict[str, Any]:
        """Expanded ``input_ids``, ``position_ids``, vision inputs and spliced ``spans``.

        See :func:`~mai_graph.backends.transformers.inputs.prompt_inputs`. Blocking.
        """
        model, processor = self.model, self.processor
        rendered = render(
            self.tokenizer,
            request.messages,
            self._eos_ids(),
            template=processor,
            thinking=thinking_for(request.purpose),
        )
        return prompt_inputs(model, processor, rendered)

    @property
    def max_model_len(self) -> int | None:
        """The context length requests are held to (None: not given and not loaded yet).

        Reading it never loads anything: callers may be on an event loop.
        """
        if self._max_model_len is None and self._model is not None:
            config = self._model.config
            text = getattr(config, "text_config", None) or config
            native = getattr(text, "max_position_embeddings", None) or DEFAULT_MAX_MODEL_LEN
            self._max_model_len = min(int(native), DEFAULT_MAX_MODEL_LEN)
        return self._max_model_len

    def _context_limit(self) -> int:
        """:attr:`max_model_len`, loading the model first if needed (blocking)."""
        self._load_model()
        limit = self.max_model_len
        assert limit is not None
        return limit

    def _eos_ids(self) -> set[int]:
        return eos_token_ids(self.model, self.tokenizer)

    async def generate(self, request: GenerationRequest) -> Generation:
        """Serve one request in a worker thread; cancelling stops it at the next token."""
        return await self._run(request, None)

    async def generate_stream(
        self, request: GenerationRequest, on_text: TextCallback
    ) -> Generation:
        """Like :meth:`generate`, calling ``on_text`` with each text delta on the caller's loop."""
        return await self._run(request, on_caller_loop(on_text))

    async def attention(
        self, request: GenerationRequest, *, layers: Sequence[int] | None = None, full: bool = False
    ) -> list[float]:
        """Attention from the prompt's last turn onto its spliced reasoning tokens.

        For an S2 request (CoT conversation + reasoning ids + extraction turn) this is how much
        the extraction positions attend to each reasoning token: attention weights averaged over
        heads and ``layers`` (default: the last third), summed over the query rows after the
        reasoning. The model's attention implementation is the same afterwards.

        The cheap path (default) reuses or builds a KV cache for everything before those query
        rows with the model's own attention kernel, then runs only the query rows with eager
        attention. ``full=True`` runs one eager pass over the whole prompt (for checking).
        """
        return await asyncio.to_thread(self._attention, request, layers, full)

    async def _run(self, request: GenerationRequest, on_text: TextCallback | None) -> Generation:
        cancel = threading.Event()
        self._active.add(cancel)
        worker = asyncio.get_running_loop().run_in_executor(
            None, self._serve, request, cancel, on_text, time.perf_counter()
        )
        worker.add_done_callback(lambda _: self._active.discard(cancel))
        try:
            return await asyncio.shield(worker)
        except asyncio.CancelledError:
            cancel.set()
            worker.add_done_callback(lambda f: f.cancelled() or f.exception())
            raise

    def _serve(
        self,
        request: GenerationRequest,
        cancel: threading.Event,
        on_text: TextCallback | None,
        submitted: float,
    ) -> Generation:
        with self._lock:  # one request at a time: the wait for it is the call's queue time
            if cancel.is_set():
                raise BackendError(f"{self.name}: request {request.request_id} was cancelled")
            try:
                return self._generate(request, cancel, on_text, submitted)
            except (BackendError, ConfigError):
                raise
            except Exception as exc:
                raise BackendError(
                    f"{self.name} failed on request {request.request_id}: {exc}"
                ) from exc

    def _generate(
        self,
        request: GenerationRequest,
        cancel: threading.Event,
        on_text: TextCallback | None,
        submitted: float | None = None,
    ) -> Generation:
        import torch

        start = time.perf_counter()
        model, tok = self.model, self.tokenizer
        inputs = self.prepare(request)
        ids, positions = inputs["input_ids"], inputs["position_ids"]
        limit = self._context_limit()
        check_prompt_length(self.name, ids.shape[1], limit, purpose=request.purpose)
        room = limit - ids.shape[1]
        if request.max_tokens > room:  # stop at the context's end, as an engine does
            request = dataclasses.replace(
                request, max_tokens=room, min_tokens=min(request.min_tokens, room)
            )
        key = cache_key(ids[0].tolist(), model.config, inputs["media"])
        cached, cache = self._caches.lookup(
            key, min_prefix=media_end(ids[0].tolist(), model.config)
        )
        if cache is None:
            cache = empty_cache(model)
        prefill: dict[str, Any] = {
            "input_ids": ids[:, cached:],
            "position_ids": positions[:, :, cached:],
            "past_key_values": cache,
            "use_cache": True,
        }
        if cached == 0:  # images and video frames enter the cache in one piece
            prefill.update({k: inputs[k] for k in VISION_KEYS if k in inputs})
        fed: list[int] = []  # generated ids the cache holds
        next_pos = int(positions.max()) + 1

        def step(token: int) -> torch.Tensor:
            pos = torch.full((3, 1, 1), next_pos + len(fed), dtype=positions.dtype)
            fed.append(token)
            out = model(
                input_ids=torch.tensor([[token]]),
                position_ids=pos,
                past_key_values=cache,
                use_cache=True,
            )
            return out.logits[0, -1]

        first_ids: dict[str, tuple[int, ...]] | str | None = None
        if request.distribution is not None:
            first_ids = (
                first_token_ids(tok, request.distribution)
                if request.min_tokens <= 1
                else "min_tokens > 1 asks for a longer answer than one decode step"
            )
        with torch.inference_mode():
            logits = model(**prefill).logits[0, -1]
            self._caches.store(key, cache)
            if isinstance(first_ids, dict):
                return self._one_step(
                    request, logits, first_ids, key, cached, start, submitted, on_text
                )
            done = decode(
                logits, step, request, tok, self._eos_ids(), cancel=cancel, on_text=on_text
            )
            if fed:
                self._caches.store(key + tuple(fed), cache)
        out_ids = done.token_ids
        end = time.perf_counter()
        arrived = start if submitted is None else min(submitted, start)
        first = done.first_token_at
        return Generation(
            # Its own steps, timed: the wait for the model, inputs + prefill, then decode.
            queue_s=None if submitted is None else max(start - submitted, 0.0),
            prefill_s=None if first is None else first - start,
            decode_s=None if first is None else end - first,
            image_tokens=sum(1 for t in key if t < 0),  # media tokens are negative in the key
            text=final_text(tok, out_ids, request.stop),
            model=self.name,
            prompt_tokens=len(key),
            cached_tokens=cached,
            generated_tokens=len(out_ids),
            # As an engine reports them: from the request's arrival, its queueing included.
            latency_s=end - arrived,
            ttft_s=None if first is None else first - arrived,
            finish_reason=done.finish_reason,
            token_ids=tuple(out_ids),
            logprobs=None if done.logprobs is None else tuple(done.logprobs),
            tokens=tuple(tok.batch_decode([[t] for t in out_ids], skip_special_tokens=True)),
            distribution_fallback=first_ids if isinstance(first_ids, str) else None,
        )

    def _one_step(
        self,
        request: GenerationRequest,
        logits: Any,
        first_ids: dict[str, tuple[int, ...]],
        key: tuple[int, ...],
        cached: int,
        start: float,
        submitted: float | None,
        on_text: TextCallback | None,
    ) -> Generation:
        """A distribution request answered from the prefill's logits (no decode step)."""
        import torch

        first = time.perf_counter()
        lps = torch.log_softmax(logits.float(), dim=-1)
        wanted = sorted({t for ids in first_ids.values() for t in ids})
        logprobs = dict(zip(wanted, lps[wanted].tolist()))
        distribution = fold(logprobs, first_ids)
        answer = pick(distribution, request.temperature, request.seed)
        if on_text is not None:
            on_text(answer)
        end = time.perf_counter()
        arrived = start if submitted is None else min(submitted, start)
        p = distribution[answer]
        return Generation(
            queue_s=None if submitted is None else max(start - submitted, 0.0),
            prefill_s=first - start,
            decode_s=end - first,
            image_tokens=sum(1 for t in key if t < 0),
            text=answer,
            model=self.name,
            prompt_tokens=len(key),
            cached_tokens=cached,
            generated_tokens=1,
            latency_s=end - arrived,
            ttft_s=first - arrived,
            finish_reason="stop",
            token_ids=(first_ids[answer][0],),
            logprobs=None if request.logprobs is None else (math.log(p) if p > 0 else -math.inf,),
            tokens=(answer,),
            distribution=distribution,
        )

    def _attention(
        self, request: GenerationRequest, layers: Sequence[int] | None, full: bool
    ) -> list[float]:
        with self._lock:
            inputs = self.prepare(request)
            check_prompt_length(
                self.name, inputs["input_ids"].shape[1], self._context_limit(), purpose="attention"
            )
            return reasoning_attention(self.model, inputs, self._caches, layers=layers, full=full)

    def __repr__(self) -> str:
        return f"TransformersBackend({self.name!r})"
