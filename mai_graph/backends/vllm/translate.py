"""A request to vLLM and back: prompt and ``SamplingParams`` in, ``Generation`` out.

:class:`Translator` holds what translating needs from an engine (its tokenizer, chat template,
processor, end-of-turn ids and context length) and nothing of its life: the backend's engine
handle starts, restarts and stops engines; the translator turns a
:class:`~mai_graph.backends.base.GenerationRequest` into the token-id prompt and
``SamplingParams`` an ``AsyncLLM`` takes, and its final ``RequestOutput`` into a
:class:`~mai_graph.backends.base.Generation`. ``Translator.for_engine(engine)`` serves callers
who build and run their own ``AsyncLLM``::

    translator = Translator.for_engine(engine)
    prompt, params = translator.prompt(request), translator.sampling_params(request)
    async for out in engine.generate(prompt, params, request.request_id):
        final = out
    generation = translator.generation(final, request, latency_s=..., ttft_s=...)

Prompts go in as token ids rendered with the model's chat template; images go as multimodal
data with their pixel hash as the multimodal uuid, so the engine's processor and prefix caches
key on content.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mai_graph.answers.distribution import first_token_ids, fold, pick
from mai_graph.backends.base import Generation, GenerationRequest, StageTimes
from mai_graph.backends.render import media_ids, render, thinking_for
from mai_graph.backends.vllm import compat
from mai_graph.errors import ConfigError, ImageError
from mai_graph.inputs.images import ImageRef, load_image
from mai_graph.inputs.limits import check_media_counts, check_prompt_length
from mai_graph.inputs.video import VideoRef, video_input

if TYPE_CHECKING:
    from vllm import SamplingParams

__all__ = [
    "MAX_LOGPROB_TOKEN_IDS",
    "Translator",
    "counter_kwargs",
    "one_step",
    "stage_times",
]


def counter_kwargs(mm: Any) -> dict[str, Any]:
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


class Translator:
    """Translates requests for one engine (see the module's docstring).

    Args:
        name: The model's name in messages.
        tokenizer: The engine's tokenizer.
        processor: The checkpoint's processor (media token counts, chat template), or None.
        eos: Token ids that end a turn.
        max_model_len: The engine's context length.
        media_limits: Most items per prompt by modality.
        mm_kwargs: The engine's processor settings as the media token counter reads them
            (:func:`counter_kwargs`), so the length check agrees with the engine.
    """

    def __init__(
        self,
        name: str,
        tokenizer: Any,
        processor: Any,
        eos: set[int],
        max_model_len: int,
        media_limits: Mapping[str, int],
        mm_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.tokenizer = tokenizer
        self.processor = processor
        self.template = processor if getattr(processor, "chat_template", None) else None
        """The processor when it carries the chat template (vision checkpoints), else None."""
        self.eos = set(eos)
        self.max_model_len = int(max_model_len)
        self.media_limits = dict(media_limits)
        self.mm_kwargs = dict(mm_kwargs or {})
        self._first_ids: dict[Any, dict[str, tuple[int, ...]] | str] = {}

    @classmethod
    def for_engine(
        cls,
        engine: Any,
        *,
        name: str | None = None,
        media_limits: Mapping[str, int] | None = None,
        mm_processor_kwargs: Mapping[str, Any] | None = None,
    ) -> Translator:
        """The translator of a started ``AsyncLLM`` (reads its tokenizer and processor files)."""
        from transformers import AutoProcessor

        from mai_graph.inputs.limits import DEFAULT_MM_LIMITS

        tokenizer = engine.get_tokenizer()
        model_config = engine.model_config
        try:  # vision checkpoints keep their chat template with the processor
            processor = AutoProcessor.from_pretrained(
                model_config.model,
                revision=model_config.revision,
                trust_remote_code=model_config.trust_remote_code,
            )
        except (OSError, ValueError):
            processor = None
        eos_id = getattr(tokenizer, "eos_token_id", None)
        eos = {eos_id} if isinstance(eos_id, int) else set()
        generation_eos = compat.generation_eos(model_config)
        if isinstance(generation_eos, int):
            eos.add(generation_eos)
        elif isinstance(generation_eos, list):
            eos.update(generation_eos)
        return cls(
            name or str(model_config.model),
            tokenizer,
            processor,
            eos,
            int(model_config.max_model_len),
            media_limits if media_limits is not None else DEFAULT_MM_LIMITS,
            counter_kwargs(mm_processor_kwargs),
        )

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
            found = first_token_ids(self.tokenizer, key)
            if isinstance(found, dict) and sum(map(len, found.values())) > MAX_LOGPROB_TOKEN_IDS:
                found = f"more than {MAX_LOGPROB_TOKEN_IDS} first tokens"
            self._first_ids[key] = found
        return self._first_ids[key]

    @staticmethod
    def sampling_params(
        request: GenerationRequest, first_ids: Mapping[str, Sequence[int]] | None = None
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

    def image_tokens(self, image: ImageRef) -> int:
        """Tokens the model's processor turns ``image`` into (0 if it cannot say).

        Raises:
            ImageError: The processor refuses the image's size (e.g. its aspect ratio).
        """
        counter = compat.media_token_counter(self.processor)
        if counter is None:
            return 0
        try:
            counts = counter(image_sizes=[(image["height"], image["width"])], **self.mm_kwargs)
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

    def video_tokens(self, video: VideoRef) -> int:
        """Tokens the model's processor turns ``video``'s sampled frames into (0: unknown)."""
        counter = compat.media_token_counter(self.processor)
        if counter is None:
            return 0
        try:
            size = (len(video["indices"]), video["height"], video["width"])
            tokens = getattr(
                counter(video_sizes=[size], **self.mm_kwargs), "num_video_tokens", None
            )
        except Exception:  # noqa: BLE001 - the engine checks what cannot be counted here
            return 0
        if not tokens:
            return 0
        return int(tokens[0]) + self.frame_stamp_tokens(video)

    def frame_stamp_tokens(self, video: VideoRef) -> int:
        """Qwen3-VL's text around each frame group: ``<t seconds>`` and its own start / end.

        Its processor writes, per temporal group of frames, the group's time as text and wraps
        the group's tokens in vision start / end tokens (measured: 32 tokens for 8 frames that
        the media token counter alone misses). 0 for processors without frame timestamps.
        """
        stamps = compat.frame_timestamps(self.processor, video["indices"], float(video["fps"]))
        if not stamps:
            return 0
        return sum(
            len(self.tokenizer.encode(f"<{t:.1f} seconds>", add_special_tokens=False)) + 2
            for t in stamps
        )

    def prompt(self, request: GenerationRequest) -> dict[str, Any]:
        """The engine's prompt: token ids, and the media with their content hashes as uuids.

        Raises:
            BackendError: The prompt (text plus media tokens) exceeds the context.
            ConfigError: A video on an engine whose processor kwargs its video processor
                refuses.
        """
        rendered = render(
            self.tokenizer,
            request.messages,
            self.eos,
            template=self.template,
            thinking=thinking_for(request.purpose),
        )
        # Each image is one placeholder token in the rendered ids; the engine expands it.
        length = len(rendered.token_ids) + sum(self.image_tokens(r) - 1 for r in rendered.images)
        length += sum(self.video_tokens(v) - 1 for v in rendered.videos)
        max_len = self.max_model_len
        check_prompt_length(self.name, length, max_len, purpose=request.purpose)
        prompt: dict[str, Any] = {"prompt_token_ids": rendered.token_ids}
        if rendered.videos and self.mm_kwargs:
            # Measured with vLLM 0.32 on Qwen3-VL: the processor kwargs reach the video
            # processor unfiltered, which refuses them (the request would fail in the engine).
            raise ConfigError(
                f"{self.name}: this engine was started with mm_processor_kwargs "
                f"{sorted(self.mm_kwargs)}, and vLLM 0.32 passes them to Qwen3-VL's video "
                "processor, which refuses them: a video cannot be served here",
                parameter="mm_processor_kwargs",
                value=sorted(self.mm_kwargs),
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

    def generation(
        self,
        final: Any,
        request: GenerationRequest,
        *,
        latency_s: float,
        ttft_s: float | None,
        found: Mapping[str, Sequence[int]] | str | None = None,
    ) -> Generation:
        """The :class:`Generation` of a request's final ``RequestOutput``.

        ``found`` is what :meth:`distribution_ids` returned for it: with ids, the answer is
        read from the one step's log-probabilities (:func:`one_step`).
        """
        completion = final.outputs[0]
        first_ids = found if isinstance(found, Mapping) else None
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
        media = media_ids(self.tokenizer)
        gen = Generation(
            **stage_times(final.metrics),
            image_tokens=sum(1 for t in prompt_ids if t in media) if media else None,
            distribution_fallback=found if isinstance(found, str) else None,
            text=completion.text,
            model=self.name,
            prompt_tokens=len(prompt_ids),
            cached_tokens=final.num_cached_tokens,
            generated_tokens=len(token_ids),
            latency_s=latency_s,
            ttft_s=ttft_s,
            finish_reason=completion.finish_reason or "stop",
            token_ids=token_ids,
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs,
            tokens=tuple(
                self.tokenizer.batch_decode([[t] for t in token_ids], skip_special_tokens=True)
            ),
        )
        if first_ids is None:
            return gen
        return one_step(request, gen, completion, first_ids)


def one_step(
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
