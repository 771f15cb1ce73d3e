"""Per-run settings: the graph's ``context_schema``, declared once and validated by pydantic.

:class:`MAIContext` is a pydantic model, so one declaration gives Studio's settings form its
descriptions, bounds and enums (the JSON schema ``langgraph dev`` publishes), refuses unknown
keys (typos), and validates every value, raising :class:`~mai_graph.errors.ConfigError`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from mai_graph.answers import AnswerKind
from mai_graph.errors import ConfigError, shown

__all__ = ["Gate", "MAIContext", "Policy", "SparsifyStrategy", "load_settings", "mai_settings"]

Policy = Literal["mai", "small", "large", "small_cot", "large_cot"]
"""Which route the graph takes.

- ``mai``: multi-agent inference (verify, then reason / extract / sparsify / answer if needed).
- ``small``: baseline, the small model answers short.
- ``large``: baseline, the large model answers short.
- ``small_cot``: baseline, the small model reasons, then its S2 answer is taken.
- ``large_cot``: baseline, the large model reasons, then its S2 answer is taken.
"""

SparsifyStrategy = Literal["surprisal", "attention", "relevance", "none"]
"""How the small model's reasoning is cut before the large model reads it.

- ``surprisal``: keep the tokens the small model found least predictable (``-logprob`` of each
  generated token; the logprobs come free with the reasoning). Works on every engine.
- ``attention``: keep the tokens the small model's answer-extraction turn attends to most (the
  paper's strategy); needs the small model in transformers (see :class:`AttentionScorer`).
- ``relevance``: model-free; keeps the words most related to the question and options.
- ``none``: transfer the full reasoning (the ablation baseline).

Digits, option letters and negations are kept by every strategy unless ``force_keep`` is off.
"""

Gate = Literal["agree", "agree_confident", "agree_joint", "never"]
"""When verification (and the S2 turn) may end a run early.

- ``agree``: the two answers agree (the paper's rule).
- ``agree_confident``: they agree *and* each model's probability for its own answer is at least
  ``gate_min_prob`` (the smaller of the two reaches it; probabilities from the answer
  distributions, or the short answers' token logprobs).
- ``agree_joint``: they agree *and* the product of the two models' probabilities of the agreed
  answer (their joint probability, as independent judges) is at least ``gate_min_prob``.
- ``never``: no early exit; every run reasons and transfers (an ablation, and how evaluation
  records every branch of a sample for offline calibration).
"""


DraftQuorum = Literal["all", "majority"]
"""With several drafts (drafter models or sampled drafts), which agreement ends a run at
verification.

- ``all``: every draft agrees with the large model's short answer (under ``gate``).
- ``majority``: the large model's answer is shared by more than half of all short answers
  (the drafts' and the large model's own).
"""

DraftRank = Literal["confidence", "agreement"]
"""How the drafts' reasoning is ranked when a run escalates (the best ``transfer_drafts`` are
sparsified and transferred).

- ``confidence``: the drafting model's probability for its own S2 answer, highest first.
- ``agreement``: how many other drafts' S2 answers agree with the draft's, ties broken by
  confidence.
"""


MAX_SEED = 2**63 - 17
"""Largest sampling seed: engines take a signed 64-bit seed, and sampled drafts add their index
(at most 16) to it."""

MAX_PROMPT_CHARS = 20_000
"""Longest prompt override (system prompt, instructions, transfer preamble), in characters."""


class MAIContext(BaseModel):
    """Settings of one MAI run (pass as ``context=`` to ``invoke`` / ``run``).

    Every field is validated when the object is built; unknown keys are refused. A graph used
    as a subgraph of an app with its own context schema reads these settings from the parent
    context's ``mai`` field (a ``MAIContext`` or a dict of its fields); see :func:`mai_settings`.

    Example:
        >>> MAIContext(keep_ratio=0.3).keep_ratio
        0.3
        >>> MAIContext(kep_ratio=0.3)
        Traceback (most recent call last):
        ...
        mai_graph.errors.ConfigError: unknown context settings ['kep_ratio']; ...
    """

    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, use_attribute_docstrings=True
    )

    policy: Policy = "mai"
    """Route policy: mai, or a baseline (small, large, small_cot, large_cot)."""
    answer_kind: AnswerKind = "auto"
    """How answers are read and compared: auto, choice, yes_no, number or text."""
    rel_tol: float = Field(0.05, ge=0, lt=1)
    """Relative tolerance when comparing numeric answers (0.05 = 5%)."""
    gate: Gate = "agree"
    """Early-exit rule: agree (the paper's), agree_confident (agree and both answer
    probabilities >= gate_min_prob), agree_joint (agree and their product >= gate_min_prob),
    or never (always reason and transfer)."""
    gate_min_prob: float = Field(0.5, ge=0, le=1)
    """agree_confident: the least probability each model must give its own short answer;
    agree_joint: the least product of the two."""
    large_confident_exit: float | None = Field(None, gt=0, le=1)
    """On disagreement, end with the large model's short answer when its probability is at
    least this (off when unset; a departure from the paper)."""
    pooled_exit: float | None = Field(None, gt=0, le=1)
    """On disagreement, end with the large model's short answer when the two models'
    distributions, averaged, give it at least this probability (bounded questions; off when
    unset; a departure from the paper)."""
    short_max_tokens: int = Field(16, ge=1, le=4096)
    """Token budget of the short answers (verify, answer)."""
    cot_max_tokens: int = Field(512, ge=1, le=131072)
    """Token budget of the small model's chain of thought."""
    cot_min_tokens: int = Field(0, ge=0, le=131072)
    """Force at least this many reasoning tokens (benchmarks, tests)."""
    s2_max_tokens: int = Field(16, ge=1, le=4096)
    """Token budget of the S2 answer-extraction turn."""
    s2_exit: bool = True
    """End the run when the S2 answer agrees with the large model's short answer."""
    speculative_cot: bool = False
    """Start the small model's reasoning while verification runs: a disagreement then finds it
    under way (saving the verify latency), an agreement cancels it (aborted in the engine)."""
    sparsify: SparsifyStrategy = "surprisal"
    """Sparsification strategy: surprisal, attention, relevance or none."""
    keep_ratio: float = Field(0.2, gt=0, le=1)
    """Share of reasoning tokens the large model reads, in (0, 1]."""
    keep_mass: float | None = Field(None, gt=0, le=1)
    """Instead of a ratio, keep the fewest top tokens covering this share of the importance
    mass, in (0, 1]."""
    whole_words: bool = True
    """Keep or drop whole words rather than sub-word pieces."""
    force_keep: bool = True
    """Always keep digits, option letters and negations."""
    transfer_mask_answer: bool = False
    """Leave the small model's stated final answer out of the transferred reasoning (tells
    the large model's reading of the reasoning from its copying of the answer; evaluation)."""
    max_transfer_tokens: int = Field(2048, ge=1, le=131072)
    """Upper bound on transferred tokens, whatever the ratio (guards the large model's context)."""
    constrain_choices: bool = True
    """For multiple choice, constrain short answers to the option letters (where supported)."""
    verify_distribution: bool = True
    """For choice and yes_no questions, short answers (verification, S2, the answer after the
    transfer) read the model's whole distribution over the allowed answers off one decode step
    (the answer is its argmax); where the first token cannot tell the answers apart, or off,
    they are generated."""
    temperature: float = Field(0.0, ge=0, le=5)
    """Sampling temperature of every call (0 = greedy)."""
    seed: int | None = Field(None, ge=0, le=MAX_SEED)
    """Sampling seed, for reproducible runs at temperature > 0, in 0 .. 2**63 - 17 (engines take
    a signed 64-bit seed; sampled drafts add their index to it)."""
    drafts: int = Field(1, ge=1, le=16)
    """Drafts per small model: above 1, each small model answers (and on escalation reasons)
    this many times, sampled at draft_temperature."""
    draft_temperature: float = Field(0.7, gt=0, le=5)
    """Sampling temperature of sampled drafts (drafts > 1)."""
    draft_quorum: DraftQuorum = "all"
    """With several drafts, which agreement ends a run at verification: all (every draft agrees
    with the large model) or majority (the large model's answer has more than half the votes)."""
    draft_rank: DraftRank = "confidence"
    """With several drafts, how their reasoning is ranked on escalation: confidence (own S2
    answer probability) or agreement (S2 answers shared with other drafts)."""
    transfer_drafts: int = Field(1, ge=1, le=4)
    """With several drafts, how many of the best-ranked reasonings the large model reads."""
    video_fps: float = Field(2.0, gt=0, le=30)
    """Frames sampled per second of a question's video."""
    max_frames: int = Field(32, ge=1, le=256)
    """Most frames sampled from a question's video (evenly spaced over the whole clip)."""
    review: bool = False
    """Pause after verification for a human decision (graphs built with a review node)."""
    system_prompt: str | None = Field(None, max_length=MAX_PROMPT_CHARS)
    """Override of the system prompt (keep it identical across runs for prefix caching)."""
    short_instruction: str | None = Field(None, max_length=MAX_PROMPT_CHARS)
    """Override of the short-answer instruction."""
    cot_instruction: str | None = Field(None, max_length=MAX_PROMPT_CHARS)
    """Override of the chain-of-thought instruction."""
    s2_instruction: str | None = Field(None, max_length=MAX_PROMPT_CHARS)
    """Override of the answer-extraction (S2) instruction."""
    transfer_preamble: str | None = Field(None, max_length=MAX_PROMPT_CHARS)
    """Override of the text that introduces the transferred reasoning to the large model."""

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _config_error(exc) from None

    @model_validator(mode="after")
    def _min_within_budget(self) -> MAIContext:
        if self.cot_min_tokens > self.cot_max_tokens:
            raise ValueError(
                f"cot_min_tokens ({self.cot_min_tokens}) exceeds cot_max_tokens "
                f"({self.cot_max_tokens})"
            )
        return self

    def replace(self, **changes: Any) -> MAIContext:
        """A validated copy with some fields changed."""
        return MAIContext(**{**self.model_dump(), **changes})

    @classmethod
    def coerce(cls, value: Any) -> MAIContext:
        """Build a context from ``None``, a mapping of fields, or a context (returned as is)."""
        if value is None:
            return _DEFAULT
        if isinstance(value, MAIContext):
            return value
        if isinstance(value, Mapping):
            return cls(**dict(value))
        raise ConfigError(
            f"context must be a MAIContext or a dict of its fields, got {type(value).__name__}",
            parameter="context",
            value=value,
            fix="pass MAIContext(...) or a dict of its fields",
        )


def load_settings(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a settings file: a JSON object of :class:`MAIContext` fields, validated.

    ``mai-graph calibrate`` writes one; ``mai-graph run --context FILE``, ``eval --context
    FILE`` and Studio (paste it as the run's context) accept it.

    Raises:
        ConfigError: Missing file, invalid JSON, not an object, or unknown / invalid fields.
    """
    from mai_graph.files import read_text
    from mai_graph.jsonin import parse_json

    file = Path(path).expanduser()
    text = read_text(file, flag="--context", what="context file")
    data = parse_json(
        text, parameter="--context", what=f"--context file {file}",
        fix='write a JSON object such as {"gate": "agree", "keep_ratio": 0.3}',
    )  # fmt: skip
    if not isinstance(data, dict):
        raise ConfigError(
            f"context file {file} must hold a JSON object of MAIContext fields",
            parameter="--context",
            value=str(file),
            fix='write e.g. {"gate": "agree", "keep_ratio": 0.3}',
        )
    MAIContext(**data)  # validate now, naming the file's mistakes
    return data


def mai_settings(context: Any) -> MAIContext:
    """The MAI settings of a run, whatever context the graph runs under.

    ``None`` gives the defaults; a :class:`MAIContext` is used as is; a mapping is read as MAI
    settings, unless it has a ``mai`` key (then that is). Any other object is a parent app's
    context: its ``mai`` attribute holds the settings if it has one, else the defaults apply.

    >>> mai_settings({"mai": {"keep_ratio": 0.5}}).keep_ratio
    0.5
    """
    if context is None or isinstance(context, MAIContext):
        return MAIContext.coerce(context)
    if isinstance(context, Mapping):
        return MAIContext.coerce(context.get("mai", context))
    return MAIContext.coerce(getattr(context, "mai", None))


_BOUNDS = {
    "greater_than": "> {gt}",
    "greater_than_equal": ">= {ge}",
    "less_than": "< {lt}",
    "less_than_equal": "<= {le}",
}


def _range(name: str) -> str:
    """The field's allowed range, e.g. ``(0, 1]``, from its declared bounds."""
    lo, hi, lo_open, hi_open = None, None, False, False
    for meta in MAIContext.model_fields[name].metadata:
        for attr, is_lo, is_open in (("gt", 1, 1), ("ge", 1, 0), ("lt", 0, 1), ("le", 0, 0)):
            bound = getattr(meta, attr, None)
            if bound is None:
                continue
            if is_lo:
                lo, lo_open = bound, bool(is_open)
            else:
                hi, hi_open = bound, bool(is_open)
    left = f"{'(' if lo_open else '['}{lo}" if lo is not None else "(-inf"
    right = f"{hi}{')' if hi_open else ']'}" if hi is not None else "inf)"
    return f"{left}, {right}"


def _config_error(exc: ValidationError) -> ConfigError:
    """One clear ConfigError for the first problem pydantic found."""
    err = exc.errors()[0]
    loc = [str(part) for part in err["loc"]]
    name = loc[0] if loc else "context"
    value = err.get("input")
    if isinstance(value, str) and len(value) > 80:  # never echo a huge input back
        value = f"{value[:60]}... ({len(value):,} characters)"
    got = shown(value, 200)  # an int of 5,000 digits has no repr Python will print
    known = sorted(MAIContext.model_fields)
    if err["type"] == "extra_forbidden":
        unknown = [str(e["loc"][0]) for e in exc.errors() if e["type"] == "extra_forbidden"]
        return ConfigError(
            f"unknown context settings {unknown}; known: {known}",
            parameter=unknown[0],
            value=unknown,
            fix="check the spelling against MAIContext's fields",
        )
    if name not in MAIContext.model_fields:  # a cross-field rule
        return ConfigError(
            str(err["msg"]).removeprefix("Value error, "),
            parameter="cot_min_tokens",
            value=value,
            fix="raise cot_max_tokens or lower cot_min_tokens",
        )
    field = MAIContext.model_fields[name]
    annotation = str(field.annotation)
    allowed = _literal_values(field.annotation)
    if allowed:
        message = f"{name} must be one of {allowed}, got {got}"
        fix = f"set {name} to one of the listed values"
    elif field.annotation is bool:
        message = f"{name} must be true or false, got {got}"
        fix = f"set {name} to a boolean"
    elif "int" in annotation:
        within = f" in {_range(name)}" if field.metadata else ""
        message = f"{name} must be an integer{within}, got {got}"
        fix = f"set {name} to a whole number within the range"
    elif "float" in annotation:
        message = f"{name} must be in {_range(name)}, got {got}"
        fix = f"set {name} to a number in {_range(name)}"
    else:
        message = f"{name}: {err['msg']}, got {shown(value, 120)}"
        fix = f"see MAIContext.{name}: {field.description or ''}"
    return ConfigError(message, parameter=name, value=value, fix=fix)


def _literal_values(annotation: Any) -> list[Any]:
    """The allowed values of a ``Literal`` (or optional ``Literal``) annotation, else []."""
    if get_origin(annotation) is Literal:
        return list(get_args(annotation))
    return [v for arg in get_args(annotation) for v in _literal_values(arg)]


_DEFAULT = MAIContext()
