"""Hugging Face transformers backend: CPU development, KV reuse across turns, attention access.

Runs one request at a time in a worker thread with an explicit decode loop, so it can:

- reuse KV caches: every prompt (and prompt + generated tokens) leaves a cache entry keyed by
  its token ids; a later prompt that extends one (the S2 turn extends the CoT conversation, the
  transfer prompt shares the verify prefix) only prefills the rest, and reports the reused
  length as cached tokens;
- honor ``min_tokens``, stop strings, logprobs and constrained ``choices`` exactly;
- stop at the next token when the awaiting task is cancelled.

Vision-language models whose processor expands an image placeholder into grid tokens and whose
model takes 3-D (m-RoPE) positions, the Qwen2/2.5/3-VL families, are supported.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mai_graph.backends.base import Generation, GenerationRequest, TextCallback
from mai_graph.backends.render import render, vocab_fingerprint
from mai_graph.errors import BackendError, ConfigError
from mai_graph.images import ImageRef, load_image
from mai_graph.loop import on_caller_loop

if TYPE_CHECKING:
    pass

__all__ = ["TransformersBackend"]


def _looks_local(model: str) -> bool:
    return model.startswith((".", "~")) or os.path.isabs(model) or model.count("/") > 1


class TransformersBackend:
    """A vision-language model run in-process with transformers.

    Args:
        model: Checkpoint path / hub id, or a loaded model (then pass ``processor``).
        processor: The model's processor (loaded from ``model`` when omitted).
        name: Name in metrics (default: the checkpoint path).
        dtype: Torch dtype name for loading (default ``float32``, fastest on CPU).
        cache_entries: How many KV caches to keep for prefix reuse.
        threads: Torch intra-op threads (default: leave torch's setting).
    """

    def __init__(
        self,
        model: Any,
        processor: Any = None,
        *,
        name: str | None = None,
        dtype: str = "float32",
        cache_entries: int = 8,
        threads: int | None = None,
    ) -> None:
        if cache_entries < 0:
            raise ConfigError(
                f"cache_entries must be >= 0, got {cache_entries}", parameter="cache_entries"
            )
        self._source = model
        self._processor = processor
        self._dtype = dtype
        self._threads = threads
        self.name = name or (model if isinstance(model, str) else type(model).__name__)
        self._model: Any = None if isinstance(model, str) else model
        self._lock = threading.Lock()
        self._caches: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        self._cache_entries = cache_entries
        self._fingerprint: str | None = None

    # -- loading -------------------------------------------------------------------------------

    def load(self) -> None:
        """Load model and processor now (otherwise the first request does)."""
        import torch
        from transformers import AutoModelForImageTextToText, AutoProcessor

        if self._threads:
            torch.set_num_threads(self._threads)
        if self._model is None:
            if _looks_local(self._source) and not os.path.isdir(self._source):
                raise BackendError(
                    f"model folder not found: {self._source}",
                    parameter="model",
                    value=self._source,
                    fix="pass an existing checkpoint folder, or build the tiny test pair "
                    "with `mai-graph build-tiny DIR`",
                )
            try:
                self._model = AutoModelForImageTextToText.from_pretrained(
                    self._source, dtype=getattr(torch, self._dtype)
                ).eval()
            except (OSError, ValueError) as exc:
                raise BackendError(
                    f"cannot load model {self._source!r}: {exc}",
                    parameter="model",
                    value=self._source,
                    fix="pass a local checkpoint folder (or a hub id on a machine with access)",
                ) from exc
        if self._processor is None:
            self._processor = AutoProcessor.from_pretrained(
                self._source if isinstance(self._source, str) else self._model.name_or_path
            )
        if not hasattr(self._processor, "image_processor"):
            raise ConfigError(
                f"{self.name}: the processor has no image processor "
                f"({type(self._processor).__name__})",
                parameter="processor",
                fix="use a vision-language checkpoint with a processor config",
            )

    @property
    def model(self) -> Any:
        """The loaded model."""
        if self._model is None or self._processor is None:
            self.load()
        return self._model

    @property
    def processor(self) -> Any:
        """The loaded processor."""
        if self._processor is None:
            self.load()
        return self._processor

    @property
    def tokenizer(self) -> Any:
        """The processor's tokenizer."""
        return self.processor.tokenizer

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        for source in (self.model.generation_config, self.tokenizer):
            eos = getattr(source, "eos_token_id", None)
            if isinstance(eos, int):
                ids.add(eos)
            elif isinstance(eos, list | tuple):
                ids.update(eos)
        return ids

    # -- inputs --------------------------------------------------------------------------------

    def prepare(self, request: GenerationRequest) -> dict[str, Any]:
        """Expanded ``input_ids``, ``position_ids``, vision inputs and spliced spans of a prompt.

        ``spans`` are the (start, end) positions of spliced ids (e.g. the reasoning in an S2
        prompt) in the expanded ``input_ids``.
        """
        rendered = render(
            self.tokenizer, request.messages, self._eos_ids(), template=self.processor
        )
        inputs = self._expand(rendered.token_ids, rendered.images)
        extra = inputs["input_ids"].shape[1] - len(rendered.token_ids)
        image_token = self.model.config.image_token_id
        first_image = next((i for i, t in enumerate(rendered.token_ids) if t == image_token), None)
        inputs["spans"] = [
            (start + extra, end + extra)
            if first_image is not None and first_image < start
            else (start, end)
            for start, end in rendered.spans
        ]
        return inputs

    def _expand(self, ids: list[int], images: list[ImageRef]) -> dict[str, Any]:
        import torch

        config = self.model.config
        image_token = config.image_token_id
        vision: dict[str, Any] = {}
        expanded: list[int] = []
        if images:
            out = self.processor.image_processor(
                images=[load_image(r) for r in images], return_tensors="pt"
            )
            grids = out["image_grid_thw"]
            merge = self.processor.image_processor.merge_size
            counts = [int(g.prod()) // (merge * merge) for g in grids]
            vision = {"pixel_values": out["pixel_values"], "image_grid_thw": grids}
            slots = iter(counts)
            for tid in ids:
                if tid == image_token:
                    n = next(slots, None)
                    if n is None:
                        raise ConfigError(
                            "the prompt has more image placeholders than images",
                            parameter="messages",
                        )
                    expanded.extend([image_token] * n)
                else:
                    expanded.append(tid)
        else:
            expanded = list(ids)
        input_ids = torch.tensor([expanded])
        mm_types = (input_ids == image_token).int()
        positions, _ = self.model.model.get_rope_index(
            input_ids, mm_types, image_grid_thw=vision.get("image_grid_thw")
        )
        return {"input_ids": input_ids, "position_ids": positions, **vision}

    # -- KV cache reuse -----------------------------------------------------------------------

    def _lookup(self, ids: tuple[int, ...], image_end: int) -> tuple[int, Any]:
        """A copy of the cache sharing the longest prefix with ``ids``, cropped to it.

        The prefix must cover every image token and leave at least one token to prefill.
        """
        import copy

        best_len, best_key = 0, None
        limit = len(ids) - 1
        for key in self._caches:
            n = 0
            for a, b in zip(key, ids[:limit]):
                if a != b:
                    break
                n += 1
            if n > best_len:
                best_len, best_key = n, key
        if best_key is None or best_len < max(image_end, 1):
            return 0, None
        self._caches.move_to_end(best_key)
        cache = copy.deepcopy(self._caches[best_key])
        surplus = cache.get_seq_length() - best_len
        if surplus > 0:
            cache.crop(-surplus)
        return best_len, cache

    def _store(self, ids: tuple[int, ...], cache: Any) -> None:
        import copy

        if self._cache_entries == 0:
            return
        self._caches[ids] = copy.deepcopy(cache)
        self._caches.move_to_end(ids)
        while len(self._caches) > self._cache_entries:
            self._caches.popitem(last=False)

    @property
    def vocab_fingerprint(self) -> str:
        """Hash of the tokenizer's vocabulary: equal for backends whose token ids mean the same."""
        if self._fingerprint is None:
            self._fingerprint = vocab_fingerprint(self.tokenizer)
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
        await asyncio.get_running_loop().run_in_executor(None, self.clear_cache)

    # -- serving -------------------------------------------------------------------------------

    async def generate(self, request: GenerationRequest) -> Generation:
        """Serve one request in a worker thread; cancelling stops it at the next token."""
        return await self._run(request, None)

    async def generate_stream(
        self, request: GenerationRequest, on_text: TextCallback
    ) -> Generation:
        """Like :meth:`generate`, calling ``on_text`` with each text delta on the caller's loop."""
        return await self._run(request, on_caller_loop(on_text))

    async def _run(self, request: GenerationRequest, on_text: TextCallback | None) -> Generation:
        cancel = threading.Event()
        worker = asyncio.get_running_loop().run_in_executor(
            None, self._serve, request, cancel, on_text
        )
        try:
            return await asyncio.shield(worker)
        except asyncio.CancelledError:
            cancel.set()
            worker.add_done_callback(lambda f: f.cancelled() or f.exception())
            raise

    def _serve(
        self, request: GenerationRequest, cancel: threading.Event, on_text: TextCallback | None
    ) -> Generation:
        with self._lock:
            if cancel.is_set():
                raise BackendError(f"{self.name}: request {request.request_id} was cancelled")
            try:
                return self._decode(request, cancel, on_text)
            except (BackendError, ConfigError):
                raise
            except Exception as exc:
                raise BackendError(
                    f"{self.name} failed on request {request.request_id}: {exc}"
                ) from exc

    def _decode(
        self, request: GenerationRequest, cancel: threading.Event, on_text: TextCallback | None
    ) -> Generation:
        import torch
        from transformers.cache_utils import DynamicCache

        model, tok = self.model, self.tokenizer
        start = time.perf_counter()
        inputs = self.prepare(request)
        inputs.pop("spans")
        ids = inputs["input_ids"]
        positions = inputs["position_ids"]
        key = tuple(ids[0].tolist())
        image_positions = (ids[0] == model.config.image_token_id).nonzero()
        image_end = int(image_positions[-1]) + 1 if len(image_positions) else 0
        cached, cache = self._lookup(key, image_end)
        if cache is None:
            cache = DynamicCache(config=model.config)
        forward: dict[str, Any] = {
            "input_ids": ids[:, cached:],
            "position_ids": positions[:, :, cached:],
            "past_key_values": cache,
            "use_cache": True,
        }
        if cached == 0 and "pixel_values" in inputs:
            forward["pixel_values"] = inputs["pixel_values"]
            forward["image_grid_thw"] = inputs["image_grid_thw"]
        eos = self._eos_ids()
        allowed = _ChoiceTrie(tok, request.choices, eos) if request.choices else None
        generator = torch.Generator().manual_seed(request.seed or 0)
        out_ids: list[int] = []
        logprobs: list[float] = []
        next_pos = int(positions.max()) + 1
        finish, ttft = "length", None
        window = (0, 0)  # incremental detokenization offsets (prefix, read)
        with torch.inference_mode():
            logits = model(**forward).logits[0, -1].float()
            self._store(key, cache)
            for step in range(request.max_tokens):
                if cancel.is_set():
                    finish = "abort"
                    break
                if step < request.min_tokens:
                    logits[list(eos)] = float("-inf")
                if allowed is not None:
                    mask = torch.full_like(logits, float("-inf"))
                    mask[allowed.next_tokens(out_ids)] = 0
                    logits = logits + mask
                logp = torch.log_softmax(logits, dim=-1)
                if request.temperature > 0:
                    probs = torch.softmax(logits / request.temperature, dim=-1)
                    token = int(torch.multinomial(probs, 1, generator=generator))
                else:
                    token = int(torch.argmax(logits))
                if ttft is None:
                    ttft = time.perf_counter() - start
                if token in eos and step >= request.min_tokens:
                    out_ids.append(token)
                    logprobs.append(float(logp[token]))
                    finish = "stop"
                    break
                out_ids.append(token)
                logprobs.append(float(logp[token]))
                if on_text is not None:
                    window = _stream_delta(tok, out_ids, window, on_text)
                if allowed is not None and allowed.complete(out_ids):
                    finish = "stop"
                    break
                if request.stop and any(
                    s in tok.decode(out_ids, skip_special_tokens=True) for s in request.stop
                ):
                    finish = "stop"
                    break
                if step + 1 == request.max_tokens:
                    break
                step_pos = torch.full((3, 1, 1), next_pos + step, dtype=positions.dtype)
                logits = (
                    model(
                        input_ids=torch.tensor([[token]]),
                        position_ids=step_pos,
                        past_key_values=cache,
                        use_cache=True,
                    )
                    .logits[0, -1]
                    .float()
                )
            # The cache now holds prompt + all generated tokens but the last.
            if len(out_ids) > 1:
                self._store(key + tuple(out_ids[:-1]), cache)
        text = tok.decode(out_ids, skip_special_tokens=True)
        if request.stop:
            cut = [text.find(s) for s in request.stop if s in text]
            if cut:
                text = text[: min(cut)]
        return Generation(
            text=text,
            model=self.name,
            prompt_tokens=len(key),
            cached_tokens=cached,
            generated_tokens=len(out_ids),
            latency_s=time.perf_counter() - start,
            ttft_s=ttft,
            finish_reason=finish,
            token_ids=tuple(out_ids),
            logprobs=tuple(logprobs) if request.logprobs is not None else None,
            tokens=tuple(tok.batch_decode([[t] for t in out_ids], skip_special_tokens=True)),
        )

    # -- attention ---------------------------------------------------------------------------

    async def attention(
        self, request: GenerationRequest, *, layers: Sequence[int] | None = None, full: bool = False
    ) -> list[float]:
        """Attention from the prompt's last turn onto its spliced reasoning tokens.

        For an S2 request (CoT conversation + reasoning ids + extraction turn) this is how much
        the extraction positions attend to each reasoning token: attention weights averaged over
        heads and ``layers`` (default: the last third), summed over the query rows after the
        reasoning.

        The cheap path (default) reuses or builds a KV cache for everything before those query
        rows with the fast attention kernel, then runs only the query rows with eager attention.
        ``full=True`` runs one eager pass over the whole prompt (for checking; much slower).
        """
        return await asyncio.get_running_loop().run_in_executor(
            None, self._attention, request, layers, full
        )

    def _attention(
        self, request: GenerationRequest, layers: Sequence[int] | None, full: bool
    ) -> list[float]:
        import torch
        from transformers.cache_utils import DynamicCache

        with self._lock:
            model = self.model
            inputs = self.prepare(request)
            spans = inputs.pop("spans")
            if not spans:
                raise ConfigError(
                    "attention scoring needs a prompt whose reasoning carries its token ids",
                    parameter="request",
                    fix="pass the S2 request built from the reasoning's generated ids",
                )
            start, end = spans[-1]
            ids, positions = inputs["input_ids"], inputs["position_ids"]
            total = ids.shape[1]
            if end >= total:
                raise ConfigError("no query rows follow the reasoning", parameter="request")
            n_layers = model.config.text_config.num_hidden_layers
            last_third = range(n_layers - -(-n_layers // 3), n_layers)
            chosen = list(layers) if layers is not None else list(last_third)
            if not chosen or any(not 0 <= i < n_layers for i in chosen):
                raise ConfigError(
                    f"layers must be within 0..{n_layers - 1}, got {chosen}",
                    parameter="layers",
                    value=chosen,
                )
            vision: dict[str, Any] = {
                k: inputs[k] for k in ("pixel_values", "image_grid_thw") if k in inputs
            }
            with torch.inference_mode():
                if full:
                    model.set_attn_implementation("eager")
                    try:
                        out = model(
                            input_ids=ids, position_ids=positions, output_attentions=True, **vision
                        )
                    finally:
                        model.set_attn_implementation("sdpa")
                    rows = [a[0, :, end:, :] for a in out.attentions]
                else:
                    key = tuple(ids[0].tolist())
                    image_end = (
                        int((ids[0] == model.config.image_token_id).nonzero().max()) + 1
                        if vision
                        else 0
                    )
                    cached, cache = self._lookup(key[:end], image_end)
                    if cache is None:
                        cache = DynamicCache(config=model.config)
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
                        self._store(key[:end], cache)  # the next scoring of this prompt reuses it
                    model.set_attn_implementation("eager")
                    try:
                        out = model(
                            input_ids=ids[:, end:],
                            position_ids=positions[:, :, end:],
                            past_key_values=cache,
                            use_cache=True,
                            output_attentions=True,
                        )
                    finally:
                        model.set_attn_implementation("sdpa")
                    rows = [a[0] for a in out.attentions]
            picked = torch.stack([rows[i].float() for i in chosen])  # layers, heads, q, keys
            per_key = picked.mean(dim=(0, 1)).sum(dim=0)
            return [float(v) for v in per_key[start:end]]

    def __repr__(self) -> str:
        return f"TransformersBackend({self.name!r})"


def _stream_delta(
    tok: Any, ids: list[int], window: tuple[int, int], on_text: TextCallback
) -> tuple[int, int]:
    """Report the text the newest token added, decoding only a short window of recent ids.

    The usual incremental detokenization (as in vLLM / TGI): text is released once it no
    longer ends in an incomplete character, so per-step cost stays flat as the output grows.
    """
    prefix, read = window
    before = tok.decode(ids[prefix:read], skip_special_tokens=True)
    after = tok.decode(ids[prefix:], skip_special_tokens=True)
    if len(after) > len(before) and not after.endswith("\ufffd"):
        on_text(after[len(before) :])
        return read, len(ids)
    return prefix, read


class _ChoiceTrie:
    """Token-level prefix constraint: the output must be exactly one of the choices."""

    def __init__(self, tokenizer: Any, choices: tuple[str, ...], eos: set[int]) -> None:
        self.sequences = [tuple(tokenizer.encode(c, add_special_tokens=False)) for c in choices]
        self.eos = eos

    def next_tokens(self, prefix: list[int]) -> list[int]:
        n = len(prefix)
        p = tuple(prefix)
        nxt = {s[n] for s in self.sequences if len(s) > n and s[:n] == p}
        return sorted(nxt) or sorted(self.eos)

    def complete(self, prefix: list[int]) -> bool:
        p = tuple(prefix)
        done = p in self.sequences
        longer = any(len(s) > len(p) and s[: len(p)] == p for s in self.sequences)
        return done and not longer
