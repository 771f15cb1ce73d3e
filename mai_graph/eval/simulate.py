"""A simulated small/large model pair with set accuracies, for validating the evaluation harness.

The pair answers the samples of a dataset (it knows their gold answers), so measured accuracy
and route shares can be checked against what the settings imply (:func:`expected`):

- Five *draws* per sample decide which answers are right: ``small`` and ``large`` (the short
  answers), ``small_cot`` and ``large_cot`` (each model's answer after its own reasoning; the
  S2 turn returns it, and MAI's extract step is the small model's), and ``transfer`` (the large
  model after reading the small model's reasoning). Each is right with its configured
  probability.
- ``error_correlation``: with this probability a sample's draws share one difficulty (the
  more accurate model is then right whenever the less accurate one is); otherwise the draws are
  independent. For two models of equal accuracy it is the correlation of their errors.
- ``shared_mistake``: a wrong answer is the sample's most plausible wrong answer with this
  probability, otherwise any wrong answer (so two wrong models may agree, as real ones do).
- Answer probabilities are informative: a right answer's probability is drawn from
  ``right_prob``, a wrong one's from ``wrong_prob`` (the gate's ``agree_confident`` and
  ``large_confident_exit`` can then be calibrated).
- Latency is simulated (prefill and decode seconds per token; nothing waits unless ``sleep``
  is set), so speedups are those of a large model ``large_decode_s / small_decode_s`` times
  slower per token.

Everything is a deterministic function of ``seed`` and the sample id, whatever the call order.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from mai_graph.answers import canonical_gold, canonical_number
from mai_graph.answers.distribution import answer_of, around
from mai_graph.backends.base import Generation, GenerationRequest
from mai_graph.backends.fake import FunctionBackend
from mai_graph.errors import BackendError, ConfigError, check_int
from mai_graph.eval.datasets import Sample
from mai_graph.eval.scorers import reference_form
from mai_graph.prompts import question_block

__all__ = ["DRAWS", "SimConfig", "expected", "simulated_pair"]

DRAWS = ("small", "large", "small_cot", "large_cot", "transfer")
"""The answers decided per sample (see the module docstring)."""

_TEXT_DISTRACTORS = (
    "red", "green", "blue", "yellow", "purple", "orange", "black", "white", "circle", "square",
)  # fmt: skip
_NUMBER_DISTRACTORS = 4
_FILLER = (
    "I look at the image and check each part that matters for the question . The objects "
    "and their colours and positions are noted , then compared with what is asked ."
).split()
_IMAGE_TOKENS = 64


@dataclass(frozen=True)
class SimConfig:
    """Settings of the simulated pair (probabilities in [0, 1])."""

    small: float = 0.6
    """P(small model's short answer is right)."""
    large: float = 0.8
    """P(large model's short answer is right)."""
    small_cot: float = 0.7
    """P(small model's answer after reasoning is right) (``small_cot`` and MAI's S2 step)."""
    large_cot: float = 0.85
    """P(large model's answer after reasoning is right)."""
    transfer: float = 0.82
    """P(large model's answer after reading the small model's reasoning is right)."""
    error_correlation: float = 0.5
    """Share of samples whose draws share one difficulty (see the module docstring)."""
    shared_mistake: float = 0.5
    """P(a wrong answer is the sample's most plausible wrong answer)."""
    right_prob: tuple[float, float] = (0.55, 1.0)
    """Range of a right answer's probability."""
    wrong_prob: tuple[float, float] = (0.2, 0.75)
    """Range of a wrong answer's probability."""
    small_cot_tokens: int = 120
    large_cot_tokens: int = 150
    small_decode_s: float = 0.004
    """Seconds per generated token, small model."""
    large_decode_s: float = 0.016
    small_prefill_s: float = 0.0001
    """Seconds per prompt token, small model."""
    large_prefill_s: float = 0.0004
    sleep: float = 0.0
    """Wait this share of each call's simulated latency (0: answer at once)."""
    seed: int = 0

    def __post_init__(self) -> None:
        for name in (*DRAWS, "error_correlation", "shared_mistake"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
                raise ConfigError(
                    f"{name} must be a probability in [0, 1], got {value!r}",
                    parameter=name,
                    value=value,
                )
        for name in ("right_prob", "wrong_prob"):
            lo, hi = getattr(self, name)
            if not 0 <= lo <= hi <= 1:
                raise ConfigError(
                    f"{name} must be a range 0 <= lo <= hi <= 1, got {(lo, hi)!r}",
                    parameter=name,
                    value=(lo, hi),
                )
        if not isinstance(self.sleep, int | float) or not 0 <= self.sleep <= 10:
            raise ConfigError(f"sleep must be in [0, 10], got {self.sleep!r}", parameter="sleep")
        for name in ("small_cot_tokens", "large_cot_tokens"):
            check_int(getattr(self, name), name, minimum=8)

    @classmethod
    def oracle(cls) -> SimConfig:
        """Every answer right, with probability 1.

        The harness must score 1.0 (less only on questions whose human answers rarely agree,
        scored by the VQA accuracy).
        """
        values: dict[str, Any] = dict.fromkeys(DRAWS, 1.0)
        return cls(**values, right_prob=(1.0, 1.0))

    @classmethod
    def parse(cls, items: Sequence[str], base: SimConfig | None = None) -> SimConfig:
        """Settings from ``FIELD=VALUE`` strings (``small=0.5``, ``right_prob=0.6,1``).

        >>> SimConfig.parse(["small=0.5", "right_prob=0.6,1"]).right_prob
        (0.6, 1.0)
        """
        values = asdict(base or cls())
        kinds = {f.name: f.type for f in fields(cls)}
        for item in items:
            key, sep, raw = item.partition("=")
            key = key.strip().replace("-", "_")
            if not sep or key not in kinds:
                raise ConfigError(
                    f"--sim needs FIELD=VALUE with a SimConfig field, got {item!r}",
                    parameter="--sim",
                    value=item,
                    fix=f"use one of {sorted(kinds)}",
                )
            try:
                if key.endswith("_prob"):
                    lo, hi = (float(x) for x in raw.split(","))
                    values[key] = (lo, hi)
                elif key.endswith("_tokens") or key == "seed":
                    values[key] = int(raw)
                else:
                    values[key] = float(raw)
            except ValueError:
                raise ConfigError(
                    f"--sim {key}: cannot read {raw!r}", parameter="--sim", value=item
                ) from None
        return cls(**values)


@dataclass(frozen=True)
class _Answer:
    text: str
    right: bool
    prob: float


def _wrong_answers(sample: Sample) -> list[str]:
    """Distinct wrong answers of a sample (none of them scores as right)."""
    if sample.kind == "choice":
        letter = canonical_gold(sample.answer, "choice", sample.options)  # "(B)", "B.", "dog"
        return [k for k in sample.options or {} if k != letter] or ["Z"]
    if sample.kind == "yes_no":
        return ["no" if canonical_gold(sample.answer, "yes_no") == "yes" else "yes"]
    if sample.kind == "number":
        value = canonical_number(canonical_gold(sample.answer, "number"))
        if value is None:  # a date or a clock time: any other text is wrong
            return [w for w in _TEXT_DISTRACTORS if w != sample.answer][:_NUMBER_DISTRACTORS]
        gold = value
        step = max(1.0, math.ceil(0.25 * abs(gold)))
        values = [gold + step, gold - step, gold + 2 * step, gold + 3 * step]
        return [_number_text(v) for v in values[:_NUMBER_DISTRACTORS]]
    # no human answer may give a wrong answer partial credit
    taken: set[str | None] = {canonical_gold(sample.answer, "text")}
    taken |= {reference_form(ref) for ref in sample.references or ()}
    return [w for w in _TEXT_DISTRACTORS if w not in taken][:8]


def _number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _right_text(sample: Sample) -> str:
    if sample.kind == "choice":
        return canonical_gold(sample.answer, "choice", sample.options)
    return sample.answer


class _Plan:
    """The drawn answers of every sample."""

    def __init__(self, samples: Sequence[Sample], config: SimConfig) -> None:
        self.config = config
        self.answers: dict[str, dict[str, _Answer]] = {}
        for sample in samples:
            self.answers[sample.id] = self._draw(sample)

    def _draw(self, sample: Sample) -> dict[str, _Answer]:
        c = self.config
        rng = random.Random(f"mai-sim|{c.seed}|{sample.id}")
        wrongs = _wrong_answers(sample)
        rng.shuffle(wrongs)  # wrongs[0] is the sample's most plausible wrong answer
        linked = rng.random() < c.error_correlation
        difficulty = rng.random()
        out = {}
        for draw in DRAWS:
            own = rng.random()
            right = (difficulty if linked else own) < getattr(c, draw)
            shared = rng.random() < c.shared_mistake
            pick = rng.randrange(len(wrongs))
            lo, hi = c.right_prob if right else c.wrong_prob
            prob = lo + (hi - lo) * rng.random()
            text = _right_text(sample) if right else wrongs[0 if shared else pick]
            out[draw] = _Answer(text, right, prob)
        return out


class _Lookup:
    """Finds the sample a request is about: its question block, its image hash, its options.

    Every prompt the graph builds holds the question as :func:`~mai_graph.prompts.
    question_block` renders it (the question, hint lines included, and its lettered options),
    so a request is matched on that whole block, longest first: matching single lines would
    take a hinted MMBench question (``Hint: ...`` then the question) for another row that asks
    the same last line, and answer that row's letter. Samples sharing a block are told apart
    by their image. Requests whose prompts were rewritten fall back to the longest question
    text found in them.
    """

    def __init__(self, samples: Sequence[Sample]) -> None:
        self.by_question: dict[str, list[Sample]] = {}
        self.by_block: dict[str, list[Sample]] = {}
        self.by_head: dict[str, list[str]] = {}
        for sample in samples:
            self.by_question.setdefault(sample.question.strip(), []).append(sample)
            block = question_block(sample.question, sample.options)
            self.by_block.setdefault(block, []).append(sample)
        for block in sorted(self.by_block, key=len, reverse=True):
            self.by_head.setdefault(block.split("\n", 1)[0], []).append(block)
        self._hashes: dict[str, str | None] = {}
        self._longest_first = sorted(self.by_question, key=len, reverse=True)

    def _image_hash(self, sample: Sample) -> str | None:
        if sample.id not in self._hashes:
            from mai_graph.inputs.limits import fit_image
            from mai_graph.inputs.sources import image_ref

            # as the graph sees it: a small image is scaled up first
            ref = fit_image(image_ref(sample.image)) if sample.image else None
            self._hashes[sample.id] = ref["sha256"] if ref is not None else None
        return self._hashes[sample.id]

    def _by_block(self, text: str) -> list[Sample] | None:
        for line in text.splitlines():
            for block in self.by_head.get(line, ()):
                if block in text:
                    return self.by_block[block]
        return None

    def find(self, request: GenerationRequest) -> Sample:
        text = "\n".join(
            p["text"] for m in request.messages for p in m["content"] if p["type"] == "text"
        )
        candidates = self._by_block(text)
        if candidates is None:
            question = next((q for q in self._longest_first if q in text), None)
            if question is None:
                raise BackendError(
                    "simulated backend: the request's question is not in its dataset",
                    parameter="request",
                    fix="build the simulated pair from the samples you evaluate",
                )
            candidates = self.by_question[question]
        if len(candidates) == 1:
            return candidates[0]
        image = request.image
        sha = image["sha256"] if image is not None else None
        same = [sample for sample in candidates if self._image_hash(sample) == sha]
        if len(same) > 1:  # e.g. rotations of one multiple-choice question: the options differ
            same = [s for s in same if question_block(s.question, s.options) in text] or same
        if same:
            return same[0]
        raise BackendError(
            "simulated backend: no sample has this question and image",
            parameter="request",
            fix="build the simulated pair from the samples you evaluate",
        )


def _prompt_tokens(request: GenerationRequest) -> int:
    n = 0
    for message in request.messages:
        for part in message["content"]:
            n += len(part["text"].split()) if part["type"] == "text" else _IMAGE_TOKENS
    return n + len(request.messages)


def _word_logprob(rng: random.Random) -> float:
    return -5.0 * rng.random() ** 2


def _distribution(request: GenerationRequest, text: str, prob: float) -> dict[str, float] | None:
    """A simulated model's answer distribution: its probability on its answer, the rest even.

    None when the request asks for none, or the answer is not one of the allowed ones.
    """
    if request.distribution is None or request.min_tokens > 1:
        return None
    chosen = answer_of(request.distribution, text)
    if chosen is None:
        return None
    return around([a for a, _ in request.distribution], chosen, prob)


def simulated_pair(
    samples: Sequence[Sample], config: SimConfig | None = None
) -> tuple[FunctionBackend, FunctionBackend]:
    """A small and a large simulated backend that answer ``samples`` as ``config`` says.

    Args:
        samples: The samples that will be evaluated (their gold answers drive the simulation).
        config: The :class:`SimConfig` (default settings when None);
            :meth:`SimConfig.oracle` gives a pair that is always right.

    Returns:
        ``(small, large)`` :class:`~mai_graph.backends.fake.FunctionBackend` objects named
        ``sim-small`` / ``sim-large``.

    Example:
        >>> from mai_graph.eval.datasets import Sample
        >>> from mai_graph import run
        >>> s = Sample(id="1", question="Is it red?", kind="yes_no", answer="yes")
        >>> small, large = simulated_pair([s], SimConfig.oracle())
        >>> run("Is it red?", small=small, large=large, answer_kind="yes_no").canonical
        'yes'
    """
    cfg = config or SimConfig()
    plan = _Plan(samples, cfg)
    lookup = _Lookup(samples)

    def backend(role: str) -> FunctionBackend:
        decode = cfg.small_decode_s if role == "small" else cfg.large_decode_s
        prefill = cfg.small_prefill_s if role == "small" else cfg.large_prefill_s
        cot_tokens = cfg.small_cot_tokens if role == "small" else cfg.large_cot_tokens

        def fn(request: GenerationRequest) -> Generation:
            sample = lookup.find(request)
            answers = plan.answers[sample.id]
            purpose = request.purpose
            if purpose in ("cot", "s2"):
                answer = answers[f"{role}_cot"]
            elif purpose == "answer" and role == "large":
                answer = answers["transfer"]
            else:
                answer = answers[role]
            rng = random.Random(f"{sample.id}|{role}|{purpose}")
            if purpose == "cot":
                filler = [_FILLER[i % len(_FILLER)] for i in range(cot_tokens - 5)]
                words = [*filler, "So", "the", "answer", "is", answer.text + "."]
                logprobs = [_word_logprob(rng) for _ in words]
            else:
                words = answer.text.split()
                logprobs = [math.log(max(answer.prob, 1e-12))] + [0.0] * (len(words) - 1)
            words = words[: request.max_tokens]
            logprobs = logprobs[: len(words)]
            prompt = _prompt_tokens(request)
            ttft = prefill * prompt
            distribution = _distribution(request, answer.text, answer.prob)
            return Generation(
                distribution=distribution,
                text=" ".join(words),
                model=f"sim-{role}",
                prompt_tokens=prompt,
                generated_tokens=len(words),
                latency_s=ttft + decode * len(words),
                ttft_s=ttft,
                queue_s=0.0,  # simulated stages: the modelled prefill, then the decode
                prefill_s=ttft,
                decode_s=decode * len(words),
                finish_reason="stop",
                logprobs=tuple(logprobs) if request.logprobs is not None else None,
                tokens=tuple(w if i == 0 else " " + w for i, w in enumerate(words)),
            )

        if cfg.sleep == 0:
            return FunctionBackend(fn, name=f"sim-{role}")

        async def slow(request: GenerationRequest) -> Generation:
            gen = fn(request)
            await asyncio.sleep(gen.latency_s * cfg.sleep)
            return gen

        return FunctionBackend(slow, name=f"sim-{role}")

    return backend("small"), backend("large")


# --- what the settings imply ---------------------------------------------------------------


def _wrong_sums(m: int, q: float) -> tuple[float, float]:
    """Sum of squares and cubes of the wrong-answer distribution (m answers, attractor q)."""
    rest = (1 - q) / m
    top = q + rest
    return top**2 + (m - 1) * rest**2, top**3 + (m - 1) * rest**3


def _mai(r: dict[str, float], sq: float, cube: float, s2_exit: bool) -> dict[str, float]:
    """Route shares and accuracy of MAI (gate ``agree``) for right-probabilities ``r``."""
    rs, rl, r2, rt = r["small"], r["large"], r["small_cot"], r["transfer"]
    agree_right = rs * rl
    agree = agree_right + (1 - rs) * (1 - rl) * sq
    extract_right = extract = 0.0
    if s2_exit:
        extract_right = (1 - rs) * rl * r2
        extract = (
            rs * (1 - rl) * (1 - r2) * sq
            + extract_right
            + (1 - rs) * (1 - rl) * (1 - r2) * (sq - cube)
        )
    transfer = 1 - agree - extract
    return {
        "agree": agree,
        "extract_agree": extract,
        "transfer": transfer,
        "accuracy": agree_right + extract_right + transfer * rt,
    }


def _sample_expectation(config: SimConfig, m: int, s2_exit: bool) -> dict[str, float]:
    sq, cube = _wrong_sums(m, config.shared_mistake)
    p = {d: float(getattr(config, d)) for d in DRAWS}
    free = _mai(p, sq, cube, s2_exit)
    cuts = sorted({0.0, 1.0, *p.values()})
    linked = dict.fromkeys(free, 0.0)
    for lo, hi in zip(cuts, cuts[1:]):
        if hi <= lo:
            continue
        r = {d: 1.0 if p[d] >= hi else 0.0 for d in DRAWS}
        for key, value in _mai(r, sq, cube, s2_exit).items():
            linked[key] += (hi - lo) * value
    c = config.error_correlation
    return {k: c * linked[k] + (1 - c) * free[k] for k in free}


def expected(
    samples: Sequence[Sample], config: SimConfig, *, s2_exit: bool = True
) -> dict[str, Any]:
    """What :func:`simulated_pair` implies for each policy (gate ``agree``), in expectation.

    Returns:
        ``{"accuracy": {policy: value}, "routes": {route: share}, "mai_accuracy_sd": sd}``:
        MAI's accuracy and route shares, the baselines' accuracies (their configured
        probabilities, times the mean credit of a right answer: below 1 only for questions
        whose human answers rarely agree), and the standard deviation of MAI's measured
        accuracy over these samples (for sampling-error bounds).
    """
    n = len(samples)
    if n == 0:
        raise ConfigError("expected() needs samples", parameter="samples")
    cache: dict[int, dict[str, float]] = {}
    totals = dict.fromkeys(("agree", "extract_agree", "transfer", "accuracy"), 0.0)
    variance = credits = 0.0
    for sample in samples:
        m = len(_wrong_answers(sample))
        if m not in cache:
            cache[m] = _sample_expectation(config, m, s2_exit)
        # a right answer earns less than 1 where few annotators agree (VQA accuracy)
        credit = sample.verdict(_right_text(sample)).credit
        credits += credit
        for key, value in cache[m].items():
            totals[key] += value * credit if key == "accuracy" else value
        p = cache[m]["accuracy"]
        variance += credit * credit * p * (1 - p)
    mean_credit = credits / n
    accuracy = {
        "mai": totals["accuracy"] / n,
        "small": config.small * mean_credit,
        "large": config.large * mean_credit,
        "small_cot": config.small_cot * mean_credit,
        "large_cot": config.large_cot * mean_credit,
    }
    routes = {k: totals[k] / n for k in ("agree", "extract_agree", "transfer")}
    return {"accuracy": accuracy, "routes": routes, "mai_accuracy_sd": math.sqrt(variance) / n}
