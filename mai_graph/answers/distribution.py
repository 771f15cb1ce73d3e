"""Distributions over a bounded question's answers, read off one decode step.

For a ``choice`` question (the option letters) or a ``yes_no`` one (yes / no), the answer is
decided by the first token the model writes. One decode step that returns the log-probabilities
of each answer's first tokens gives the model's whole distribution over the allowed answers
(its argmax is the answer), at the cost of a one-token generation and without a structured
output grammar. A backend needs, per answer, the token ids that start it:
:func:`first_token_ids` finds them in a tokenizer and says why when they cannot identify the
answers (an answer with no single-token form, or two answers sharing a first token); then the
call falls back to the constrained generation and says so in its record.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

from mai_graph.answers.kinds import AnswerKind

__all__ = [
    "YES_NO_FORMS",
    "answer_forms",
    "answer_of",
    "around",
    "first_token_ids",
    "fold",
    "pick",
]

YES_NO_FORMS: dict[str, tuple[str, ...]] = {
    "yes": ("yes", "Yes", "YES"),
    "no": ("no", "No", "NO"),
}
"""The surface forms of yes and no a model's first token may take (folded into one answer)."""


def answer_forms(
    kind: AnswerKind, options: Mapping[str, str] | None
) -> tuple[tuple[str, tuple[str, ...]], ...] | None:
    """The allowed answers of a bounded question, each with the surface forms that write it.

    >>> answer_forms("choice", {"A": "cat", "B": "dog"})
    (('A', ('A',)), ('B', ('B',)))
    >>> answer_forms("yes_no", None)[0]
    ('yes', ('yes', 'Yes', 'YES'))
    >>> answer_forms("text", None) is None
    True
    """
    if kind == "choice" and options:
        return tuple((letter, (letter,)) for letter in options)
    if kind == "yes_no":
        return tuple(YES_NO_FORMS.items())
    return None


def answer_of(answers: Sequence[tuple[str, Sequence[str]]], text: str) -> str | None:
    """The allowed answer ``text`` writes (one of its forms exactly), or None.

    >>> answer_of(answer_forms("yes_no", None), "Yes"), answer_of(answer_forms("yes_no", None), "y")
    ('yes', None)
    """
    return next((a for a, forms in answers if text in forms), None)


def around(answers: Sequence[str], chosen: str, p: float) -> dict[str, float]:
    """A distribution with ``p`` on ``chosen`` and the rest shared evenly by the others.

    What is known of a model's distribution when only its answer's probability is.

    >>> around(["A", "B", "C"], "A", 0.6)
    {'A': 0.6, 'B': 0.2, 'C': 0.2}
    """
    rest = (1.0 - p) / (len(answers) - 1) if len(answers) > 1 else 0.0
    return {a: (p if a == chosen else rest) for a in answers}


def first_token_ids(
    tokenizer: Any, answers: Sequence[tuple[str, Sequence[str]]]
) -> dict[str, tuple[int, ...]] | str:
    """Per answer, the ids of its single-token forms; or why they cannot identify the answers.

    A form counts when the tokenizer writes it as exactly one token (as the first token of an
    assistant turn: no leading space). Each answer needs one such form, and no id may start
    two answers.
    """
    ids: dict[str, tuple[int, ...]] = {}
    owner: dict[int, str] = {}
    for answer, forms in answers:
        found: list[int] = []
        for form in forms:
            encoded = tokenizer.encode(form, add_special_tokens=False)
            if len(encoded) == 1 and int(encoded[0]) not in found:
                found.append(int(encoded[0]))
        if not found:
            return f"answer {answer!r} is not a single token"
        for token in found:
            if owner.setdefault(token, answer) != answer:
                return f"answers {owner[token]!r} and {answer!r} start with the same token"
        ids[answer] = tuple(found)
    return ids


def fold(logprobs: Mapping[Any, float], ids: Mapping[str, Sequence[Any]]) -> dict[str, float]:
    """The distribution over the answers: each answer's forms summed, renormalized to 1.

    ``ids`` names each answer's first tokens (token ids, or token texts where a server sends
    texts) and ``logprobs`` their log-probabilities. Tokens missing from ``logprobs`` count as
    probability 0; if every answer's mass is 0 (or not finite), the distribution is uniform.

    >>> d = fold({1: math.log(0.5), 2: math.log(0.2), 3: math.log(0.1)}, {"A": [1, 3], "B": [2]})
    >>> {k: round(v, 3) for k, v in d.items()}
    {'A': 0.75, 'B': 0.25}
    """
    mass: dict[str, float] = {}
    for answer, tokens in ids.items():
        total = 0.0
        for token in tokens:
            lp = logprobs.get(token)
            if lp is not None and math.isfinite(lp):
                total += math.exp(min(lp, 0.0))
        mass[answer] = total
    norm = math.fsum(mass.values())
    if not norm > 0:
        return {answer: 1.0 / len(ids) for answer in ids}
    return {answer: m / norm for answer, m in mass.items()}


def pick(distribution: Mapping[str, float], temperature: float, seed: int | None) -> str:
    """The answer a model takes from its distribution: the argmax, or a draw when sampling.

    At temperature 0 the most probable answer (the first of equals, in the answers' order); at
    a temperature, a draw from the distribution sharpened or flattened by it (``p ** (1/T)``),
    reproducible for a seed.

    >>> pick({"A": 0.2, "B": 0.7, "C": 0.1}, 0.0, None)
    'B'
    """
    answers = list(distribution)
    if temperature <= 0:
        return max(answers, key=lambda a: distribution[a])
    weights = [distribution[a] ** (1.0 / temperature) for a in answers]
    if not math.fsum(weights) > 0:
        return max(answers, key=lambda a: distribution[a])
    return random.Random(seed).choices(answers, weights=weights, k=1)[0]
