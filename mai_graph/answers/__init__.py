"""Canonical answers: extraction from model text and matching, shared by the MV gate and scorers."""

from mai_graph.answers.core import (
    UNKNOWN,
    AnswerKind,
    answers_match,
    canonical_gold,
    canonical_match,
    extract_answer,
    match_gold,
    resolve_kind,
    strip_think,
)
from mai_graph.answers.options import MAX_OPTIONS, Options, normalize_options

__all__ = [
    "MAX_OPTIONS",
    "UNKNOWN",
    "AnswerKind",
    "Options",
    "answers_match",
    "canonical_gold",
    "canonical_match",
    "extract_answer",
    "match_gold",
    "normalize_options",
    "resolve_kind",
    "strip_think",
]
