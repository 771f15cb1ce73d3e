"""Model-free relevance: words tied to the question and options, weighted by rarity."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

from mai_graph.scoring.base import ReasoningInput, word_groups

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
    """Model-free: a word scores by its overlap with the question and options and its rarity.

    ``score = idf(word) * (3 if the word is in the question or options else 1)``; words with no
    content (stop words, punctuation) score 0.05. Every piece of a word gets the word's score.
    Needs no model, so it works with every backend.
    """

    name = "relevance"

    async def score(self, reasoning: ReasoningInput) -> list[float]:
        """One score per reasoning token."""
        return self.score_pieces(reasoning.tokens, reasoning.question, reasoning.options)

    def score_pieces(
        self, tokens: Sequence[str], question: str, options: Sequence[str] | None
    ) -> list[float]:
        """Scores without the async wrapper (pure function of the texts)."""
        query = set(_terms(question + " " + " ".join(options or ())))
        groups = word_groups(tokens)
        group_terms = [_terms("".join(tokens[i] for i in g)) for g in groups]
        counts = Counter(term for terms in group_terms for term in set(terms))
        n = max(len(groups), 1)
        scores = [0.0] * len(tokens)
        for group, terms in zip(groups, group_terms):
            best = 0.05
            for term in terms:
                idf = math.log(1 + n / counts[term])
                best = max(best, idf * (3.0 if term in query else 1.0))
            for i in group:
                scores[i] = best
        return scores
