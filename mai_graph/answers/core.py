"""Extraction and matching: the public entry points of :mod:`mai_graph.answers`."""

from __future__ import annotations

import re
from typing import Final

from mai_graph.answers.choice import read_choice
from mai_graph.answers.kinds import UNKNOWN, AnswerKind, resolve_kind
from mai_graph.answers.numbers import (
    Hedge,
    format_quantity,
    parse_canonical,
    quantities_match,
    read_auto_number,
    read_number,
)
from mai_graph.answers.options import Options, normalize_options
from mai_graph.answers.text import answer_region, is_refusal, prepare, vqa_normalize
from mai_graph.answers.yes_no import read_yes_no
from mai_graph.errors import ConfigError

__all__ = [
    "answers_match",
    "canonical_gold",
    "canonical_match",
    "canonical_number",
    "extract_answer",
    "match_gold",
]

_FIRST_WORDS = re.compile(r"[a-z]+(?:'[a-z]+)?", re.IGNORECASE)
_YES_WORDS: Final = frozenset({"yes", "yeah", "yep", "yup"})
_NO_WORDS: Final = frozenset({"no", "nope", "nah"})
_NO_FOLLOW: Final = frozenset(
    "it there i they that this the its it's he she we you not a an one".split()
)
_COPULA = re.compile(
    r"(?:(?:it|this|that|they|these|those|he|she)(?:'s|'re| is| are| was| were) )+"
)
_ZH_YES_NO = ("是", "否", "不", "对", "對", "没", "有", "正确", "错")
_SETTLE = 3
"""At most this many extra readings until a canonical answer reads the same again."""


def _check_rel_tol(rel_tol: float) -> None:
    if not 0 <= rel_tol < 1:
        raise ConfigError(
            f"rel_tol must be in [0, 1), got {rel_tol!r}",
            parameter="rel_tol",
            value=rel_tol,
            fix="pass a fraction such as 0.05 for 5%",
        )


def _read_number_kind(t: str, *, gold: bool = False) -> str:
    if not gold and is_refusal(answer_region(t)):
        return UNKNOWN
    try:
        q = read_number(t)
    except Hedge:
        return UNKNOWN
    # read_number keeps currencies and units of measure only ("12 km", never "4 birds")
    return UNKNOWN if q is None else format_quantity(q, with_unit=True)


def _says_yes_no(region: str) -> bool:
    """Whether an answer opens like a yes/no answer (``auto``)."""
    head = region.lstrip(" \t\n\"'([:")
    if head.startswith(_ZH_YES_NO):
        return True
    words = _FIRST_WORDS.findall(region[:64].lower())
    if not words:
        return False
    first, nxt = words[0], (words[1] if len(words) > 1 else None)
    if first in _YES_WORDS:
        return True
    if first in _NO_WORDS:
        return nxt is None or nxt in _NO_FOLLOW
    return len(words) == 1 and first in ("true", "false")


def _read_auto(t: str, *, gold: bool = False) -> str:
    """Read an ``auto`` answer, then read the result again until it settles.

    Reading again settles forms that only show after normalization ("the 5th of March
    1987" normalizes to "5th of march 1987", a date), so the canonical answer reads the same
    again (idempotence).
    """
    out = _read_auto_once(t, gold=gold)
    for _ in range(_SETTLE):
        again = out if out == UNKNOWN else _read_auto_once(out, gold=gold)
        if again == out:
            break
        out = again
    return out


def _read_auto_once(t: str, *, gold: bool) -> str:
    region = answer_region(t)
    if not gold and is_refusal(region):
        return UNKNOWN
    if _says_yes_no(region):
        return read_yes_no(region)
    equals = region.rfind("=")
    stated = region[equals + 1 :] if equals >= 0 and region[equals + 1 :].strip() else region
    try:
        q = read_auto_number(stated.lstrip(" \t\n\"'([:"))
    except Hedge:
        return UNKNOWN
    if q is not None:
        return format_quantity(q, with_unit=True)
    text = vqa_normalize(region)
    copula = _COPULA.match(text)  # "It is red." reads "red"
    if copula is not None and copula.end() < len(text):
        text = text[copula.end() :]
    return text or UNKNOWN


def _read_text(t: str) -> str:
    """Read a ``text`` answer, then read it again until it settles (see :func:`_read_auto`)."""
    out = _read_text_once(t)
    for _ in range(_SETTLE):
        again = out if out == UNKNOWN else _read_text_once(out)
        if again == out:
            break
        out = again
    return out


def _read_text_once(t: str) -> str:
    region = answer_region(t)
    if is_refusal(region):
        return UNKNOWN
    return vqa_normalize(region) or UNKNOWN


def extract_answer(
    text: str, kind: AnswerKind | str = "auto", options: Options | None = None
) -> str:
    """Read the canonical answer off a model's text.

    Args:
        text: The model output (reasoning blocks are ignored).
        kind: One of :data:`AnswerKind`.
        options: Multiple-choice options: texts in letter order, or a mapping of letter to
            text (see :func:`~mai_graph.answers.normalize_options`).

    Returns:
        The canonical answer, or :data:`UNKNOWN`. Extraction is idempotent: reading a
        canonical answer again returns it unchanged.

    Raises:
        ConfigError: For an unknown kind, invalid options or a non-string text.

    >>> extract_answer("The answer is (B).", "choice", ["cat", "dog"])
    'B'
    >>> extract_answer("a dog", options={"B": "a cat", "C": "a dog"})
    'C'
    >>> extract_answer("Yes, it is.", "yes_no"), extract_answer("$1,200", "number")
    ('yes', '$1200')
    >>> extract_answer("The Seven Dwarfs!", "text"), extract_answer("4.1k birds")
    ('7 dwarfs', '4100 birds')
    >>> extract_answer("I can't tell.") == UNKNOWN
    True
    """
    opts = normalize_options(options)
    resolved = resolve_kind(kind, opts)
    if not isinstance(text, str):
        raise ConfigError(
            f"answer text must be a str, got {type(text).__name__}",
            parameter="text",
            value=text,
            fix="pass the model's output text",
        )
    if text.strip() == UNKNOWN:
        return UNKNOWN
    t = prepare(text)
    if resolved == "choice":
        return read_choice(t, opts)
    if resolved == "yes_no":
        return read_yes_no(t)
    if resolved == "number":
        return _read_number_kind(t)
    if resolved == "text":
        return _read_text(t)
    return _read_auto(t)


def canonical_match(a: str, b: str, *, rel_tol: float = 0.05) -> bool:
    """Compare two canonical answers (as :func:`extract_answer` returns them).

    Numbers match within ``rel_tol`` when their percent signs, currencies and unit nouns
    agree; years, dates and clock times match only when equal; anything else matches when
    equal. :data:`UNKNOWN` never matches, not even itself.

    >>> canonical_match("100", "104"), canonical_match("100", "106")
    (True, False)
    >>> canonical_match("1987", "1988"), canonical_match("07:45", "08:45")
    (False, False)
    >>> canonical_match(UNKNOWN, UNKNOWN)
    False
    """
    _check_rel_tol(rel_tol)
    if a == UNKNOWN or b == UNKNOWN:
        return False
    qa, qb = parse_canonical(a), parse_canonical(b)
    if qa is not None and qb is not None:
        return quantities_match(qa, qb, rel_tol=rel_tol)
    return a == b


def canonical_number(canonical: str) -> float | None:
    """The numeric value of a canonical number answer; None for anything else.

    Canonical numbers may carry a thousands separator (``"1,987"``), a percent sign
    (``"12%"`` → 12.0), a currency or a unit noun (``auto``); dates and clock times have no
    single value and give None.

    >>> canonical_number("1,987"), canonical_number("12%"), canonical_number("-$3.5")
    (1987.0, 12.0, -3.5)
    >>> canonical_number("07:45") is None, canonical_number("red car") is None
    (True, True)
    """
    q = parse_canonical(canonical) if canonical != UNKNOWN else None
    if q is None or q.kind not in ("num", "year"):
        return None
    return float(q.value)


def answers_match(
    a: str,
    b: str,
    kind: AnswerKind | str = "auto",
    *,
    options: Options | None = None,
    rel_tol: float = 0.05,
) -> bool:
    """Whether two answers (model texts or canonical answers) say the same thing.

    This is the gate: an answer that cannot be read is :data:`UNKNOWN` and never matches.

    Args:
        a: First answer text.
        b: Second answer text.
        kind: One of :data:`AnswerKind`.
        options: Multiple-choice options (texts in letter order, or letter → text).
        rel_tol: Relative tolerance for numbers (default 5%).

    >>> answers_match("(C)", "The answer is C.", options=["x", "y", "z"])
    True
    >>> answers_match("seven", "7.2", "number"), answers_match("4 birds", "4 cars")
    (True, False)
    >>> answers_match("I cannot tell", "I cannot tell", "text")
    False
    """
    _check_rel_tol(rel_tol)
    return canonical_match(
        extract_answer(a, kind, options), extract_answer(b, kind, options), rel_tol=rel_tol
    )


def _gold_range(gold: str, kind: str) -> str | None:
    """A number gold answer that is itself a range ("1990-2000") compares as text."""
    if kind not in ("number", "auto"):
        return None
    t = prepare(gold)
    try:
        if kind == "number":
            read_number(t)
        else:
            read_auto_number(answer_region(t).lstrip(" \t\n\"'([:"))
    except Hedge:
        return vqa_normalize(t) or None
    return None


def canonical_gold(
    gold: str, kind: AnswerKind | str = "auto", options: Options | None = None
) -> str:
    """The canonical form of a dataset's gold answer (``"C"``, ``"yes"``, ``"12%"``, ``"u.s."``).

    Gold answers are read like model answers, except that nothing in them counts as a refusal
    (a gold ``"unknown"`` is the text ``unknown``, never :data:`UNKNOWN`).

    Raises:
        ConfigError: When the gold answer is empty or cannot be read in ``kind`` (a letter
            that is not an option, a yes/no gold that is neither).

    >>> canonical_gold("unknown", "text"), canonical_gold("U.S.", "text")
    ('unknown', 'us')
    >>> canonical_gold("1,987", "number"), canonical_gold("(c)", "choice", ["x", "y", "z"])
    ('1,987', 'C')
    """
    if not isinstance(gold, str) or not gold.strip():
        raise ConfigError(
            f"gold answer must be a non-empty string, got {gold!r}",
            parameter="gold",
            value=gold,
            fix="pass the dataset's answer text",
        )
    opts = normalize_options(options)
    resolved = resolve_kind(kind, opts)
    t = prepare(gold)
    if resolved == "choice":
        out = read_choice(t, opts)
    elif resolved == "yes_no":
        out = read_yes_no(t)
    elif resolved == "text":
        out = vqa_normalize(t) or UNKNOWN
    else:
        reader = _read_number_kind if resolved == "number" else _read_auto
        out = _gold_range(gold, resolved) or reader(t, gold=True)
    if out == UNKNOWN:
        raise ConfigError(
            f"gold answer {gold!r:.80} cannot be read as a {resolved} answer",
            parameter="gold",
            value=gold[:80],
            fix="check the dataset's answer column and the answer kind",
        )
    return out


def match_gold(
    prediction: str,
    gold: str,
    kind: AnswerKind | str = "auto",
    *,
    options: Options | None = None,
    rel_tol: float = 0.05,
) -> bool:
    """Score one model output against a dataset's gold answer.

    Shares the gate's reading of the prediction; the conventions per kind:

    - ``choice``: the letters must be equal; an unreadable prediction is wrong.
    - ``yes_no``: equal ``yes`` / ``no``.
    - ``number``: ChartQA relaxed accuracy, ``|pred - gold| <= rel_tol * |gold|`` (exact when
      the gold is 0); years, dates, decades and clock times exact; a gold ``12%`` accepts
      ``12`` and ``0.12``. A gold range ("1990-2000") compares as normalized text.
    - ``text``: VQA-normalized exact match.
    - ``auto``: the gold's own form decides; a gold without a unit noun ignores the
      prediction's (gold ``4`` accepts ``4 birds``).

    Args:
        prediction: The model output.
        gold: The dataset's answer ("C", "yes", "1987", "12%", "u.s.", "unknown").
        kind: One of :data:`AnswerKind`.
        options: Multiple-choice options.
        rel_tol: Relative tolerance for numbers (default 5%, ChartQA's).

    Raises:
        ConfigError: For an invalid kind, options, tolerance or an unreadable gold answer.

    >>> match_gold("The answer is (C).", "C", options=["x", "y", "z"])
    True
    >>> match_gold("About 104.", "100", "number"), match_gold("1988", "1987", "number")
    (True, False)
    >>> match_gold("Unknown.", "unknown", "text"), match_gold("I don't know", "unknown", "text")
    (True, False)
    """
    _check_rel_tol(rel_tol)
    opts = normalize_options(options)
    resolved = resolve_kind(kind, opts)
    want = canonical_gold(gold, resolved, opts)
    if _gold_range(gold, resolved) == want:
        region = answer_region(prepare(prediction))
        return not is_refusal(region) and vqa_normalize(region) == want
    got = extract_answer(prediction, resolved, opts)
    if got == UNKNOWN:
        return False
    if resolved in ("choice", "yes_no", "text"):
        return got == want
    qa, qb = parse_canonical(got), parse_canonical(want)
    if qa is not None and qb is not None:
        return quantities_match(qa, qb, rel_tol=rel_tol, gold=True)
    return got == want
