"""Token importance for sparsification: what a scorer sees, and how tokens are selected."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from mai_graph.errors import ConfigError
from mai_graph.messages import Message

__all__ = [
    "ReasoningInput",
    "Selection",
    "TokenScorer",
    "must_keep",
    "binding_partners",
    "select_tokens",
    "split_pieces",
    "word_groups",
]

_FORCE_LETTER = re.compile(r"^\(?[A-Z][.):]?$")
_FORCE_WORD = re.compile(r"\d|^(?:not|no|never|none|neither|nor|cannot|\w+n't)$", re.IGNORECASE)
_PIECE = re.compile(r"\s*\S+|\s+")
_CLAUSE_END = re.compile(r"[.,;:!?]$")
BIND_WINDOW = 2
"""How many words on each side of a kept value (inside its clause) may be what it binds to."""
SHORT_CLAUSE = 5
"""A clause of at most this many words is kept whole with a value in it (a list item, a
fact: ``I count red 3``, ``r1c2 red right``, ``So r2c3 is green``)."""


@dataclass(frozen=True, slots=True)
class ReasoningInput:
    """The small model's reasoning as scorers see it."""

    tokens: tuple[str, ...]
    """Text pieces, one per generated token (a word-initial piece carries its leading space)."""
    token_ids: tuple[int, ...] | None
    """The generated token ids, when the backend reports them (same length as ``tokens``)."""
    logprobs: tuple[float, ...] | None
    """Each generated token's logprob, when the backend reports them."""
    question: str
    options: tuple[str, ...] | None
    """The option texts, in display order."""
    s2_messages: tuple[Message, ...]
    """The S2 prompt (CoT conversation + reasoning + extraction turn), for model-based scorers."""
    letters: tuple[str, ...] = ()
    """The options' letters (always kept when ``force_keep``)."""


@runtime_checkable
class TokenScorer(Protocol):
    """Scores each reasoning token's importance (higher = keep).

    Implementations: :class:`~mai_graph.scoring.relevance.RelevanceScorer`,
    :class:`~mai_graph.scoring.surprisal.SurprisalScorer`,
    :class:`~mai_graph.scoring.attention.AttentionScorer`.
    """

    name: str

    async def score(self, reasoning: ReasoningInput) -> Sequence[float]:
        """One non-negative score per token of ``reasoning.tokens``."""
        ...


@dataclass(frozen=True, slots=True)
class Selection:
    """Which tokens were kept (indices in original order) and how much importance was dropped."""

    kept: tuple[int, ...]
    dropped_mass: float
    """Share of the total score mass of the tokens not kept (0 when all are kept)."""


def split_pieces(text: str) -> list[str]:
    """Pieces of a text for backends that report no tokens: words with their leading space.

    >>> split_pieces("The cat  sat.")
    ['The', ' cat', '  sat.']
    """
    return _PIECE.findall(text)


def must_keep(token: str, letters: Collection[str] | None = None) -> bool:
    """Digits, option letters and negations are always kept.

    Args:
        token: A word or piece.
        letters: The question's option letters (default: any capital letter standing alone).

    >>> [must_keep(t) for t in ("12", " (B)", " not", "cat", " a")]
    [True, True, True, False, False]
    >>> must_keep("I", letters=("A", "B")), must_keep("B.", letters=("A", "B"))
    (False, True)
    """
    token = token.strip().strip(",;:!?\"'")
    letter = _FORCE_LETTER.match(token)
    if letter and (letters is None or token.strip("().:") in letters):
        return True
    return bool(_FORCE_WORD.search(token.rstrip(".")))


@functools.lru_cache(maxsize=8192)
def _forced(unit: str, letters: frozenset[str] | None) -> bool:
    """:func:`must_keep`, remembered: a reasoning repeats its words, every run its letters."""
    return must_keep(unit, letters)


def word_groups(tokens: Sequence[str]) -> list[list[int]]:
    """Group sub-word pieces into words: a piece that starts with whitespace starts a word.

    >>> word_groups(["The", " squ", "are", " is", " red", "."])
    [[0], [1, 2], [3], [4, 5]]
    """
    groups: list[list[int]] = []
    for i, piece in enumerate(tokens):
        if not groups or piece[:1].isspace() or tokens[i - 1][-1:].isspace():
            groups.append([i])
        else:
            groups[-1].append(i)
    return groups


def binding_partners(
    texts: Sequence[str], scores: Sequence[float], u: int, skip: Collection[int] = ()
) -> tuple[int, ...]:
    """The units a value at unit ``u`` is the value of: what must be kept along with it.

    A count without its colour, a cell without what is in it, a "not" without what it
    negates carries nothing. A short clause (clauses end at ``. , ; : ! ?``; at most
    :data:`SHORT_CLAUSE` words) is kept whole. In a longer one the partner is the word, among
    the :data:`BIND_WINDOW` nearest words on each side that are not in ``skip`` (other values;
    at most twice that many words away), with the best score per distance (``score /
    distance``; the nearer word on a tie). When the best of each side tie, both are partners
    (nothing tells which one the value belongs to). Empty when the clause has no such word.

    >>> words = ["I", " count", " red", " 3,", " green", " 0."]
    >>> binding_partners(words, [0.1, 0.1, 1.0, 2.0, 1.0, 2.0], 3)
    (0, 1, 2)
    >>> words = ["So", " we", " have", " red", " 3", " >", " blue", " 2."]
    >>> binding_partners(words, [0.1, 0.1, 0.1, 1.0, 2.0, 0.5, 1.0, 2.0], 4)
    (3,)
    >>> binding_partners(words, [0.1, 0.1, 0.1, 1.0, 2.0, 0.5, 1.0, 2.0], 7, skip={4})
    (6,)
    >>> binding_partners(["Answer:", " 3"], [0.5, 2.0], 1)
    ()
    """
    lo = u  # the clause, looked for no further than a short clause reaches
    while lo > 0 and u - lo < SHORT_CLAUSE and not _CLAUSE_END.search(texts[lo - 1].rstrip()):
        lo -= 1
    hi = u
    while (hi < len(texts) - 1 and hi - u < SHORT_CLAUSE
           and not _CLAUSE_END.search(texts[hi].rstrip())):  # fmt: skip
        hi += 1
    closed = (lo == 0 or _CLAUSE_END.search(texts[lo - 1].rstrip())) and (
        hi == len(texts) - 1 or _CLAUSE_END.search(texts[hi].rstrip())
    )
    words = [v for v in range(lo, hi + 1) if texts[v].strip()]
    if closed and len(words) <= SHORT_CLAUSE:
        return tuple(v for v in words if v != u)
    best: list[tuple[float, int, int]] = []
    for step in (-1, 1):
        side: tuple[float, int, int] | None = None
        seen, v = 0, u
        while seen < BIND_WINDOW and abs(v - u) < 2 * BIND_WINDOW:
            if step < 0 and (v == 0 or _CLAUSE_END.search(texts[v - 1].rstrip())):
                break
            if step > 0 and (v == len(texts) - 1 or _CLAUSE_END.search(texts[v].rstrip())):
                break
            v += step
            if v in skip or not texts[v].strip():
                continue
            seen += 1
            key = (scores[v] / abs(v - u), -abs(v - u), v)
            if side is None or key[:2] > side[:2]:
                side = key
        if side is not None:
            best.append(side)
    if not best:
        return ()
    top = max(k[:2] for k in best)
    return tuple(k[2] for k in best if k[:2] == top)


def _check(tokens: Sequence[str], scores: Sequence[float], keep_ratio: float) -> None:
    if len(tokens) != len(scores):
        raise ConfigError(
            f"got {len(scores)} scores for {len(tokens)} tokens",
            parameter="scores",
            fix="return exactly one score per token from the scorer",
        )
    if not 0 < keep_ratio <= 1:
        raise ConfigError(
            f"keep_ratio must be in (0, 1], got {keep_ratio!r}",
            parameter="keep_ratio",
            value=keep_ratio,
        )
    if any(not math.isfinite(s) or s < 0 for s in scores):
        raise ConfigError(
            "token scores must be finite and non-negative",
            parameter="scores",
            fix="clip or shift the scorer's output",
        )


def select_tokens(
    tokens: Sequence[str],
    scores: Sequence[float],
    keep_ratio: float = 0.2,
    *,
    keep_mass: float | None = None,
    whole_words: bool = False,
    force_keep: bool = True,
    letters: Collection[str] | None = None,
    max_tokens: int | None = None,
) -> Selection:
    """Keep the most important tokens, in their original order.

    The budget is ``ceil(keep_ratio * n)`` tokens, or, with ``keep_mass``, the smallest set of
    top-scoring units whose scores cover that share of the total. Forced units (digits, option
    letters (``letters``, default any lone capital), negations; see :func:`must_keep`) are taken
    first, then the rest by score (ties go
    to the earlier unit). With ``whole_words`` a unit is a word (all its pieces; its score is
    its best piece's), and the last word taken may overshoot the budget by its length.
    ``max_tokens`` caps the result whatever the other settings.

    >>> select_tokens(["a", "b", "c", "d"], [0.1, 0.9, 0.5, 0.2], 0.5).kept
    (1, 2)
    """
    _check(tokens, scores, keep_ratio)
    if keep_mass is not None and not 0 < keep_mass <= 1:
        raise ConfigError(f"keep_mass must be in (0, 1], got {keep_mass!r}", parameter="keep_mass")
    n = len(tokens)
    if n == 0:
        return Selection((), 0.0)
    units = word_groups(tokens) if whole_words else [[i] for i in range(n)]
    if whole_words:
        unit_score: list[float] = []
        texts: list[str] = []
        for unit in units:
            if len(unit) == 1:
                unit_score.append(scores[unit[0]])
                texts.append(tokens[unit[0]])
            else:
                unit_score.append(max(scores[i] for i in unit))
                texts.append("".join(tokens[i] for i in unit))
    else:
        unit_score, texts = list(scores), list(tokens)
    # Best first, ties to the earlier unit (a stable sort keeps their order, reversed or not).
    by_score = sorted(range(len(units)), key=unit_score.__getitem__, reverse=True)
    total = float(sum(scores))
    if keep_mass is None:
        budget = max(1, math.ceil(keep_ratio * n - 1e-9))
    else:
        budget, mass = 0, 0.0
        for u in by_score:
            if total > 0 and mass >= keep_mass * total - 1e-12:
                break
            budget += len(units[u])
            mass += sum(scores[i] for i in units[u])
        budget = max(budget, 1)
    if max_tokens is not None:
        budget = min(budget, max_tokens)
    letter_set = None if letters is None else frozenset(letters)
    forced = [u for u in by_score if _forced(texts[u], letter_set)] if force_keep else []
    if forced and whole_words:  # each value word with the word it is the value of
        values = set(forced)
        bound = []
        for u in forced:  # the value, then its partners and the words between them
            ps = binding_partners(texts, unit_score, u, values)
            span = range(min(u, *ps), max(u, *ps) + 1) if ps else ()
            bound += [u, *(w for w in span if w != u)]
        forced = bound
    kept: set[int] = set()
    for u in forced:
        if units[u][0] in kept:
            continue
        if max_tokens is not None and len(kept) + len(units[u]) > max_tokens:
            continue
        kept.update(units[u])
    for u in by_score:
        if len(kept) >= budget:
            break
        if units[u][0] not in kept:
            if max_tokens is not None and len(kept) + len(units[u]) > max_tokens:
                continue
            kept.update(units[u])
    dropped = sum(scores[i] for i in range(n) if i not in kept)
    return Selection(tuple(sorted(kept)), dropped / total if total > 0 else 0.0)
