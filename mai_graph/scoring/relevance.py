"""Model-free relevance: words tied to the question and options, weighted by rarity."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

__all__ = ["RelevanceScorer"]

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "a an the and or of to in on at is are was were be been it its this that these those with "
    "for as by from so then there here we i you they he she them his her our your their can "
    "could would should will just also very let me my do does did have has had about into".split()
)


def _stem(word: str) -> str:
    for suffix in ("ing", "es", "ed", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def _terms(text: str) -> list[str]:
    return [_stem(w) for w in _WORD.findall(text.lower()) if w not in _STOP]


class RelevanceScorer:
    """Scores a word by its overlap with the question and options and by its rarity.

    ``score = idf(word) * (1 + 2 * [word in question or options])``; stop words score
    a tenth. Needs no model, so it works with every backend.
    """

    name = "relevance"

    def score(
        self, tokens: Sequence[str], *, question: str, options: Sequence[str] | None
    ) -> list[float]:
        """One score per whitespace token of the reasoning."""
        query = set(_terms(question + " " + " ".join(options or ())))
        token_terms = [_terms(t) for t in tokens]
        counts = Counter(term for terms in token_terms for term in set(terms))
        n = max(len(tokens), 1)
        scores = []
        for terms in token_terms:
            if not terms:
                scores.append(0.05)
                continue
            best = 0.0
            for term in terms:
                idf = math.log(1 + n / counts[term])
                best = max(best, idf * (3.0 if term in query else 1.0))
            scores.append(best)
        return scores
