"""Answer kinds, the UNKNOWN sentinel and kind resolution."""

from __future__ import annotations

from typing import Final, Literal, get_args

from mai_graph.errors import ConfigError

__all__ = ["KINDS", "UNKNOWN", "AnswerKind", "resolve_kind"]

AnswerKind = Literal["auto", "choice", "yes_no", "number", "text"]
"""How answers are read and compared.

- ``auto``: ``choice`` when options are given; otherwise each answer is read by its own form
  as yes/no, a number (with its unit noun), a date or time, or text.
- ``choice``: multiple choice; answers are option letters, read from letters or option texts.
- ``yes_no``: answers are ``yes`` or ``no``.
- ``number``: answers are numbers (count nouns dropped; ``%``, magnitudes, currencies and units
  of measure kept, ``1 km`` = ``1000 m``), compared within a relative tolerance; years, dates
  and clock times compare exactly.
- ``text``: free text, compared after VQA answer normalization.
"""

KINDS: Final = get_args(AnswerKind)

UNKNOWN: Final = "<unknown>"
"""The canonical answer when nothing can be read (a refusal, a hedge, no answer at all).

It never matches anything, not even itself. Normalization never produces it (it removes
``<`` and ``>``), so a dataset answer that is literally the word ``unknown`` stays a real
answer.
"""


def resolve_kind(kind: str, options: object = None) -> AnswerKind:
    """Validate ``kind`` and turn ``auto`` into ``choice`` when options are given.

    Args:
        kind: One of :data:`AnswerKind`.
        options: The question's options (any non-empty value counts as given).

    Raises:
        ConfigError: For an unknown kind, naming the allowed ones.

    >>> resolve_kind("auto", ["cat", "dog"])
    'choice'
    >>> resolve_kind("auto")
    'auto'
    """
    if kind not in KINDS:
        raise ConfigError(
            f"answer kind must be one of {list(KINDS)}, got {kind!r}",
            parameter="answer_kind",
            value=kind,
            fix="pass one of the listed kinds",
        )
    if kind == "auto" and options:
        return "choice"
    return kind  # type: ignore[return-value]
