"""Canonical answers: extraction from model text and matching, shared by the MV gate and scorers.

Every extractor returns a *canonical* string, or :data:`UNKNOWN` when nothing can be read off
the text. Extraction is idempotent (``extract_answer(extract_answer(t, k), k) ==
extract_answer(t, k)``), so canonical answers can be stored and compared again later.

Canonical forms by kind:

- ``choice``: the option letter, ``"A"`` .. ``"Z"``.
- ``yes_no``: ``"yes"`` or ``"no"``.
- ``number``: a plain decimal (``"7"``, ``"3.5"``, ``"-0.25"``, ``"1200"``).
- ``text``: VQA-style normalized text (lower case, no punctuation or articles, digits for
  number words).
"""

from __future__ import annotations

import math
import re
from typing import Literal, get_args

from mai_graph.answers.options import Options, normalize_options
from mai_graph.errors import ConfigError

__all__ = [
    "UNKNOWN",
    "AnswerKind",
    "answers_match",
    "extract_answer",
    "resolve_kind",
    "strip_think",
]

AnswerKind = Literal["auto", "choice", "yes_no", "number", "text"]
"""How answers are read and compared.

- ``auto``: ``choice`` when options are given; otherwise each answer is read as yes/no, a
  number or text by its own form, and two answers match when their forms and values agree.
- ``choice``: multiple choice; answers are option letters (``options`` maps texts to letters).
- ``yes_no``: answers are ``yes`` or ``no``.
- ``number``: answers are numbers, compared with a relative tolerance.
- ``text``: free text, compared after VQA-style normalization.
"""

UNKNOWN = "<unknown>"
"""The canonical answer when nothing can be extracted; it never matches anything."""

_KINDS = get_args(AnswerKind)

_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL | re.IGNORECASE)
_LEAD_IN = re.compile(
    r"(?:final\s+answer|the\s+answer|answer|so\s+the\s+answer)\s*(?:is|:|=)\s*:?\s*",
    re.IGNORECASE,
)
_MARKUP = re.compile(r"[*_`#]+")
_LETTER_ALONE = re.compile(r"^\W*([A-Za-z])\W*$")
_LETTER_LEAD = re.compile(r"^\s*\(?([A-Z])(?:[.):]|\s*$)")
_LETTER_NAMED = re.compile(
    r"\b(?:answer|option|choice)\s*(?:is|:)?\s*(?:option\s+)?\(?([A-Z])\b\)?", re.IGNORECASE
)
_LETTER_PAREN = re.compile(r"\(([A-Z])\)")
_WORD = re.compile(r"[a-z]+(?:-[a-z]+)?|\d+(?:\.\d+)?")
_YES = frozenset({"yes", "yeah", "yep", "true", "correct", "right", "y"})
_NO = frozenset({"no", "nope", "false", "incorrect", "wrong", "n", "not"})
_NUMBER = re.compile(r"(?<![\w.])[-−]?\$?\d+(?:\.\d+)?(?:\s*/\s*\d+(?:\.\d+)?)?(?![\w])")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_PUNCT = re.compile(r"[^\w\s.]|(?<!\d)\.|\.(?!\d)")
_ARTICLES = frozenset({"a", "an", "the"})
_SPACE = re.compile(r"\s+")
_REFUSAL = re.compile(
    r"\b(?:can ?not|can't|cannot|unable to|impossible to) (?:tell|determine|say|see|answer)\b"
    r"|\b(?:unsure|not sure|don't know|do not know|no idea|not certain|uncertain)\b",
    re.IGNORECASE,
)

_UNITS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19, "none": 0, "no": 0,
}  # fmt: skip
_TENS = {
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70,
    "eighty": 80, "ninety": 90,
}  # fmt: skip
_SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000}


def strip_think(text: str) -> str:
    """Remove ``<think>...</think>`` blocks (an unclosed block runs to the end).

    >>> strip_think("<think>hmm, B or C</think> C")
    ' C'
    """
    if "<think>" in text.lower():
        text = _THINK.sub("", text)
    return text.replace("</think>", "")


def resolve_kind(kind: str, options: Options | None = None) -> AnswerKind:
    """Validate ``kind`` and turn ``auto`` into ``choice`` when options are given.

    >>> resolve_kind("auto", ["cat", "dog"])
    'choice'
    >>> resolve_kind("auto")
    'auto'
    """
    if kind not in _KINDS:
        raise ConfigError(
            f"answer kind must be one of {list(_KINDS)}, got {kind!r}",
            parameter="answer_kind",
            value=kind,
            fix="pass one of the listed kinds",
        )
    if kind == "auto" and options:
        return "choice"
    return kind  # type: ignore[return-value]


def _answer_span(text: str) -> str:
    """The part of ``text`` that states the answer: after the last "answer is", else all."""
    text = _MARKUP.sub("", strip_think(text)).strip()
    lead_ins = list(_LEAD_IN.finditer(text))
    if lead_ins:
        tail = text[lead_ins[-1].end() :].strip()
        if tail:
            return tail
    return text


def _norm_words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _content_words(text: str) -> list[str]:
    return [w for w in _norm_words(text) if w not in _ARTICLES]


def _extract_choice(text: str, opts: dict[str, str] | None) -> str:
    letters = list(opts) if opts else [chr(ord("A") + i) for i in range(26)]
    options = list(opts.values()) if opts else None

    def ok(letter: str) -> str | None:
        letter = letter.upper()
        return letter if letter in letters else None

    raw = _MARKUP.sub("", strip_think(text)).strip()
    span = _answer_span(text)
    for candidate in (span, raw):
        m = _LETTER_ALONE.match(candidate)
        if m and ok(m.group(1)):
            return m.group(1).upper()
    for pattern in (_LETTER_LEAD, _LETTER_NAMED):
        for candidate in (span, raw):
            m = pattern.search(candidate)
            if m and ok(m.group(1)):
                return m.group(1).upper()
    if options:
        # The answer quotes an option's text: exact first, then the only option contained.
        span_words = _content_words(span)
        norm_options = [_content_words(o) for o in options]
        for i, words in enumerate(norm_options):
            if words and words == span_words:
                return letters[i]
        contained = [
            i for i, words in enumerate(norm_options) if words and _contains(span_words, words)
        ]
        # Prefer the longest option when one option's text contains another's ("red" / "red car").
        if contained:
            longest = max(len(norm_options[i]) for i in contained)
            best = [i for i in contained if len(norm_options[i]) == longest]
            if len(best) == 1:
                return letters[best[0]]
    parens = {m.group(1) for m in _LETTER_PAREN.finditer(span)}
    if len(parens) == 1:
        letter = ok(parens.pop())
        if letter:
            return letter
    return UNKNOWN


def _contains(haystack: list[str], needle: list[str]) -> bool:
    k = len(needle)
    return any(haystack[i : i + k] == needle for i in range(len(haystack) - k + 1))


def _extract_yes_no(text: str) -> str:
    words = _norm_words(_answer_span(text))
    if not words:
        return UNKNOWN
    has_yes = any(w in ("yes", "true") for w in words)
    has_no = any(w in ("no", "false") for w in words)
    if has_yes and has_no:
        return UNKNOWN
    if words[0] in _YES:
        return "yes"
    if words[0] in _NO:
        return "no"
    if has_yes != has_no:
        return "yes" if has_yes else "no"
    return UNKNOWN


def _words_to_number(words: list[str]) -> float | None:
    """Read a number written in words ("twenty-one", "three hundred"); None if not one.

    >>> _words_to_number(["twenty-one"])
    21.0
    """
    total, current, seen = 0.0, 0.0, False
    for word in words:
        for part in word.split("-"):
            if part in _UNITS and not (part in ("no", "none") and seen):
                current += _UNITS[part]
            elif part in _TENS:
                current += _TENS[part]
            elif part in _SCALES:
                current = max(current, 1.0) * _SCALES[part]
                if _SCALES[part] >= 1000:
                    total, current = total + current, 0.0
            elif part == "and" and seen:
                continue
            else:
                return None
            seen = True
    return total + current if seen else None


def _parse_number(text: str) -> float | None:
    span = _THOUSANDS.sub("", _answer_span(text)).replace("−", "-")
    matches = list(_NUMBER.finditer(span))
    if matches:
        token = matches[-1].group(0).replace("$", "").replace(" ", "")
        if "/" in token:
            num, den = token.split("/")
            return float(num) / float(den) if float(den) != 0 else None
        return float(token)
    words = _norm_words(span)
    # A number in words at the start of the answer ("seven apples", "twenty-one").
    for end in range(len(words), 0, -1):
        value = _words_to_number(words[:end])
        if value is not None:
            return value
    return None


def _format_number(value: float) -> str:
    """Canonical decimal text.

    >>> _format_number(7.0), _format_number(0.5), _format_number(-1200.0)
    ('7', '0.5', '-1200')
    """
    if not math.isfinite(value):
        return UNKNOWN
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.10g}"


def _extract_number(text: str) -> str:
    value = _parse_number(text)
    return UNKNOWN if value is None else _format_number(value)


def _normalize_text(text: str) -> str:
    span = _answer_span(text).lower()
    span = _THOUSANDS.sub("", span)
    span = _PUNCT.sub(" ", span)
    words = []
    for word in span.split():
        if word in _ARTICLES:
            continue
        number = _UNITS.get(word) if word not in ("no", "none") else None
        words.append(str(number) if number is not None else word)
    out = _SPACE.sub(" ", " ".join(words)).strip()
    return out or UNKNOWN


def _extract_auto(text: str) -> str:
    span = _answer_span(text)
    words = _norm_words(span)
    if not words:
        return UNKNOWN
    if words[0] in ("yes", "no") or (len(words) == 1 and words[0] in ("true", "false")):
        return _extract_yes_no(span)
    numeric = _NUMBER.match(_THOUSANDS.sub("", span).lstrip("$−- ")) or (
        _words_to_number(words[:1]) is not None and words[0] not in ("no", "none")
    )
    if numeric and len(words) <= 4:
        return _extract_number(span)
    return _normalize_text(span)


def extract_answer(
    text: str, kind: AnswerKind | str = "auto", options: Options | None = None
) -> str:
    """Read the canonical answer off a model's text.

    Args:
        text: The model output (``<think>`` blocks are ignored).
        kind: One of :data:`AnswerKind`.
        options: The multiple-choice option texts, in letter order (A, B, ...).

    Returns:
        The canonical answer, or :data:`UNKNOWN`.

    >>> extract_answer("The answer is (B).", "choice", ["cat", "dog"])
    'B'
    >>> extract_answer("a dog", options=["cat", "dog"])
    'B'
    >>> extract_answer("Yes, it is.", "yes_no")
    'yes'
    >>> extract_answer("$1,200", "number")
    '1200'
    >>> extract_answer("The Seven Dwarfs!", "text")
    '7 dwarfs'
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
    if text.strip() == UNKNOWN or _REFUSAL.search(_answer_span(text)):
        return UNKNOWN
    if resolved == "choice":
        return _extract_choice(text, opts)
    if resolved == "yes_no":
        return _extract_yes_no(text)
    if resolved == "number":
        return _extract_number(text)
    if resolved == "text":
        return _normalize_text(text)
    return _extract_auto(text)


def _as_float(canonical: str) -> float | None:
    try:
        return float(canonical)
    except ValueError:
        return None


def canonical_match(a: str, b: str, *, rel_tol: float = 0.05) -> bool:
    """Compare two canonical answers; numbers within ``rel_tol``; UNKNOWN never matches.

    >>> canonical_match("100", "104"), canonical_match("100", "106")
    (True, False)
    """
    if a == UNKNOWN or b == UNKNOWN:
        return False
    if a == b:
        return True
    x, y = _as_float(a), _as_float(b)
    if x is None or y is None:
        return False
    return math.isclose(x, y, rel_tol=rel_tol, abs_tol=1e-9)


def answers_match(
    a: str,
    b: str,
    kind: AnswerKind | str = "auto",
    *,
    options: Options | None = None,
    rel_tol: float = 0.05,
) -> bool:
    """Whether two answers (model texts or canonical answers) say the same thing.

    Args:
        a: First answer text.
        b: Second answer text.
        kind: One of :data:`AnswerKind`.
        options: Multiple-choice option texts, in letter order.
        rel_tol: Relative tolerance for numbers (default 5%).

    >>> answers_match("(C)", "The answer is C.", options=["x", "y", "z"])
    True
    >>> answers_match("seven", "7.2", "number")
    True
    >>> answers_match("I cannot tell", "I cannot tell", "choice", options=["x", "y"])
    False
    """
    if not 0 <= rel_tol < 1:
        raise ConfigError(
            f"rel_tol must be in [0, 1), got {rel_tol!r}",
            parameter="rel_tol",
            value=rel_tol,
            fix="pass a fraction such as 0.05 for 5%",
        )
    return canonical_match(
        extract_answer(a, kind, options), extract_answer(b, kind, options), rel_tol=rel_tol
    )


def canonical_gold(gold: str, kind: AnswerKind | str = "auto", options: Options | None = None) -> str:
    """The canonical form of a dataset's gold answer (``"C"``, ``"yes"``, ``"12%"``, ``"u.s."``).

    Raises:
        ConfigError: When the gold answer cannot be read in ``kind`` (e.g. a letter that is
            not one of the options).

    >>> canonical_gold("unknown", "text")
    'unknown'
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
    if resolved == "text" or (resolved == "auto" and gold.strip().lower() == "unknown"):
        out = _normalize_text(gold)
    else:
        out = extract_answer(gold, resolved, opts)
    if out == UNKNOWN:
        raise ConfigError(
            f"gold answer {gold!r} cannot be read as a {resolved} answer",
            parameter="gold",
            value=gold,
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

    >>> match_gold("The answer is (C).", "C", options=["x", "y", "z"])
    True
    """
    want = canonical_gold(gold, kind, options)
    got = extract_answer(prediction, kind, options)
    if got == UNKNOWN:
        return False
    return got == want or canonical_match(got, want, rel_tol=rel_tol)
