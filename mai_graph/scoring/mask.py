r"""The stated final answer of a reasoning, found so that a transfer can leave it out.

A receiver that reads another model's reasoning may simply copy the answer it states instead of
using the reasoning (measured for cross-model reasoning transfer in "Reasoning that Travels",
arXiv 2605.28913). The masked transfer (``MAIContext.transfer_mask_answer``) sends the reasoning
without that statement, so that an evaluation can tell reading from copying.

The statement is found on the reasoning's own pieces (tokens as decoded):

1. the last answer cue (``Answer:``, ``answer is``, ``final answer``, ``\boxed{``, any case)
   and everything after it; or, without a cue,
2. the last whole-word occurrence of the small model's extracted (S2) answer, when it is known.

Pieces that only partly overlap the statement are masked whole (a sub-word piece never leaks
half an answer).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["ANSWER_CUE", "answer_statement"]

ANSWER_CUE = re.compile(
    r"(?:\bfinal\s+answer\b\s*(?:is|:)?|\banswer\s*(?:is|:)|\\boxed\s*\{)", re.IGNORECASE
)
"""Where a reasoning starts stating its final answer."""


def _span(pieces: Sequence[str], start: int, end: int) -> list[int]:
    """Indices of the pieces overlapping characters ``[start, end)`` of their concatenation."""
    out, pos = [], 0
    for i, piece in enumerate(pieces):
        nxt = pos + len(piece)
        if nxt > start and pos < end:
            out.append(i)
        pos = nxt
    return out


def answer_statement(pieces: Sequence[str], answer: str | None = None) -> list[int]:
    r"""Indices of the pieces that state the reasoning's final answer (empty if none is found).

    Args:
        pieces: The reasoning's tokens as decoded (their concatenation is the text).
        answer: The answer the small model extracted from it (S2), used without a cue.

    Examples:
        >>> answer_statement(["I", " see", " 3", ".", " Answer", ":", " 3"])
        [4, 5, 6]
        >>> answer_statement(["so", " it", " is", " blue", "."], "blue")
        [3]
        >>> answer_statement(["no", " cue", " here"], "blue")
        []
        >>> answer_statement(["The answer is \\boxed{4}"])
        [0]
    """
    text = "".join(pieces)
    cues = list(ANSWER_CUE.finditer(text))
    if cues:
        return _span(pieces, cues[-1].start(), len(text))
    word = (answer or "").strip()
    if not word:
        return []
    found = list(re.finditer(rf"(?<!\w){re.escape(word)}(?!\w)", text, re.IGNORECASE))
    if not found:
        return []
    return _span(pieces, found[-1].start(), found[-1].end())
