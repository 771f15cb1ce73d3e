"""Per-run settings: the graph's ``context_schema``, validated once per run."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, get_args

from mai_graph.answers import AnswerKind
from mai_graph.errors import ConfigError

__all__ = ["MAIContext", "Policy", "SparsifyStrategy"]

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


def _choice(name: str, value: Any, allowed: tuple[Any, ...]) -> None:
    if value not in allowed:
        raise ConfigError(
            f"{name} must be one of {list(allowed)}, got {value!r}",
            parameter=name,
            value=value,
            fix=f"set {name} to one of the listed values",
        )


def _int_range(name: str, value: Any, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ConfigError(
            f"{name} must be an integer in [{lo}, {hi}], got {value!r}",
            parameter=name,
            value=value,
            fix=f"set {name} between {lo} and {hi}",
        )


@dataclass(frozen=True, kw_only=True)
class MAIContext:
    """Settings of one MAI run (pass as ``context=`` to ``invoke`` / ``run``).

    Every field is validated when the object is built; unknown keys in a dict are refused.
    """

    policy: Policy = "mai"
    """Route policy; see :data:`Policy`."""
    answer_kind: AnswerKind = "auto"
    """How answers are read and compared; see :data:`mai_graph.answers.AnswerKind`."""
    rel_tol: float = 0.05
    """Relative tolerance when comparing numeric answers."""
    short_max_tokens: int = 16
    """Budget of the short answers (verify, answer)."""
    cot_max_tokens: int = 512
    """Budget of the small model's chain of thought."""
    cot_min_tokens: int = 0
    """Force at least this many reasoning tokens (benchmarks, tests)."""
    s2_max_tokens: int = 16
    """Budget of the S2 answer-extraction turn."""
    s2_exit: bool = True
    """End the run when the S2 answer agrees with the large model's short answer."""
    speculative_cot: bool = False
    """Start the small model's reasoning while verification runs: a disagreement then finds it
    under way (saving the verify latency), an agreement cancels it (aborted in the engine; the
    small model wasted some decode steps, batched with the short answers)."""
    sparsify: SparsifyStrategy = "surprisal"
    """Sparsification strategy; see :data:`SparsifyStrategy`."""
    keep_ratio: float = 0.2
    """Share of reasoning tokens the large model reads, in (0, 1]."""
    keep_mass: float | None = None
    """Instead of a ratio, keep the fewest top tokens covering this share of the importance
    mass, in (0, 1]."""
    whole_words: bool = True
    """Keep or drop whole words rather than sub-word pieces."""
    force_keep: bool = True
    """Always keep digits, option letters and negations."""
    max_transfer_tokens: int = 2048
    """Upper bound on transferred tokens, whatever the ratio (guards the large model's context)."""
    constrain_choices: bool = True
    """For multiple choice, constrain short answers to the option letters (where supported)."""
    temperature: float = 0.0
    """Sampling temperature of every call (0 = greedy)."""
    seed: int | None = None
    """Sampling seed, for reproducible runs at temperature > 0."""
    system_prompt: str | None = None
    """Override of the system prompt (keep it identical across runs for prefix caching)."""
    short_instruction: str | None = None
    """Override of the short-answer instruction."""
    cot_instruction: str | None = None
    """Override of the chain-of-thought instruction."""
    s2_instruction: str | None = None
    """Override of the answer-extraction (S2) instruction."""
    transfer_preamble: str | None = None
    """Override of the text that introduces the transferred reasoning to the large model."""

    def __post_init__(self) -> None:
        _choice("policy", self.policy, get_args(Policy))
        _choice("answer_kind", self.answer_kind, get_args(AnswerKind))
        _choice("sparsify", self.sparsify, get_args(SparsifyStrategy))
        if not isinstance(self.rel_tol, int | float) or not 0 <= self.rel_tol < 1:
            raise ConfigError(
                f"rel_tol must be in [0, 1), got {self.rel_tol!r}",
                parameter="rel_tol",
                value=self.rel_tol,
                fix="use a fraction such as 0.05 for 5%",
            )
        if (
            not isinstance(self.keep_ratio, int | float)
            or isinstance(self.keep_ratio, bool)
            or not 0 < self.keep_ratio <= 1
        ):
            raise ConfigError(
                f"keep_ratio must be in (0, 1], got {self.keep_ratio!r}",
                parameter="keep_ratio",
                value=self.keep_ratio,
                fix="use e.g. 0.2 to keep 20% of the reasoning tokens",
            )
        if self.keep_mass is not None and (
            not isinstance(self.keep_mass, int | float) or not 0 < self.keep_mass <= 1
        ):
            raise ConfigError(
                f"keep_mass must be in (0, 1] or None, got {self.keep_mass!r}",
                parameter="keep_mass",
                value=self.keep_mass,
                fix="use e.g. 0.8 to keep the tokens holding 80% of the importance",
            )
        _int_range("max_transfer_tokens", self.max_transfer_tokens, 1, 131072)
        _int_range("short_max_tokens", self.short_max_tokens, 1, 4096)
        _int_range("cot_max_tokens", self.cot_max_tokens, 1, 131072)
        _int_range("cot_min_tokens", self.cot_min_tokens, 0, self.cot_max_tokens)
        _int_range("s2_max_tokens", self.s2_max_tokens, 1, 4096)
        if not isinstance(self.temperature, int | float) or not 0 <= self.temperature <= 5:
            raise ConfigError(
                f"temperature must be in [0, 5], got {self.temperature!r}",
                parameter="temperature",
                value=self.temperature,
                fix="use 0 for greedy decoding",
            )
        for name in (
            "s2_exit",
            "speculative_cot",
            "constrain_choices",
            "whole_words",
            "force_keep",
        ):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(
                    f"{name} must be true or false, got {getattr(self, name)!r}",
                    parameter=name,
                    value=getattr(self, name),
                    fix=f"set {name} to a boolean",
                )

    @classmethod
    def coerce(cls, value: MAIContext | dict[str, Any] | None) -> MAIContext:
        """Build a context from ``None``, a dict of fields, or a context (returned as is)."""
        if value is None:
            return _DEFAULT
        if isinstance(value, MAIContext):
            return value
        if not isinstance(value, dict):
            raise ConfigError(
                f"context must be a MAIContext or a dict, got {type(value).__name__}",
                parameter="context",
                value=value,
                fix="pass MAIContext(...) or a dict of its fields",
            )
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ConfigError(
                f"unknown context settings {unknown}; known: {sorted(known)}",
                parameter="context",
                value=unknown,
                fix="check the spelling against MAIContext's fields",
            )
        return cls(**value)


_DEFAULT = MAIContext()
