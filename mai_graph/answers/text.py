"""Text helpers every kind shares: preparation, answer statements, refusals, VQA normalization.

Every regex here is compiled once and runs in linear time: no nested quantifiers that can
backtrack, no scans of every suffix.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from decimal import Decimal
from typing import Final

__all__ = [
    "ANSWER_STATEMENT",
    "NUMBER_WORDS",
    "answer_region",
    "is_refusal",
    "last_statement",
    "prepare",
    "strip_think",
    "vqa_normalize",
    "words_to_number",
]

# ---------------------------------------------------------------------------------------------
# Preparation: one pass that every reader starts from.

_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL | re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_BOXED = re.compile(r"\\boxed\s*\{((?:[^{}]|\{[^{}]*\})*)\}")
_LATEX_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mathbf)\s*\{([^{}]*)\}")
_MARKUP = re.compile(r"[*`#]+")
_UNDERSCORE = re.compile(r"_+(?![A-Za-z0-9])|(?<![A-Za-z0-9])_+")
_TRANSLATE: Final = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u2212": "-",  # minus sign
        "\u2010": "-",  # hyphen
        "\u2011": "-",  # non-breaking hyphen
        "\u2012": "-",  # figure dash
        "\u02d7": "-",  # modifier letter minus
        "\u2796": "-",  # heavy minus sign
        "\u2015": " - ",  # horizontal bar
        "\u301c": "~",  # wave dash (a range: 3〜5)
        "\u2053": "~",  # swung dash
        "\u066b": ".",  # Arabic decimal separator
        "\u066c": ",",  # Arabic thousands separator
        "\u2013": "-",  # en dash
        "\u2014": " - ",  # em dash
        "\u2044": "/",  # fraction slash (NFKC writes ½ as 1⁄2)
        "\u00a0": " ",
        "\u3002": ". ",  # ideographic full stop
        "\u3001": ", ",  # ideographic comma
    }
)
_SPECIAL: Final = tuple(chr(c) for c in _TRANSLATE)
_INVISIBLE = re.compile("[\u00ad\u200b\u200c\u200d\u2060\ufeff]")
"""Characters that show nothing: inside a number they would split it ("1\u200b000")."""
_LATEX_FRAC = re.compile(r"\\[dt]?frac\s*\{\s*([^{}]*?)\s*\}\s*\{\s*([^{}]*?)\s*\}")
_LATEX_BRACED_POWER = re.compile(r"\^\s*\{\s*([+-]?\d{1,4})\s*\}")
_LATEX_TIMES = re.compile(r"\\(?:times|cdot)\b")
_LATEX_MATH = re.compile(r"\$([^$\s]*[\\^{][^$\s]*)\$")
"""Inline math (``$10^{5}$``): its dollar signs are delimiters, not a currency."""
_DOUBLE_STAR_POWER = re.compile(r"(?<=\d)\*\*(?=[+-]?\d)")
_SUPERSCRIPTS: Final = "\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079"
# A power written with superscripts after a digit ("10³") becomes "10^3" before NFKC, which
# would make it "103"; after a letter ("m²") NFKC's "m2" is kept (a unit of its own).
_SUPER_POWER = re.compile(f"(?<=\\d)(\u207b?)([{_SUPERSCRIPTS}]+)")
_SUPER_DIGITS: Final = str.maketrans(_SUPERSCRIPTS, "0123456789")
# A vulgar fraction right after a digit ("1½") is its own part of a mixed number: NFKC alone
# would write "11⁄2".
_GLUED_FRACTION = re.compile("(?<=\\d)(?=[\u00bc-\u00be\u2150-\u215e])")
_ASCII_LOWER: Final = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def lower_same(text: str) -> str:
    """Lower case with every character kept at its position (for offsets into ``text``).

    >>> lower_same("Answer: B")
    'answer: b'
    """
    low = text.lower()
    return low if len(low) == len(text) else text.translate(_ASCII_LOWER)


def strip_think(text: str) -> str:
    """Remove reasoning blocks: ``<think>...</think>`` (an unclosed block runs to the end).

    Chat templates that open the block in the prompt leave only the closing tag in the
    output; everything before the last ``</think>`` is reasoning then.

    >>> strip_think("<think>hmm, B or C</think> C")
    ' C'
    >>> strip_think("B or C? Let me look again.</think>C")
    'C'
    """
    lower = text.lower()
    if "<think>" in lower:
        text = _THINK.sub("", text)
        lower = text.lower()
    if "</think>" in lower:
        text = _THINK_CLOSE.split(text)[-1]
    return text


_PER_MILLE_WORDS = re.compile(r"\bper\s+mille\b", re.IGNORECASE)


def prepare(text: str) -> str:
    r"""The text every reader starts from.

    Unicode NFKC (full-width ``Ｃ`` reads ``C``), reasoning blocks removed, typographic quotes
    and dashes made plain, ``\boxed{X}`` read as a stated answer, markdown emphasis dropped.
    (The Chinese answer marker 答案 is one of the answer statements, see ``ANSWER_STATEMENT``.)

    >>> prepare("**Answer:** \\boxed{Ｃ}")
    'Answer:  answer: C .'
    >>> prepare("答案：C")
    '答案:C'
    """
    if not text.isascii():
        text = _INVISIBLE.sub("", text)
        text = _SUPER_POWER.sub(_caret_power, text)
        text = _GLUED_FRACTION.sub(" ", text)
        text = text.replace("‰", " permille ").replace("¢", " cents ")  # NFKC keeps them
    text = unicodedata.normalize("NFKC", text)
    if "mille" in text.lower():
        text = _PER_MILLE_WORDS.sub("permille", text)
    text = strip_think(text)
    if any(c in text for c in _SPECIAL):
        text = text.translate(_TRANSLATE)
    if "\\" in text or "^{" in text or "$" in text:
        text = _LATEX_MATH.sub(r"\1", text)
        text = _BOXED.sub(r" answer: \1 .", text)
        text = _LATEX_TEXT.sub(r"\1", text)
        text = _LATEX_FRAC.sub(_fraction, text)
        text = _LATEX_BRACED_POWER.sub(r"^\1", text)
        text = _LATEX_TIMES.sub("×", text)
    if "**" in text:  # 10**5, before markdown emphasis goes
        text = _DOUBLE_STAR_POWER.sub("^", text)
    text = _MARKUP.sub("", text)
    if "_" in text:
        text = _UNDERSCORE.sub("", text)
    return text


def _fraction(m: re.Match[str]) -> str:
    r"""``\frac{a}{b}`` as ``a/b`` (numbers) or ``(a)/(b)``."""
    a, b = m.group(1), m.group(2)
    if _PLAIN_NUMBER.fullmatch(a) and _PLAIN_NUMBER.fullmatch(b):
        return f"{a}/{b}"
    return f"({a})/({b})"


_PLAIN_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _caret_power(m: re.Match[str]) -> str:
    return "^" + ("-" if m.group(1) else "") + m.group(2).translate(_SUPER_DIGITS)


# ---------------------------------------------------------------------------------------------
# Answer statements: "the answer is ...", "Answer: ...", "I'd go with ...".

ANSWER_STATEMENT = re.compile(
    r"answer(?:\s+to\s+(?:the|this|your)\s+question)?"
    r"\s*(?:(?:would|should|will|must)\s+be\b|is\b|:|=|-(?=\s)|\n)"
    r"|i(?:'d|\s+would|\s+will|'ll)?\s+(?:go\s+with|choose|pick|select|opt\s+for|say)\b"
    r"|my\s+(?:pick|guess|choice)\s*(?:is\b|:)"
    r"|答案\s*(?:应该是|应为|是|为|:)?"
)
"""Answer statements, matched on lower-cased text (see :func:`iter_words`)."""
_LEAD_REST = re.compile(r"(?:[\s:=,]|-(?![\d.$€£¥₹]))*")
"""What follows a statement before the answer; a minus sign belongs to the answer ("-5")."""


def iter_words(
    pattern: re.Pattern[str], low: str, pos: int = 0, endpos: int | None = None
) -> Iterator[re.Match[str]]:
    r"""Matches of a keyword-led ``pattern`` in lower-cased ``low`` that start a word.

    Patterns start with their keyword rather than ``\b`` so the regex engine can skip
    ahead fast; the word boundary is checked here. Matches start in ``low[pos:endpos]``.
    """
    stop = len(low) if endpos is None else endpos
    for m in pattern.finditer(low, pos, min(len(low), stop + _OVERHANG)):
        i = m.start()
        if i >= stop:
            return
        first = low[i]
        if i == 0 or not (first.isascii() and first.isalnum()):
            yield m
        elif not (low[i - 1].isalnum() or low[i - 1] == "_"):
            yield m


_OVERHANG = 64
_WS = re.compile(r"\s")


def word_start(low: str, i: int) -> int:
    """A position at or after ``i`` that starts a word (so a window rarely cuts one).

    >>> word_start("the answer is", 5)
    11
    """
    if i <= 0:
        return 0
    m = _WS.search(low, i - 1, i + _OVERHANG)
    return m.end() if m else i


def last_matches(pattern: re.Pattern[str], low: str, limit: int) -> list[re.Match[str]]:
    """The last ``limit`` word-start matches of ``pattern`` in ``low``, last first.

    Looks back from the end in growing windows, so a long text with many matches costs no
    more than its last part.

    >>> [m.group() for m in last_matches(re.compile("answer"), "answer, answer, answer", 2)]
    ['answer', 'answer']
    """
    out: list[re.Match[str]] = []
    end, size = len(low), 1024
    while True:
        start = 0 if size >= end else word_start(low, end - size)
        out.extend(reversed(list(iter_words(pattern, low, start, end))))
        if len(out) >= limit or start == 0:
            return out[:limit]
        end, size = start, size * 4


def last_statement(text: str, pattern: re.Pattern[str] = ANSWER_STATEMENT) -> re.Match[str] | None:
    """The last answer statement ("the answer is", "Answer:", ...) in ``text``, or None.

    Positions refer to ``text``; matching is on its lower-cased form.

    >>> last_statement("I think A. The answer is B.").end()
    24
    """
    found = last_matches(pattern, lower_same(text), 1)
    return found[0] if found else None


def answer_region(text: str) -> str:
    """What follows the last answer statement, or all of ``text`` when there is none.

    >>> answer_region("Hmm, a cat? The final answer is: a dog.")
    'a dog.'
    >>> answer_region("a dog")
    'a dog'
    """
    m = last_statement(text)
    if m is not None:
        rest = text[_LEAD_REST.match(text, m.end()).end() :].strip()  # type: ignore[union-attr]
        if rest:
            return rest
    return text.strip()


# ---------------------------------------------------------------------------------------------
# Refusals and hedges: never an answer, in any kind.

_REFUSAL = re.compile(
    r"(?:can(?:no|')?t|could(?:\s+no|n')t|unable\s+to|impossible\s+to|not\s+possible\s+to"
    r"|hard\s+to|difficult\s+to|no\s+way\s+to)\s+(?:\w+\s+){0,2}?"
    r"(?:tell|determine|determined|say|answer|answered|know|known|identify|identified|judge"
    r"|read|infer|inferred|decide|be\s+sure|be\s+certain)\b"
    r"|(?:don'?t|do\s+not|doesn'?t|does\s+not)\s+know\b"
    r"|not\s+(?:sure|certain|clear|determinable|necessarily)\b"
    r"|(?:not|n't)\s+(?:\w+\s+){0,3}?(?:enough|sufficient)\s+(?:information|info|context"
    r"|detail|evidence)\b"
    r"|(?:unsure|uncertain|unclear|undeterminable|indeterminate|undetermined)\b"
    r"|no\s+(?:idea|clue)\b"
    r"|insufficient\s+(?:information|info|context|detail|evidence)\b"
    r"|(?:maybe|perhaps|possibly|it\s+depends|depends\s+on)\b"
    r"|could\s+be\s+(?:either|any|both)\b|either\s+way\b|n/a\b"
    r"|(?:also|equally)\s+(?:possible|plausible|likely)\b|(?:could|might|may)\s+also\s+be\b"
    r"|none\s+of\s+the\s+(?:above|options|choices|answers)\b"
    r"|无法(?:确定|判断|回答)|不确定|不知道"
)

_CANNOT_SEE = re.compile(
    # the model itself cannot see, read or make out the picture ("I can't see the image")
    r"\b(?:i|we)(?:'m|\s+am|'ve|\s+have|\s+was|\s+were)?\s+(?:\w+\s+){0,2}?"
    r"(?:can(?:no|')?t|cannot|could(?:\s+no|n')t|(?:am|was|were)?\s*unable\s+to"
    r"|(?:am|'m|was|were)?\s*(?:not|n't)\s+able\s+to)"
    r"\s+(?:\w+\s+){0,2}?(?:see|view|make\s+out|access|open|load|process|read|recogni[sz]e"
    r"|discern|analy[sz]e|interpret)\b"
    # "I don't see any dog" answers the question; "I don't see any image" refuses it
    r"|\b(?:i|we)\s+(?:don'?t|do\s+not|didn'?t|did\s+not)\s+(?:see|have)\s+(?:an|any|the)?\s*"
    r"(?:image|picture|photo|attachment)s?\b"
    r"|\btoo\s+(?:blurry|blurred|dark|grainy|pixelated|low[-\s]resolution|faint)\s+to\s+"
    r"(?:see|read|tell|make|determine|identify|count|answer)\b"
    r"|\b(?:provide|upload|send|share|attach|give\s+me)\s+(?:me\s+)?(?:with\s+)?"
    r"(?:a|an|another|the)?\s*(?:clearer|better|sharper|higher[-\s]resolution|valid)"
    r"\s+(?:image|picture|photo|version)"
    r"|\bno\s+(?:image|picture|photo)\s+(?:was\s+|has\s+been\s+)"
    r"(?:provided|attached|shown|included|uploaded|shared)\b"
    r"|^\W*(?:there\s+is\s+|there's\s+)?no\s+(?:image|picture|photo)(?:\s+attached)?\W*$"
    r"|\b(?:image|picture|photo)\s+(?:you\s+\w+\s+)?(?:is|was|seems|appears)\s+(?:to\s+be\s+)?"
    r"(?:missing|corrupted|not\s+(?:loaded|attached|provided))\b"
    r"|\b(?:image|picture|photo)\s+(?:did\s+not|didn'?t|failed\s+to)\s+load\b"
    # apologies and refusals by the model, not text read off a picture
    r"|^\W*(?:i'?m\s+|i\s+am\s+)?(?:so\s+)?sorry\W+(?:but\s+)?i\b|\bi\s+apologi[sz]e\b"
    r"|^\W*unfortunately\W+(?:but\s+)?i\b|\bas\s+an\s+ai\b"
    # other languages: Chinese, Japanese, Spanish, Portuguese, French, German, Italian
    r"|无法(?:确定|判断|回答|看到|看清|识别|查看)|看不(?:清|到|见)|(?:抱歉|对不起)\W*我"
    r"|分かりません|わかりません|判断できません|見えません"
    r"|\bno\s+(?:puedo|es\s+posible\s+(?:saber|ver|determinar)\w*)\b|\blo\s+siento\W+no\b"
    r"|\bno\s+sé\b|\bn[aã]o\s+(?:consigo|posso|sei)\b"
    r"|\bje\s+ne\s+(?:peux|sais|vois)\b|\bd[ée]sol[ée]\W+(?:mais\s+)?je\b"
    r"|\b(?:ich\s+kann|kann\s+ich)\b[^.!?]{0,60}\bnicht\b|\bich\s+wei(?:ss|ß)\s+(?:es\s+)?nicht\b"
    r"|\bnon\s+(?:posso|riesco|so)\b"
)
"""Refusals of the picture itself, apologies, and refusals in other languages: looked for
near the answer's ends (:data:`_REFUSAL_EDGE` characters), where a model puts them."""

_REFUSAL_EDGE = 600


def is_refusal(text: str) -> bool:
    """Whether ``text`` refuses or hedges ("I can't tell", "not sure", "maybe", ...).

    >>> is_refusal("I can't tell from the image."), is_refusal("Unsure"), is_refusal("unknown")
    (True, True, False)
    """
    low = text.lower()
    if next(iter_words(_REFUSAL, low), None) is not None:
        return True
    edges = (low,) if len(low) <= 2 * _REFUSAL_EDGE else (low[:_REFUSAL_EDGE], low[-_REFUSAL_EDGE:])
    return any(_CANNOT_SEE.search(edge) is not None for edge in edges)


# ---------------------------------------------------------------------------------------------
# Number words.

_UNITS: Final = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19,
}  # fmt: skip
_TENS: Final = {
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70,
    "eighty": 80, "ninety": 90,
}  # fmt: skip
_SCALES: Final = {"dozen": 12, "hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9}
_NUMWORD = r"(?:" + "|".join(sorted([*_UNITS, *_TENS, *_SCALES], key=len, reverse=True)) + r")"
NUMBER_WORDS: Final = (
    r"(?:\b(?:an?\s+(?=(?:dozen|hundred|thousand|million|billion)\b))?"
    + _NUMWORD
    + r"(?:(?:[\s-]+and)?[\s-]+"
    + _NUMWORD
    + r"){0,11}\b)"
)
"""Regex source of a number written in words ("twenty-one", "a hundred and five")."""
_NUMBER_WORDS = re.compile(NUMBER_WORDS)
_WORD_SPLIT = re.compile(r"[\s-]+")
_NUMBER_WORD_START = re.compile(
    r"zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fifteen"
    r"|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|thousand|million|billion"
    r"|dozen"
)
_MAX_NUMBER_WORDS = 12


def words_to_number(words: str) -> Decimal | None:
    """Read a number written in words; None if it is not one.

    >>> words_to_number("twenty-one"), words_to_number("three hundred and five")
    (Decimal('21'), Decimal('305'))
    >>> words_to_number("a dozen"), words_to_number("two million")
    (Decimal('12'), Decimal('2000000'))
    """
    parts = _WORD_SPLIT.split(words.lower().strip())
    if len(parts) > _MAX_NUMBER_WORDS:
        return None
    total, current, seen = 0, 0, False
    for part in parts:
        if part in ("a", "an") and not seen:
            pass
        elif part in _UNITS:
            current += _UNITS[part]
        elif part in _TENS:
            current += _TENS[part]
        elif part in _SCALES:
            current = max(current, 1) * _SCALES[part]
            if _SCALES[part] >= 1000:
                total, current = total + current, 0
        elif part == "and" and seen:
            continue
        else:
            return None
        seen = seen or part not in ("a", "an")
    return Decimal(total + current) if seen else None


def _digits_for_words(m: re.Match[str]) -> str:
    words = m.group(0)
    single = _SINGLE_DIGITS.get(words)
    if single is not None:
        return single
    if words.split("-")[0].split()[0] in _SCALES:
        return words  # "billion" alone (as in "4.5 billion") is not a number
    value = words_to_number(words)
    return words if value is None else str(value)


_SINGLE_DIGITS: Final = {
    **{k: str(v) for k, v in _UNITS.items()},
    **{k: str(v) for k, v in _TENS.items()},
}


# ---------------------------------------------------------------------------------------------
# VQA answer normalization, with the project's extras.

_VQA_PUNCT: Final = (";", "/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">")
_VQA_PUNCT2: Final = ("<", "@", "`", ",", "?", "!", "*", "|")
_NUM_COMMA = re.compile(r"\d,\d")
_PERIOD = re.compile(r"\.(?!\d)")
_ARTICLES: Final = frozenset({"a", "an", "the"})
_CONTRACTIONS: Final = {
    "aint": "ain't", "arent": "aren't", "cant": "can't", "couldnt": "couldn't",
    "couldve": "could've", "didnt": "didn't", "doesnt": "doesn't", "dont": "don't",
    "hadnt": "hadn't", "hasnt": "hasn't", "havent": "haven't", "hes": "he's", "howd": "how'd",
    "hows": "how's", "isnt": "isn't", "itd": "it'd", "itll": "it'll", "im": "i'm", "ive": "i've",
    "mightnt": "mightn't", "mightve": "might've", "mustnt": "mustn't", "mustve": "must've",
    "neednt": "needn't", "shouldnt": "shouldn't", "shouldve": "should've", "thats": "that's",
    "theres": "there's", "theyd": "they'd", "theyll": "they'll", "theyre": "they're",
    "theyve": "they've", "wasnt": "wasn't", "werent": "weren't", "weve": "we've",
    "whats": "what's", "whens": "when's", "wheres": "where's", "whos": "who's",
    "whys": "why's", "wont": "won't", "wouldnt": "wouldn't", "wouldve": "would've",
    "yall": "y'all", "youd": "you'd", "youll": "you'll", "youre": "you're", "youve": "you've",
}  # fmt: skip
_WORD_MAP: Final = {**_CONTRACTIONS, "none": "0", "a": "", "an": "", "the": ""}
_SIGNED = re.compile(r"(?<![\w.])([-−<>≤≥])\s*(?=\.?\d)")
_SIGN_WORDS: Final = {"-": "minus ", "−": "minus ", "<": "less than ", ">": "more than ",
                      "≤": "at most ", "≥": "at least "}  # fmt: skip
_PER_MILLE = re.compile(r"‰|\bper\s*mille\b")


def vqa_normalize(text: str) -> str:
    """Normalize an open answer the way the VQA evaluation does, plus the project's extras.

    VQA rules: each punctuation mark is deleted where it touches a space (or when the text
    holds a digit-comma-digit) and otherwise becomes a space; periods not followed by a digit
    are deleted (``u.s.`` → ``us``, ``3.5`` stays); lower case; number words become digits
    (``none`` → ``0``); articles are dropped; contractions get their apostrophe (``dont`` →
    ``don't``). Extras: number words of any size (``twenty-one`` → ``21``), ``*`` and ``|``
    count as punctuation, quotes at the edges of words are dropped, whitespace is collapsed,
    and a sign or comparison before a number is a word (``-5`` → ``minus 5``, ``<5`` →
    ``less than 5``: VQA's rule would delete it, and two different numbers would read alike),
    as are ``‰`` (``per mille``) and ``¢`` (``cents``). Returns ``""`` when nothing is left.

    >>> vqa_normalize("The U.S.!"), vqa_normalize("Twenty-one dogs"), vqa_normalize("1,234")
    ('us', '21 dogs', '1234')
    >>> vqa_normalize("Dont know"), vqa_normalize("red-white"), vqa_normalize("3.5 m.")
    ("don't know", 'red white', '3.5 m')
    >>> vqa_normalize("-5"), vqa_normalize("<5 cm"), vqa_normalize("5‰"), vqa_normalize("1-2")
    ('minus 5', 'less than 5 cm', '5 per mille', '1 2')
    """
    s = text.replace("\n", " ").replace("\t", " ").strip().lower()
    s = _SIGNED.sub(lambda m: " " + _SIGN_WORDS[m.group(1)], s)
    s = _PER_MILLE.sub(" per mille ", s).replace("¢", " cents ")
    if _NUMBER_WORD_START.search(s):
        s = _NUMBER_WORDS.sub(_digits_for_words, s)
    strip_all = _NUM_COMMA.search(s) is not None
    for p in _VQA_PUNCT + _VQA_PUNCT2:
        if p in s:
            glued = strip_all or f"{p} " in s or f" {p}" in s
            s = s.replace(p, "" if glued else " ")
    s = _PERIOD.sub("", s)
    if _NUMBER_WORD_START.search(s):  # words that punctuation kept apart ("twenty_one")
        s = _NUMBER_WORDS.sub(_digits_for_words, s)
    if "'" in s:
        s = " ".join(w.strip("'") for w in s.split())
    words = [_WORD_MAP.get(w, w) for w in s.split()]
    return " ".join(w for w in words if w)
