r"""Multiple choice: which option letter an answer states.

Order of reading (the first that applies wins):

1. The whole answer is one option's text ("a blue bus", "None of the above").
2. The last answer statement that names a letter or an option text: "Answer: D", "the
   correct option is (B)", "I'd go with D", "\boxed{D}", "D is right", "It's C".
3. A refusal or hedge anywhere ("not sure", "maybe B") → unknown.
4. An echoed option list ("A. cat B. dog") → unknown.
5. A letter that opens the answer ("D", "(b)", "D, since C shows ...", "B: a blue bus").
6. The one option whose text the answer contains (negated texts removed: "blue, not light
   blue"; the longest when one option's text contains another's).
7. The one letter mentioned as ``(C)`` or "option C".

A letter is refused when a second letter is offered beside it ("A or B", "B/C", "between B and
C") or when the option text written after it belongs to another letter ("A. a blue bus"). The
article "a" and the pronoun "I" are not letters when a word follows ("a dog", "I think").
"""

from __future__ import annotations

import functools
import re
from typing import Final

from mai_graph.answers.kinds import UNKNOWN
from mai_graph.answers.text import (
    ANSWER_STATEMENT,
    is_refusal,
    last_matches,
    lower_same,
    vqa_normalize,
)

__all__ = ["read_choice"]

_CHOICE_LEAD = re.compile(
    ANSWER_STATEMENT.pattern
    + r"|(?:option|choice|letter)\s*(?:(?:would|should|must)\s+be\b|is\b|:)"
    r"|(?:go(?:ing)?\s+with|choose|choosing|pick|select|opt\s+for)\b|选择?项?"
    r"|(?P<weak>(?:so|thus|therefore|hence|definitely|clearly|probably|likely|certainly"
    r"|obviously|surely)\s*,?\s+(?:it'?s\s+|it\s+is\s+)?"
    r"|it(?:'s|\s+is|\s+must\s+be|\s+should\s+be)\s+(?:option\s+)?)"
)
"""Statements that precede the letter (lower-cased text; ``weak`` ones need a capital next)."""
_LIST_INTRO = re.compile(r"\b(?:each|every|following|all|these|those|other|which)\s+$")
_WEAK_LETTER = re.compile(r"[\(\[]?[A-Z][\)\]]?(?:[\s.,;:!]|$)")
_CHOICE_POST = re.compile(
    r"(?:is|seems|looks|would\s+be|should\s+be|must\s+be)\s+(?:the\s+)?(?:most\s+)?"
    r"(?:correct|right|best|true|answer|accurate|appropriate|likely|one)\b"
)
"""Verdicts that follow the letter ("D is right"), lower-cased text."""
_POST_LETTER = re.compile(
    r"(?:(?<![\w'])(?:[Oo]ption|[Cc]hoice)\s+[\(\[]?(?P<o>[A-Za-z])"
    r"|(?<![\w'(\[])[\(\[]?(?P<l>[A-Z]))[\)\]]?\s+$"
)
_LETTER = re.compile(
    r"[\s:=\-\"'.]*(?P<opt>(?:option|choice|letter)\s*)?(?P<open>[\(\[\{])?\s*"
    r"(?P<l>[A-Za-z])\s*(?P<close>[\)\]\}])?(?![A-Za-z0-9'])",
    re.IGNORECASE,
)
_NEXT_WORD = re.compile(r"\s+([A-Za-z]+)")
_CONNECTORS: Final = frozenset(
    "because since as is was seems would should must and or but so for with which that "
    "then therefore thus hence from vs versus".split()
)
_LETTER_HEDGE = re.compile(r"\s*(?:,|/|\bor\b|\band\b|&|\bvs\b\.?|\bversus\b|-|\bthrough\b|\bto\b)")
_LETTER_HEDGE_BEFORE = re.compile(
    r"(?-i:(?<![\w'])[\(\[]?[A-Z][\)\]]?)\s*(?:,|/|\bor\b|\band\b|&|\bvs\b\.?|\bversus\b)\s*"
    r"(?:option\s+|choice\s+)?[\(\[]?$",
    re.IGNORECASE,
)
_AFTER_LETTER = re.compile(r"[ \t.):\-]*")
_GAP = re.compile(r"[\s:=\-\"']*")
_SENTENCE = re.compile(r"[\n!?;]|\.(?:\s|$)")
_LABEL = re.compile(r"(?-i:(?:^|(?<=\s))[\(\[]?([A-Z])[\)\].:](?=\s))")
_MENTION = re.compile(
    r"(?-i:\((?P<p>[A-Z])\))|\b(?:option|choice)\s+\(?(?P<o>[A-Za-z])\b\)?", re.IGNORECASE
)
_NOT_BEFORE = re.compile(r"\b(?:not|n't|except)\s*$")
_NEGATED = re.compile(
    r"\b(?:not|isn't|aren't|wasn't|rather\s+than|instead\s+of|except|other\s+than)\s+"
    r"(?:(?!\bbut\b)[^,.;:!?\n])*",
    re.IGNORECASE,
)
_REGION = 200
_MAX_STATEMENTS = 8


def _words(text: str) -> str:
    """Option-matching form: VQA-normalized words, padded with spaces for whole-word search."""
    return f" {vqa_normalize(text)} "


class _Options:
    """Letters and normalized option texts of one question."""

    def __init__(self, opts: dict[str, str] | None) -> None:
        self.letters = frozenset(opts) if opts else frozenset(map(chr, range(65, 91)))
        self.texts = {k: _words(v) for k, v in opts.items()} if opts else {}
        self.longest = max(map(len, opts.values())) if opts else 0

    def exact(self, text: str) -> str | None:
        """The letter whose option text is all of ``text``."""
        if len(text) > 2 * self.longest + 64:
            return None
        words = _words(text)
        hits = [k for k, v in self.texts.items() if v.strip() and v == words]
        return hits[0] if len(hits) == 1 else None

    def contained(self, text: str) -> str | None:
        """The one option (the longest, when texts nest) whose text ``text`` contains."""
        words = _words(_NEGATED.sub(" ", text))
        hits = [k for k, v in self.texts.items() if v.strip() and v in words]
        hits = [k for k in hits if not any(h != k and self.texts[k] in self.texts[h] for h in hits)]
        return hits[0] if len(hits) == 1 else None


def _letter_at(text: str, pos: int, opts: _Options) -> tuple[str, int] | None:
    """A letter token at ``pos`` ("B", "(b)", "option C"), and where it ends."""
    m = _LETTER.match(text, pos, min(len(text), pos + 40))
    if m is None:
        return None
    letter = m.group("l")
    if letter in "aAiI" and not (m.group("open") or m.group("close") or m.group("opt")):
        nxt = _NEXT_WORD.match(text, m.end())
        if nxt is not None and nxt.group(1).lower() not in _CONNECTORS:
            return None  # the article "a" or the pronoun "I"
    letter = letter.upper()
    if letter not in opts.letters:
        return None
    return letter, m.end()


def _checked(text: str, letter: str, end: int, opts: _Options) -> str:
    """``letter`` unless another letter is offered beside it or its text names another."""
    hedge = _LETTER_HEDGE.match(text, end)
    if hedge is not None:
        other = _letter_at(text, hedge.end(), opts)
        if other is not None and other[0] != letter:
            return UNKNOWN
    if opts.texts:
        rest_start = _AFTER_LETTER.match(text, end).end()  # type: ignore[union-attr]
        stop = _SENTENCE.search(text, rest_start, rest_start + _REGION)
        rest = text[rest_start : stop.start() if stop else rest_start + _REGION]
        named = opts.exact(rest)
        if named is not None and named != letter:
            return UNKNOWN
    return letter


def _hedged_before(text: str, start: int) -> bool:
    return _LETTER_HEDGE_BEFORE.search(text[max(0, start - 24) : start]) is not None


def _from_statements(text: str, opts: _Options) -> str | None:
    """The letter of the last statement that names one (None: no statement names one)."""
    low = lower_same(text)
    found: list[tuple[int, int, str | None]] = []  # (position, read from, letter or None)
    for m in last_matches(_CHOICE_LEAD, low, _MAX_STATEMENTS):
        if m.group("weak") is not None and not _WEAK_LETTER.match(text, m.end()):
            continue
        if _LIST_INTRO.search(low, max(0, m.start() - 16), m.start()):
            continue  # "each option:", "the following choices:" introduce a list
        found.append((m.start(), m.end(), None))
    for m in last_matches(_CHOICE_POST, low, _MAX_STATEMENTS):
        before = _POST_LETTER.search(text, max(0, m.start() - 24), m.start())
        if before is None:
            continue
        letter = (before.group("o") or before.group("l")).upper()
        negated = _NOT_BEFORE.search(low, max(0, before.start() - 8), before.start())
        if letter in opts.letters and not negated:
            found.append((before.start(), before.start(), letter))
    found.sort()
    for _, start, letter in found[::-1][:_MAX_STATEMENTS]:
        if letter is not None:
            token = _LETTER.match(text, start)
            if _hedged_before(text, token.start("l") if token else start):
                return UNKNOWN
            return _checked(text, letter, token.end() if token else start, opts)
        start = _GAP.match(text, start).end()  # type: ignore[union-attr]
        stop = _SENTENCE.search(text, start, start + _REGION)
        region = text[start : stop.start() if stop else start + _REGION]
        if not region.strip():
            continue
        if is_refusal(region):
            return UNKNOWN
        read = _letter_at(text, start, opts)
        if read is not None:
            return _checked(text, read[0], read[1], opts)
        named = opts.exact(region) or opts.contained(region)
        if named is not None:
            return named
    return None


_BARE_LETTER = re.compile(r"\s*\(?([A-Za-z])\)?[.:]?\s*")


@functools.lru_cache(maxsize=256)
def _options_of(items: tuple[tuple[str, str], ...] | None) -> _Options:
    """The matcher of one question's options, built once per distinct option set."""
    return _Options(dict(items) if items is not None else None)


def read_choice(text: str, opts: dict[str, str] | None) -> str:
    """The option letter a prepared answer text states, or UNKNOWN.

    >>> read_choice("Answer: D. Option C would need a wider base.", None)
    'D'
    >>> read_choice("blue, not light blue", {"A": "light blue", "B": "blue"})
    'B'
    >>> read_choice("a dog", {"A": "a cat", "B": "a dog"}), read_choice("A or B", None)
    ('B', '<unknown>')
    """
    options = _options_of(tuple(opts.items()) if opts else None)
    bare = _BARE_LETTER.fullmatch(text)  # the common case: the letter alone ("B", "(b)", "C.")
    if bare is not None and bare.group(1).upper() in options.letters:
        return bare.group(1).upper()
    lead = _letter_at(text, 0, options)
    if options.texts and lead is None:
        exact = options.exact(text)
        if exact is not None:
            return exact
    stated = _from_statements(text, options)
    if stated is not None:
        return stated
    if is_refusal(text):
        return UNKNOWN
    if len({m.group(1) for m in _LABEL.finditer(text) if m.group(1) in options.letters}) >= 2:
        return UNKNOWN  # an echoed option list
    if lead is not None:
        return _checked(text, lead[0], lead[1], options)
    if options.texts:
        named = options.contained(text)
        if named is not None:
            return named
    low = lower_same(text)
    mentioned = set()
    for m in _MENTION.finditer(text):
        letter = (m.group("p") or m.group("o")).upper()
        negated = _NOT_BEFORE.search(low, max(0, m.start() - 8), m.start())
        if letter in options.letters and not negated:
            mentioned.add(letter)
    if len(mentioned) == 1:
        return mentioned.pop()
    return UNKNOWN
