"""Canonical answers: extraction from model text and matching, shared by the MV gate and scorers.

Every extractor returns a *canonical* string, or :data:`UNKNOWN` when nothing can be read off
the text (a refusal, a hedge, no answer). Extraction is idempotent (``extract_answer(
extract_answer(t, k), k) == extract_answer(t, k)``), so canonical answers can be stored and
compared again later with :func:`canonical_match`. Every function takes text of any length in
linear time.

Canonical forms by kind:

- ``choice``: the option letter, ``"A"`` .. ``"Z"`` (a mapping's own letters).
- ``yes_no``: ``"yes"`` or ``"no"``.
- ``number``: a plain decimal with magnitudes applied (``"7"``, ``"-0.25"``, ``"4100"``),
  ``"30%"`` for percentages; a year ``"1987"``, a quantity in the year range ``"1,987"``; dates
  ``"1987-03-05"`` / ``"1987-03"`` / ``"--03-05"``, decades ``"1990s"``, times ``"07:45"``.
- ``text``: VQA-normalized text (lower case, punctuation and articles removed, digits).
- ``auto``: yes/no, a number form with its currency and unit noun (``"$3.5"``, ``"4 birds"``),
  or text.

Modules: :mod:`~mai_graph.answers.options` (option lists and mappings),
:mod:`~mai_graph.answers.text` (preparation, refusals, VQA normalization),
:mod:`~mai_graph.answers.choice`, :mod:`~mai_graph.answers.yes_no`,
:mod:`~mai_graph.answers.numbers`, :mod:`~mai_graph.answers.core` (the entry points).
"""

from mai_graph.answers.core import (
    answers_match,
    canonical_gold,
    canonical_match,
    canonical_number,
    extract_answer,
    match_gold,
)
from mai_graph.answers.kinds import UNKNOWN, AnswerKind, resolve_kind
from mai_graph.answers.options import MAX_OPTIONS, Options, normalize_options
from mai_graph.answers.text import strip_think

__all__ = [
    "MAX_OPTIONS",
    "UNKNOWN",
    "AnswerKind",
    "Options",
    "answers_match",
    "canonical_gold",
    "canonical_match",
    "canonical_number",
    "extract_answer",
    "match_gold",
    "normalize_options",
    "resolve_kind",
    "strip_think",
]
