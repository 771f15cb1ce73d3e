"""Test and offline backends: scripted answers, exact request records, simulated prefix cache.

They run the real graph without a model: for tests of graph logic, for LangGraph Studio offline,
and for the CLI's ``--backend fake``. Token counts use a whitespace "tokenizer" (an image counts
as ``image_tokens`` tokens, a video as many per pair of sampled frames), and cached tokens are
the longest prompt prefix shared with an earlier request, like an engine's prefix cache.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import math
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from mai_graph.answers.distribution import answer_of, around
from mai_graph.backends.base import Capabilities, Generation, GenerationRequest, TextCallback
from mai_graph.backends.render import common_prefix
from mai_graph.errors import BackendError, ConfigError
from mai_graph.messages import Message

__all__ = ["FunctionBackend", "ScriptedBackend", "demo_backends"]

Response = str | Sequence[str] | Callable[[GenerationRequest], str]


def _prompt_tokens(messages: Sequence[Message], image_tokens: int) -> list[str]:
    tokens: list[str] = []
    for message in messages:
        tokens.append(f"<{message['role']}>")
        for part in message["content"]:
            if part["type"] == "image":
                tokens.extend([f"<img:{part['image']['sha256'][:12]}>"] * image_tokens)
            elif part["type"] == "video":  # frames pair up in time, like Qwen-VL's encoder
                frames = (len(part["video"]["indices"]) + 1) // 2
                tokens.extend([f"<vid:{part['video']['sha256'][:12]}>"] * image_tokens * frames)
            else:
                tokens.extend(part["text"].split())
    tokens.append("<assistant>")
    return tokens


def _fake_logprob(token: str) -> float:
    return -(int(hashlib.blake2b(token.encode(), digest_size=2).hexdigest(), 16) % 500) / 100


class _FakeEngine:
    """Bookkeeping shared by the fakes: records, in-flight counts, prefix cache, token limits."""

    media_limits: Mapping[str, int] | None = None
    """Most items per prompt by modality, as an engine's ``limit_mm_per_prompt`` (set it to
    see the graph refuse a run over them); ``None``: no limits."""

    @property
    def capabilities(self) -> Capabilities:
        """What a fake can do, with the media limits set on it.

        Streams; generations carry logprobs when asked (scripted ``probs``, or a stable fake
        per word); requests with ``distribution`` get one (scripted, or built around the
        answer's odds) when the scripted text is one of the allowed answers.
        """
        limits = self.media_limits
        return Capabilities(
            stream=True,
            logprobs=True,
            distribution=True,
            media_limits=None if limits is None else tuple(sorted(limits.items())),
        )

    def __init__(self, name: str, latency: float, image_tokens: int, cache_size: int) -> None:
        if latency < 0:
            raise ConfigError(f"latency must be >= 0, got {latency}", parameter="latency")
        self.name = name
        self.latency = latency
        self.image_tokens = image_tokens
        self.requests: list[GenerationRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._seen: deque[list[str]] = deque(maxlen=cache_size)

    def _cached(self, prompt: list[str]) -> int:
        best = max((common_prefix(old, prompt) for old in self._seen), default=0)
        self._seen.append(prompt)
        return best

    async def _serve(
        self,
        request: GenerationRequest,
        text: str | Generation,
        on_text: TextCallback | None = None,
        prob: float | None = None,
    ) -> Generation:
        self.requests.append(request)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        start = time.perf_counter()
        try:
            if self.latency:
                await asyncio.sleep(self.latency)
            gen = (
                text
                if isinstance(text, Generation)
                else self._generation(request, text, time.perf_counter() - start, prob)
            )
            if on_text is not None:
                for piece in gen.tokens or (gen.text,):
                    on_text(piece)
            return gen
        finally:
            self.in_flight -= 1

    def _scripted_distribution(self, request: GenerationRequest) -> Mapping[str, float] | None:
        return None

    def _distribution(
        self, request: GenerationRequest, text: str, prob: float | None
    ) -> tuple[dict[str, float] | None, str | None]:
        """The distribution a fake answers a distribution request with, or why it cannot.

        The scripted text must be one of the allowed answers' forms; its probability is the
        scripted one (``probs``: a number, or a mapping answer -> probability for the whole
        distribution), else the fake's stable odds for the word; the other answers share the
        rest evenly.
        """
        if request.distribution is None:
            return None, None
        if request.min_tokens > 1:
            return None, "min_tokens > 1 asks for a longer answer than one decode step"
        answers = [a for a, _ in request.distribution]
        chosen = answer_of(request.distribution, text)
        if chosen is None:
            return None, f"the scripted answer {text!r} is not one of {answers}"
        scripted = self._scripted_distribution(request)
        if scripted is not None:
            mass = {a: float(scripted.get(a, 0.0)) for a in answers}
            total = math.fsum(mass.values())
            if total > 0:
                return {a: m / total for a, m in mass.items()}, None
        p = prob if prob is not None else math.exp(_fake_logprob(text))
        return around(answers, chosen, p), None

    def _generation(
        self, request: GenerationRequest, text: str, elapsed: float, prob: float | None = None
    ) -> Generation:
        if request.choices is not None and text not in request.choices:
            raise BackendError(
                f"{self.name}: scripted output {text!r} for {request.purpose!r} is not one of "
                f"the request's choices {list(request.choices)}",
                parameter="choices",
                value=text,
                fix="script one of the choices, or set constrain_choices=False in the context",
            )
        words = text.split()
        finish = "stop"
        if len(words) > request.max_tokens:
            words, finish = words[: request.max_tokens], "length"
        while len(words) < request.min_tokens:
            words.append(words[-1] if words else "…")
        prompt = _prompt_tokens(request.messages, self.image_tokens)
        logprobs = None
        if request.logprobs is not None and prob is not None and words:
            # The whole answer's probability rides on its first token.
            logprobs = (math.log(prob) if prob > 0 else -math.inf,) + (0.0,) * (len(words) - 1)
        elif request.logprobs is not None:
            logprobs = tuple(_fake_logprob(w) for w in words)
        distribution, fallback = self._distribution(request, text, prob)
        if distribution is not None:
            p = distribution[answer_of(request.distribution or (), text) or ""]
            words = [text]
            logprobs = None if request.logprobs is None else (math.log(p) if p > 0 else -math.inf,)
        return Generation(
            distribution=distribution,
            distribution_fallback=fallback,
            text=" ".join(words),
            model=self.name,
            prompt_tokens=len(prompt),
            cached_tokens=self._cached(prompt),
            generated_tokens=len(words),
            latency_s=elapsed,
            ttft_s=elapsed,
            # Scripted stages: the whole (simulated) latency is the prefill; nothing queues.
            queue_s=0.0,
            prefill_s=elapsed,
            decode_s=0.0,
            image_tokens=sum(1 for t in prompt if t.startswith(("<img:", "<vid:"))),
            finish_reason=finish,
            logprobs=logprobs,
            tokens=tuple(w if i == 0 else " " + w for i, w in enumerate(words)),
        )


class ScriptedBackend(_FakeEngine):
    """Answers from a script keyed by the request's purpose, and records every request.

    Args:
        script: ``{purpose: response}`` where purpose is ``short``, ``cot``, ``s2`` or ``answer``
            (``default`` for the rest) and a response is a string, a list of strings used in turn
            (one per call), or a function of the request. A bare string answers everything.
        name: Model name reported in metrics.
        latency: Seconds each call takes (``asyncio.sleep``), to test concurrency.
        image_tokens: Prompt tokens an image counts for.
        fail: ``{purpose: [exceptions]}``; each call of that purpose raises the next one first.
        probs: ``{purpose: probability}`` (or a list used in turn): the answer probability the
            generation's logprobs carry (``exp(sum(logprobs))``), for confidence-gate tests;
            or ``{purpose: {answer: probability}}``, the whole distribution a distribution
            request of that purpose gets (renormalized over its answers).

    Example:
        >>> backend = ScriptedBackend({"short": "B"}, name="small")
        >>> backend.requests
        []
    """

    def __init__(
        self,
        script: Mapping[str, Response] | str = "",
        *,
        name: str = "scripted",
        latency: float = 0.0,
        image_tokens: int = 64,
        fail: Mapping[str, Sequence[BaseException]] | None = None,
        probs: Mapping[str, float | Sequence[float] | Mapping[str, float]] | None = None,
    ) -> None:
        super().__init__(name, latency, image_tokens, cache_size=64)
        self.probs: dict[str, Any] = dict(probs or {})
        for purpose, value in self.probs.items():
            if isinstance(value, Mapping):  # a whole distribution: answer -> probability
                values = list(value.values())
            else:
                values = [value] if isinstance(value, int | float) else list(value)
            if not all(isinstance(p, int | float) and 0 <= p <= 1 for p in values):
                raise ConfigError(
                    f"probs[{purpose!r}] must be probabilities in [0, 1], got {value!r}",
                    parameter="probs",
                    value=value,
                )
        self._prob_turn: dict[str, int] = {}
        self.script: dict[str, Any] = (
            {"default": script} if isinstance(script, str) else dict(script)
        )
        self._turn: dict[str, int] = {}
        self._fail = {k: list(v) for k, v in (fail or {}).items()}

    def _respond(self, request: GenerationRequest) -> str:
        purpose = request.purpose
        response = self.script.get(purpose, self.script.get("default"))
        if response is None:
            raise BackendError(
                f"{self.name}: no scripted response for purpose {purpose!r}",
                parameter="script",
                value=sorted(self.script),
                fix=f"add a {purpose!r} (or 'default') entry to the script",
            )
        if callable(response):
            return str(response(request))
        if isinstance(response, str):
            return response
        turn = self._turn.get(purpose, 0)
        if turn >= len(response):
            raise BackendError(
                f"{self.name}: scripted responses for {purpose!r} ran out after {turn} calls",
                parameter="script",
                value=purpose,
                fix="script more responses, or a string to answer every call",
            )
        self._turn[purpose] = turn + 1
        return str(response[turn])

    async def generate(self, request: GenerationRequest) -> Generation:
        """Serve one request from the script."""
        return await self.generate_stream(request, None)

    async def generate_stream(
        self, request: GenerationRequest, on_text: TextCallback | None
    ) -> Generation:
        """Serve one request from the script, reporting each word to ``on_text``."""
        failures = self._fail.get(request.purpose)
        if failures:
            self.requests.append(request)
            raise failures.pop(0)
        return await self._serve(request, self._respond(request), on_text, self._prob(request))

    def _scripted_distribution(self, request: GenerationRequest) -> Mapping[str, float] | None:
        value = self.probs.get(request.purpose)
        return value if isinstance(value, Mapping) else None

    def _prob(self, request: GenerationRequest) -> float | None:
        value = self.probs.get(request.purpose)
        if isinstance(value, Mapping):  # the answer's probability is read off the distribution
            return None
        if value is None or isinstance(value, int | float):
            return value
        turn = self._prob_turn.get(request.purpose, 0)
        self._prob_turn[request.purpose] = turn + 1
        return float(value[min(turn, len(value) - 1)])

    def calls(self, purpose: str) -> list[GenerationRequest]:
        """The recorded requests of one purpose, in order."""
        return [r for r in self.requests if r.purpose == purpose]


class FunctionBackend(_FakeEngine):
    """Answers with ``fn(request)``, which returns text or a :class:`Generation` (may be async).

    Example:
        >>> backend = FunctionBackend(lambda request: "yes", name="large")
        >>> backend.name
        'large'
    """

    def __init__(
        self,
        fn: Callable[[GenerationRequest], str | Generation | Awaitable[str | Generation]],
        *,
        name: str = "function",
        latency: float = 0.0,
        image_tokens: int = 64,
    ) -> None:
        if not callable(fn):
            raise ConfigError("fn must be callable", parameter="fn", value=fn)
        super().__init__(name, latency, image_tokens, cache_size=16)
        self.fn = fn

    async def generate(self, request: GenerationRequest) -> Generation:
        """Serve one request with the function."""
        return await self.generate_stream(request, None)

    async def generate_stream(
        self, request: GenerationRequest, on_text: TextCallback | None
    ) -> Generation:
        """Serve one request with the function, reporting each word to ``on_text``."""
        out = self.fn(request)
        if inspect.isawaitable(out):
            out = await out
        return await self._serve(request, out, on_text)


def _pick(seed: str, choices: Sequence[str]) -> str:
    return choices[int(hashlib.sha256(seed.encode()).hexdigest(), 16) % len(choices)]


def demo_backends(*, latency: float | None = None) -> tuple[FunctionBackend, FunctionBackend]:
    """A deterministic small/large pair for offline demos (Studio, ``--backend fake``).

    Answers depend on a hash of the question, so some questions end at verification and
    others go through reasoning and transfer. The text is canned, not a model's.

    Args:
        latency: Seconds each call takes; default ``$MAI_GRAPH_FAKE_LATENCY_S`` or 0 (a served
            fake pair that takes time, to try cancellation and load through a server).
    """
    if latency is None:
        raw = os.environ.get("MAI_GRAPH_FAKE_LATENCY_S", "").strip()
        try:
            latency = float(raw) if raw else 0.0
        except ValueError:
            latency = -1.0
        if not 0 <= latency <= 3600:
            raise ConfigError(
                f"MAI_GRAPH_FAKE_LATENCY_S must be seconds from 0 to 3600, got {raw!r}",
                parameter="MAI_GRAPH_FAKE_LATENCY_S",
                value=raw,
                fix="set it to e.g. 0.5, or unset it",
            )

    def answer(role: str) -> Callable[[GenerationRequest], str]:
        def fn(request: GenerationRequest) -> str:
            text = "\n".join(
                p["text"] for m in request.messages for p in m["content"] if p["type"] == "text"
            )
            question = next((ln for ln in text.splitlines() if ln.startswith("Question:")), "")
            choices = request.choices or ("yes", "no")
            if request.purpose == "short":
                return _pick(question + role, choices)
            pick = _pick(question + "reasoning", choices)
            if request.purpose == "cot":
                return (
                    f"The question asks about the image. Looking at the relevant region, the "
                    f"evidence points to {pick}. So the answer is {pick}."
                )
            return pick

        return fn

    return (
        FunctionBackend(answer("small"), name="demo-small", latency=latency),
        FunctionBackend(answer("large"), name="demo-large", latency=latency),
    )
