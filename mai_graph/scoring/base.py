"""Token-importance scoring and selection for sparsifying the transferred reasoning."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from mai_graph.errors import ConfigError

__all__ = ["Selection", "TokenScorer", "select_tokens"]

_FORCE_LETTER = re.compile(r"^\(?[A-Z][.):]?$")
_FORCE_WORD = re.compile(r"\d|^(?:not|no|never|none|neither|nor|cannot|\w+n't)$", re.IGNORECASE)


@runtime_checkable
class TokenScorer(Protocol):
    """Scores each reasoning token's importance (higher = keep).

    Implementations: :class:`~mai_graph.scoring.relevance.RelevanceScorer`.
    """

    name: str

    def score(
        self, tokens: Sequence[str], *, question: str, options: Sequence[str] | None
    ) -> list[float]:
        """One non-negative score per token."""
        ...


@dataclass(frozen=True, slots=True)
class Selection:
    """Which tokens were kept (indices in original order) and how much importance was dropped."""

    kept: tuple[int, ...]
    dropped_mass: float


def must_keep(token: str) -> bool:
    """Digits, option letters and negations are always kept.

    >>> [must_keep(t) for t in ("12", "(B)", "not", "cat")]
    [True, True, True, False]
    """
    token = token.strip(",;:!?\"'")
    return bool(_FORCE_LETTER.match(token) or _FORCE_WORD.search(token.rstrip(".")))


def select_tokens(
    tokens: Sequence[str], scores: Sequence[float], keep_ratio: float, *, force_keep: bool = True
) -> Selection:
    """Keep the ``ceil(keep_ratio * n)`` highest-scoring tokens, in their original order.

    Forced tokens (see :func:`must_keep`) are kept on top of the budget only where the budget
    would otherwise drop them; ties go to the earlier token.

    >>> select_tokens(["a", "b", "c", "d"], [0.1, 0.9, 0.5, 0.2], 0.5).kept
    (1, 2)
    """
    if len(tokens) != len(scores):
        raise ConfigError(
            f"got {len(scores)} scores for {len(tokens)} tokens",
            parameter="scores",
            fix="return exactly one score per token from the scorer",
        )
    if not 0 < keep_ratio <= 1:
        raise ConfigError(
            f"keep_ratio must be in (0, 1], got {keep_ratio!r}", parameter="keep_ratio"
        )
    n = len(tokens)
    if n == 0:
        return Selection((), 0.0)
    budget = max(1, math.ceil(keep_ratio * n - 1e-9))
    order = sorted(range(n), key=lambda i: (-scores[i], i))
    kept = set(order[:budget])
    if force_keep:
        kept.update(i for i in range(n) if must_keep(tokens[i]))
    total = float(sum(scores))
    dropped = sum(scores[i] for i in range(n) if i not in kept)
    return Selection(tuple(sorted(kept)), dropped / total if total > 0 else 0.0)
